//! [`Toolgate`]: loaded policies over one store, the engine under the
//! [`Service`](crate::service::Service). It evaluates calls, records
//! outcomes, resolves pauses and runs admin commands without the service's
//! rules (durability before answering, tenants, listeners), so outside this
//! crate it is only opened, and handed to a service. Every method is
//! blocking (wasmtime and redb both are); async callers use
//! `spawn_blocking`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{Config, PluginMode, RefusalScope};

/// How long a person's refusal holds with `refusal_scope = "session"`: a
/// working day, past any session's pause.
const REFUSAL_FOR_SESSION: Duration = Duration::from_secs(24 * 3600);
pub use crate::decision::Outcome;
use crate::decision::{Decision, RiskReport};
use crate::decision_log::PendingLogEntry;
use crate::decision_log::{LogEntry, LogFilter};
use crate::error::{Error, Result};
use crate::gates::{GateKey, GateResolution, PendingGate};
use crate::locations::StoreLocation;
use crate::memo::BoundedMap;
use crate::native::NativePolicy;
use crate::pipeline::{self, Env};
use crate::plugins::{self, Plugin, PluginSet};
use crate::probe::ProbeClient;
use crate::registry::Registry;
pub use crate::registry::ReloadReport;
use crate::request::{ArgumentsText, ToolRequest};
use crate::runtime::Runtime;
use crate::store::hygiene::{StoreStats, SweepReport};
use crate::store::{FleetPins, Store, StoredEvent, TakeGateError, TerminalStore};

/// A toolgate host: loaded policies over one store.
pub struct Toolgate {
    /// First, so it is dropped first: its chores thread is joined before
    /// the store and the plugins (whose instances hold the store) go.
    runtime: Runtime,
    store: Arc<Store>,
    probe: Arc<ProbeClient>,
    /// The plugins and config in force.
    pub(crate) registry: Registry,
    /// A person's "always" answers, as rules in the operator's file.
    standing: crate::standing::StandingApprovals,
    /// The composed risk of recent calls, by call id, for `observe`.
    recent_risks: RecentRisks,
    /// Recent answers, so a copy of a call is not decided twice.
    answered: crate::answered::Answered,
    /// The turn of each recent prompt, by session and prompt id.
    prompt_turns: PromptTurns,
    /// Threads stopped because a call ran as toolgate did not judge it.
    unjudged: crate::unjudged::Unjudged,
    /// The clock's latest moment, kept in the store for the next process.
    clock: crate::clock::Clock,
}

/// The composed risk of the last [`RecentRisks::KEPT`] decided calls, so an
/// outcome reported later (PostToolUse) reaches `observe` with the risk its
/// call was decided at. Memory only: an outcome for a call this process did
/// not decide carries the unclassified risk, as the contract says.
struct RecentRisks(Mutex<BoundedMap<String, RiskReport>>);

impl Default for RecentRisks {
    fn default() -> Self {
        Self(Mutex::new(BoundedMap::new(Self::KEPT)))
    }
}

impl RecentRisks {
    const KEPT: usize = 4096;

    fn remember(&self, call_id: &str, risk: &RiskReport) {
        let mut memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        memo.insert(call_id.to_string(), risk.clone());
    }

    fn of(&self, call_id: Option<&str>) -> RiskReport {
        let memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        call_id
            .and_then(|id| memo.get(&id.to_string()))
            .cloned()
            .unwrap_or_default()
    }
}

/// The turn each recent prompt of a runtime that names its prompts
/// (Claude Code's `prompt_id`) started, by session and prompt id. The
/// agent can run the hook itself with any event: a forged prompt event
/// starts a turn of its own, but the real calls of the current prompt
/// still carry the real prompt's id, so they stay in its turn and per-turn
/// budgets hold. Memory only: after a restart an unknown prompt id joins
/// the session's current turn.
struct PromptTurns(Mutex<BoundedMap<(String, String), u64>>);

impl Default for PromptTurns {
    fn default() -> Self {
        Self(Mutex::new(BoundedMap::new(Self::KEPT)))
    }
}

impl PromptTurns {
    const KEPT: usize = 65_536;
}

impl std::fmt::Debug for Toolgate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolgate")
            .field("store", &self.store.path())
            .field("plugins", &self.plugins().len())
            .finish()
    }
}

impl Toolgate {
    /// Open the store and load every enabled plugin. `store` overrides the
    /// config's store. Any plugin that fails to load fails the whole
    /// start, with a message naming it.
    pub fn open(config: Config, store: Option<StoreLocation>) -> Result<Self> {
        let location = store.unwrap_or_else(|| config.store_location());
        let wait = Duration::from_millis(config.store_wait_ms);
        let store = Arc::new(Store::open_location(&location, wait)?);
        // First, so nothing this process does reads a clock behind the last.
        let clock = crate::clock::Clock::open(&store)?;
        store.maintenance().set_log_config(config.log);
        store
            .maintenance()
            .set_retention(crate::store::hygiene::Retention::from_config(&config));
        store
            .audit_trail()
            .set_audit(audit_settings(&config, store.path())?);
        let cache_max_age = Duration::from_secs(config.retention.cache_max_age_days * 24 * 3600);
        let runtime = Runtime::new(
            config.instance_slots(crate::pool::MAX_IDLE),
            config.cache_path(),
            cache_max_age,
        )
        .map_err(|err| Error::Config {
            path: "<engine>".into(),
            message: format!("cannot create the wasm engine: {err:#}"),
        })?;
        let probe = Arc::new(ProbeClient::new(&config.probe));
        let standing =
            crate::standing::StandingApprovals::open(Some(config.always_path(&location)))?;
        let registry = Registry::open(config, &runtime, &store)?;
        let unjudged = crate::unjudged::Unjudged::open(&store)?;
        Ok(Self {
            runtime,
            store,
            probe,
            registry,
            standing,
            recent_risks: RecentRisks::default(),
            answered: Default::default(),
            prompt_turns: PromptTurns::default(),
            unjudged,
            clock,
        })
    }

    /// Re-read the config file (when the host was built from one) and every
    /// plugin, and swap in what changed, atomically. Calls already running
    /// finish on the version they started with. A plugin that fails keeps its
    /// previous version; a config that fails to parse changes nothing.
    ///
    /// On a shared store (PostgreSQL) the other hosts are told, and reload
    /// from their own config before their next decision.
    pub(crate) fn reload(&self) -> Result<ReloadReport> {
        let report = self.reload_here(&FleetPins::new())?;
        self.store
            .maintenance()
            .announce_reload(&self.registry.pins());
        Ok(report)
    }

    /// Reload this host only; a registry plugin that follows a tag takes
    /// the digest `pins` names for it (another host's resolution).
    fn reload_here(&self, pins: &FleetPins) -> Result<ReloadReport> {
        let before = self.plugins();
        let audit_before = self.registry.with_config(|c| audit_identity(&c.audit));
        let config = self.registry.reload(&self.runtime, &self.store, pins)?;
        audit_reload(&self.store, &before, &self.plugins());
        let audit_now = audit_identity(&config.audit);
        if audit_now != audit_before {
            // Chained under the settings it changes, before they change.
            let record = serde_json::json!({"audit": {"before": audit_before, "after": audit_now}});
            self.store
                .audit_trail()
                .audit(crate::audit::AuditRecord::now(
                    crate::audit::AuditKind::Reload,
                    &record,
                ));
            self.store.maintenance().persist();
        }
        if let Err(err) = self.standing.reload() {
            tracing::error!(error = %err, "standing approvals dropped until the file is fixed");
        }
        self.store.maintenance().set_log_config(config.log);
        self.store
            .maintenance()
            .set_retention(crate::store::hygiene::Retention::from_config(&config));
        match audit_settings(&config, self.store.path()) {
            Ok(audit) => self.store.audit_trail().set_audit(audit),
            Err(err) => {
                tracing::error!(error = %err, "the audit trail keeps its previous settings")
            }
        }
        Ok(config.report)
    }

    /// Every loaded plugin with its status, in decision order.
    pub(crate) fn plugin_statuses(&self) -> Vec<plugins::PluginStatus> {
        self.registry.statuses()
    }

    /// The last (re)load failure of each plugin that has one.
    pub(crate) fn plugin_problems(&self) -> BTreeMap<String, String> {
        self.registry.problems()
    }

    /// The plugins serving decisions now.
    pub(crate) fn plugins(&self) -> Arc<PluginSet> {
        self.registry.plugins()
    }

    /// The store itself, for seeding it (a policy's fixtures, a benchmark's
    /// native baseline). What the servers and an embedder read of it is
    /// below, one method each.
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Wait until everything decided, resolved or recorded so far is
    /// durable.
    pub(crate) fn persist(&self) {
        self.store.maintenance().persist();
    }

    /// Wait until what an answer depends on is durable (policy state,
    /// turns, gates, resolutions), not the decision log and events, which
    /// follow within 100 ms unless `[log] durable_before_answer`: the
    /// daemon answers a decision only after this, so a daemon killed with
    /// SIGKILL loses no lease use, budget or pause it acknowledged.
    pub(crate) fn settle(&self) {
        self.store.maintenance().settle();
    }

    /// Whether what was committed so far could be made durable: after a
    /// failed durable commit (an fsync's EIO, a full disk) an error naming
    /// the store, so an answer that depends on it is not given. redb then
    /// refuses every operation until the store is opened again: a daemon
    /// exits for a fresh start.
    pub(crate) fn check_durable(&self) -> Result<()> {
        match self.store.maintenance().durability_failure() {
            None => Ok(()),
            Some(why) => Err(Error::store(
                self.store.path(),
                format!(
                    "what this answer depends on could not be made durable ({why}), so it is \
                     not given; the store is opened again (the daemon restarts); try again \
                     shortly, and check the disk (space, I/O errors) if it goes on"
                ),
            )),
        }
    }

    /// The current turn of `session` (0 before its first).
    pub(crate) fn turn(&self, session: &str) -> Result<u64> {
        self.store.turns().turn(session)
    }

    /// Start the next turn of `session`; its number (from 1).
    pub(crate) fn next_turn(&self, session: &str) -> Result<u64> {
        self.store.turns().next_turn(session)
    }

    /// The newest `limit` decisions matching `filter`, oldest first.
    /// Every decision answered so far is in it: entries still queued for
    /// the store's writer are written first.
    pub(crate) fn decision_log(
        &self,
        filter: &LogFilter,
        limit: usize,
    ) -> Result<Vec<(u64, LogEntry)>> {
        self.store.maintenance().persist();
        self.store.log().decision_log(filter, limit)
    }

    /// The newest `limit` policy events across all policies, oldest first,
    /// queued ones included.
    pub(crate) fn recent_events(&self, limit: usize) -> Result<Vec<(u64, StoredEvent)>> {
        self.store.maintenance().persist();
        self.store.events().recent_events(limit)
    }

    /// The newest `limit` events of `session` in `policy`'s stream, oldest
    /// first.
    pub(crate) fn session_events(
        &self,
        policy: &str,
        session: &str,
        limit: usize,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .events()
            .session_recent(policy, session, limit, &[])
    }

    /// Sizes per table and per policy.
    pub(crate) fn store_stats(&self) -> Result<StoreStats> {
        self.store.maintenance().stats()
    }

    /// Remove now what is past its retention.
    pub(crate) fn sweep(&self) -> Result<SweepReport> {
        self.store.maintenance().sweep()
    }

    /// Events (and log entries) dropped because a queue was full.
    pub(crate) fn dropped_events(&self) -> u64 {
        self.store.maintenance().dropped_events()
    }

    /// The local path that names the store: the redb file, or the path
    /// standing for a database on this machine.
    pub(crate) fn store_path(&self) -> &std::path::Path {
        self.store.path()
    }

    /// Where agents' hooks came from (see `daemon::peer`).
    pub(crate) fn agent_terminals(&self) -> &dyn TerminalStore {
        self.store.terminals()
    }

    /// The turn an event of `session` belongs to. `starts_turn` for a new
    /// user prompt (UserPromptSubmit), which begins the next turn. When
    /// the runtime names the prompt (`prompt`), every event of that prompt
    /// is bound to the turn it started: a prompt event the agent forged
    /// starts a turn of its own but cannot move the real calls into it (see
    /// [`PromptTurns`]). Without one, the session's turn counter.
    pub(crate) fn turn_of(
        &self,
        session: &str,
        prompt: Option<&str>,
        starts_turn: bool,
    ) -> Result<u64> {
        let counter = || {
            if starts_turn {
                self.store.turns().next_turn(session)
            } else {
                self.store.turns().turn(session)
            }
        };
        let Some(prompt) = prompt.filter(|p| !p.is_empty()) else {
            return counter();
        };
        let key = (session.to_string(), prompt.to_string());
        // Held across the counter: two events of one new prompt at once
        // (parallel calls) get one turn.
        let mut turns = self
            .prompt_turns
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(turn) = turns.get(&key) {
            return Ok(*turn);
        }
        let turn = counter()?;
        turns.insert(key, turn);
        Ok(turn)
    }

    /// The config now in force.
    pub(crate) fn config(&self) -> Config {
        self.registry.config()
    }

    /// Read the config now in force without copying it (what a server
    /// asks of it on every request).
    pub(crate) fn with_config<T>(&self, f: impl FnOnce(&Config) -> T) -> T {
        self.registry.with_config(f)
    }

    fn env(&self) -> Env<'_> {
        let (gate_ttl_secs, transcript_cap, refusal_scope) = self.registry.with_config(|c| {
            (
                c.gate_ttl_secs,
                c.transcript_tail_max_bytes,
                c.approvals.refusal_scope,
            )
        });
        Env {
            runtime: &self.runtime,
            store: &self.store,
            probe: &self.probe,
            gate_ttl: Duration::from_secs(gate_ttl_secs),
            transcript_cap,
            refusal_scope,
            standing: &self.standing,
            dry_run: false,
            natives: &[],
        }
    }

    /// Decide on one proposed call. A pause is stored as a pending gate.
    pub(crate) fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        request.check_ids().map_err(Error::Request)?;
        self.clock.tick(&self.store);
        if let Some(pins) = self.store.maintenance().reload_requested() {
            match self.reload_here(&pins) {
                Ok(report) => tracing::info!(
                    ?report,
                    "reloaded: another host of the fleet announced a change"
                ),
                Err(err) => {
                    tracing::error!(error = %err.report(), "a fleet reload failed here; the previous version keeps serving")
                }
            }
        }
        let arguments = request.arguments_text();
        self.answered
            .once(&self.plugins(), request, arguments, |arguments| {
                self.decide(request, arguments)
            })
    }

    /// [`Toolgate::evaluate`]'s decision, logged. The file system is taken
    /// as it is at one moment for the whole evaluation: a path the
    /// self-protection resolved is resolved for the policies too.
    fn decide(&self, request: &ToolRequest, arguments: ArgumentsText) -> Result<Decision> {
        crate::guard::resolve::memoized(request.cwd.as_deref(), || {
            self.decide_now(request, arguments)
        })
    }

    fn decide_now(&self, request: &ToolRequest, arguments: ArgumentsText) -> Result<Decision> {
        // The policies built into the host vote first: the agent may not
        // operate toolgate itself, and a thread stopped after an unjudged
        // run waits for a person.
        let plane = self.registry.control_plane();
        let stop = self.with_config(|c| c.approvals.stop_on_unjudged_runs);
        let mut natives: Vec<&dyn NativePolicy> = vec![&*plane];
        if stop {
            natives.push(&self.unjudged);
        }
        let env = Env {
            natives: &natives,
            ..self.env()
        };
        let decision = pipeline::evaluate_live(&env, &self.plugins(), request, &arguments)?;
        self.recent_risks
            .remember(&decision.call_id, &decision.risk);
        let log = self.store.maintenance().log_config();
        if log.enabled {
            self.store.log().log_decision(PendingLogEntry::new(
                request,
                arguments,
                &decision,
                log.arguments,
            ));
        }
        Ok(decision)
    }

    /// Tell every policy what happened to a call. Policy failures are logged,
    /// never returned: observing must not disturb the runtime.
    pub(crate) fn observe(&self, request: &ToolRequest, outcome: Outcome, summary: &str) {
        if let Err(problem) = request.check_ids() {
            tracing::warn!(%problem, "outcome not observed");
            return;
        }
        let risk = self.recent_risks.of(request.call_id.as_deref());
        pipeline::observe(
            &self.env(),
            &self.plugins(),
            request,
            outcome,
            summary,
            &risk,
        );
    }

    /// What the model may read of `output`, the result of `request`: the
    /// policies that export the `output` phase may redact, replace or
    /// withhold it. Apply [`OutputCheck::text`] where the runtime lets the
    /// host change what the model reads.
    ///
    /// [`OutputCheck::text`]: crate::output::OutputCheck::text
    pub(crate) fn check_output(
        &self,
        request: &ToolRequest,
        outcome: Outcome,
        output: &str,
    ) -> crate::output::OutputCheck {
        let risk = self.recent_risks.of(request.call_id.as_deref());
        crate::output_check::check(
            &self.env(),
            &self.plugins(),
            request,
            outcome,
            output,
            &risk,
        )
    }

    /// For each of `tools`, in order: may it be offered to the model in
    /// `caller`'s session (a request naming the session, thread and user)?
    pub(crate) fn visible_tools(
        &self,
        caller: &ToolRequest,
        tools: &[crate::output::ToolDescriptor],
    ) -> Vec<bool> {
        crate::tool_filter::visible(&self.env(), &self.plugins(), caller, tools)
    }

    /// Whether any live policy says which tools may be offered (exports
    /// `visibility`): a lister need not ask, or look again, otherwise.
    pub(crate) fn filters_tools(&self) -> bool {
        self.plugins()
            .iter()
            .any(|p| p.phases.visibility && p.mode == PluginMode::Live)
    }

    /// Close the gate that paused `request` once the runtime reports that
    /// the call ran: the person answered in the runtime's own prompt (Claude
    /// Code's or Copilot CLI's "ask"). Only the gate raised for this very
    /// call is closed — same channel, and the same call id, or for a runtime
    /// that sends none (Copilot CLI) the same tool and arguments — and no
    /// standing approval is recorded, so a forged report can close a prompt
    /// but never approve anything.
    pub(crate) fn close_answered_gate(&self, request: &ToolRequest) -> Result<Option<PendingGate>> {
        let key = GateKey {
            user_id: request.user_id.clone(),
            thread_id: request.thread().to_string(),
        };
        let now = crate::now_ms();
        let this_call = |gate: &PendingGate| match request.call_id.as_deref() {
            Some(id) if !id.is_empty() => gate.call_id == id,
            _ => {
                let arguments = request.arguments_text();
                gate.fingerprint
                    == crate::gates::call_fingerprint(
                        &request.tool,
                        &request.origin.key(),
                        arguments.sha256(),
                    )
            }
        };
        let gates = self.store.gates().thread_gates(&key, now)?;
        // Not the question a call that ran unjudged raised: only a person
        // answers that one.
        match gates.iter().find(|gate| {
            gate.policy != crate::decision::HOST
                && gate.source_channel == request.channel
                && this_call(gate)
        }) {
            Some(gate) => self.end_gate(gate, now),
            None => Ok(None),
        }
    }

    /// End the pending gates (of one thread, or all) whose call the person
    /// declined in their runtime's own prompt, as `declined` (the runtime
    /// adapter's judgement) says. A runtime may tell hooks nothing of a
    /// decline but record it in its transcript (see
    /// [`crate::claude_code::declined_in_prompt`]), so without this the
    /// gate would wait out its TTL, and a late approval of it would let an
    /// identical retry run unasked. A declined gate leaves every list and
    /// records nothing: if the call comes again, the runtime asks again.
    /// Reading a transcript can end a gate but never approve one, so a
    /// forged transcript gains the agent nothing.
    pub(crate) fn end_declined_gates(
        &self,
        key: Option<&GateKey>,
        declined: impl Fn(&PendingGate) -> bool,
    ) -> Result<Vec<PendingGate>> {
        let now = crate::now_ms();
        let gates = match key {
            Some(key) => self.store.gates().thread_gates(key, now)?,
            None => self.store.gates().list_gates(None, now)?,
        };
        let mut ended = Vec::new();
        for gate in gates.iter().filter(|gate| declined(gate)) {
            if let Some(gate) = self.end_gate(gate, now)? {
                tracing::info!(request_id = %gate.request_id, policy = %gate.policy, channel = %gate.source_channel, "gate declined in the runtime's prompt");
                ended.push(gate);
            }
        }
        Ok(ended)
    }

    /// Check a call the runtime reports as run against what toolgate
    /// judged for its call id: one that ran otherwise (another hook or a
    /// mod rewrote it) raises a question for a person, returned, and with
    /// `[approvals] stop_on_unjudged_runs` stops its thread until answered.
    pub(crate) fn check_ran_as_judged(&self, ran: &ToolRequest) -> Result<Option<PendingGate>> {
        if !self.answered.ran_unjudged(ran) {
            return Ok(None);
        }
        tracing::warn!(tool = %ran.tool, call_id = ?ran.call_id, session = %ran.session_id, "a call ran with input toolgate did not judge");
        self.unjudged.raise(&self.store, ran).map(Some)
    }

    /// Take back the pause `pause` unanswered: the runtime asks its person
    /// itself (see `[approvals] follow_client_rules`).
    pub(crate) fn withdraw_pause(&self, pause: &crate::decision::PauseInfo) -> Result<()> {
        let key = GateKey {
            user_id: pause.user_id.clone(),
            thread_id: pause.thread_id.clone(),
        };
        let now = crate::now_ms();
        let gates = self.store.gates().thread_gates(&key, now)?;
        if let Some(gate) = gates.iter().find(|g| g.request_id == pause.request_id) {
            self.end_gate(gate, now)?;
        }
        Ok(())
    }

    /// Remove `gate` unanswered, unless it was resolved or replaced
    /// meanwhile.
    fn end_gate(&self, gate: &PendingGate, now: u64) -> Result<Option<PendingGate>> {
        match self.store.gates().take_gate(
            &gate.key(),
            &gate.request_id,
            &gate.source_channel,
            &[],
            now,
        ) {
            Ok(gate) => Ok(Some(gate)),
            Err(TakeGateError::Storage(err)) => Err(err),
            Err(TakeGateError::Refused(_)) => Ok(None),
        }
    }

    /// Resolve a gate as the daemon does: `authenticated` (a person at a
    /// terminal, or a channel with its token) may resolve a gate raised
    /// from any channel, and `by` (the person, as the daemon identified
    /// them) is named in the audit trail.
    pub(crate) fn resolve_gate_by(
        &self,
        (key, request_id): (&GateKey, &str),
        channel: &str,
        resolution: GateResolution,
        authenticated: bool,
        by: &str,
    ) -> Result<PendingGate> {
        let trusted = match authenticated {
            true => vec![channel.to_string()],
            false => self.registry.with_config(|c| c.trusted_channels.clone()),
        };
        self.resolve_from(key, request_id, channel, resolution, &trusted, by)
    }

    /// Take the gate and record its resolution, and in the audit trail who
    /// answered (`by`) what.
    fn resolve_from(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        resolution: GateResolution,
        trusted: &[String],
        by: &str,
    ) -> Result<PendingGate> {
        let gate =
            self.store
                .gates()
                .take_gate(key, request_id, channel, trusted, crate::now_ms())?;
        // A refusal is remembered too: the identical retry is refused with
        // the person's answer, not asked about again (see
        // `pipeline::person_refused`), for the configured scope.
        let (gate_ttl, scope) = self
            .registry
            .with_config(|c| (c.gate_ttl_secs, c.approvals.refusal_scope));
        let ttl = match (&resolution, scope) {
            (GateResolution::Deny, RefusalScope::Session) => REFUSAL_FOR_SESSION,
            _ => Duration::from_secs(gate_ttl),
        };
        let always = matches!(resolution, GateResolution::Approve { always: true })
            && self.registry.with_config(|c| c.keeps_always(&gate.policy));
        let answer = resolution.answer_name();
        let kind = match resolution {
            GateResolution::Deny => crate::audit::AuditKind::Refusal,
            _ => crate::audit::AuditKind::Approval,
        };
        self.store
            .gates()
            .record_resolution(&gate, resolution, ttl, channel)?;
        self.store
            .audit_trail()
            .audit(crate::audit::AuditRecord::now(
                kind,
                &serde_json::json!({
                    "answer": answer,
                    "by": by,
                    "channel": channel,
                    "request_id": request_id,
                    "user_id": gate.user_id,
                    "thread_id": gate.thread_id,
                    "session_id": gate.session_id,
                    "tool": gate.tool,
                    "call_id": gate.call_id,
                    "policy": gate.policy,
                    "fingerprint": gate.fingerprint,
                }),
            ));
        if let Some(rule) = always
            .then(|| crate::standing::AlwaysRule::for_gate(&gate, channel))
            .flatten()
        {
            let file = self.standing.remember(rule)?;
            tracing::info!(request_id, policy = %gate.policy, file = %file.display(), "standing approval recorded");
        }
        Ok(gate)
    }

    /// The standing approvals (a person's "always" answers) this host
    /// keeps, and where.
    pub(crate) fn standing_approvals(&self) -> &crate::standing::StandingApprovals {
        &self.standing
    }

    /// Up to `limit` links of this host's audit chain after `after`, and
    /// its signed head (see [`crate::audit`]).
    pub(crate) fn audit_links(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<crate::store::AuditPage> {
        self.store.audit_trail().audit_links(after, limit)
    }

    /// Every flow label: what sessions took in and which files hold it.
    pub(crate) fn flow_labels(&self) -> Result<Vec<crate::flows::Label>> {
        crate::flows::list(&self.store)
    }

    /// Remove the flow labels `what` names (a person's act); how many went.
    pub(crate) fn clear_flows(&self, what: &crate::flows::FlowsClear) -> Result<usize> {
        crate::flows::clear(&self.store, what)
    }

    /// Pending (unexpired) gates, optionally of one user, by session.
    pub(crate) fn gates(&self, user_id: Option<&str>) -> Result<Vec<PendingGate>> {
        let mut gates = self.store.gates().list_gates(user_id, crate::now_ms())?;
        // A session's pauses together, oldest first.
        gates.sort_by(|a, b| {
            (&a.user_id, &a.session_id, a.created_at_ms).cmp(&(
                &b.user_id,
                &b.session_id,
                b.created_at_ms,
            ))
        });
        Ok(gates)
    }

    /// Run an admin command on one plugin.
    pub(crate) fn command(&self, plugin: &str, name: &str, args: &str) -> Result<String> {
        let error = command_error(plugin, name);
        let target = self.plugin_named(plugin, name)?;
        let mut sandbox = self
            .env()
            .sandbox(&target, None)
            .map_err(|f| error(f.to_string()))?;
        sandbox
            .call("command", |p, s| p.gate.call_command(s, name, args))
            .map_err(|f| error(f.to_string()))?
            .map(|output| crate::bounds::cut(output, crate::bounds::COMMAND_OUTPUT))
            .map_err(|message| error(crate::bounds::cut(message, crate::bounds::ERROR_TEXT)))
    }

    /// The named plugin, for an operator request.
    fn plugin_named(&self, plugin: &str, what: &str) -> Result<Arc<Plugin>> {
        let plugins = self.plugins();
        plugins.get(plugin).cloned().ok_or_else(|| {
            command_error(plugin, what)(format!(
                "no plugin named `{plugin}` is loaded (loaded: {})",
                plugins
                    .iter()
                    .map(|p| p.name.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

fn command_error(plugin: &str, command: &str) -> impl Fn(String) -> Error {
    let (plugin, command) = (plugin.to_string(), command.to_string());
    move |message| Error::Command {
        plugin: plugin.clone(),
        command: command.clone(),
        message,
    }
}

/// What the store's writer chains under `config` (none with `[audit]
/// enabled = false`), for the store whose local name is `store`. The key is
/// made on first use; one that cannot be read or made is an error naming it.
fn audit_settings(
    config: &Config,
    store: &std::path::Path,
) -> Result<Option<crate::audit::AuditSettings>> {
    let audit = &config.audit;
    if !audit.enabled {
        return Ok(None);
    }
    let path = config.audit_key_path(store);
    let key = crate::audit::AuditKey::load_or_create(&path).map_err(|err| Error::Config {
        path: config.origin(),
        message: format!(
            "[audit]: cannot read or make the audit key {}: {err}; fix its permissions, set \
             [audit] key to a file the daemon's user may write, or [audit] enabled = false",
            path.display()
        ),
    })?;
    Ok(Some(crate::audit::AuditSettings {
        host: audit.host.clone().unwrap_or_else(crate::audit::host_name),
        key,
        max_entries: audit.max_entries,
        max_age_secs: audit.max_age_days.saturating_mul(24 * 3600),
        checkpoint_every: audit.checkpoint_every,
    }))
}

/// What of `[audit]` a reload that changes it records (the key by its
/// path: its public half is beside it).
fn audit_identity(audit: &crate::config::AuditConfig) -> serde_json::Value {
    serde_json::json!({
        "enabled": audit.enabled,
        "key": audit.key,
        "host": audit.host,
        "max_entries": audit.max_entries,
        "max_age_days": audit.max_age_days,
        "otlp_endpoint": audit.otlp_endpoint,
        "syslog": audit.syslog,
    })
}

/// The audit trail's record of a reload from `before` to `after` that
/// changed something: the plugins deciding now, and a `rollout` link for
/// each whose rollout changed (or that came or went with one).
fn audit_reload(store: &Store, before: &PluginSet, after: &PluginSet) {
    let identity = |set: &PluginSet| -> Vec<(String, String, Option<crate::config::Rollout>)> {
        set.iter()
            .map(|p| (p.name.to_string(), p.sha256.clone(), p.rollout.clone()))
            .collect()
    };
    if identity(before) == identity(after) {
        return;
    }
    let plugins: Vec<serde_json::Value> = after
        .iter()
        .map(|p| serde_json::json!({"name": &*p.name, "sha256": p.sha256, "rollout": p.rollout}))
        .collect();
    store.audit_trail().audit(crate::audit::AuditRecord::now(
        crate::audit::AuditKind::Reload,
        &serde_json::json!({ "plugins": plugins }),
    ));
    let rollout = |set: &PluginSet, name: &str| set.get(name).and_then(|p| p.rollout.clone());
    let names: std::collections::BTreeSet<&str> = before
        .iter()
        .chain(after.iter())
        .map(|p| &*p.name)
        .collect();
    for name in names {
        let (was, now) = (rollout(before, name), rollout(after, name));
        if was != now {
            store.audit_trail().audit(crate::audit::AuditRecord::now(
                crate::audit::AuditKind::Rollout,
                &serde_json::json!({"plugin": name, "before": was, "after": now}),
            ));
        }
    }
}
