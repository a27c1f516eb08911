//! `toolgate:policy/probe`: ask the host's configured model.

use crate::bindings::toolgate::policy::probe::{Host, ProbeError, ProbeRequest};
use crate::probe::ProbeFailure;
use crate::sandbox::SandboxState;

impl Host for SandboxState {
    fn ask(&mut self, request: ProbeRequest) -> Result<String, ProbeError> {
        let policy = self.call.policy.clone();
        let result = self.call.waiting(|call| {
            call.probe
                .ask(&request.system, &request.user, request.timeout_ms)
        });
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
