//! The blocking client for a daemon's socket: what the thin hook client, the
//! MCP gateway and the CLI talk to the daemon with. Plain std and the wire
//! types, no wasmtime; its errors are [`ClientError`], which the engine's
//! `Error` takes in whole (`From`).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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
}

impl Client {
    /// A client for the daemon at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            timeout: Duration::from_secs(30),
            busy_wait: Duration::from_secs(5),
            daemon_uid: crate::peer::own_uid(),
        }
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
        let unreachable = |err: std::io::Error| ClientError::Unreachable {
            socket: self.socket.clone(),
            message: err.to_string(),
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(unreachable)?;
        crate::peer::expect_daemon(&stream, self.daemon_uid).map_err(|why| {
            ClientError::NotTheDaemon(format!("{}: {why}", self.socket.display()))
        })?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(unreachable)?;
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(unreachable)?;
        let mut line = serde_json::to_string(request).expect("requests serialise");
        line.push('\n');
        stream.write_all(line.as_bytes()).map_err(unreachable)?;
        let mut answer = String::new();
        BufReader::new(stream)
            .read_line(&mut answer)
            .map_err(unreachable)?;
        if answer.is_empty() {
            return Err(unreachable(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection without answering",
            )));
        }
        decode_answer(&answer)
    }
}
