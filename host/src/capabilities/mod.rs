//! The host capabilities policies import, one module per WIT interface.
//!
//! Every capability is scoped by [`CallContext::policy`]: a policy names keys
//! and streams, the host decides whose they are. There is no way in the WIT
//! to name another policy.

mod context;
mod events;
mod probe;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Limits;
use crate::probe::ProbeClient;
use crate::sandbox::SandboxState;
use crate::store::Store;

/// The most items any list read returns, whatever `limit` the policy asks.
pub(crate) const MAX_LIST: usize = 1000;
/// The longest short field (session id, kind, tool, key prefix, excluded
/// kind) the host keeps from a policy, bytes.
pub(crate) const MAX_FIELD: usize = 256;
/// The most entries of a list argument (`exclude-kinds`) the host reads.
pub(crate) const MAX_LIST_ARGUMENT: usize = 32;
/// The longest log line kept, bytes.
pub(crate) const MAX_LOG_LINE: usize = 4096;

/// `text` cut to at most `max` bytes, on a character boundary.
pub(crate) fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// What the capabilities need to serve one policy for one evaluation, and
/// what it has used of its per-evaluation host-call budgets.
pub(crate) struct CallContext {
    /// The plugin's name: its namespace.
    pub policy: Arc<str>,
    pub store: Arc<Store>,
    pub probe: Arc<ProbeClient>,
    /// Byte cap on the policy's state namespace.
    pub state_quota: u64,
    /// The transcript the runtime named for this call, if any.
    pub transcript: Option<PathBuf>,
    /// Host cap on one transcript-tail read.
    pub transcript_cap: u32,
    /// Lines the policy logged in this evaluation (`level: message`).
    pub logs: Vec<String>,
    /// Transcript bytes read for this policy in this evaluation.
    pub transcript_bytes: u64,
    /// Time spent blocked in host calls that have their own timeout (model
    /// probes); the policy's CPU deadline does not count it, its wall-clock
    /// ceiling does.
    pub host_wait: Duration,
    /// Probes made in this evaluation, and the most allowed.
    pub probes: u32,
    pub probe_max_calls: u32,
    /// The most this evaluation may wait for probes in all.
    pub probe_max_wait: Duration,
    /// When the call into the policy now running must end, whatever it
    /// waits for.
    pub wall_deadline: Option<Instant>,
    /// Events appended in this evaluation, and the most allowed.
    pub events_appended: u32,
    pub events_per_call: u32,
}

impl CallContext {
    /// A fresh context for one evaluation of the plugin `policy`.
    pub(crate) fn new(
        policy: Arc<str>,
        limits: &Limits,
        store: Arc<Store>,
        probe: Arc<ProbeClient>,
        transcript: Option<PathBuf>,
        transcript_cap: u32,
    ) -> Self {
        Self {
            policy,
            store,
            probe,
            state_quota: limits.state_max_bytes,
            transcript,
            transcript_cap,
            logs: Vec::new(),
            transcript_bytes: 0,
            host_wait: Duration::ZERO,
            probes: 0,
            probe_max_calls: limits.probe_max_calls,
            probe_max_wait: Duration::from_millis(u64::from(limits.probe_max_wait_ms)),
            wall_deadline: None,
            events_appended: 0,
            events_per_call: limits.events_per_call,
        }
    }

    /// Run a blocking host operation, keeping its time out of the policy's
    /// CPU deadline.
    fn waiting<T>(&mut self, op: impl FnOnce(&mut Self) -> T) -> T {
        let start = Instant::now();
        let result = op(self);
        self.host_wait += start.elapsed();
        result
    }

    /// How long the next host wait may last: what is left of the probe
    /// budget and of the wall-clock ceiling, whichever is less.
    fn wait_allowance(&self) -> Duration {
        let budget = self.probe_max_wait.saturating_sub(self.host_wait);
        match self.wall_deadline {
            Some(deadline) => budget.min(deadline.saturating_duration_since(Instant::now())),
            None => budget,
        }
    }
}

impl crate::bindings::toolgate::policy::types::Host for SandboxState {}
