//! The daemon: the one long-lived owner of a store. It keeps policies warm
//! and serves every client (hooks, the CLI, embedders) over a Unix socket,
//! and optionally a loopback HTTP port.
//!
//! - [`protocol`]: the requests and answers both transports carry;
//! - `socket` and `http`: the two servers;
//! - [`client`]: the blocking client, and where a store's daemon listens;
//! - [`launch`]: starting a store's daemon on demand, race-free;
//! - [`peer`]: who is asking — peer credentials, agent terminals, channel
//!   tokens — and what they may do.
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
pub mod peer;
pub mod protocol;
mod share;
mod socket;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use crate::decision::{Decision, Outcome, Verdict};
use crate::gates::{GateKey, GateResolution};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::tenant::Tenant;
use crate::{Config, ToolRequest, Toolgate};
use crate::{Error, Result};

pub use peer::Peer;
pub use protocol::{ConfigIdentity, DaemonRequest, HookRuntime};
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

/// Shared state of a running daemon.
pub struct Daemon {
    host: Arc<Toolgate>,
    metrics: Metrics,
    /// The requests running policies, per OS user too.
    in_flight: share::InFlight,
    idle_exit: Option<Duration>,
    /// When the last request arrived (ms since the epoch).
    last_request_ms: AtomicU64,
    /// Agent terminals already written to the store.
    agent_terminals: std::sync::Mutex<std::collections::HashSet<(u32, u64, u32, u64)>>,
    notifier: Option<Arc<Notifier>>,
    /// The approvals inbox's sign-in codes, sessions and history.
    inbox: inbox::Inbox,
    /// The loopback HTTP address, once serving.
    http_address: std::sync::OnceLock<SocketAddr>,
    /// The socket's permissions.
    socket_mode: u32,
    /// Whether a search for declined gates is running (one at a time).
    settling: Arc<std::sync::atomic::AtomicBool>,
    /// Cancelled when serving ends: open socket connections close.
    stopping: tokio_util::sync::CancellationToken,
    /// Notified when the store failed so that only opening it again helps
    /// (redb refuses every write after an I/O error): the daemon goes on
    /// answering (every answer that needs the store fails closed, and
    /// `/health` says failing) while it waits for the disk to take writes
    /// again, then serving ends and the process starts afresh.
    restart: tokio::sync::Notify,
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

/// What must be on disk before a request is answered.
enum Durable {
    /// A person's command or reload: everything.
    Everything,
    /// An answer to an agent: what it depends on (see
    /// [`Toolgate::settle`]).
    WhatTheAnswerDependsOn,
    /// A read.
    Nothing,
}

impl Durable {
    fn before_answering(request: &DaemonRequest) -> Self {
        match request {
            DaemonRequest::Command { .. } | DaemonRequest::Reload => Self::Everything,
            DaemonRequest::NextTurn { .. } => Self::WhatTheAnswerDependsOn,
            request if request.runs_policies() => Self::WhatTheAnswerDependsOn,
            _ => Self::Nothing,
        }
    }
}

/// Where a request came from, which decides what it may do.
#[derive(Debug, Clone, Copy)]
pub enum Caller {
    /// This process (an embedder, or a CLI command with no daemon running):
    /// trusted as the code that links the library.
    InProcess,
    /// A Unix-socket connection, with the kernel's word on its peer.
    Socket(Option<Peer>),
    /// A loopback HTTP connection: no peer credentials.
    Http,
}

impl Daemon {
    /// A daemon over `host`.
    pub fn new(host: Arc<Toolgate>, options: DaemonOptions) -> Arc<Self> {
        Arc::new(Self {
            host,
            metrics: Metrics::default(),
            in_flight: share::InFlight::new(options.max_in_flight),
            idle_exit: options.idle_exit,
            last_request_ms: AtomicU64::new(crate::now_ms()),
            agent_terminals: Default::default(),
            notifier: options.notifier,
            inbox: inbox::Inbox::default(),
            http_address: std::sync::OnceLock::new(),
            socket_mode: options.socket_mode,
            settling: Default::default(),
            stopping: Default::default(),
            restart: Default::default(),
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

    /// Count a decision, and announce it if it paused a call.
    fn decided(&self, decision: &Decision) {
        self.metrics.record(decision);
        let (Some(notifier), Some(pause)) = (&self.notifier, &decision.pause) else {
            return;
        };
        if decision.verdict != Verdict::Pause {
            return;
        }
        match self.host.gates(Some(&pause.user_id)) {
            Ok(gates) => {
                let gate = gates.iter().find(|g| g.request_id == pause.request_id);
                if let Some(gate) = gate {
                    notifier.paused(gate, decision.reason.as_deref());
                }
            }
            Err(err) => {
                tracing::warn!(error = %err.report(), "cannot read the pause to announce it")
            }
        }
    }

    /// The host.
    pub fn host(&self) -> &Arc<Toolgate> {
        &self.host
    }

    /// Reload and count it.
    pub fn reload(&self) -> Result<crate::ReloadReport> {
        let result = self.host.reload();
        self.metrics.record_reload(result.is_ok());
        result
    }

    /// Handle one request from this process (blocking: run it off the
    /// async workers).
    pub fn handle(&self, request: DaemonRequest) -> Result<Value> {
        self.handle_from(request, Caller::InProcess)
    }

    /// Handle one request from `caller`: a pause is resolved only by a
    /// person at a terminal of their own or a channel with its token, and
    /// admin commands and reloads only by such a person (see [`peer`]).
    pub fn handle_from(&self, request: DaemonRequest, caller: Caller) -> Result<Value> {
        let remote = self.admit(&request, caller)?;
        let tenant = self.tenant_of(caller);
        let request = tenant.confine_request(request)?;
        let host = &self.host;
        let durable = Durable::before_answering(&request);
        let value = match request {
            DaemonRequest::Hook {
                runtime,
                event,
                on_error,
                config,
            } => self.answer_hook((runtime, tenant), &event, on_error, config.as_ref()),
            DaemonRequest::Evaluate { request } => {
                let decision = host.evaluate(&request)?;
                self.decided(&decision);
                to_json(decision)
            }
            DaemonRequest::Observe {
                request,
                outcome,
                summary,
            } => self.observed(&request, outcome, &summary)?,
            DaemonRequest::CheckOutput {
                request,
                outcome,
                output,
                observe,
            } => self.checked(&request, outcome, &output, observe)?,
            DaemonRequest::VisibleTools { caller, tools } => json!({
                "visible": host.visible_tools(&caller, &tools),
                "filtered": host.filters_tools(),
            }),
            DaemonRequest::NextTurn { session } => json!(host.next_turn(&session)?),
            DaemonRequest::Turn { session } => json!(host.turn(&session)?),
            DaemonRequest::Resolve {
                user,
                thread,
                request_id,
                channel,
                resolution,
                token: _,
            } => {
                let key = GateKey {
                    user_id: user,
                    thread_id: thread,
                };
                let by = resolver(&caller, &channel);
                // A remote channel was authenticated in `admit`: a person's
                // channel may resolve a gate raised from any channel.
                to_json(self.resolve(&key, &request_id, &channel, resolution, remote, by)?)
            }
            DaemonRequest::Gates { user } => {
                let mut gates = host.gates(user.as_deref())?;
                gates.retain(|gate| tenant.sees_user(&gate.user_id));
                to_json(gates)
            }
            DaemonRequest::Command { plugin, name, args } => {
                let args = if args.is_null() { json!({}) } else { args };
                let answer = host.command(&plugin, &name, &args.to_string())?;
                serde_json::from_str(&answer).unwrap_or(Value::String(answer))
            }
            DaemonRequest::Log { filter, limit } => {
                rows("entry", host.decision_log(&filter, limit)?)
            }
            DaemonRequest::Events { limit } => rows("event", host.recent_events(limit)?),
            DaemonRequest::StoreStats => to_json(host.store_stats()?),
            DaemonRequest::Sweep => to_json(host.sweep()?),
            DaemonRequest::Reload => to_json(self.reload()?),
            DaemonRequest::Plugins => to_json(host.plugin_statuses()),
            DaemonRequest::Health => self.health(),
            DaemonRequest::WebLogin => self.web_login(caller)?,
            DaemonRequest::Metrics => Value::String(self.metrics_text()),
        };
        self.once_durable(durable, value)
    }

    /// `value`, once what it depends on (`durable`) is on disk; an error
    /// naming the store if that failed: never an answer its state may not
    /// survive. redb refuses everything after an I/O error until the store
    /// is opened again, so serving then ends for a fresh start.
    fn once_durable(&self, durable: Durable, value: Value) -> Result<Value> {
        match durable {
            Durable::Everything => self.host.persist(),
            Durable::WhatTheAnswerDependsOn => self.host.settle(),
            Durable::Nothing => return Ok(value),
        }
        if let Err(failed) = self.host.check_durable() {
            self.metrics.record_not_durable();
            self.restart.notify_one();
            return Err(failed);
        }
        Ok(value)
    }

    /// What the policies leave of a call's output, and (`observe`: its
    /// summary) its outcome recorded in the same request.
    fn checked(
        &self,
        request: &ToolRequest,
        outcome: Outcome,
        output: &str,
        observe: Option<String>,
    ) -> Result<Value> {
        let check = self.host.check_output(request, outcome, output);
        if let Some(summary) = observe {
            self.observed(request, outcome, &summary)?;
        }
        Ok(to_json(check))
    }

    /// A runtime's report of what happened to a call.
    fn observed(&self, request: &ToolRequest, outcome: Outcome, summary: &str) -> Result<Value> {
        if outcome == Outcome::Denied {
            // A paused call that did not run (the person refused it in the
            // runtime's own prompt, or the agent gave up) withdraws its
            // pause: closing a prompt approves nothing.
            self.host.close_answered_gate(request)?;
        }
        self.host.observe(request, outcome, summary);
        Ok(Value::Null)
    }

    /// A runtime's hook event, answered as the runtime reads answers; one
    /// for another config (`config`) is refused with the failure answer.
    fn answer_hook(
        &self,
        (runtime, tenant): (HookRuntime, Tenant),
        event: &str,
        on_error: crate::hooks::OnError,
        config: Option<&ConfigIdentity>,
    ) -> Value {
        if let Some(named) = config
            && let Err(refusal) = self.serves(named)
        {
            let answer = runtime.failure_answer(on_error, &refusal.to_string());
            return Value::String(answer.to_string());
        }
        let handled = crate::hooks::handle_as(&self.host, tenant, runtime, event, on_error);
        if let Some(decision) = &handled.decision {
            self.decided(decision);
        }
        Value::String(handled.output)
    }

    /// Resolve a pending gate: the one path every channel's answer takes
    /// (the socket's `Resolve`, the approvals inbox). `authenticated`: the
    /// caller proved a person's channel (a terminal of their own, a
    /// channel's token, an inbox session), which may resolve a gate raised
    /// from any channel; otherwise only the gate's own channel or a trusted
    /// one may. The answer joins the inbox's history as `by`.
    pub(crate) fn resolve(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        resolution: GateResolution,
        authenticated: bool,
        by: String,
    ) -> Result<crate::gates::PendingGate> {
        let decision = resolution.answer_name();
        let gate = if authenticated {
            self.host
                .resolve_gate_authenticated(key, request_id, channel, resolution)?
        } else {
            self.host
                .resolve_gate(key, request_id, channel, resolution)?
        };
        self.host.persist();
        tracing::info!(request_id, decision, %by, "gate resolved");
        self.inbox.record(inbox::Resolved {
            at_ms: crate::now_ms(),
            tool: gate.tool.clone(),
            request_id: request_id.to_string(),
            decision: decision.into(),
            by,
        });
        Ok(gate)
    }

    /// A sign-in code for the approvals inbox, for the person `caller`
    /// (already checked in `admit`).
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

    /// Whether serving ended because the store must be opened again (its
    /// disk failed a write and takes them again): the process starts
    /// afresh.
    pub fn must_restart(&self) -> bool {
        self.must_restart.load(Ordering::Acquire)
    }

    /// Liveness, and who this daemon is (its pid, store and config).
    fn health(&self) -> Value {
        let identity = self.host.with_config(|c| c.identity.clone());
        let durable = self.host.check_durable();
        json!({
            "status": if durable.is_ok() { "ok" } else { "failing" },
            "store_failure": durable.err().map(|e| e.to_string()),
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "plugins": self.host.plugins().len(),
            "store": self.host.store_path(),
            "config": self.host.with_config(Config::origin),
            "config_identity": identity,
        })
    }

    /// Whether this daemon serves the config `named`. The same file with
    /// other bytes is read again first (a person edited it and the reload
    /// has not happened yet); another file, or the bundled default in
    /// place of a file, is refused: the caller then fails closed rather
    /// than getting this config's answer.
    pub fn serves(&self, named: &ConfigIdentity) -> Result<()> {
        let serving = || self.host.with_config(|c| c.identity.clone());
        let Some(mut current) = serving() else {
            return Ok(()); // a config given as text: nothing to compare
        };
        let same_file = |a: &ConfigIdentity, b: &ConfigIdentity| match (a, b) {
            (ConfigIdentity::File { path: x, .. }, ConfigIdentity::File { path: y, .. }) => x == y,
            _ => false,
        };
        if &current != named && same_file(&current, named) {
            // A failed reload keeps the old config, which is then refused.
            if let Err(err) = self.reload() {
                tracing::warn!(error = %err, "the config changed but does not reload");
            }
            current = serving().unwrap_or(current);
        }
        if &current == named {
            return Ok(());
        }
        Err(Error::ConfigMismatch {
            serving: current.describe(),
            named: named.describe(),
        })
    }

    /// The Prometheus text: the decision metrics and the daemon's own.
    pub fn metrics_text(&self) -> String {
        self.metrics
            .render(self.in_flight.running(), self.host.dropped_events())
    }

    /// Whether OS users other than the daemon's own may connect (system
    /// mode, or a socket opened to others): then each is a tenant of its
    /// own, and a caller the kernel cannot name (HTTP) gets no decisions.
    fn serves_many_users(&self) -> bool {
        self.socket_mode & 0o077 != 0 || self.host.with_config(|c| c.daemon.user.is_some())
    }

    /// Whose requests `caller` makes (see [`crate::tenant`]): by the
    /// kernel's word on a socket's peer. A caller without one was admitted
    /// only where the daemon serves one user, or for what is the same for
    /// everyone (see [`Self::admit`]).
    fn tenant_of(&self, caller: Caller) -> Tenant {
        match caller {
            Caller::Socket(Some(peer)) => {
                let operator = peer.uid == toolgate_wire::peer::own_uid()
                    || (self.host).with_config(|c| c.approvals.terminal_uids.contains(&peer.uid));
                Tenant::of_uid(peer.uid, operator)
            }
            Caller::InProcess | Caller::Socket(None) | Caller::Http => Tenant::Operator,
        }
    }

    /// Check who may make `request` (see [`peer`]); whether it came from
    /// outside this process.
    fn admit(&self, request: &DaemonRequest, caller: Caller) -> Result<bool> {
        let peer = match caller {
            Caller::Socket(peer) => peer,
            Caller::InProcess | Caller::Http => None,
        };
        let remote = !matches!(caller, Caller::InProcess);
        let unnamed = matches!(caller, Caller::Http | Caller::Socket(None));
        if unnamed && self.serves_many_users() && !crate::tenant::needs_no_tenant(request) {
            return Err(Error::Unauthorized(
                "this daemon serves several OS users, and only its socket says which one asks \
                 (the kernel's SO_PEERCRED): HTTP cannot. Decide over the socket (`toolgate \
                 hook`, the installed hooks), or resolve with a channel's token"
                    .into(),
            ));
        }
        let approvals = || self.host.config().approvals;
        let terminals = self.host.agent_terminals();
        match request {
            // Whoever asks for decisions is an agent's runtime: a hook, the
            // MCP gateway, or a process embedding toolgate (the Python and
            // Node packages). Its terminal session can never approve.
            DaemonRequest::Hook { .. }
            | DaemonRequest::Evaluate { .. }
            | DaemonRequest::Observe { .. }
            | DaemonRequest::CheckOutput { .. }
            | DaemonRequest::VisibleTools { .. } => {
                if let Some(peer) = &peer {
                    self.remember_agent_terminal(peer)?;
                }
            }
            DaemonRequest::Resolve { channel, token, .. } if remote => {
                if channel == peer::TERMINAL {
                    let command = "toolgate gates resolve";
                    peer::authorize_person(&approvals(), terminals, peer.as_ref(), command)?;
                } else {
                    peer::authorize_channel(&approvals(), channel, token.as_deref())?;
                }
            }
            DaemonRequest::Command { .. } | DaemonRequest::Reload | DaemonRequest::WebLogin
                if remote =>
            {
                let command = match request {
                    DaemonRequest::Command { plugin, name, .. } => {
                        format!("toolgate command {plugin} {name}")
                    }
                    DaemonRequest::Reload => "toolgate plugins reload".into(),
                    _ => "toolgate approvals open".into(),
                };
                peer::authorize_person(&approvals(), terminals, peer.as_ref(), &command)?;
            }
            _ => {}
        }
        Ok(remote)
    }

    /// Record (once per daemon) that an agent's hook came from `peer`'s
    /// session and terminal.
    fn remember_agent_terminal(&self, peer: &Peer) -> Result<()> {
        let key = (peer.session, peer.session_born, peer.tty, peer.tty_born);
        if (peer.session, peer.tty) == (0, 0) {
            return Ok(());
        }
        let mut known = self
            .agent_terminals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if known.insert(key)
            && let Err(err) = self
                .host
                .agent_terminals()
                .record_agent_terminals(&peer.terminal_keys())
        {
            known.remove(&key);
            return Err(err);
        }
        Ok(())
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
        let slot = self.in_flight.take(uid).map_err(|why| {
            self.metrics.record_busy();
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
                let _ = self.http_address.set(listener.local_addr()?);
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
                _ = self.restart.notified() => self.wait_for_disk(),
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
            .host
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
        let (host, settling) = (Arc::clone(&self.host), Arc::clone(&self.settling));
        tokio::task::spawn_blocking(move || {
            if let Err(err) = host.end_declined_gates(None, crate::hooks::declined_in_prompt) {
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
        idle_ms >= limit.as_millis() as u64 && self.in_flight.running() == 0
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

/// Numbered rows as `[{"seq": N, NAME: row}, ...]`.
fn rows<T: Serialize>(name: &str, rows: Vec<(u64, T)>) -> Value {
    Value::Array(
        rows.into_iter()
            .map(|(seq, row)| json!({"seq": seq, name: to_json(row)}))
            .collect(),
    )
}

fn to_json(value: impl Serialize) -> Value {
    serde_json::to_value(value).expect("daemon results always serialise")
}

/// Who resolved a gate, as the record names them: a person at a terminal
/// by their uid, a channel by its name.
fn resolver(caller: &Caller, channel: &str) -> String {
    match caller {
        Caller::Socket(Some(peer)) if channel == peer::TERMINAL => {
            format!("{channel} (uid {})", peer.uid)
        }
        _ => channel.to_string(),
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
