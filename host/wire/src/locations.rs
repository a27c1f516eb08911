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
    let store = canonical(store);
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
