//! `wasi:logging/logging`: the host log, attributed to the calling policy.
//!
//! Lines share the evaluation's log budget with stdout and stderr
//! (`limits.log_max_bytes`); what does not fit is counted and dropped.

use super::{MAX_FIELD, MAX_LOG_LINE, cut};
use crate::bindings::wasi::logging::logging::{Host, Level};
use crate::sandbox::SandboxState;

impl Host for SandboxState {
    fn log(&mut self, level: Level, context: String, message: String) {
        let message = cut(message, MAX_LOG_LINE);
        let context = cut(context, MAX_FIELD);
        if !self.output.charge(context.len() + message.len()) {
            return;
        }
        let line = if context.is_empty() {
            message
        } else {
            format!("[{context}] {message}")
        };
        let policy = &*self.call.policy;
        let name = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
            Level::Critical => "critical",
        };
        match level {
            Level::Trace => tracing::trace!(policy, "{line}"),
            Level::Debug => tracing::debug!(policy, "{line}"),
            Level::Info => tracing::info!(policy, "{line}"),
            Level::Warn => tracing::warn!(policy, "{line}"),
            Level::Error | Level::Critical => tracing::error!(policy, "{line}"),
        }
        self.call.logs.push(format!("{name}: {line}"));
    }
}
