//! Starting a store's daemon on demand.
//!
//! Many hook processes can arrive at once (Claude Code runs read-only tool
//! calls in parallel), each finding no daemon. They serialise on an
//! exclusive lock on `STORE.daemon.lock`: the first starts the daemon and
//! waits until it answers; the others, once they hold the lock, find it
//! answering and start nothing. The daemon is detached (its own process
//! group, stdin closed, stdout and stderr appended to `STORE.daemon.log`),
//! so it outlives the hook and never holds the hook's pipes open.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Client;
use crate::{Error, Result};

/// How to start the daemon of one store.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// Where the daemon will listen.
    pub socket: PathBuf,
    /// The program and arguments that run it, e.g. `toolgate --config C
    /// --store S serve --socket P`.
    pub command: Vec<OsString>,
    /// Its log file.
    pub log: PathBuf,
    /// The lock file that makes starting it race-free.
    pub lock: PathBuf,
    /// How long to wait for the lock and for the daemon to answer.
    pub wait: Duration,
    /// The user the daemon runs as: only its socket is believed.
    pub daemon_uid: u32,
}

impl Launcher {
    /// A launcher for `store`'s daemon run by `program` with `args` (the
    /// arguments before `serve`, e.g. `--config FILE --store FILE`).
    pub fn new(
        store: &crate::locations::StoreLocation,
        program: impl Into<OsString>,
        args: Vec<OsString>,
    ) -> Self {
        let socket = store.socket();
        let local = store.local_name();
        let beside = |suffix: &str| {
            let mut path = local.as_os_str().to_owned();
            path.push(suffix);
            PathBuf::from(path)
        };
        let mut command = vec![program.into()];
        command.extend(args);
        command.extend(["serve".into(), "--socket".into(), socket.clone().into()]);
        Self {
            socket,
            command,
            log: beside(".daemon.log"),
            lock: beside(".daemon.lock"),
            wait: Duration::from_secs(30),
            daemon_uid: toolgate_wire::peer::own_uid(),
        }
    }

    /// Believe only a daemon running as `uid` (see [`Client::with_daemon_uid`]).
    pub fn with_daemon_uid(mut self, uid: u32) -> Self {
        self.daemon_uid = uid;
        self
    }

    /// Listen on `socket` instead of the store's default socket.
    pub fn with_socket(mut self, socket: PathBuf) -> Self {
        if let Some(last) = self.command.last_mut() {
            *last = socket.clone().into();
        }
        self.socket = socket;
        self
    }

    /// Make sure the daemon answers, starting it if no one else has; its
    /// client.
    pub fn ensure_running(&self) -> Result<Client> {
        let client = Client::new(&self.socket).with_daemon_uid(self.daemon_uid);
        if client.is_up() {
            return Ok(client);
        }
        let deadline = Instant::now() + self.wait;
        let _lock = self.lock_until(deadline)?;
        // Another process may have started it while we waited for the lock.
        if client.is_up() {
            return Ok(client);
        }
        let mut child = self.spawn()?;
        tracing::info!(pid = child.id(), socket = %self.socket.display(), "started the toolgate daemon");
        loop {
            if let Some(status) = child.try_wait().map_err(|e| self.failed(e.to_string()))? {
                return Err(self.failed(format!("it exited at start ({status})")));
            }
            if client.is_up() {
                return Ok(client);
            }
            if Instant::now() >= deadline {
                return Err(self.failed(format!(
                    "it did not answer within {} s",
                    self.wait.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn lock_until(&self, deadline: Instant) -> Result<File> {
        if let Some(dir) = self.lock.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.failed(e.to_string()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|e| self.failed(format!("cannot open {}: {e}", self.lock.display())))?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(Error::Busy(format!(
                        "another process is starting the daemon and held {} for {} s",
                        self.lock.display(),
                        self.wait.as_secs()
                    )));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(self.failed(format!("cannot lock {}: {e}", self.lock.display())));
                }
            }
        }
    }

    fn spawn(&self) -> Result<std::process::Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| self.failed(format!("cannot open its log {}: {e}", self.log.display())))?;
        let stderr = log.try_clone().map_err(|e| self.failed(e.to_string()))?;
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| self.failed("no command to run".into()))?;
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| self.failed(format!("cannot run {}: {e}", Path::new(program).display())))
    }

    fn failed(&self, why: String) -> Error {
        Error::DaemonUnreachable {
            socket: self.socket.clone(),
            message: format!(
                "cannot start the daemon: {why}; see {} (last lines: {})",
                self.log.display(),
                last_lines(&self.log, 3)
            ),
        }
    }
}

/// The last `n` lines of a (log) file, joined, for an error message.
fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(n).collect();
    if lines.is_empty() {
        "none".into()
    } else {
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}
