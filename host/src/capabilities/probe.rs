//! `toolgate:policy/probe`: ask the host's configured model.

use crate::bindings::toolgate::policy::probe::{Host, ProbeError, ProbeRequest};
use crate::probe::ProbeFailure;
use crate::sandbox::SandboxState;

impl Host for SandboxState {
    fn ask(&mut self, request: ProbeRequest) -> Result<String, ProbeError> {
        let policy = self.call.policy.clone();
        // Bounded per evaluation: how many probes, and how long in all
        // (within the call's wall-clock ceiling too).
        if self.call.probes >= self.call.probe_max_calls {
            tracing::warn!(policy = %policy, max = self.call.probe_max_calls, "probe refused: the evaluation's probe budget is spent");
            return Err(ProbeError::Transport(format!(
                "probe budget spent: at most {} probes per evaluation (limits.probe_max_calls)",
                self.call.probe_max_calls
            )));
        }
        let allowance = self.call.wait_allowance();
        if allowance.is_zero() {
            tracing::warn!(policy = %policy, "probe refused: no wait time left in this evaluation");
            return Err(ProbeError::Timeout);
        }
        self.call.probes += 1;
        let timeout_ms = request
            .timeout_ms
            .min(u32::try_from(allowance.as_millis()).unwrap_or(u32::MAX))
            .max(1);
        let result = self
            .call
            .waiting(|call| call.probe.ask(&request.system, &request.user, timeout_ms));
        result.map_err(|failure| {
            // No endpoint is a normal state (the default config has none).
            if matches!(failure, ProbeFailure::NotConfigured) {
                tracing::debug!(policy = %policy, "model probe: no endpoint configured");
            } else {
                tracing::warn!(policy = %policy, error = %failure, "model probe failed");
            }
            match failure {
                ProbeFailure::NotConfigured => ProbeError::NotConfigured,
                ProbeFailure::Timeout => ProbeError::Timeout,
                other => ProbeError::Transport(other.to_string()),
            }
        })
    }
}
