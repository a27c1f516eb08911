//! Where a store's companions live: its daemon's socket. A leaf module, so
//! anything (the guard, the CLI, the daemon) can name them.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// The longest Unix socket path we create (the OS limit is 107 bytes).
const MAX_SOCKET_PATH: usize = 100;

/// The socket of the daemon that owns `store`: `STORE.sock` beside the
/// store file, so one store has one daemon and every client finds it from
/// the store's path alone. Where that path would be too long for a Unix
/// socket, a name derived from the store's path in `$XDG_RUNTIME_DIR` (else
/// the temporary directory).
pub fn socket_for_store(store: &Path) -> PathBuf {
    let store = canonical(&local_store_name(store));
    let mut beside = store.clone().into_os_string();
    beside.push(".sock");
    if beside.len() <= MAX_SOCKET_PATH {
        return beside.into();
    }
    let digest = hex::encode(Sha256::digest(store.as_os_str().as_encoded_bytes()));
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(std::env::temp_dir, PathBuf::from);
    dir.join(format!("toolgate-{}.sock", &digest[..16]))
}

/// Whether a store location names a PostgreSQL database (a `postgres://`
/// or `postgresql://` URL) rather than a redb file.
pub fn is_database_url(store: &Path) -> bool {
    let text = store.to_string_lossy();
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// The local path that stands for `store` on this machine: a redb file is
/// itself; a database gets a name in the state directory derived from its
/// URL (without the password), beside which this machine's daemon keeps its
/// socket, log and lock. So every host of a fleet has its own daemon.
pub fn local_store_name(store: &Path) -> PathBuf {
    if !is_database_url(store) {
        return store.to_path_buf();
    }
    let url = redacted_url(&store.to_string_lossy());
    let digest = hex::encode(Sha256::digest(url.as_bytes()));
    default_dir("XDG_STATE_HOME", ".local/state").join(format!("postgres-{}", &digest[..16]))
}

/// `url` without its password, for messages, logs and names.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

/// `$VAR/toolgate`, else `$HOME/<fallback>/toolgate`, else `./.toolgate`.
pub fn default_dir(var: &str, fallback: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("toolgate");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(fallback).join("toolgate"),
        None => PathBuf::from(".toolgate"),
    }
}

/// `path` with its directory resolved (the file itself may not exist yet),
/// so two spellings of one store find one daemon.
fn canonical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|dir| dir.join(name))
            .unwrap_or(absolute),
        _ => absolute,
    }
}
