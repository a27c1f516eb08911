//! Typed wrappers over the host capabilities a policy imports.
//!
//! These call into the host, so they only work inside a running toolgate
//! host; keep them at the edges of policy code.

pub use crate::bindings::toolgate::policy::context::Level;
pub use crate::bindings::toolgate::policy::events::Event;
pub use crate::bindings::toolgate::policy::probe::{ProbeError, ProbeRequest};
pub use crate::bindings::toolgate::policy::state::StateError;

/// Durable key-value state in this policy's own namespace.
pub mod state {
    use super::StateError;
    use crate::bindings::toolgate::policy::state as raw;

    /// Read a value.
    pub fn get(key: &str) -> Option<Vec<u8>> {
        raw::get(key)
    }

    /// Read a JSON value; a missing or undecodable value reads as `None`.
    pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Option<T> {
        raw::get(key).and_then(|bytes| serde_json::from_slice(&bytes).ok())
    }

    /// Write a value.
    pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
        raw::set(key, value)
    }

    /// Write a JSON value.
    pub fn set_json<T: serde::Serialize>(key: &str, value: &T) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StateError::Storage(e.to_string()))?;
        raw::set(key, &bytes)
    }

    /// Delete a value.
    pub fn delete(key: &str) -> Result<(), StateError> {
        raw::delete(key)
    }

    /// Keys under `prefix`, in order, at most `limit`.
    pub fn keys(prefix: &str, limit: u32) -> Vec<String> {
        raw::list_keys(prefix, limit)
    }

    /// Atomically take one unit of the counter at `key` if it is below
    /// `limit`; `Ok(None)` when it is exhausted.
    pub fn try_increment(key: &str, limit: u64) -> Result<Option<u64>, StateError> {
        raw::try_increment(key, limit)
    }
}

/// This policy's event stream.
pub mod events {
    pub use super::Event;
    use crate::bindings::toolgate::policy::events as raw;

    /// Append an event (queued; never blocks the decision).
    pub fn append(event: &Event) {
        raw::append(event)
    }

    /// The newest `limit` events of a session, oldest first.
    pub fn session_recent(session: &str, limit: u32, exclude_kinds: &[String]) -> Vec<Event> {
        raw::session_recent(session, limit, exclude_kinds)
    }

    /// The newest `limit` events for `tool` from other sessions, oldest first.
    pub fn tool_history(
        tool: &str,
        exclude_session: &str,
        limit: u32,
        exclude_kinds: &[String],
    ) -> Vec<Event> {
        raw::tool_history(tool, exclude_session, limit, exclude_kinds)
    }
}

/// Ask the host's configured model.
pub fn probe(system: &str, user: &str, timeout_ms: u32) -> Result<String, ProbeError> {
    crate::bindings::toolgate::policy::probe::ask(&ProbeRequest {
        system: system.to_string(),
        user: user.to_string(),
        timeout_ms,
    })
}

/// The tail of this call's transcript, if the runtime named one.
pub fn transcript_tail(max_bytes: u32) -> Option<String> {
    crate::bindings::toolgate::policy::context::transcript_tail(max_bytes)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    crate::bindings::toolgate::policy::context::now_ms()
}

/// Log through the host, attributed to this policy.
pub fn log(level: Level, message: &str) {
    crate::bindings::toolgate::policy::context::log(level, message)
}
