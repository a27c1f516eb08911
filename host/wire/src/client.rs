//! The blocking client for a daemon's socket: what the thin hook client, the
//! MCP gateway and the CLI talk to the daemon with. Plain std and the wire
//! types, no wasmtime; its errors are [`ClientError`], which the engine's
//! `Error` takes in whole (`From`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::protocol::{self, DaemonRequest, ErrorKind};

/// Why a request to the daemon got no result.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No daemon answers at the socket (not running, or it went away).
    #[error("toolgate daemon at {}: {message}", socket.display())]
    Unreachable {
        /// The daemon's socket.
        socket: PathBuf,
        /// Why it could not be reached.
        message: String,
    },
    /// Something other than the expected daemon serves the socket (another
    /// user's process): refused, never believed.
    #[error("{0}")]
    NotTheDaemon(String),
    /// The daemon is at its limit of requests in flight.
    #[error("toolgate daemon is busy: {0}")]
    Busy(String),
    /// The daemon could not understand the request.
    #[error("invalid request: {0}")]
    Request(String),
    /// The daemon refused the caller.
    #[error("not allowed: {0}")]
    Unauthorized(String),
    /// The daemon answered with an error of another kind.
    #[error("toolgate daemon: {message}")]
    Remote {
        /// What sort of failure the daemon reported.
        kind: ErrorKind,
        /// The daemon's message.
        message: String,
    },
}

impl ClientError {
    /// What sort of failure this is, sorted as the daemon sorts its own.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Unreachable { .. } => ErrorKind::Unreachable,
            ClientError::NotTheDaemon(_) | ClientError::Unauthorized(_) => ErrorKind::Unauthorized,
            ClientError::Busy(_) => ErrorKind::Busy,
            ClientError::Request(_) => ErrorKind::InvalidRequest,
            ClientError::Remote { kind, .. } => *kind,
        }
    }
}

/// A wire answer back as a result, each error kind the daemon reports as
/// its own variant.
pub fn decode_answer(text: &str) -> Result<Value, ClientError> {
    protocol::decode(text).map_err(|(kind, message)| match kind {
        ErrorKind::Busy => ClientError::Busy(message),
        ErrorKind::InvalidRequest => ClientError::Request(message),
        ErrorKind::Unauthorized => ClientError::Unauthorized(message),
        kind => ClientError::Remote { kind, message },
    })
}

/// A blocking client for the daemon's socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
    busy_wait: Duration,
    daemon_uid: u32,
    /// Idle connections kept for the next calls, shared by the clones
    /// (see [`Client::keeping_connections`]); `None`: one per call.
    kept: Option<Arc<Mutex<Vec<Kept>>>>,
}

/// An open connection to the daemon, idle since `since`, opened by process
/// `pid`: a forked child must not share its parent's connection (each
/// could read the other's answer).
#[derive(Debug)]
struct Kept {
    stream: BufReader<UnixStream>,
    since: Instant,
    pid: u32,
}

/// The most idle connections a client keeps.
const KEPT_CONNECTIONS: usize = 8;
/// A connection idle this long is closed rather than reused (the daemon
/// closes one idle for 120 s).
const KEPT_FOR: Duration = Duration::from_secs(60);

impl Client {
    /// A client for the daemon at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            timeout: Duration::from_secs(30),
            busy_wait: Duration::from_secs(5),
            daemon_uid: crate::peer::own_uid(),
            kept: None,
        }
    }

    /// Keep connections open between calls (up to 8 idle, each for up to
    /// a minute), for a process that asks many times: a call then costs
    /// no connect, and the daemon identifies the caller once per
    /// connection. A request is sent again on a new connection only when
    /// a kept one was found closed before it could be written, so it is
    /// never applied twice.
    pub fn keeping_connections(mut self) -> Self {
        self.kept = Some(Arc::default());
        self
    }

    /// Talk only to a daemon running as `uid` (default: this process's
    /// user); a socket served by anyone else is refused as
    /// [`ClientError::NotTheDaemon`], never believed.
    pub fn with_daemon_uid(mut self, uid: u32) -> Self {
        self.daemon_uid = uid;
        self
    }

    /// How long to keep retrying while the daemon answers `busy` (default
    /// 5 s; zero: not at all).
    pub fn with_busy_wait(mut self, wait: Duration) -> Self {
        self.busy_wait = wait;
        self
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether a daemon answers at the socket.
    pub fn is_up(&self) -> bool {
        self.call_once(&DaemonRequest::Health).is_ok()
    }

    /// Send one request and wait for its answer, retrying with backoff
    /// while the daemon is busy.
    pub fn call(&self, request: &DaemonRequest) -> Result<Value, ClientError> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match self.call_once(request) {
                Err(ClientError::Busy(_)) if started.elapsed() + pause < self.busy_wait => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                answer => return answer,
            }
        }
    }

    fn call_once(&self, request: &DaemonRequest) -> Result<Value, ClientError> {
        let mut line = serde_json::to_string(request).expect("requests serialise");
        // The daemon would close the connection on it, mid-write: say why.
        if line.len() >= crate::protocol::MAX_REQUEST_BYTES {
            return Err(ClientError::Request(format!(
                "the request is {} bytes as sent, past the daemon's limit of {} bytes",
                line.len(),
                crate::protocol::MAX_REQUEST_BYTES
            )));
        }
        line.push('\n');
        // A kept connection closed while idle (the daemon restarted, or
        // timed it out) fails the write: nothing was sent, so sending on a
        // new connection is safe.
        if let Some(mut kept) = self.take_kept()
            && kept.get_mut().write_all(line.as_bytes()).is_ok()
        {
            return self.answer(kept);
        }
        let mut stream = self.connect()?;
        stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(|err| self.unreachable(err))?;
        self.answer(stream)
    }

    /// A new connection, checked to be the daemon's.
    fn connect(&self) -> Result<BufReader<UnixStream>, ClientError> {
        let stream = UnixStream::connect(&self.socket).map_err(|err| self.unreachable(err))?;
        crate::peer::expect_daemon(&stream, self.daemon_uid).map_err(|why| {
            ClientError::NotTheDaemon(format!("{}: {why}", self.socket.display()))
        })?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(|err| self.unreachable(err))?;
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(|err| self.unreachable(err))?;
        Ok(BufReader::new(stream))
    }

    /// Read the answer to the request just sent on `stream`, keeping the
    /// connection when this client keeps them.
    fn answer(&self, mut stream: BufReader<UnixStream>) -> Result<Value, ClientError> {
        let mut answer = String::new();
        stream
            .read_line(&mut answer)
            .map_err(|err| self.unreachable(err))?;
        if !answer.ends_with('\n') {
            return Err(self.unreachable(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without answering",
            )));
        }
        if let Some(kept) = &self.kept {
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.len() < KEPT_CONNECTIONS {
                kept.push(Kept {
                    stream,
                    since: Instant::now(),
                    pid: std::process::id(),
                });
            }
        }
        decode_answer(&answer)
    }

    /// The most recently used kept connection still fresh enough to use.
    fn take_kept(&self) -> Option<BufReader<UnixStream>> {
        let mut kept = self
            .kept
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        kept.retain(|k| k.pid == pid && k.since.elapsed() < KEPT_FOR);
        kept.pop().map(|k| k.stream)
    }

    fn unreachable(&self, err: std::io::Error) -> ClientError {
        ClientError::Unreachable {
            socket: self.socket.clone(),
            message: err.to_string(),
        }
    }
}
