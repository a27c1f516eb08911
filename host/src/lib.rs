//! toolgate: a WebAssembly policy-plugin host for AI-agent runtimes — the
//! servers and the command line around the engine.
//!
//! Before an agent runs a tool, its runtime asks toolgate. toolgate runs
//! every loaded policy — a sandboxed WebAssembly component built against the
//! `toolgate:policy` WIT contract — over the proposed call, composes their
//! answers in priority order, and returns allow, deny (with a reason) or pause
//! (for a person), plus notes for the agent.
//!
//! The engine (sandbox, pipeline, composition, store, the runtimes' hook
//! adapters) is the crate `toolgate-engine`, re-exported here whole, so
//! `toolgate::Service` and `toolgate_engine::Service` are one type. This
//! crate adds what serves it: the daemon and its HTTP hooks and inbox, the
//! MCP gateway, metrics, notifications, and the `toolgate` and
//! `toolgate-hook` binaries. An agent runtime that embeds toolgate links the
//! engine alone.
//!
//! ```no_run
//! use toolgate::{Config, Service, ToolRequest};
//!
//! let host = Service::open(Config::bundled_default()?, None)?;
//! let request = ToolRequest::new("Bash", serde_json::json!({"command": "ls"}));
//! let decision = host.evaluate(&request)?;
//! println!("{:?}: {:?}", decision.verdict, decision.reason);
//! # Ok::<(), toolgate::Error>(())
//! ```

#![deny(missing_docs)]

pub use toolgate_engine::*;

pub mod audit_export;
pub mod daemon;
pub mod mcp;
pub mod metrics;
pub mod notify;

/// Internals the fuzz targets in `fuzz/` check directly. Built by `cargo
/// fuzz` (which compiles every crate with `--cfg fuzzing`), and by the
/// unit tests, so that a change here cannot break the targets unseen (the
/// engine's half by the engine's).
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing {
    use crate::daemon::inbox;
    use hyper::HeaderMap;

    pub use crate::daemon::inbox::escape;

    /// The inbox's reading of a form field.
    pub fn form_value(form: &str, name: &str) -> Option<String> {
        inbox::form_value(form, name)
    }
    /// The inbox's encoding of a form value.
    pub fn percent_encode(text: &str) -> String {
        inbox::percent_encode(text)
    }
    /// The inbox's reading of a cookie's values.
    pub fn cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
        inbox::cookies(headers, name)
    }
    /// The inbox's `Host` check.
    pub fn loopback_host(headers: &HeaderMap) -> bool {
        inbox::loopback_host(headers)
    }
    /// The inbox's same-origin check.
    pub fn same_origin(headers: &HeaderMap) -> bool {
        inbox::same_origin(headers)
    }

    /// The engine's internals the fuzz targets check (the guard's quick
    /// filter, the registry manifest's reading).
    #[cfg(fuzzing)]
    pub use toolgate_engine::fuzzing::*;
}
