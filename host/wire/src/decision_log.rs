//! The decision log: every decision, in redb, with bounded retention.
//!
//! Entries go through the store's batching writer (logging never blocks a
//! decision); retention by count and age is applied after each batch.
//! Arguments are stored as configured — a digest by default — because tool
//! arguments can carry secrets.

use serde::{Deserialize, Serialize};

use crate::decision::{Decision, PolicyVerdict, Verdict};
use crate::request::{ArgumentsText, ToolRequest};

/// How tool arguments appear in the decision log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgumentsView {
    /// The sha256 of the arguments.
    Digest,
    /// Keys and types, values replaced by their length.
    Redacted,
    /// The arguments as sent.
    Full,
    /// Nothing.
    None,
}

/// One logged decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// The call's id.
    pub call_id: String,
    /// When it was decided (ms since the epoch).
    pub at_ms: u64,
    /// The session.
    pub session_id: String,
    /// The thread.
    pub thread_id: String,
    /// The user.
    pub user_id: String,
    /// The channel.
    pub channel: String,
    /// The tool.
    pub tool: String,
    /// The arguments as configured: a digest, a redacted shape, or in full.
    pub arguments: serde_json::Value,
    /// Each policy that ran.
    pub policies: Vec<LoggedPolicy>,
    /// The final verdict.
    pub verdict: Verdict,
    /// The reason, for deny and pause.
    pub reason: Option<String>,
    /// The deciding policy.
    pub decided_by: Option<String>,
    /// Wall time of the evaluation, microseconds.
    pub duration_us: u64,
    /// How `arguments` was kept; only `full` entries can be replayed.
    #[serde(default = "digest_view")]
    pub arguments_view: ArgumentsView,
    /// What else a replay needs to rebuild the call.
    #[serde(default)]
    pub call: LoggedCall,
    /// Shadow plugins' verdicts on the same call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<LoggedPolicy>,
    /// The arguments the call was to run with when policies rewrote them,
    /// kept as `arguments` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten: Option<serde_json::Value>,
}

/// One policy's part in a logged decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedPolicy {
    /// The plugin's name.
    pub name: String,
    /// The component's sha256.
    pub sha256: String,
    /// Its verdict.
    pub verdict: PolicyVerdict,
    /// Its failure, if any.
    pub failure: Option<String>,
    /// The arguments it rewrote the call to, kept as the entry's
    /// `arguments` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<serde_json::Value>,
}

/// The parts of a request that are not in the entry's other fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoggedCall {
    /// Where the tool comes from.
    #[serde(default)]
    pub origin: crate::request::Origin,
    /// The execution mode.
    #[serde(default)]
    pub mode: crate::request::Mode,
    /// The thread's kind.
    #[serde(default)]
    pub thread_kind: String,
    /// The turn.
    #[serde(default)]
    pub turn: u64,
    /// Whether a subagent made the call.
    #[serde(default)]
    pub is_subagent: bool,
    /// The agent's context size, when the runtime said.
    #[serde(default)]
    pub context_tokens: Option<u64>,
}

fn digest_view() -> ArgumentsView {
    ArgumentsView::Digest
}

impl LogEntry {
    /// The call again, for a replay: only from entries that kept the
    /// arguments in full (likely secrets in them are redacted; a transcript
    /// is not kept).
    pub fn replayable(&self) -> Option<ToolRequest> {
        if self.arguments_view != ArgumentsView::Full {
            return None;
        }
        let mut request = ToolRequest::new(self.tool.clone(), self.arguments.clone());
        request.call_id = Some(self.call_id.clone());
        request.session_id = self.session_id.clone();
        request.thread_id = Some(self.thread_id.clone());
        request.user_id = self.user_id.clone();
        request.channel = self.channel.clone();
        request.origin = self.call.origin.clone();
        request.mode = self.call.mode;
        request.thread_kind = self.call.thread_kind.clone();
        request.turn = self.call.turn;
        request.is_subagent = self.call.is_subagent;
        request.context_tokens = self.call.context_tokens;
        Some(request)
    }

    /// The log entry for `decision` on `request`, its arguments kept as
    /// `view` shows them (`Null` until then).
    fn of(request: &ToolRequest, decision: &Decision, view: ArgumentsView) -> Self {
        Self {
            call_id: decision.call_id.clone(),
            at_ms: crate::now_ms(),
            session_id: request.session_id.clone(),
            thread_id: request.thread().to_string(),
            user_id: request.user_id.clone(),
            channel: request.channel.clone(),
            tool: request.tool.clone(),
            arguments: serde_json::Value::Null,
            arguments_view: view,
            call: LoggedCall {
                origin: request.origin.clone(),
                mode: request.mode,
                thread_kind: request.thread_kind.clone(),
                turn: request.turn,
                is_subagent: request.is_subagent,
                context_tokens: request.context_tokens,
            },
            policies: decision
                .policies
                .iter()
                .map(|p| LoggedPolicy::of(p, view))
                .collect(),
            shadows: decision
                .shadows
                .iter()
                .map(|p| LoggedPolicy::of(p, view))
                .collect(),
            rewritten: decision.arguments.as_ref().and_then(|a| shown(a, view)),
            verdict: decision.verdict,
            reason: decision.reason.as_deref().map(crate::redact::for_display),
            decided_by: decision.decided_by.clone(),
            duration_us: decision.duration_us,
        }
    }
}

/// A decision on its way to the log. In the `digest` view (the default) the
/// arguments may still be unhashed: the store's writer thread hashes them
/// when it turns this into a [`LogEntry`], so hashing a large argument (a
/// file being written: ~50 µs per 100 KB) does not lengthen the decision.
pub struct PendingLogEntry {
    entry: LogEntry,
    /// The arguments whose sha256 is the entry's `arguments`, still to do.
    unhashed: Option<ArgumentsText>,
}

impl PendingLogEntry {
    /// The log entry for `decision` on `request`, whose arguments were
    /// serialised once as `arguments` for the evaluation.
    pub fn new(
        request: &ToolRequest,
        arguments: ArgumentsText,
        decision: &Decision,
        view: ArgumentsView,
    ) -> Self {
        let mut entry = LogEntry::of(request, decision, view);
        let mut unhashed = None;
        match view {
            ArgumentsView::Full => entry.arguments = crate::redact::redact_json(&request.arguments),
            ArgumentsView::Redacted => entry.arguments = redact(&request.arguments),
            ArgumentsView::None => {}
            ArgumentsView::Digest => match arguments.sha256_if_hashed() {
                Some(sha256) => entry.arguments = digest(sha256),
                None => unhashed = Some(arguments),
            },
        }
        Self { entry, unhashed }
    }

    /// Bytes of arguments still to hash (0 when there is nothing to do).
    pub fn unhashed_len(&self) -> usize {
        self.unhashed.as_ref().map_or(0, |a| a.json.len())
    }

    /// Hash the arguments now, on this thread.
    pub fn hash_now(&mut self) {
        if let Some(arguments) = self.unhashed.take() {
            self.entry.arguments = digest(arguments.sha256());
        }
    }

    /// The complete entry, hashing the arguments if that is still to do.
    pub fn into_entry(mut self) -> LogEntry {
        self.hash_now();
        self.entry
    }
}

impl std::fmt::Debug for PendingLogEntry {
    /// The entry as it will be logged and the size of what is still to
    /// hash — never the unhashed arguments themselves, which may hold
    /// secrets the `digest` view exists to keep out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingLogEntry")
            .field("entry", &self.entry)
            .field("unhashed_bytes", &self.unhashed_len())
            .finish()
    }
}

impl From<LogEntry> for PendingLogEntry {
    /// An entry that is already complete (an imported one).
    fn from(entry: LogEntry) -> Self {
        Self {
            entry,
            unhashed: None,
        }
    }
}

/// The `digest` view of arguments with this sha256.
fn digest(sha256: &[u8; 32]) -> serde_json::Value {
    serde_json::json!({ "sha256": hex::encode(sha256) })
}

impl LoggedPolicy {
    /// What the log keeps of one policy's part, arguments as `view` says.
    fn of(p: &crate::decision::PolicyResult, view: ArgumentsView) -> Self {
        Self {
            name: p.name.clone(),
            sha256: p.sha256.clone(),
            verdict: p.verdict,
            failure: p.failure.clone(),
            rewrite: p.rewrite.as_ref().and_then(|a| shown(a, view)),
        }
    }
}

/// Arguments as `view` keeps them (none for `none`).
pub fn shown(arguments: &serde_json::Value, view: ArgumentsView) -> Option<serde_json::Value> {
    use sha2::Digest as _;
    match view {
        ArgumentsView::Full => Some(crate::redact::redact_json(arguments)),
        ArgumentsView::Redacted => Some(redact(arguments)),
        ArgumentsView::Digest => {
            let json = crate::request::canonical_json(arguments);
            Some(digest(&sha2::Sha256::digest(json.as_bytes()).into()))
        }
        ArgumentsView::None => None,
    }
}

/// Keep the shape (keys, types, lengths), drop the values.
fn redact(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), redact(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(s) => Value::String(format!("<{} chars>", s.chars().count())),
        Value::Number(_) => Value::String("<number>".into()),
        other => other.clone(),
    }
}

/// A filter for reading the log.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LogFilter {
    /// Only this session.
    pub session: Option<String>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Only this verdict.
    pub verdict: Option<Verdict>,
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn a_pending_entry_never_shows_its_unhashed_arguments() {
        let request = ToolRequest::new("Bash", serde_json::json!({"token": "sk-live-SECRET"}));
        let decision = Decision::refused_by_host(&request, "test".into());
        let pending = PendingLogEntry::new(
            &request,
            request.arguments_text(),
            &decision,
            ArgumentsView::Digest,
        );
        let shown = format!("{pending:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("unhashed_bytes"), "{shown}");
    }

    #[test]
    fn the_digest_view_is_the_sha256_of_the_compact_arguments() {
        // What an operator recomputes from the call they have: the hash of
        // its arguments as compact JSON, whether the deciding thread hashed
        // them (for a fingerprint) or the log's writer does.
        let request = ToolRequest::new("Write", serde_json::json!({"path": "a", "n": [1, 2]}));
        let decision = Decision::refused_by_host(&request, "test".into());
        let expected = hex::encode(Sha256::digest(br#"{"n":[1,2],"path":"a"}"#));
        let unhashed = request.arguments_text();
        assert_eq!(unhashed.json, r#"{"n":[1,2],"path":"a"}"#);
        let hashed = request.arguments_text();
        hashed.sha256();
        for text in [unhashed, hashed] {
            let entry =
                PendingLogEntry::new(&request, text, &decision, ArgumentsView::Digest).into_entry();
            assert_eq!(entry.arguments["sha256"], expected);
        }
    }
}
