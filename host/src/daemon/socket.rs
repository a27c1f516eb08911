//! The Unix-socket server: one JSON request per line, one JSON answer per
//! line, any number per connection.

use std::io::{BufRead as _, BufReader, ErrorKind, Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Daemon;
use super::protocol::MAX_REQUEST_BYTES;

/// A connection that sends nothing for this long is closed.
const IDLE_CONNECTION: Duration = Duration::from_secs(120);
/// How long a thread waits for a connection's next request before the
/// connection goes back to waiting on the runtime.
const HAND_BACK: Duration = Duration::from_millis(100);

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
    /// Serve one connection: each request on a thread from the blocking
    /// pool, which then waits briefly for the next one, so a client asking
    /// many times in a row (the MCP gateway, an embedding runtime) wakes
    /// the thread that answers it, with no hand-over between threads. An
    /// idle connection waits on the runtime, holding no thread.
    pub(super) async fn socket_connection(self: Arc<Self>, stream: tokio::net::UnixStream) {
        let caller = super::Caller::Socket(super::Peer::of(&stream));
        let mut stream = stream;
        loop {
            tokio::select! {
                ready = tokio::time::timeout(IDLE_CONNECTION, stream.readable()) => {
                    if !matches!(ready, Ok(Ok(()))) {
                        return;
                    }
                }
                _ = self.stopping.cancelled() => return,
            }
            let Ok(blocking) = stream.into_std() else {
                return;
            };
            let daemon = Arc::clone(&self);
            let served =
                tokio::task::spawn_blocking(move || daemon.serve_requests(blocking, caller));
            let Ok(Some(idle)) = served.await else {
                return;
            };
            stream = match idle
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixStream::from_std(idle))
            {
                Ok(stream) => stream,
                Err(_) => return,
            };
        }
    }

    /// Answer requests on `stream` as they come; give it back once none
    /// came for [`HAND_BACK`] (`None`: the connection is over: closed by
    /// the client, a request line too long, the daemon stopping).
    fn serve_requests(&self, stream: UnixStream, caller: super::Caller) -> Option<UnixStream> {
        let mut write = stream.try_clone().ok()?;
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(HAND_BACK)).ok()?;
        write.set_write_timeout(Some(IDLE_CONNECTION)).ok()?;
        let mut lines = BufReader::new(stream);
        let mut line = Vec::new();
        let mut idle_since = Instant::now();
        loop {
            let room = MAX_REQUEST_BYTES.saturating_sub(line.len()) as u64;
            match (&mut lines).take(room).read_until(b'\n', &mut line) {
                Ok(0) => return None,
                Ok(_) if !line.ends_with(b"\n") && line.len() >= MAX_REQUEST_BYTES => {
                    let too_long = crate::Error::Request(format!(
                        "request line longer than {MAX_REQUEST_BYTES} bytes"
                    ));
                    let mut answer = super::protocol::encode_answer(&Err(too_long));
                    answer.push('\n');
                    let _ = write.write_all(answer.as_bytes());
                    return None;
                }
                Ok(_) => {}
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.stopping.is_cancelled() || idle_since.elapsed() >= IDLE_CONNECTION {
                        return None;
                    }
                    if line.is_empty() {
                        // Between requests, nothing buffered: wait on the
                        // runtime instead.
                        return Some(lines.into_inner());
                    }
                    continue; // what was read so far stays in `line`
                }
                Err(_) => return None,
            }
            idle_since = Instant::now();
            let text = std::str::from_utf8(&line).ok()?;
            if !text.trim().is_empty() {
                let mut answer = self.respond_blocking(text.trim(), caller);
                answer.push('\n');
                write.write_all(answer.as_bytes()).ok()?;
            }
            line.clear();
            // A client asking every few milliseconds never lets the read
            // time out: the daemon stopping is checked here too.
            if self.stopping.is_cancelled() {
                return None;
            }
        }
    }
}
