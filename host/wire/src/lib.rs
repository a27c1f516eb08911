//! toolgate's wire types as plain data: the requests an agent runtime sends,
//! the decisions it gets back, pending gates, the decision log and the
//! daemon protocol, and [`client`], the one client for a daemon's socket.
//! No wasmtime and no store: the thin hook client (`toolgate-hook`), the MCP
//! gateway, the CLI and embedders that only talk to a daemon use this crate;
//! the engine re-exports its data modules under the same names.

#![deny(missing_docs)]

pub mod client;
pub mod decision;
pub mod decision_log;
pub mod gates;
pub mod locations;
pub mod output;
pub mod peer;
pub mod protocol;
pub mod redact;
pub mod request;

pub use decision::{Decision, Verdict};
pub use request::ToolRequest;

/// A request that cannot be understood; the message says why and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid request: {0}")]
pub struct InvalidRequest(pub String);

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
