//! Pulled artifacts on disk, content-addressed: `blobs/sha256/HEX` holds
//! the bytes whose sha256 is HEX (manifests and layers alike), and
//! `tags/` remembers which manifest a tag named when it was last pulled.
//! Nothing read from here is trusted: every read is checked against the
//! digest it is filed under, so a damaged or edited file is a miss, never
//! a plugin.

use std::path::PathBuf;

use sha2::{Digest as _, Sha256};

/// The cache directory of pulled artifacts.
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
}

/// `sha256:HEX` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl BlobCache {
    /// The cache at `dir` (made on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        super::reference::is_sha256_hex(hex).then(|| self.dir.join("blobs/sha256").join(hex))
    }

    fn tag_path(&self, reference: &super::Reference) -> PathBuf {
        let name = format!(
            "{}/{}:{}",
            reference.registry,
            reference.repository,
            reference.tag.as_deref().unwrap_or_default()
        );
        self.dir
            .join("tags")
            .join(hex::encode(Sha256::digest(name.as_bytes())))
    }

    /// The bytes filed under `digest`, if they are there and their sha256
    /// is that digest. A file that fails the check is removed, so the next
    /// pull writes it again.
    pub fn read(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.blob_path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if sha256_digest(&bytes) == digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), "a cached OCI blob does not match its digest; it is ignored and removed");
        let _ = std::fs::remove_file(&path);
        None
    }

    /// File `bytes` under their own digest (written whole, then renamed).
    pub fn write(&self, bytes: &[u8]) -> std::io::Result<String> {
        let digest = sha256_digest(bytes);
        let path = self.blob_path(&digest).expect("a sha256 digest");
        crate::files::write_durably(&path, bytes)?;
        Ok(digest)
    }

    /// The manifest digest `reference`'s tag named when last pulled.
    pub fn tagged(&self, reference: &super::Reference) -> Option<String> {
        let text = std::fs::read_to_string(self.tag_path(reference)).ok()?;
        let digest = text.trim();
        self.blob_path(digest).map(|_| digest.to_string())
    }

    /// Remember that `reference`'s tag names `digest`.
    pub fn remember_tag(&self, reference: &super::Reference, digest: &str) -> std::io::Result<()> {
        crate::files::write_durably(&self.tag_path(reference), digest.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_that_no_longer_matches_its_digest_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(dir.path());
        let digest = cache.write(b"component bytes").unwrap();
        assert_eq!(cache.read(&digest).unwrap(), b"component bytes");

        let path = cache.blob_path(&digest).unwrap();
        std::fs::write(&path, b"component bytez").unwrap();
        assert_eq!(cache.read(&digest), None);
        assert!(!path.exists(), "the damaged file is removed");
        assert_eq!(cache.read("sha256:../../etc/passwd"), None);
    }
}
