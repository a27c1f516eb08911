//! The service in this process, typed: what a Rust embedder, the command
//! line and the tests call. Each method is the daemon's request of the same
//! name without the JSON, under the same rules: a decision is counted and
//! announced, and nothing is answered before what it depends on is durable
//! (see [`Durable`]). The caller is this process, trusted as the code that
//! links the library (see [`super::Caller::InProcess`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Durable, Handled, Service};
use crate::config::Config;
use crate::decision::{Decision, Outcome};
use crate::decision_log::{LogEntry, LogFilter};
use crate::gates::{GateKey, GateResolution, PendingGate};
use crate::hooks::{HookRuntime, OnError};
use crate::locations::StoreLocation;
use crate::output::{OutputCheck, ToolDescriptor};
use crate::plugins::{PluginSet, PluginStatus};
use crate::store::hygiene::{StoreStats, SweepReport};
use crate::store::{AuditPage, Store, StoredEvent, TerminalStore};
use crate::tenant::Tenant;
use crate::{ReloadReport, Result, ToolRequest, Toolgate};

impl Service {
    /// Open the store and load every enabled plugin, for this process.
    /// `store` overrides the config's store. Any plugin that fails to load
    /// fails the whole start, with a message naming it.
    pub fn open(config: Config, store: Option<StoreLocation>) -> Result<Self> {
        Ok(Self::new(Arc::new(Toolgate::open(config, store)?)))
    }

    /// Decide on one proposed call. A pause is stored as a pending gate;
    /// the decision is given once what it depends on (policy state, turns,
    /// the gate) is durable.
    pub fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        let decision = self.decide(request)?;
        self.once_durable(Durable::WhatTheAnswerDependsOn, decision)
    }

    /// Tell every policy what happened to a call. Policy failures are
    /// logged, never returned: observing must not disturb the runtime. A
    /// denied call that had paused withdraws its pause.
    pub fn observe(&self, request: &ToolRequest, outcome: Outcome, summary: &str) -> Result<()> {
        self.observed(request, outcome, summary)?;
        self.once_durable(Durable::WhatTheAnswerDependsOn, ())
    }

    /// What the model may read of `output`, the result of `request`: the
    /// policies that export the `output` phase may redact, replace or
    /// withhold it. Apply [`OutputCheck::text`] where the runtime lets the
    /// host change what the model reads.
    pub fn check_output(
        &self,
        request: &ToolRequest,
        outcome: Outcome,
        output: &str,
    ) -> Result<OutputCheck> {
        let check = self.checked(request, outcome, output, None)?;
        self.once_durable(Durable::WhatTheAnswerDependsOn, check)
    }

    /// For each of `tools`, in order: may it be offered to the model in
    /// `caller`'s session (a request naming the session, thread and user)?
    pub fn visible_tools(
        &self,
        caller: &ToolRequest,
        tools: &[ToolDescriptor],
    ) -> Result<Vec<bool>> {
        let visible = self.host.visible_tools(caller, tools);
        self.once_durable(Durable::WhatTheAnswerDependsOn, visible)
    }

    /// A runtime's hook event (its JSON text), answered as the runtime
    /// reads answers, with the decision when a call was decided: never
    /// fails for the event's sake (an error becomes the runtime's failure
    /// answer for `on_error`), only when the answer could not be made
    /// durable.
    pub fn hook(&self, runtime: HookRuntime, event: &str, on_error: OnError) -> Result<Handled> {
        let handled = self.answer_hook((runtime, Tenant::Operator), event, on_error, None);
        self.once_durable(Durable::WhatTheAnswerDependsOn, handled)
    }

    /// The current turn of `session` (0 before its first).
    pub fn turn(&self, session: &str) -> Result<u64> {
        self.host.turn(session)
    }

    /// Start the next turn of `session`; its number (from 1).
    pub fn next_turn(&self, session: &str) -> Result<u64> {
        let turn = self.host.next_turn(session)?;
        self.once_durable(Durable::WhatTheAnswerDependsOn, turn)
    }

    /// Resolve a pending gate from `channel`, which must be the gate's own
    /// or one of `trusted_channels` (an embedder authenticates its channels
    /// itself). On success the resolution is remembered, durably, so the
    /// resubmitted call does not pause again.
    pub fn resolve_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        resolution: GateResolution,
    ) -> Result<PendingGate> {
        self.resolve(key, request_id, channel, resolution, false, channel.into())
    }

    /// Pending (unexpired) gates, optionally of one user, by session.
    pub fn gates(&self, user_id: Option<&str>) -> Result<Vec<PendingGate>> {
        self.host.gates(user_id)
    }

    /// End the pending gates (all, or `key`'s thread's) that `declined`
    /// says a person declined in the runtime's own prompt: they leave every
    /// list and record nothing (reading a transcript can end a gate, never
    /// approve one).
    pub fn end_declined_gates(
        &self,
        key: Option<&GateKey>,
        declined: impl Fn(&PendingGate) -> bool,
    ) -> Result<Vec<PendingGate>> {
        let ended = self.host.end_declined_gates(key, declined)?;
        if ended.is_empty() {
            return Ok(ended); // nothing changed: nothing to wait for
        }
        self.once_durable(Durable::WhatTheAnswerDependsOn, ended)
    }

    /// Check a call the runtime reports as run against what toolgate
    /// judged for its call id: one that ran otherwise raises a question for
    /// a person, returned.
    pub fn check_ran_as_judged(&self, ran: &ToolRequest) -> Result<Option<PendingGate>> {
        let raised = self.host.check_ran_as_judged(ran)?;
        self.once_durable(Durable::WhatTheAnswerDependsOn, raised)
    }

    /// Run an admin command on one plugin; its output.
    pub fn command(&self, plugin: &str, name: &str, args: &str) -> Result<String> {
        let output = self.host.command(plugin, name, args)?;
        self.once_durable(Durable::Everything, output)
    }

    /// Re-read the config file (when the host was built from one) and every
    /// plugin, and swap in what changed, atomically: calls already running
    /// finish on the version they started with; a plugin that fails keeps
    /// its previous version; a config that fails to parse changes nothing.
    pub fn reload(&self) -> Result<ReloadReport> {
        let report = self.reload_and_tell()?;
        self.once_durable(Durable::Everything, report)
    }

    /// Wait until everything decided, resolved or recorded so far is
    /// durable (the decision log and events too).
    pub fn persist(&self) {
        self.host.persist();
    }

    /// Every loaded plugin with its status, in decision order.
    pub fn plugin_statuses(&self) -> Vec<PluginStatus> {
        self.host.plugin_statuses()
    }

    /// The last (re)load failure of each plugin that has one.
    pub fn plugin_problems(&self) -> BTreeMap<String, String> {
        self.host.plugin_problems()
    }

    /// The plugins serving decisions now.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.host.plugins()
    }

    /// Read the config now in force without copying it.
    pub fn with_config<T>(&self, f: impl FnOnce(&Config) -> T) -> T {
        self.host.with_config(f)
    }

    /// The newest `limit` decisions matching `filter`, oldest first, every
    /// one answered so far included.
    pub fn decision_log(&self, filter: &LogFilter, limit: usize) -> Result<Vec<(u64, LogEntry)>> {
        self.host.decision_log(filter, limit)
    }

    /// The newest `limit` policy events across all policies, oldest first.
    pub fn recent_events(&self, limit: usize) -> Result<Vec<(u64, StoredEvent)>> {
        self.host.recent_events(limit)
    }

    /// The newest `limit` events of `session` in `policy`'s stream, oldest
    /// first.
    pub fn session_events(
        &self,
        policy: &str,
        session: &str,
        limit: usize,
    ) -> Result<Vec<StoredEvent>> {
        self.host.session_events(policy, session, limit)
    }

    /// Up to `limit` links of this host's audit chain after `after`, and
    /// its signed head (see [`crate::audit`]).
    pub fn audit_links(&self, after: Option<u64>, limit: usize) -> Result<AuditPage> {
        self.host.audit_links(after, limit)
    }

    /// Sizes per table and per policy.
    pub fn store_stats(&self) -> Result<StoreStats> {
        self.host.store_stats()
    }

    /// Remove now what is past its retention.
    pub fn sweep(&self) -> Result<SweepReport> {
        self.host.sweep()
    }

    /// Events (and log entries) dropped because a queue was full.
    pub fn dropped_events(&self) -> u64 {
        self.host.dropped_events()
    }

    /// The local path that names the store: the redb file, or the path
    /// standing for a database on this machine.
    pub fn store_path(&self) -> &std::path::Path {
        self.host.store_path()
    }

    /// The store itself, for seeding it (a policy's fixtures, a
    /// benchmark's native baseline): writes here bypass every rule above.
    pub fn store(&self) -> &Arc<Store> {
        self.host.store()
    }

    /// Where agents' hooks came from (see [`super::peer`]).
    pub fn agent_terminals(&self) -> &dyn TerminalStore {
        self.host.agent_terminals()
    }

    /// The standing approvals (a person's "always" answers) this host
    /// keeps, and where.
    pub fn standing_approvals(&self) -> &crate::standing::StandingApprovals {
        self.host.standing_approvals()
    }
}
