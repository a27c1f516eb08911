//! The compiled-artifact cache: a component compiled once is kept as native
//! code, so the next start loads it in milliseconds instead of compiling.
//!
//! Loading an entry runs native code from a file, so an entry is used only
//! if it is proven to come from the component it is filed under: it is
//! `HMAC-SHA256(key, component sha256, engine, artifact) || artifact`, under
//! a key kept in the cache directory (`cache.key`, owner-only) that only
//! toolgate writes. An entry copied from another component's name, edited,
//! or written by anyone without the key fails the check and the component
//! is compiled again. The key is as safe as its file: in system mode it
//! belongs to the daemon's user and the agent cannot read it; in per-user
//! mode the agent's user could, so there the self-protection guard refuses
//! every tool call that names the cache directory (reads included), and
//! system mode is the fix (see docs/src/safety/ in the book).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The key's file name inside the cache directory.
const KEY_FILE: &str = "cache.key";
/// The entries' extension.
const EXTENSION: &str = "cwasm";
/// What the MAC is over, first: a format version, so an entry of another
/// format never verifies.
const DOMAIN: &[u8] = b"toolgate compiled-artifact cache v2\0";

type HmacSha256 = Hmac<Sha256>;

/// A cache directory and its key.
#[derive(Clone)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    key: [u8; 32],
}

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ArtifactCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl ArtifactCache {
    /// The cache in `dir` (created owner-only), with its key (made on first
    /// use); entries unused for `max_age` are evicted now. `None`, with a
    /// warning, when the directory or key cannot be had: then nothing is
    /// cached and every start compiles.
    pub(crate) fn open(dir: &Path, max_age: Duration) -> Option<Self> {
        let opened = (|| -> std::io::Result<Self> {
            std::fs::create_dir_all(dir)?;
            // Owner-only: what is in here runs as native code.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            Ok(Self {
                dir: dir.to_path_buf(),
                key: key_in(dir)?,
            })
        })();
        match opened {
            Ok(cache) => {
                cache.evict_stale(max_age);
                Some(cache)
            }
            Err(err) => {
                tracing::warn!(dir = %dir.display(), error = %err, "no compiled-artifact cache; every start compiles");
                None
            }
        }
    }

    /// The entry for the component with sha256 `digest` under an engine
    /// whose compatibility hash is `engine`.
    pub(crate) fn entry(&self, digest: &str, engine: &str) -> Entry<'_> {
        Entry {
            cache: self,
            path: self.dir.join(format!(
                "{digest}-{}.{EXTENSION}",
                &engine[..16.min(engine.len())]
            )),
            digest: digest.to_string(),
            engine: engine.to_string(),
        }
    }

    fn mac(&self, digest: &str, engine: &str, artifact: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        for part in [
            DOMAIN,
            digest.as_bytes(),
            b"\0",
            engine.as_bytes(),
            b"\0",
            artifact,
        ] {
            mac.update(part);
        }
        mac
    }

    /// Remove entries last used longer ago than `max_age` (their
    /// modification time is touched on every use).
    fn evict_stale(&self, max_age: Duration) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        for entry in entries.flatten() {
            let path = entry.path();
            let stale = path.extension().is_some_and(|e| e == EXTENSION)
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|used| now.duration_since(used).is_ok_and(|age| age > max_age));
            if stale {
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "evicted an unused compiled component")
                    }
                    Err(err) => {
                        tracing::debug!(path = %path.display(), error = %err, "cannot evict a cache entry")
                    }
                }
            }
        }
    }
}

/// One component's entry.
pub(crate) struct Entry<'c> {
    cache: &'c ArtifactCache,
    path: PathBuf,
    digest: String,
    engine: String,
}

impl Entry<'_> {
    /// The artifact, if the entry exists and is proven to be this
    /// component's; anything else is `None` (and recompiled), never
    /// trusted.
    pub(crate) fn load(&self) -> Option<Vec<u8>> {
        let mut bytes = std::fs::read(&self.path).ok()?;
        if bytes.len() < 32 {
            tracing::warn!(path = %self.path.display(), "truncated compiled-artifact cache entry; recompiling");
            return None;
        }
        let artifact = bytes.split_off(32);
        if self
            .cache
            .mac(&self.digest, &self.engine, &artifact)
            .verify_slice(&bytes)
            .is_err()
        {
            tracing::warn!(path = %self.path.display(), "compiled-artifact cache entry not made by this toolgate for this component; recompiling");
            return None;
        }
        // Mark it used, so eviction (by age of last use) keeps it.
        if let Ok(file) = std::fs::File::options().append(true).open(&self.path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
        Some(artifact)
    }

    /// Keep `artifact` as this component's entry (best effort: a cache
    /// that cannot be written only costs the next start a compile).
    pub(crate) fn store(&self, artifact: &[u8]) {
        let write = || -> std::io::Result<()> {
            let mac = self
                .cache
                .mac(&self.digest, &self.engine, artifact)
                .finalize();
            let mut bytes = mac.into_bytes().to_vec();
            bytes.extend_from_slice(artifact);
            // Write then rename, so a reader never sees half a file.
            let tmp = self
                .path
                .with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, &bytes)?;
            std::fs::rename(&tmp, &self.path)
        };
        if let Err(err) = write() {
            tracing::warn!(path = %self.path.display(), error = %err, "cannot write the compiled-artifact cache");
        }
    }
}

/// The cache's key, made (32 random bytes, owner-only) if there is none.
/// Two processes making it at once agree: the key is written to a file of
/// its own and linked into place, which fails if another got there first,
/// and then that one's key is read.
fn key_in(dir: &Path) -> std::io::Result<[u8; 32]> {
    let path = dir.join(KEY_FILE);
    let read = |path: &Path| -> std::io::Result<[u8; 32]> {
        let bytes = std::fs::read(path)?;
        bytes.try_into().map_err(|_| {
            std::io::Error::other(format!(
                "{} is not a 32-byte key; remove it (the cache is then rebuilt)",
                path.display()
            ))
        })
    };
    match read(&path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(format!("{KEY_FILE}.{}", std::process::id()));
    let mut file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&key)?;
    file.sync_all()?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_verifies_only_under_its_own_component_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::open(dir.path(), Duration::from_secs(3600)).unwrap();
        let engine = "e".repeat(64);
        let allow_all = cache.entry(&"a".repeat(64), &engine);
        allow_all.store(b"native code of allow-all");
        assert_eq!(
            allow_all.load().as_deref(),
            Some(&b"native code of allow-all"[..])
        );

        // Copied over another component's entry: refused.
        let lease_gate = cache.entry(&"b".repeat(64), &engine);
        std::fs::copy(&allow_all.path, &lease_gate.path).unwrap();
        assert_eq!(lease_gate.load(), None);

        // Edited in place: refused.
        let mut bytes = std::fs::read(&allow_all.path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&allow_all.path, &bytes).unwrap();
        assert_eq!(allow_all.load(), None);

        // The old format (its own sha256 first) does not verify either.
        use sha2::Digest as _;
        let mut old = Sha256::digest(b"x").to_vec();
        old.extend_from_slice(b"x");
        std::fs::write(&lease_gate.path, old).unwrap();
        assert_eq!(lease_gate.load(), None);
    }

    #[test]
    fn the_key_is_made_once_owner_only_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = key_in(dir.path()).unwrap();
        assert_eq!(key_in(dir.path()).unwrap(), first);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.path().join(KEY_FILE), b"short").unwrap();
        let err = key_in(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a 32-byte key"), "{err}");
    }
}
