//! The blocking client for a daemon's socket, and where a store's daemon
//! listens.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

pub use crate::locations::socket_for_store;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::protocol::{self, DaemonRequest};
use crate::{Error, Result};

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
            daemon_uid: toolgate_wire::peer::own_uid(),
        }
    }

    /// Talk only to a daemon running as `uid` (default: this process's
    /// user); a socket served by anyone else is refused as
    /// [`Error::Unauthorized`], never believed.
    pub fn with_daemon_uid(mut self, uid: u32) -> Self {
        self.daemon_uid = uid;
        self
    }

    /// How long to keep retrying while the daemon answers `busy` (default 5 s).
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
    /// while the daemon is busy. No daemon at the socket is
    /// [`Error::DaemonUnreachable`]; the daemon's own errors keep their kind.
    pub fn call(&self, request: &DaemonRequest) -> Result<Value> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match self.call_once(request) {
                Err(Error::Busy(_)) if started.elapsed() + pause < self.busy_wait => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                answer => return answer,
            }
        }
    }

    fn call_once(&self, request: &DaemonRequest) -> Result<Value> {
        let unreachable = |err: std::io::Error| Error::DaemonUnreachable {
            socket: self.socket.clone(),
            message: err.to_string(),
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(unreachable)?;
        toolgate_wire::peer::expect_daemon(&stream, self.daemon_uid)
            .map_err(|why| Error::Unauthorized(format!("{}: {why}", self.socket.display())))?;
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
        protocol::decode_answer(&answer)
    }
}
