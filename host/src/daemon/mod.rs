//! The daemon: the one long-lived owner of a store. It keeps policies warm
//! and serves every client (hooks, the CLI, embedders) over a Unix socket,
//! and optionally a loopback HTTP port.
//!
//! Each request is the engine's [`Service`]'s to answer (admission,
//! tenants, durability before the answer); the daemon adds the transports
//! and what only a server has:
//! - `socket` and `http`: the two servers;
//! - [`Client`]: the blocking client, and where a store's daemon listens;
//! - [`launch`]: starting a store's daemon on demand, race-free;
//! - [`inbox`]: the approvals inbox;
//! - `share`: requests in flight and connections, per OS user.
//!
//! Every request that ran policies is answered only after what the answer
//! depends on is durable (policy state, turns, pauses, resolutions), so a
//! daemon killed with SIGKILL loses no lease use, budget or pause it
//! acknowledged; the decision log and events follow within 100 ms (at once
//! with `[log] durable_before_answer`). A person's command or reload waits
//! for everything.

mod http;
pub mod inbox;
pub mod launch;
mod share;
mod socket;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::decision::Decision;
use crate::gates::PendingGate;
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::service::{Listener, Service};
use crate::{Error, Result, Toolgate};

pub use crate::service::{
    Caller, ConfigIdentity, DaemonRequest, HookRuntime, Peer, peer, protocol,
};
pub use toolgate_wire::client::{Client, ClientError};
pub use toolgate_wire::locations::socket_for_store;

/// How a daemon runs, beyond its host.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// Requests that run policies at once; more are answered `busy`.
    pub max_in_flight: usize,
    /// Stop after this long without a request (`None`: never).
    pub idle_exit: Option<Duration>,
    /// Who hears about new pauses (`toolgate serve` starts it from
    /// `[notify]`).
    pub notifier: Option<Arc<Notifier>>,
    /// The socket's permissions (`[daemon] socket_mode`).
    pub socket_mode: u32,
    /// Socket connections one OS user may hold open at once
    /// (`[daemon] max_connections_per_user`).
    pub max_connections_per_user: usize,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            idle_exit: None,
            notifier: None,
            socket_mode: 0o600,
            max_connections_per_user: 256,
        }
    }
}

/// A running daemon: the engine's [`Service`] behind a Unix socket and,
/// optionally, loopback HTTP.
pub struct Daemon {
    service: Arc<Service>,
    /// What the service tells the daemon, and what the daemon keeps for it.
    shared: Arc<Shared>,
    idle_exit: Option<Duration>,
    /// When the last request arrived (ms since the epoch).
    last_request_ms: AtomicU64,
    /// The socket's permissions.
    socket_mode: u32,
    /// Whether a search for declined gates is running (one at a time).
    settling: Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled when serving ends: open socket connections close.
    stopping: tokio_util::sync::CancellationToken,
    /// Whether the wait for the disk has begun.
    waiting_for_disk: std::sync::atomic::AtomicBool,
    /// Notified when the disk takes writes again.
    disk_back: Arc<tokio::sync::Notify>,
    /// Serving ended for that reason.
    must_restart: std::sync::atomic::AtomicBool,
    /// Open socket connections per peer uid, and how many one may hold.
    connections: share::PerUser,
    /// Threads serving each peer uid's connections at once.
    turns: share::Turns,
}

/// The daemon's half of the service's [`Listener`]: counting, announcing
/// pauses, the inbox, and the restart after a store failure.
struct Shared {
    metrics: Metrics,
    /// The requests running policies, per OS user too.
    in_flight: share::InFlight,
    notifier: Option<Arc<Notifier>>,
    /// The approvals inbox's sign-in codes, sessions and history.
    inbox: inbox::Inbox,
    /// The loopback HTTP address, once serving.
    http_address: std::sync::OnceLock<SocketAddr>,
    /// Notified when the store failed so that only opening it again helps
    /// (redb refuses every write after an I/O error): the daemon goes on
    /// answering (every answer that needs the store fails closed, and
    /// `/health` says failing) while it waits for the disk to take writes
    /// again, then serving ends and the process starts afresh.
    restart: tokio::sync::Notify,
}

impl Listener for Shared {
    fn decided(&self, decision: &Decision) {
        self.metrics.record(decision);
    }

    fn paused(&self, gate: &PendingGate, reason: Option<&str>) {
        if let Some(notifier) = &self.notifier {
            notifier.paused(gate, reason);
        }
    }

    fn resolved(&self, gate: &PendingGate, decision: &str, by: &str) {
        self.inbox.record(inbox::Resolved {
            at_ms: crate::now_ms(),
            tool: gate.tool.clone(),
            request_id: gate.request_id.clone(),
            decision: decision.into(),
            by: by.into(),
        });
    }

    fn reloaded(&self, ok: bool) {
        self.metrics.record_reload(ok);
    }

    fn not_durable(&self) {
        self.metrics.record_not_durable();
        self.restart.notify_one();
    }

    /// A sign-in code for the approvals inbox, for the person `caller`
    /// (already checked in the service's admission).
    fn web_login(&self, caller: Caller) -> Result<Value> {
        let Some(address) = self.http_address.get() else {
            return Err(Error::Request(
                "this daemon serves no HTTP, so no approvals inbox: set [daemon] http = \
                 \"127.0.0.1:7878\" in the config (or run `toolgate serve --http 127.0.0.1:7878`)"
                    .into(),
            ));
        };
        let identity = match caller {
            Caller::Socket(Some(peer)) => format!("uid {} at a terminal", peer.uid),
            _ => "this process".to_string(),
        };
        let code = self.inbox.issue_code(&identity);
        Ok(json!({
            "url": format!("http://{address}/approvals/login?code={code}"),
            "inbox": format!("http://{address}/approvals"),
            "code": code,
            "expires_in_secs": inbox::CODE_TTL.as_secs(),
        }))
    }

    /// The decision metrics and the daemon's own.
    fn metrics_text(&self, dropped_events: u64) -> String {
        self.metrics
            .render(self.in_flight.running(), dropped_events)
    }
}

/// `handle`'s answer, or, if it panicked (a bug), an internal error the
/// caller fails closed on: the connection still gets an answer and stays
/// open, where a panic used to close it with none.
fn contained(handle: impl FnOnce() -> Result<Value>) -> Result<Value> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(handle)).unwrap_or_else(|panic| {
        let mut what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if let Some((at, _)) = what.char_indices().nth(200) {
            what.truncate(at);
        }
        tracing::error!(panic = %what, "a request handler panicked");
        Err(Error::Remote {
            kind: crate::ErrorKind::Internal,
            message: format!(
                "toolgate failed on this request (a bug, logged: {what}); nothing was decided"
            ),
        })
    })
}

impl Daemon {
    /// A daemon over `host`.
    pub fn new(host: Arc<Toolgate>, options: DaemonOptions) -> Arc<Self> {
        let shared = Arc::new(Shared {
            metrics: Metrics::default(),
            in_flight: share::InFlight::new(options.max_in_flight),
            notifier: options.notifier,
            inbox: inbox::Inbox::default(),
            http_address: std::sync::OnceLock::new(),
            restart: Default::default(),
        });
        let shared_socket = options.socket_mode & 0o077 != 0;
        let listener: Arc<dyn Listener> = Arc::clone(&shared) as _;
        Arc::new(Self {
            service: Arc::new(Service::with_listener(host, listener, shared_socket)),
            shared,
            idle_exit: options.idle_exit,
            last_request_ms: AtomicU64::new(crate::now_ms()),
            socket_mode: options.socket_mode,
            settling: Default::default(),
            stopping: Default::default(),
            waiting_for_disk: Default::default(),
            disk_back: Default::default(),
            must_restart: Default::default(),
            connections: share::PerUser::new(options.max_connections_per_user),
            // A quarter of the in-flight slots (at least 4, so a user's
            // health check or admin command is not queued behind its own
            // slow calls): no more run at once for one user, and the CPU
            // stays mostly free for the others.
            turns: share::Turns::new((options.max_in_flight / 4).max(4)),
        })
    }

    /// The service it serves.
    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// Reload and count it.
    pub fn reload(&self) -> Result<crate::ReloadReport> {
        self.service.reload()
    }

    /// Handle one request from this process (blocking: run it off the
    /// async workers).
    pub fn handle(&self, request: DaemonRequest) -> Result<Value> {
        self.service.handle(request)
    }

    /// Handle one request from `caller` (see [`Service::handle_from`]).
    pub fn handle_from(&self, request: DaemonRequest, caller: Caller) -> Result<Value> {
        self.service.handle_from(request, caller)
    }

    /// Whether serving ended because the store must be opened again (its
    /// disk failed a write and takes them again): the process starts
    /// afresh.
    pub fn must_restart(&self) -> bool {
        self.must_restart.load(Ordering::Acquire)
    }

    /// Whether this daemon serves the config `named` (see
    /// [`Service::serves`]).
    pub fn serves(&self, named: &ConfigIdentity) -> Result<()> {
        self.service.serves(named)
    }

    /// The Prometheus text: the decision metrics and the daemon's own.
    pub fn metrics_text(&self) -> String {
        self.shared.metrics_text(self.service.dropped_events())
    }

    /// The counters the audit trail's export updates (see
    /// [`crate::audit_export::ship`]), served with the other metrics.
    pub fn audit_export_counters(&self) -> crate::metrics::AuditExportCounters {
        self.shared.metrics.audit_export()
    }

    /// Count now as activity (for `idle_exit_secs`).
    fn touch(&self) {
        self.last_request_ms
            .store(crate::now_ms(), Ordering::Relaxed);
    }

    /// Decode, admit and handle one request; the wire answer.
    async fn respond(self: &Arc<Self>, text: &str, caller: Caller) -> String {
        self.touch();
        protocol::encode_answer(&self.dispatch(text, caller).await)
    }

    async fn dispatch(self: &Arc<Self>, text: &str, caller: Caller) -> Result<Value> {
        let (request, slot) = self.accept(text, caller)?;
        let daemon = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            contained(|| daemon.handle_from(request, caller))
        })
        .await
        .unwrap_or_else(|err| {
            Err(Error::Remote {
                kind: crate::ErrorKind::Internal,
                message: format!("the request handler failed: {err}"),
            })
        })
    }

    /// [`Self::respond`] on the calling thread, which may block.
    fn respond_blocking(&self, text: &str, caller: Caller) -> String {
        self.touch();
        let answer = self
            .accept(text, caller)
            .and_then(|(request, _slot)| contained(|| self.handle_from(request, caller)));
        protocol::encode_answer(&answer)
    }

    /// Decode a request and, when it runs policies, take one of the
    /// in-flight slots it is handled under, as its caller's user may (none:
    /// `busy`, see [`share::InFlight`]).
    fn accept(&self, text: &str, caller: Caller) -> Result<(DaemonRequest, Option<share::Slot>)> {
        let request = protocol::decode_request(text)?;
        if !request.runs_policies() {
            return Ok((request, None));
        }
        // Callers the kernel does not name (HTTP, this process) share one.
        let uid = match caller {
            Caller::Socket(Some(peer)) => peer.uid,
            Caller::Socket(None) | Caller::Http | Caller::InProcess => u32::MAX,
        };
        let slot = self.shared.in_flight.take(uid).map_err(|why| {
            self.shared.metrics.record_busy();
            Error::Busy(why)
        })?;
        Ok((request, Some(slot)))
    }

    /// Serve the Unix socket at `socket` (and HTTP on `http`, which must be
    /// a loopback address) until `shutdown` completes, the daemon has been
    /// idle for its idle limit, or its socket file is removed or replaced
    /// (a store directory deleted under it); then stop accepting, let open
    /// requests finish, and remove the socket file.
    pub async fn serve(
        self: Arc<Self>,
        socket: &Path,
        http: Option<SocketAddr>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        let http = match http {
            Some(addr) if !addr.ip().is_loopback() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--http {addr}: only loopback addresses are allowed"),
                ));
            }
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                let _ = self.shared.http_address.set(listener.local_addr()?);
                Some(listener)
            }
            None => None,
        };
        let listener = socket::bind(socket, self.socket_mode)?;
        let identity = socket::file_identity(socket);
        tracing::info!(socket = %socket.display(), "toolgate daemon listening");
        let mut connections = tokio::task::JoinSet::new();
        let mut checks = tokio::time::interval(Duration::from_secs(1));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = self.shared.restart.notified() => self.wait_for_disk(),
                _ = self.disk_back.notified() => {
                    tracing::warn!("the store's disk takes writes again; starting afresh to open the store again");
                    self.must_restart.store(true, Ordering::Release);
                    break;
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(Arc::clone(&self).socket_connection(stream));
                    }
                    Err(err) => accept_failed(&err).await,
                },
                accepted = accept_http(http.as_ref()) => match accepted {
                    Ok(stream) => {
                        connections.spawn(http::serve_connection(Arc::clone(&self), stream));
                    }
                    Err(err) => accept_failed(&err).await,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = checks.tick() => {
                    if socket::file_identity(socket) != identity {
                        tracing::warn!(socket = %socket.display(), "the socket file was removed or replaced; stopping");
                        break;
                    }
                    if self.idle_for_too_long() {
                        tracing::info!("idle past daemon.idle_exit_secs; stopping");
                        break;
                    }
                    self.end_declined_gates();
                }
            }
        }
        tracing::info!(
            open = connections.len(),
            "shutting down: finishing open requests"
        );
        self.stopping.cancel();
        let drain = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(10), drain)
            .await
            .is_err()
        {
            connections.abort_all();
        }
        if socket::file_identity(socket) == identity {
            let _ = std::fs::remove_file(socket);
        }
        Ok(())
    }

    /// Once: probe, with backoff, whether the store's directory takes a
    /// write and an fsync again, and say so on [`Daemon::disk_back`].
    fn wait_for_disk(&self) {
        if self.waiting_for_disk.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(
            "the store failed to make state durable; answers that need it fail until its \
             disk takes writes again, then the daemon starts afresh"
        );
        let dir = self
            .service
            .store_path()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let back = Arc::clone(&self.disk_back);
        // A disk that passes the probe but still fails the store's writes
        // brings the daemon here again after each fresh start: each start
        // waits twice as long as the one before (see `FRESH_STARTS`).
        let starts = std::env::var(FRESH_STARTS)
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(250)
                .saturating_mul(1 << starts.min(6))
                .min(Duration::from_secs(10));
            loop {
                tokio::time::sleep(pause).await;
                let probe = dir.clone();
                if let Ok(Ok(())) = tokio::task::spawn_blocking(move || takes_writes(&probe)).await
                {
                    back.notify_one();
                    return;
                }
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        });
    }

    /// End, off the accept loop, the gates people declined in their
    /// runtime's prompt since the last look, so they leave `gates list`,
    /// the inbox and `watch` within a second, not at the next event.
    fn end_declined_gates(&self) {
        if self.settling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (service, settling) = (Arc::clone(&self.service), Arc::clone(&self.settling));
        tokio::task::spawn_blocking(move || {
            if let Err(err) = service.end_declined_gates(None, crate::hooks::declined_in_prompt) {
                tracing::warn!(error = %err.report(), "cannot look for declined gates");
            }
            settling.store(false, Ordering::Release);
        });
    }

    fn idle_for_too_long(&self) -> bool {
        let Some(limit) = self.idle_exit else {
            return false;
        };
        let idle_ms = crate::now_ms().saturating_sub(self.last_request_ms.load(Ordering::Relaxed));
        idle_ms >= limit.as_millis() as u64 && self.shared.in_flight.running() == 0
    }
}

/// An accept error (EMFILE, ENFILE, ECONNABORTED, ...) is never fatal: log
/// it, give the system a moment to free what ran out, and go on.
async fn accept_failed(err: &std::io::Error) {
    tracing::warn!(error = %err, "accept failed; retrying");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn accept_http(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<tokio::net::TcpStream> {
    match listener {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// How many times this daemon has started afresh after a store I/O error
/// (set for the new process by `toolgate serve`).
pub const FRESH_STARTS: &str = "TOOLGATE_FRESH_STARTS";

/// Whether `dir` takes a write of a megabyte and its fsync: the disk has
/// room (and works) again.
fn takes_writes(dir: &Path) -> std::io::Result<()> {
    use std::io::Write as _;
    let probe = dir.join(format!(".toolgate-disk-probe-{}", std::process::id()));
    let written = std::fs::File::create(&probe).and_then(|mut file| {
        file.write_all(&[0; 1024 * 1024])?;
        file.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_that_panics_still_answers_with_an_internal_error() {
        let answer = contained(|| panic!("index out of bounds"));
        let Err(Error::Remote { kind, message }) = answer else {
            panic!("an error answer: {answer:?}");
        };
        assert_eq!(kind, crate::ErrorKind::Internal);
        assert!(message.contains("index out of bounds"), "{message}");
        assert!(contained(|| Ok(json!(1))).is_ok());
    }
}
