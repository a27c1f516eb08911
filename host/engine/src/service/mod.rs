//! The service every front door calls: the daemon's socket and HTTP, the
//! approvals inbox, the command line with no daemon running, and the
//! Python and Node packages. [`Service::handle_from`] admits the caller,
//! confines it to its tenant, answers the request, and answers only once
//! what the answer depends on is durable: an embedder gets the daemon's
//! rules, not a weaker copy of them.
//!
//! - [`protocol`]: the requests and answers, mapped to typed errors;
//! - [`peer`]: who is asking — peer credentials, agent terminals, channel
//!   tokens — and what they may do;
//! - `admit`: those rules applied to each request;
//! - `embed`: the same requests typed, for this process (a Rust embedder,
//!   the command line, the tests): `Service::evaluate`, `observe`,
//!   `resolve_gate`, `reload`, ….
//!
//! What only a server has (counting, announcing pauses, the inbox's sign-in
//! and history, restarting after a store failure) it hears of through a
//! [`Listener`].

mod admit;
mod embed;
pub(crate) mod hook;
pub mod peer;
pub mod protocol;

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Config;
use crate::decision::{Decision, Outcome, Verdict};
use crate::gates::{GateKey, GateResolution, PendingGate};
use crate::hooks::OnError;
use crate::tenant::Tenant;
use crate::{Error, Result, ToolRequest, Toolgate};

pub use hook::Handled;
pub use peer::Peer;
pub use protocol::{ConfigIdentity, DaemonRequest, HookRuntime};

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

/// What a server around the service hears of, and what only it can answer.
/// Every method has a default: an embedder needs none of them.
pub trait Listener: Send + Sync {
    /// A decision was made (for counting).
    fn decided(&self, _decision: &Decision) {}
    /// A decision paused a call: `gate` waits for a person.
    fn paused(&self, _gate: &PendingGate, _reason: Option<&str>) {}
    /// A person (`by`) answered `gate` (`decision`: its answer's name).
    fn resolved(&self, _gate: &PendingGate, _decision: &str, _by: &str) {}
    /// A reload ran (`ok`: it took).
    fn reloaded(&self, _ok: bool) {}
    /// The store failed to make an answer durable: only opening it again
    /// helps (redb refuses every write after an I/O error).
    fn not_durable(&self) {}
    /// A sign-in code for the approvals inbox, for the person `caller`.
    fn web_login(&self, _caller: Caller) -> Result<Value> {
        Err(Error::Request(
            "this host serves no HTTP, so no approvals inbox: run `toolgate serve` with [daemon] \
             http = \"127.0.0.1:7878\" in the config (or `--http 127.0.0.1:7878`)"
                .into(),
        ))
    }
    /// The Prometheus text; `dropped_events`: events and log entries the
    /// store dropped because a queue was full.
    fn metrics_text(&self, _dropped_events: u64) -> String {
        String::new()
    }
}

/// A listener that hears nothing: a host in this process.
struct Silent;
impl Listener for Silent {}

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
            DaemonRequest::Command { .. }
            | DaemonRequest::Reload
            | DaemonRequest::ClearFlows { .. } => Self::Everything,
            DaemonRequest::NextTurn { .. } => Self::WhatTheAnswerDependsOn,
            request if request.runs_policies() => Self::WhatTheAnswerDependsOn,
            _ => Self::Nothing,
        }
    }
}

/// A host with the rules every front door applies.
pub struct Service {
    host: Arc<Toolgate>,
    listener: Arc<dyn Listener>,
    admission: admit::Admission,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("host", &self.host).finish()
    }
}

impl Service {
    /// The service over `host`, for this process alone (it hears nothing).
    pub fn new(host: Arc<Toolgate>) -> Self {
        Self::with_listener(host, Arc::new(Silent), false)
    }

    /// The service over `host`, telling `listener`; `shared_socket`: OS
    /// users other than the host's own may connect (a socket opened to
    /// others), so each is a tenant of its own.
    pub fn with_listener(
        host: Arc<Toolgate>,
        listener: Arc<dyn Listener>,
        shared_socket: bool,
    ) -> Self {
        Self {
            host,
            listener,
            admission: admit::Admission::new(shared_socket),
        }
    }

    /// The host, without the rules: this crate's own.
    pub(crate) fn host(&self) -> &Arc<Toolgate> {
        &self.host
    }

    /// Handle one request from this process.
    pub fn handle(&self, request: DaemonRequest) -> Result<Value> {
        self.handle_from(request, Caller::InProcess)
    }

    /// Handle one request from `caller`: a pause is resolved only by a
    /// person at a terminal of their own or a channel with its token, and
    /// admin commands and reloads only by such a person (see [`peer`]).
    pub fn handle_from(&self, request: DaemonRequest, caller: Caller) -> Result<Value> {
        let remote = self.admission.admit(&self.host, &request, caller)?;
        let tenant = self.admission.tenant_of(&self.host, caller);
        let request = tenant.confine_request(request)?;
        let durable = Durable::before_answering(&request);
        let value = self.answer(request, (caller, tenant), remote)?;
        self.once_durable(durable, value)
    }

    /// The answer to an admitted request from `caller`, confined to
    /// `tenant`; `remote`: it came from outside this process.
    fn answer(
        &self,
        request: DaemonRequest,
        (caller, tenant): (Caller, Tenant),
        remote: bool,
    ) -> Result<Value> {
        let host = &self.host;
        Ok(match request {
            DaemonRequest::Hook {
                runtime,
                event,
                on_error,
                config,
            } => {
                let handled =
                    self.answer_hook((runtime, tenant), &event, on_error, config.as_ref());
                Value::String(handled.output)
            }
            DaemonRequest::Evaluate { request } => to_json(self.decide(&request)?),
            DaemonRequest::Observe {
                request,
                outcome,
                summary,
            } => {
                self.observed(&request, outcome, &summary)?;
                Value::Null
            }
            DaemonRequest::CheckOutput {
                request,
                outcome,
                output,
                observe,
            } => to_json(self.checked(&request, outcome, &output, observe)?),
            DaemonRequest::VisibleTools { caller, tools } => self.visible(&caller, &tools),
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
            DaemonRequest::Command { plugin, name, args } => self.admin(&plugin, &name, args)?,
            DaemonRequest::Log { filter, limit } => {
                rows("entry", host.decision_log(&filter, limit)?)
            }
            DaemonRequest::Audit { after, limit } => {
                to_json(host.audit_links(after, limit.min(AUDIT_PAGE))?)
            }
            DaemonRequest::Events { limit } => rows("event", host.recent_events(limit)?),
            DaemonRequest::Flows => to_json(host.flow_labels()?),
            DaemonRequest::ClearFlows { what } => json!({ "cleared": host.clear_flows(&what)? }),
            DaemonRequest::StoreStats => to_json(host.store_stats()?),
            DaemonRequest::Sweep => to_json(host.sweep()?),
            DaemonRequest::Reload => to_json(self.reload_and_tell()?),
            DaemonRequest::Plugins => to_json(host.plugin_statuses()),
            DaemonRequest::Health => self.health(),
            DaemonRequest::WebLogin => self.listener.web_login(caller)?,
            DaemonRequest::Metrics => {
                Value::String(self.listener.metrics_text(host.dropped_events()))
            }
        })
    }

    /// Which of `tools` may be offered in `caller`'s session, and whether
    /// any policy says (a lister need not ask again otherwise).
    fn visible(&self, caller: &ToolRequest, tools: &[crate::output::ToolDescriptor]) -> Value {
        json!({
            "visible": self.host.visible_tools(caller, tools),
            "filtered": self.host.filters_tools(),
        })
    }

    /// A policy's admin command; its answer as JSON when it is JSON.
    fn admin(&self, plugin: &str, name: &str, args: Value) -> Result<Value> {
        let args = if args.is_null() { json!({}) } else { args };
        let answer = self.host.command(plugin, name, &args.to_string())?;
        Ok(serde_json::from_str(&answer).unwrap_or(Value::String(answer)))
    }

    /// The host's decision on `request`, counted and announced.
    fn decide(&self, request: &ToolRequest) -> Result<Decision> {
        let decision = self.host.evaluate(request)?;
        self.decided(&decision);
        Ok(decision)
    }

    /// Count a decision, and announce it if it paused a call.
    fn decided(&self, decision: &Decision) {
        self.listener.decided(decision);
        let Some(pause) = &decision.pause else {
            return;
        };
        if decision.verdict != Verdict::Pause {
            return;
        }
        match self.host.gates(Some(&pause.user_id)) {
            Ok(gates) => {
                if let Some(gate) = gates.iter().find(|g| g.request_id == pause.request_id) {
                    self.listener.paused(gate, decision.reason.as_deref());
                }
            }
            Err(err) => {
                tracing::warn!(error = %err.report(), "cannot read the pause to announce it")
            }
        }
    }

    /// Reload, and say so.
    fn reload_and_tell(&self) -> Result<crate::ReloadReport> {
        let result = self.host.reload();
        self.listener.reloaded(result.is_ok());
        result
    }

    /// `value`, once what it depends on (`durable`) is on disk; an error
    /// naming the store if that failed: never an answer its state may not
    /// survive.
    fn once_durable<T>(&self, durable: Durable, value: T) -> Result<T> {
        match durable {
            Durable::Everything => self.host.persist(),
            Durable::WhatTheAnswerDependsOn => self.host.settle(),
            Durable::Nothing => return Ok(value),
        }
        if let Err(failed) = self.host.check_durable() {
            self.listener.not_durable();
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
    ) -> Result<crate::output::OutputCheck> {
        let check = self.host.check_output(request, outcome, output);
        if let Some(summary) = observe {
            self.observed(request, outcome, &summary)?;
        }
        Ok(check)
    }

    /// A runtime's report of what happened to a call.
    fn observed(&self, request: &ToolRequest, outcome: Outcome, summary: &str) -> Result<()> {
        if outcome == Outcome::Denied {
            // A paused call that did not run (the person refused it in the
            // runtime's own prompt, or the agent gave up) withdraws its
            // pause: closing a prompt approves nothing.
            self.host.close_answered_gate(request)?;
        }
        self.host.observe(request, outcome, summary);
        Ok(())
    }

    /// A runtime's hook event, answered as the runtime reads answers; one
    /// for another config (`config`) is refused with the failure answer.
    fn answer_hook(
        &self,
        (runtime, tenant): (HookRuntime, Tenant),
        event: &str,
        on_error: OnError,
        config: Option<&ConfigIdentity>,
    ) -> Handled {
        if let Some(named) = config
            && let Err(refusal) = self.serves(named)
        {
            let answer = crate::hooks::failure_answer(runtime, on_error, &refusal.to_string());
            return Handled {
                output: answer.to_string(),
                decision: None,
            };
        }
        let handled = hook::handle_as(&self.host, tenant, runtime, event, on_error);
        if let Some(decision) = &handled.decision {
            self.decided(decision);
        }
        handled
    }

    /// Resolve a pending gate: the one path every channel's answer takes
    /// (the socket's `Resolve`, the approvals inbox). `authenticated`: the
    /// caller proved a person's channel (a terminal of their own, a
    /// channel's token, an inbox session), which may resolve a gate raised
    /// from any channel; otherwise only the gate's own channel or a trusted
    /// one may. The listener hears who answered (`by`).
    pub fn resolve(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        resolution: GateResolution,
        authenticated: bool,
        by: String,
    ) -> Result<PendingGate> {
        let decision = resolution.answer_name();
        let gate = self.host.resolve_gate_by(
            (key, request_id),
            channel,
            resolution,
            authenticated,
            &by,
        )?;
        // The resolution and its audit link on disk, before the answer.
        let gate = self.once_durable(Durable::Everything, gate)?;
        tracing::info!(request_id, decision, %by, "gate resolved");
        self.listener.resolved(&gate, decision, &by);
        Ok(gate)
    }

    /// Liveness, and who this host is (its pid, store and config).
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

    /// Whether this host serves the config `named`. The same file with
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
            if let Err(err) = self.reload_and_tell() {
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
    serde_json::to_value(value).expect("answers always serialise")
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

/// The most audit links one request reads.
pub const AUDIT_PAGE: usize = 1000;
