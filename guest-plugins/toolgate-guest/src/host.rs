//! Typed wrappers over the host capabilities a policy imports.
//!
//! These call into the host, so they only work inside a running toolgate
//! host; keep them at the edges of policy code.

pub use crate::bindings::toolgate::policy::events::{Event, EventsError};
pub use crate::bindings::toolgate::policy::state::StateError;
pub use crate::bindings::wasi::logging::logging::Level;

/// Durable key-value state in this policy's own namespace.
///
/// The host's caps (`state-error.too-large` in `host.wit`) are checked
/// here, before the host is called, with the host's own answers: past
/// them a call is answered without crossing the sandbox, since what is
/// larger than the host's copy limit (4 MiB) would trap the policy on
/// the way out instead of being answered `TooLarge`.
pub mod state {
    use super::StateError;
    use crate::bindings::toolgate::policy::state as raw;

    /// The longest key the host stores, bytes.
    pub const MAX_KEY: usize = 1024;
    /// The longest value the host stores, bytes.
    pub const MAX_VALUE: usize = 1024 * 1024;
    /// The most keys one `get_many` may ask.
    pub const MAX_KEYS: usize = 1000;

    /// `TooLarge` for a key or value the host would refuse.
    fn storable(key: &str, value: &[u8]) -> Result<(), StateError> {
        if key.len() > MAX_KEY || value.len() > MAX_VALUE {
            return Err(StateError::TooLarge);
        }
        Ok(())
    }

    /// Read a value; a key longer than any stored one reads as `None`.
    pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
        if key.len() > MAX_KEY {
            return Ok(None);
        }
        raw::get(key)
    }

    /// Read several values in one host call, in the order asked: at most
    /// [`MAX_KEYS`] keys (more is `StateError::TooLarge`).
    pub fn get_many(keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        if keys.len() > MAX_KEYS {
            return Err(StateError::TooLarge);
        }
        // Keys no store holds read as none, as the host reads them, and
        // are not sent.
        let asked: Vec<String> = keys
            .iter()
            .filter(|k| k.len() <= MAX_KEY)
            .cloned()
            .collect();
        let mut found = raw::get_many(&asked)?.into_iter();
        Ok(keys
            .iter()
            .map(|k| {
                if k.len() <= MAX_KEY {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect())
    }

    /// Read a JSON value; a missing or undecodable value reads as `None`, a
    /// store failure as `Err`.
    pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, StateError> {
        Ok(get(key)?.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Write a value: `TooLarge` past [`MAX_KEY`] or [`MAX_VALUE`].
    pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
        storable(key, value)?;
        raw::set(key, value)
    }

    /// Write a JSON value.
    pub fn set_json<T: serde::Serialize>(key: &str, value: &T) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StateError::Storage(e.to_string()))?;
        set(key, &bytes)
    }

    /// Delete a value.
    pub fn delete(key: &str) -> Result<(), StateError> {
        storable(key, &[])?;
        raw::delete(key)
    }

    /// Keys under `prefix`, in order, at most `limit`; none under a prefix
    /// longer than any key.
    pub fn keys(prefix: &str, limit: u32) -> Result<Vec<String>, StateError> {
        if prefix.len() > MAX_KEY {
            return Ok(Vec::new());
        }
        raw::list_keys(prefix, limit)
    }

    /// Atomically take one unit of the counter at `key` if it is below
    /// `limit`; `Ok(None)` when it is exhausted.
    pub fn try_increment(key: &str, limit: u64) -> Result<Option<u64>, StateError> {
        storable(key, &[])?;
        raw::try_increment(key, limit)
    }
}

/// The host's flow labels: what the call's session took in, and which
/// files hold it (`flows` in `host.wit`). Shared by every policy and kept
/// by the host; people list and clear them, policies only add and read.
pub mod flows {
    use crate::bindings::toolgate::policy::flows as raw;
    pub use crate::bindings::toolgate::policy::flows::{FlowLabel, FlowsError, Located};

    /// Label the call's session: it took in `source`, of kind `kind`.
    pub fn label_session(kind: &str, source: &str) -> Result<(), FlowsError> {
        raw::label_session(kind, source)
    }

    /// Label the file at `path` (as the call names it).
    pub fn label_file(path: &str, kind: &str, source: &str) -> Result<(), FlowsError> {
        raw::label_file(path, kind, source)
    }

    /// The call's session's labels, oldest first.
    pub fn session_labels() -> Result<Vec<FlowLabel>, FlowsError> {
        raw::session_labels()
    }

    /// The labels of the file at `path`, oldest first.
    pub fn file_labels(path: &str) -> Result<Vec<FlowLabel>, FlowsError> {
        raw::file_labels(path)
    }

    /// `path` resolved by the host, and whether it is in the project.
    pub fn locate(path: &str) -> Option<Located> {
        raw::locate(path)
    }
}

/// This policy's event stream.
pub mod events {
    use super::cut;
    pub use super::{Event, EventsError};
    use crate::bindings::toolgate::policy::events as raw;
    use crate::bindings::toolgate::policy::types::{Risk, ToolOrigin};

    /// The longest short field (session, kind, tool, origin, risk category
    /// and signal) the host keeps, bytes.
    pub const MAX_FIELD: usize = 256;
    /// The longest `detail` or `summary` the host keeps, bytes.
    pub const MAX_TEXT: usize = 1024;
    /// The most risk signals the host keeps.
    pub const MAX_SIGNALS: usize = 32;

    /// Append an event (queued; never blocks the decision). Each field is
    /// cut to what the host keeps of it before it leaves the sandbox, so
    /// an event of any size is recorded as the host records it.
    pub fn append(event: &Event) {
        let short = |t: &str| cut(t, MAX_FIELD);
        let origin = event.origin.as_ref().map(|origin| match origin {
            ToolOrigin::Builtin => ToolOrigin::Builtin,
            ToolOrigin::Mcp(server) => ToolOrigin::Mcp(short(server)),
            ToolOrigin::Other(name) => ToolOrigin::Other(short(name)),
        });
        let risk = event.risk.as_ref().map(|risk| Risk {
            level: risk.level,
            category: short(&risk.category),
            signals: risk
                .signals
                .iter()
                .take(MAX_SIGNALS)
                .map(|s| short(s))
                .collect(),
        });
        raw::append(&Event {
            session_id: short(&event.session_id),
            turn: event.turn,
            kind: short(&event.kind),
            tool: event.tool.as_deref().map(short),
            origin,
            risk,
            detail: event.detail.as_deref().map(|t| cut(t, MAX_TEXT)),
            summary: event.summary.as_deref().map(|t| cut(t, MAX_TEXT)),
            at_ms: event.at_ms,
        })
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

/// The longest log line the host keeps, bytes.
pub const MAX_LOG_LINE: usize = 4096;

/// Log through the host (`wasi:logging`), attributed to this policy; cut
/// to what the host keeps of a line before it leaves the sandbox.
pub fn log(level: Level, message: &str) {
    crate::bindings::wasi::logging::logging::log(level, "", &cut(message, MAX_LOG_LINE))
}

/// `text`'s first `max` bytes at most, on a character boundary, as the
/// host cuts it.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
