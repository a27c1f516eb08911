//! toolgate's engine: a WebAssembly policy-plugin host for AI-agent runtimes,
//! as a library to embed.
//!
//! Before an agent runs a tool, its runtime asks toolgate. toolgate runs
//! every loaded policy — a sandboxed WebAssembly component built against the
//! `toolgate:policy` WIT contract — over the proposed call, composes their
//! answers in priority order, and returns allow, deny (with a reason) or pause
//! (for a person), plus notes for the agent.
//!
//! Every front door calls one [`Service`]: the daemon,
//! the command line, the Python and Node packages, and a Rust embedder.
//!
//! ```no_run
//! use toolgate_engine::{Config, Service, ToolRequest};
//!
//! let host = Service::open(Config::bundled_default()?, None)?;
//! let request = ToolRequest::new("Bash", serde_json::json!({"command": "ls"}));
//! let decision = host.evaluate(&request)?;
//! println!("{:?}: {:?}", decision.verdict, decision.reason);
//! # Ok::<(), toolgate_engine::Error>(())
//! ```

#![deny(missing_docs)]

mod answered;
pub mod audit;
mod bindings;
mod bounds;
mod cache;
mod capabilities;
mod chores;
mod clock;
pub mod compose;
pub mod config;
mod epoch;
mod error;
mod files;
pub mod fixtures;
pub mod flows;
pub mod guard;
pub use toolgate_runtimes as hooks;
mod host;
pub mod inspect;
mod memo;
mod native;
pub mod oci;
mod output_check;
mod pipeline;
pub mod plugins;
mod pool;
pub mod probe;
mod registry;
pub mod replay;
pub mod route;
mod runtime;
mod sandbox;
mod schema;
pub mod service;
pub mod signing;
mod source_lines;
pub mod standing;
pub mod store;
pub mod tenant;
mod tool_filter;
mod unjudged;
mod watch;
mod wit_convert;

/// Internals the fuzz targets in `fuzz/` check directly (through
/// `toolgate::fuzzing`). Built by `cargo fuzz` (which compiles every crate
/// with `--cfg fuzzing`), and by the unit tests, so that a change here cannot
/// break the targets unseen.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing {
    /// What a registry's manifest says, as `plugins pull` reads it: the
    /// component layer's digest and the signature file it carries.
    #[cfg(feature = "oci")]
    pub fn oci_manifest(manifest: &[u8]) -> Result<(String, Option<String>), String> {
        let reference = crate::oci::Reference::parse("oci://127.0.0.1:5000/fuzz/policy:1")?;
        crate::oci::layout::artifact_of(&reference, manifest)
            .map(|(layer, signature)| (layer.digest, signature))
    }

    /// Whether the guard's quick filter would pass over `word` although
    /// the full check finds a protected location in it (it must never).
    pub fn quick_filter_misses(plane: &crate::guard::ControlPlane, word: &str) -> bool {
        let path = crate::guard::normalise(std::path::Path::new(word));
        plane.protects(&path).is_some() && !plane.could_name_protected(word)
    }
}

pub use bindings::{WIT_PACKAGE, WIT_VERSION};
pub use config::Config;
pub use decision::{Decision, Verdict};
pub use error::{Error, ErrorKind, PluginProblem, Result, StoreCause};
/// The runtimes' adapters at their long-standing paths.
pub use hooks::{claude_code, cursor, gemini_cli};
pub use host::{Outcome, ReloadReport, Toolgate};
pub use request::ToolRequest;
pub use runtime::PolicyFailure;
pub use service::Service;
pub use watch::Watcher;

pub use toolgate_wire::{
    decision, decision_log, gates, locations, now, now_ms, output, redact, request,
};
