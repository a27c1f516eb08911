//! Typed wrappers over the host capabilities a policy imports.
//!
//! These call into the host, so they only work inside a running toolgate
//! host; keep them at the edges of policy code.

pub use crate::bindings::toolgate::policy::events::{Event, EventsError};
pub use crate::bindings::toolgate::policy::state::StateError;
pub use crate::bindings::wasi::logging::logging::Level;

/// Durable key-value state in this policy's own namespace.
pub mod state {
    use super::StateError;
    use crate::bindings::toolgate::policy::state as raw;

    /// Read a value.
    pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
        raw::get(key)
    }

    /// Read several values in one host call, in the order asked: at most
    /// 1 000 keys (more is `StateError::TooLarge`).
    pub fn get_many(keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        raw::get_many(keys)
    }

    /// Read a JSON value; a missing or undecodable value reads as `None`, a
    /// store failure as `Err`.
    pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, StateError> {
        Ok(raw::get(key)?.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
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
    pub fn keys(prefix: &str, limit: u32) -> Result<Vec<String>, StateError> {
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
    pub use super::{Event, EventsError};
    use crate::bindings::toolgate::policy::events as raw;

    /// Append an event (queued; never blocks the decision).
    pub fn append(event: &Event) {
        raw::append(event)
    }

    /// The newest `limit` events of a session, oldest first.
    pub fn session_recent(
        session: &str,
        limit: u32,
        exclude_kinds: &[String],
    ) -> Result<Vec<Event>, EventsError> {
        raw::session_recent(session, limit, exclude_kinds)
    }

    /// The newest `limit` events for `tool` from other sessions, oldest first.
    pub fn tool_history(
        tool: &str,
        exclude_session: &str,
        limit: u32,
        exclude_kinds: &[String],
    ) -> Result<Vec<Event>, EventsError> {
        raw::tool_history(tool, exclude_session, limit, exclude_kinds)
    }
}

/// The tail of this call's transcript; `Ok(None)` when the runtime named
/// none, `Err` with the reason when the host could not read it.
pub fn transcript_tail(max_bytes: u32) -> Result<Option<String>, String> {
    use crate::bindings::toolgate::policy::context::{self, TranscriptError};
    context::transcript_tail(max_bytes).map_err(|TranscriptError::Unreadable(why)| why)
}

/// Milliseconds since the Unix epoch (`wasi:clocks/wall-clock`, through std).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Log through the host (`wasi:logging`), attributed to this policy.
pub fn log(level: Level, message: &str) {
    crate::bindings::wasi::logging::logging::log(level, "", message)
}
