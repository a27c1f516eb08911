//! The Unix-socket server: one JSON request per line, one JSON answer per
//! line, any number per connection.

use std::io::{ErrorKind, Read as _, Write as _};
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
/// The longest a connection holds its user's turn (see
/// [`super::share::Turns`]) while its client keeps asking: then it goes to
/// the back of the line, so the same user's other connections are served
/// too.
const TURN: Duration = Duration::from_millis(20);
/// A request line must be whole this long after its first byte came.
const LINE_DEADLINE: Duration = Duration::from_secs(10);
/// How much of a connection is read at once.
const READ_CHUNK: usize = 64 * 1024;

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

/// Write `line` to a connection about to be closed, waiting (briefly) for
/// it to be writable: a bare `try_write` on a connection just accepted can
/// find it not yet known writable and send nothing (seen under load).
async fn last_words(mut stream: tokio::net::UnixStream, line: &str) {
    use tokio::io::AsyncWriteExt as _;
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(line.as_bytes())).await;
}

/// The (device, inode) of a file, to notice it being removed or replaced.
pub(super) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Daemon {
    /// Serve one connection: each whole request line on a thread from the
    /// blocking pool (in its user's turn, see [`super::share::Turns`]),
    /// which then waits briefly for the next one, so a
    /// client asking many times in a row (the MCP gateway, an embedding
    /// runtime) wakes the thread that answers it, with no hand-over between
    /// threads. An idle connection, and one that has sent only part of a
    /// line, waits on the runtime, holding no thread: a client that stops
    /// mid-line (or hundreds of them) starves no one, and its line must be
    /// whole within [`LINE_DEADLINE`].
    pub(super) async fn socket_connection(self: Arc<Self>, stream: tokio::net::UnixStream) {
        let peer = super::Peer::of(&stream);
        let uid = peer.as_ref().map_or(u32::MAX, |p| p.uid);
        let Some(_held) = self.connections.open(uid) else {
            self.shared.metrics.record_connection_refused();
            let refused = crate::Error::Busy(format!(
                "this user (uid {uid}) already holds {} connections to the daemon, the most one \
                 user may ([daemon] max_connections_per_user); close some and try again",
                self.connections.limit
            ));
            last_words(stream, &answer_line(&Err(refused))).await;
            return;
        };
        let caller = super::Caller::Socket(peer);
        let mut stream = stream;
        // What the client has sent of a line not yet whole, and since when.
        let mut partial: Vec<u8> = Vec::new();
        let mut began = Instant::now();
        loop {
            // A connection handed back at the end of its turn may hold whole
            // lines already: they are served without waiting for more.
            if !partial.contains(&b'\n') {
                match self.next_line(&mut stream, &mut partial, began).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(last) => {
                        if let Some(words) = last {
                            last_words(stream, &words).await;
                        }
                        return;
                    }
                }
            }
            let turn = tokio::select! {
                turn = self.turns.wait(uid) => turn,
                _ = self.stopping.cancelled() => return,
            };
            let Ok(blocking) = stream.into_std() else {
                return;
            };
            let daemon = Arc::clone(&self);
            let carried = std::mem::take(&mut partial);
            let served = tokio::task::spawn_blocking(move || {
                let _turn = turn;
                daemon.serve_requests(blocking, caller, carried)
            });
            let Ok(Some((idle, rest))) = served.await else {
                return;
            };
            if !rest.is_empty() {
                began = Instant::now();
            }
            partial = rest;
            stream = match idle
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixStream::from_std(idle))
            {
                Ok(stream) => stream,
                Err(_) => return,
            };
        }
    }

    /// Wait, on the runtime and holding no thread, for a connection's next
    /// request: `Ok(true)` once it is readable with nothing pending (the
    /// serving thread reads it) or the line pending is whole, `Ok(false)`
    /// to wait again; `Err` to close it, with last words for the client or
    /// none.
    async fn next_line(
        &self,
        stream: &mut tokio::net::UnixStream,
        partial: &mut Vec<u8>,
        began: Instant,
    ) -> Result<bool, Option<String>> {
        let wait = match partial.is_empty() {
            true => IDLE_CONNECTION,
            false => LINE_DEADLINE.saturating_sub(began.elapsed()),
        };
        tokio::select! {
            ready = tokio::time::timeout(wait, stream.readable()) => match ready {
                Ok(Ok(())) => {}
                Err(_) if !partial.is_empty() => {
                    let late = crate::Error::Request(format!(
                        "a request line must end (with a newline) within {} s of its first \
                         byte; this connection is closed",
                        LINE_DEADLINE.as_secs()
                    ));
                    return Err(Some(answer_line(&Err(late))));
                }
                _ => return Err(None),
            },
            _ = self.stopping.cancelled() => return Err(None),
        }
        if partial.is_empty() {
            return Ok(true);
        }
        let mut buf = vec![0u8; READ_CHUNK];
        match stream.try_read(&mut buf) {
            Ok(0) => return Err(None),
            Ok(n) => partial.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(_) => return Err(None),
        }
        if partial.contains(&b'\n') {
            return Ok(true);
        }
        match partial.len() >= MAX_REQUEST_BYTES {
            true => Err(Some(too_long())),
            false => Ok(false),
        }
    }

    /// Answer the whole lines in `pending` and those that come after;
    /// give the connection back, with what it holds of a line not yet
    /// whole (or whole lines not yet answered), once none came for
    /// [`HAND_BACK`], its [`TURN`] is over or a line is cut short
    /// (`None`: the connection is over: closed by the client, a request
    /// line too long, the daemon stopping).
    fn serve_requests(
        &self,
        mut stream: UnixStream,
        caller: super::Caller,
        mut pending: Vec<u8>,
    ) -> Option<(UnixStream, Vec<u8>)> {
        let mut write = stream.try_clone().ok()?;
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(HAND_BACK)).ok()?;
        write.set_write_timeout(Some(IDLE_CONNECTION)).ok()?;
        let mut idle_since = Instant::now();
        let turn_began = idle_since;
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let text = std::str::from_utf8(&line).ok()?;
                if !text.trim().is_empty() {
                    let mut answer = self.respond_blocking(text.trim(), caller);
                    answer.push('\n');
                    write.write_all(answer.as_bytes()).ok()?;
                }
                idle_since = Instant::now();
                // A client asking every few milliseconds never lets the
                // read time out: the daemon stopping is checked here too.
                if self.stopping.is_cancelled() {
                    return None;
                }
                if turn_began.elapsed() >= TURN {
                    return Some((stream, pending));
                }
            }
            if pending.len() >= MAX_REQUEST_BYTES {
                let _ = write.write_all(too_long().as_bytes());
                return None;
            }
            if !pending.is_empty() {
                // Part of a line: the rest is waited for without a thread.
                return Some((stream, pending));
            }
            match stream.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.stopping.is_cancelled() || idle_since.elapsed() >= IDLE_CONNECTION {
                        return None;
                    }
                    // Between requests, nothing pending: wait on the runtime.
                    return Some((stream, pending));
                }
                Err(_) => return None,
            }
        }
    }
}

/// `answer` as the line the client reads.
fn answer_line(answer: &crate::Result<serde_json::Value>) -> String {
    let mut line = super::protocol::encode_answer(answer);
    line.push('\n');
    line
}

/// The answer to a line past [`MAX_REQUEST_BYTES`].
fn too_long() -> String {
    answer_line(&Err(crate::Error::Request(format!(
        "request line longer than {MAX_REQUEST_BYTES} bytes"
    ))))
}
