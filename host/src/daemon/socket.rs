//! The Unix-socket server: one JSON request per line, one JSON answer per
//! line, any number per connection.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::Daemon;
use super::protocol::MAX_REQUEST_BYTES;

/// A connection that sends nothing for this long is closed.
const IDLE_CONNECTION: Duration = Duration::from_secs(120);

/// Bind `path`, replacing a stale socket file left by a crash but never a
/// live daemon's, with permissions `mode` (0600 unless the config says).
pub(super) fn bind(path: &Path, mode: u32) -> std::io::Result<tokio::net::UnixListener> {
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is served by a running daemon", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// The (device, inode) of a file, to notice it being removed or replaced.
pub(super) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Daemon {
    pub(super) async fn socket_connection(self: Arc<Self>, stream: tokio::net::UnixStream) {
        let caller = super::Caller::Socket(super::Peer::of(&stream));
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read);
        let mut line = String::new();
        loop {
            line.clear();
            let mut limited = (&mut lines).take(MAX_REQUEST_BYTES as u64);
            let read = limited.read_line(&mut line);
            match tokio::time::timeout(IDLE_CONNECTION, read).await {
                Err(_) | Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(_)) if !line.ends_with('\n') && line.len() >= MAX_REQUEST_BYTES => {
                    let too_long = crate::Error::Request(format!(
                        "request line longer than {MAX_REQUEST_BYTES} bytes"
                    ));
                    let mut answer = super::protocol::encode_answer(&Err(too_long));
                    answer.push('\n');
                    let _ = write.write_all(answer.as_bytes()).await;
                    return;
                }
                Ok(Ok(_)) => {}
            }
            if line.trim().is_empty() {
                continue;
            }
            let mut answer = self.respond(line.trim(), caller).await;
            answer.push('\n');
            if write.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}
