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

use crate::probe::ProbeClient;
use crate::sandbox::SandboxState;
use crate::store::Store;

/// What the capabilities need to serve one policy for one evaluation.
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
    /// probes); the policy's deadline does not count it.
    pub host_wait: Duration,
}

impl CallContext {
    /// Run a blocking host operation, keeping its time out of the policy's
    /// deadline.
    fn waiting<T>(&mut self, op: impl FnOnce(&mut Self) -> T) -> T {
        let start = Instant::now();
        let result = op(self);
        self.host_wait += start.elapsed();
        result
    }
}

impl crate::bindings::toolgate::policy::types::Host for SandboxState {}
