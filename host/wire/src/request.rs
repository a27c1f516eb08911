//! The JSON an agent runtime sends for one proposed tool call, and its
//! conversion to the WIT `tool-call`.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::InvalidRequest;

/// One proposed tool call. Only `tool` is required; everything else has a
/// default suited to a single local user at a terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRequest {
    /// The tool's name as the runtime knows it, e.g. `Bash`.
    pub tool: String,
    /// The tool's arguments (any JSON; usually an object).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// Where the tool comes from: `"builtin"` (default), `{"mcp": "server"}`
    /// or `{"other": "name"}`.
    #[serde(default)]
    pub origin: Origin,
    /// The runtime's id for this call; generated when absent.
    #[serde(default)]
    pub call_id: Option<String>,
    /// The agent session.
    #[serde(default = "default_session")]
    pub session_id: String,
    /// The thread within the session; defaults to the session id.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The person the agent acts for.
    #[serde(default = "default_user")]
    pub user_id: String,
    /// The channel the request came from.
    #[serde(default = "default_channel")]
    pub channel: String,
    /// The kind of thread (`foreground`, `research`, `mission`, ...).
    #[serde(default = "default_thread_kind")]
    pub thread_kind: String,
    /// Whether the agent was dispatched by another agent.
    #[serde(default)]
    pub is_subagent: bool,
    /// The turn number within the session.
    #[serde(default)]
    pub turn: u64,
    /// How the runtime asks people for permission.
    #[serde(default)]
    pub mode: Mode,
    /// The context-window size in tokens, when the runtime knows it.
    #[serde(default)]
    pub context_tokens: Option<u64>,
    /// The agent's transcript (JSONL); policies may read its tail.
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    /// The directory the tool runs in, when the runtime says: relative
    /// paths in the arguments are resolved against it by the host's
    /// self-protection (not given to policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The JSON Schema of the tool's arguments, when the runtime knows it
    /// (the MCP gateway does, from `tools/list`): a policy's rewrite of the
    /// call must satisfy it (not given to policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<serde_json::Value>,
}

/// Where a tool comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Built into the agent runtime.
    #[default]
    Builtin,
    /// Served by the named MCP server.
    Mcp(String),
    /// Something else, named.
    Other(String),
}

impl Origin {
    /// The MCP origin of a server known by a free-form name (what a server
    /// reports, a URL's host): what is not a letter, digit, `-` or `_`
    /// becomes `-` (`mcp-servers/everything` → `mcp-servers-everything`),
    /// so the name fits catalogue keys (`mcp:SERVER/TOOL`).
    pub fn mcp_named(name: &str) -> Self {
        let name = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        Self::Mcp(name)
    }

    /// A stable text form: `builtin`, `mcp:SERVER` or `other:NAME`.
    pub fn key(&self) -> String {
        match self {
            Origin::Builtin => "builtin".into(),
            Origin::Mcp(server) => format!("mcp:{server}"),
            Origin::Other(name) => format!("other:{name}"),
        }
    }
}

/// Execution mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A person is asked before sensitive actions.
    #[default]
    Interactive,
    /// A person is present but routine actions are pre-approved.
    InteractiveAutoApprove,
    /// Nobody is there to ask.
    Autonomous,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}
fn default_session() -> String {
    "default".into()
}
/// The person a request acts for when it names none.
pub const DEFAULT_USER_ID: &str = "local";

/// How a tenant's ids begin, in system mode: `uid:N` for OS user N's user
/// id, `uid:N/…` for its sessions. The daemon gives every caller such ids
/// (see the engine's `tenant`); no caller can name another's.
pub const TENANT_PREFIX: &str = "uid:";

/// The tenant (uid) a user id belongs to, if it is a tenant's: whose files
/// (transcripts) toolgate reads on its behalf.
pub fn owner_of_user(user_id: &str) -> Option<u32> {
    let rest = user_id.strip_prefix(TENANT_PREFIX)?;
    let digits = rest.split_once('/').map_or(rest, |(uid, _)| uid);
    digits.parse().ok()
}

fn default_user() -> String {
    DEFAULT_USER_ID.into()
}
fn default_channel() -> String {
    "cli".into()
}
fn default_thread_kind() -> String {
    "foreground".into()
}

/// An id for a call whose runtime sent none: unique, and not guessable
/// from outside the process (a gate raised for the call is closed by a
/// report naming its id, see `close_answered_gate`). A counter run through
/// two hashers keyed once from the OS (SipHash, a keyed PRF): not a system
/// call per decision, as drawing 128 random bits each time would cost.
pub fn new_call_id() -> String {
    use std::hash::BuildHasher;
    static KEYS: OnceLock<(std::hash::RandomState, std::hash::RandomState)> = OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let (high, low) =
        KEYS.get_or_init(|| (std::hash::RandomState::new(), std::hash::RandomState::new()));
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:016x}{:016x}", high.hash_one(n), low.hash_one(n))
}

/// The longest id (user, session, thread, call, channel) a request may
/// carry, bytes.
pub const MAX_ID_BYTES: usize = 512;

/// Check one id that reaches keys (stores, warm instances, gates): printable
/// text of at most [`MAX_ID_BYTES`], so no two distinct ids can meet in a
/// key built from them (`alice` + `x\0y` against `alice\0x` + `y`).
pub fn check_id(name: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_ID_BYTES {
        return Err(format!(
            "{name} is {} bytes; ids are at most {MAX_ID_BYTES}",
            value.len()
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{name} contains a control character (U+{:04X}); ids must be printable text",
            c as u32
        ));
    }
    Ok(())
}

impl ToolRequest {
    /// Check every id the request carries (see [`check_id`]).
    pub fn check_ids(&self) -> Result<(), String> {
        let ids = [
            ("user_id", Some(&self.user_id)),
            ("session_id", Some(&self.session_id)),
            ("thread_id", self.thread_id.as_ref()),
            ("call_id", self.call_id.as_ref()),
            ("channel", Some(&self.channel)),
        ];
        for (name, value) in ids {
            if let Some(value) = value {
                check_id(name, value)?;
            }
        }
        Ok(())
    }

    /// A request for `tool` with every other field at its default.
    pub fn new(tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        let mut request: Self =
            serde_json::from_value(serde_json::json!({ "tool": "" })).expect("defaults parse");
        request.tool = tool.into();
        request.arguments = arguments;
        request
    }

    /// Parse one request from JSON, with an error that says what is wrong.
    pub fn from_json(text: &str) -> Result<Self, InvalidRequest> {
        let request: Self = serde_json::from_str(text).map_err(|err| {
            InvalidRequest(format!(
                "{err}. A request is a JSON object with at least \"tool\"; see examples/requests/"
            ))
        })?;
        if request.tool.trim().is_empty() {
            return Err(InvalidRequest("\"tool\" must not be empty".into()));
        }
        Ok(request)
    }

    /// The thread id, defaulting to the session id.
    pub fn thread(&self) -> &str {
        self.thread_id.as_deref().unwrap_or(&self.session_id)
    }

    /// The arguments as compact JSON text, object keys in sorted order.
    ///
    /// Sorted here rather than by `serde_json`'s map: with its
    /// `preserve_order` feature (which any crate in a build can turn on, as
    /// `cedar-policy` does) a map keeps the agent's order, and the text —
    /// so the call's fingerprint and the decision log's digest — would
    /// depend on how the binary was built.
    pub fn arguments_json(&self) -> String {
        canonical_json(&self.arguments)
    }

    /// The arguments serialised once for an evaluation.
    pub fn arguments_text(&self) -> ArgumentsText {
        ArgumentsText {
            json: self.arguments_json(),
            sha256: OnceLock::new(),
        }
    }
}

/// `value` as compact JSON with object keys in sorted order: the text a
/// call's arguments are hashed as, whatever `serde_json`'s features.
pub fn canonical_json(value: &serde_json::Value) -> String {
    // Sized up front: grown from nothing by doubling, a large argument's
    // text was copied again and again, each time into fresh pages.
    let mut json = Vec::with_capacity(json_size_hint(value));
    write_sorted(&mut json, value);
    String::from_utf8(json).expect("serde_json writes UTF-8")
}

/// `value` as compact JSON, object keys in sorted order.
fn write_sorted(out: &mut Vec<u8>, value: &serde_json::Value) {
    use serde_json::Value;
    let (open, close) = match value {
        Value::Object(_) => (b'{', b'}'),
        Value::Array(_) => (b'[', b']'),
        scalar => {
            serde_json::to_writer(out, scalar).expect("a JSON scalar always serialises");
            return;
        }
    };
    out.push(open);
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, key).expect("a key always serialises");
                out.push(b':');
                write_sorted(out, item);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(out, item);
            }
        }
        _ => unreachable!("scalars returned above"),
    }
    out.push(close);
}

/// About the length of `value` as compact JSON (exact without escapes).
fn json_size_hint(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| json_size_hint(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + json_size_hint(v))
                .sum::<usize>()
        }
    }
}

/// A call's arguments serialised once per evaluation: the JSON text every
/// policy receives, and its sha256, from which both the call's fingerprint
/// and the decision log's digest are made. Serialising a large argument (a
/// file being written) once instead of per use, and hashing it at most once
/// and only when something needs the hash, is most of what such a call
/// costs the host: the sha256 of 100 KB is ~50 µs, more than the policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentsText {
    /// Compact JSON.
    pub json: String,
    sha256: OnceLock<[u8; 32]>,
}

impl ArgumentsText {
    /// The sha256 of [`Self::json`], hashed on first use.
    pub fn sha256(&self) -> &[u8; 32] {
        self.sha256
            .get_or_init(|| Sha256::digest(self.json.as_bytes()).into())
    }

    /// The sha256 if something has asked for it already.
    pub fn sha256_if_hashed(&self) -> Option<&[u8; 32]> {
        self.sha256.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_made_up_for_calls_without_one_are_unique() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_call_id()).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn only_tool_is_required() {
        let request = ToolRequest::from_json(r#"{"tool": "Bash"}"#).unwrap();
        assert_eq!(request.session_id, "default");
        assert_eq!(request.thread(), "default");
        assert_eq!(request.origin, Origin::Builtin);
        assert_eq!(request.arguments, serde_json::json!({}));
    }

    #[test]
    fn arguments_serialise_as_compact_json_however_their_size_was_guessed() {
        // The hint is exact, short (escapes, long numbers) or long (small
        // numbers, null): the text must not depend on it.
        for arguments in [
            serde_json::json!({}),
            serde_json::json!(null),
            serde_json::json!([1, -2.5e300, 18446744073709551615u64, true, null]),
            serde_json::json!({"a\n\"b": "tab\t quote\" é \u{1}", "n": {"deep": [[], {}]}}),
            serde_json::json!({"content": "x".repeat(100_000)}),
        ] {
            let request = ToolRequest::new("Write", arguments.clone());
            assert_eq!(request.arguments_json(), arguments.to_string());
        }
    }

    #[test]
    fn mcp_origin_parses() {
        let request =
            ToolRequest::from_json(r#"{"tool": "create_issue", "origin": {"mcp": "github"}}"#)
                .unwrap();
        assert_eq!(request.origin, Origin::Mcp("github".into()));
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        let err = ToolRequest::from_json("{").unwrap_err().to_string();
        assert!(err.contains("invalid request"), "{err}");
        let err = ToolRequest::from_json(r#"{"tool": "Bash", "sesion_id": "x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sesion_id"), "{err}");
        let err = ToolRequest::from_json(r#"{"arguments": {}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tool"), "{err}");
        let err = ToolRequest::from_json(r#"{"tool": " "}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("must not be empty"), "{err}");
    }
}
