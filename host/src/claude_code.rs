//! The Claude Code hook adapter: one hook event in (as Claude Code sends it
//! on stdin), one answer out (as Claude Code reads it from stdout).
//!
//! Mapping:
//! - `mcp__SERVER__TOOL` → tool `TOOL` with MCP origin `SERVER`; any other
//!   name → a builtin tool of that name;
//! - `permission_mode` → execution mode: `default` and `plan` →
//!   interactive; `acceptEdits` → interactive (edits are Claude Code's own
//!   business; shell commands still ask); `bypassPermissions`/`dontAsk` →
//!   interactive-auto-approve (a person is there but said not to ask; actions
//!   that always need approval still ask);
//! - `transcript_path` → the transcript policies may read the tail of;
//! - `session_id` → session and thread (`foreground` kind); a payload with
//!   an `agent_id` comes from a subagent;
//! - turns: each `UserPromptSubmit` event starts the session's next turn (the
//!   count lives in the store); tool events carry the current turn.
//!
//! An internal failure must never silently allow (a crashed hook lets Claude
//! Code run the tool), so every error becomes the configured fail answer.

use std::path::PathBuf;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::Toolgate;
use crate::decision::{Decision, Verdict};
use crate::error::{Error, Result};
use crate::gates::{GateKey, PendingGate};
use crate::host::Outcome;
use crate::request::{DEFAULT_USER_ID, Mode, Origin, ToolRequest};

/// One hook event. Unknown fields are ignored: Claude Code adds fields over
/// time.
#[derive(Debug, Clone, Deserialize)]
pub struct HookEvent {
    /// The Claude Code session.
    pub session_id: String,
    /// The session's transcript (JSONL).
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    /// The working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// `default`, `plan`, `acceptEdits`, `bypassPermissions`, ...
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// `PreToolUse`, `PostToolUse`, `UserPromptSubmit`, ...
    pub hook_event_name: String,
    /// The tool, for tool events.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's input, for tool events.
    #[serde(default)]
    pub tool_input: Option<Value>,
    /// Claude Code's id for the tool call.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The tool's result, for `PostToolUse`.
    #[serde(default)]
    pub tool_response: Option<Value>,
    /// Present when the event comes from a subagent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The user prompt this event follows (every event until the next
    /// prompt carries it): binds calls to their prompt's turn.
    #[serde(default)]
    pub prompt_id: Option<String>,
}

use toolgate_wire::protocol::HookRuntime;
pub use toolgate_wire::protocol::OnError;

/// The channel Claude Code's calls come from.
pub const CHANNEL: &str = "claude-code";

/// How much of a transcript's end is searched for a decline: the decline
/// is written when the person answers, so it is near the end when the
/// daemon looks (every second) or at the session's next event.
const DECLINE_SEARCH_BYTES: u64 = 512 * 1024;

/// What answering an event needs: a new turn touches only the store, so a
/// hook process answering it in-process loads no policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing to do (`SessionStart`, unknown events): answer nothing.
    Nothing,
    /// Only the store (`UserPromptSubmit`: the session's next turn).
    Store,
    /// The policies (`PreToolUse`, `PostToolUse`).
    Policies,
}

/// What [`handle`] produced.
#[derive(Debug)]
pub struct Handled {
    /// The text the hook prints on stdout: never empty, since the
    /// installed command line counts no output as a failure.
    pub output: String,
    /// The decision, for a `PreToolUse` that was evaluated.
    pub decision: Option<Decision>,
}

impl HookEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Claude Code")
    }

    /// What answering this event needs.
    pub fn needs(&self) -> Needs {
        match self.hook_event_name.as_str() {
            "PreToolUse" | "PostToolUse" => Needs::Policies,
            "UserPromptSubmit" => Needs::Store,
            _ => Needs::Nothing,
        }
    }

    /// The key of the gate this session's calls may be paused on.
    fn gate_key(&self) -> GateKey {
        GateKey {
            user_id: DEFAULT_USER_ID.into(),
            thread_id: self.session_id.clone(),
        }
    }

    /// The turn this tool event belongs to: its prompt's (see
    /// [`Toolgate::turn_of`]).
    fn turn(&self, host: &Toolgate) -> Result<u64> {
        host.turn_of(&self.session_id, self.prompt_id.as_deref(), false)
    }

    /// The toolgate request for a tool event at `turn`.
    pub fn to_request(&self, turn: u64) -> Result<ToolRequest> {
        let name = required_tool_name(&self.hook_event_name, self.tool_name.as_deref())?;
        let (tool, origin) = match split_mcp(name) {
            Some((server, tool)) => (tool.to_string(), Origin::Mcp(server.to_string())),
            None => (name.to_string(), Origin::Builtin),
        };
        let mut request = ToolRequest::new(tool, self.tool_input.clone().unwrap_or(json!({})));
        request.origin = origin;
        request.call_id = self.tool_use_id.clone();
        request.session_id = self.session_id.clone();
        request.channel = CHANNEL.into();
        request.is_subagent = self.agent_id.as_deref().is_some_and(|a| !a.is_empty());
        request.turn = turn;
        request.mode = mode(self.permission_mode.as_deref());
        request.transcript_path = self.transcript_path.clone();
        request.cwd = self.cwd.as_ref().map(PathBuf::from);
        Ok(request)
    }
}

/// Parse one hook event of `runtime`; what is not one gets an error that
/// says what was expected. Shared by every runtime's adapter.
pub(crate) fn parse_event<T: DeserializeOwned>(text: &str, runtime: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|err| {
        Error::Request(format!(
            "not a {runtime} hook event ({err}); expected a JSON object with session_id and hook_event_name"
        ))
    })
}

/// What a pause's reason adds for a runtime that cannot ask: how a person
/// approves it (from a terminal of their own; the request id is enough,
/// `gates resolve` finds the rest) and that the agent should retry.
pub(crate) fn how_to_approve(decision: &Decision) -> String {
    decision.pause.as_ref().map_or(String::new(), |pause| {
        format!(
            " A person can approve it from a terminal of their own with `toolgate gates resolve \
             --request-id {}`; then retry the same call.",
            pause.request_id
        )
    })
}

/// What every runtime's pause answer begins with: that toolgate asks,
/// which policy, and about what ("toolgate (lease-gate asks): Allow
/// `Write`? …").
pub(crate) fn who_asks(decision: &Decision) -> String {
    let asker = decision.decided_by.as_deref().unwrap_or("a policy");
    let reason = decision.reason.as_deref().unwrap_or_default();
    format!("toolgate ({asker} asks): {reason}.")
}

/// Handle one event of `runtime` with `handle`, which may record the
/// decision it made; an error becomes the runtime's failure answer (`{}`
/// where that is nothing), so a failure is never a silent allow.
pub(crate) fn answer_or_fail(
    runtime: HookRuntime,
    on_error: OnError,
    handle: impl FnOnce(&mut Option<Decision>) -> Result<Value>,
) -> Handled {
    let mut decision = None;
    let output = handle(&mut decision).unwrap_or_else(|err| {
        tracing::error!(error = %err, "hook failed; answering with the fail mode");
        runtime.failure_answer(on_error, &err.to_string())
    });
    Handled {
        output: output.to_string(),
        decision,
    }
}

/// The tool name of a tool event, which must be there and not empty.
pub(crate) fn required_tool_name<'a>(event: &str, name: Option<&'a str>) -> Result<&'a str> {
    name.filter(|n| !n.is_empty())
        .ok_or_else(|| Error::Request(format!("{event} event without tool_name")))
}

/// `mcp__SERVER__TOOL` → (`SERVER`, `TOOL`).
pub fn split_mcp(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// Claude Code's permission mode as an execution mode (see the module docs).
pub fn mode(permission_mode: Option<&str>) -> Mode {
    match permission_mode {
        Some("bypassPermissions" | "dontAsk") => Mode::InteractiveAutoApprove,
        _ => Mode::Interactive,
    }
}

fn pre_tool_use(decision: &str, reason: &str, context: Option<String>) -> Value {
    let mut output = json!({
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    });
    if let Some(context) = context {
        output["additionalContext"] = json!(context);
    }
    json!({ "hookSpecificOutput": output })
}

/// The answer to a `PreToolUse` event: deny → `deny` with the reason; pause
/// → `ask` with the reason, which policy asks and how else a person
/// answers, and the same as a `systemMessage` (Claude Code's own prompt for
/// `Write`/`Edit` shows no hook reason; a system message reaches the
/// person in every mode); allow that a person's earlier answer let through
/// → `allow` (they already answered for this exact call; Claude Code would
/// ask them again); allow with notes → no decision (Claude Code's
/// normal permission flow applies) and the notes as `additionalContext`;
/// allow without notes → nothing (printed as `{}`).
pub fn answer(decision: &Decision) -> Option<Value> {
    let notes = (!decision.notes.is_empty()).then(|| {
        decision
            .notes
            .iter()
            .map(|n| n.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    });
    let reason = decision.reason.clone().unwrap_or_default();
    match decision.verdict {
        Verdict::Deny => Some(pre_tool_use("deny", &reason, notes)),
        Verdict::Pause => {
            let asked = format!("{}{}", who_asks(decision), how_to_approve(decision));
            let mut answer = pre_tool_use("ask", &asked, notes);
            answer["systemMessage"] = json!(asked);
            Some(answer)
        }
        Verdict::Allow if decision.approved_by.is_some() => {
            let by = decision.approved_by.as_deref().filter(|b| !b.is_empty());
            let reason = format!(
                "toolgate: a person approved this exact call (over `{}`)",
                by.unwrap_or("a channel")
            );
            Some(pre_tool_use("allow", &reason, notes))
        }
        Verdict::Allow => notes.map(|context| {
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": context}})
        }),
    }
}

/// Whether the person declined `gate`'s call in Claude Code's own prompt
/// ("No", or Esc). Claude Code runs no hook then (seen in 2.1.332: neither
/// `PostToolUseFailure` nor `PermissionDenied`; the next event is the
/// person's next prompt), but its transcript gets the call's `tool_result`
/// with `toolDenialKind: "user-rejected"`. Under `-p` an "ask" is recorded
/// the same way, with toolgate's own reason as the result: that one names
/// the gate's request id and is no decline (the person may still approve
/// from a terminal).
pub fn declined_in_prompt(gate: &PendingGate) -> bool {
    let Some(path) = gate.transcript_path.as_deref() else {
        return false;
    };
    if gate.call_id.is_empty() {
        return false;
    }
    let tail = match crate::transcript::read_tail(path, DECLINE_SEARCH_BYTES) {
        Ok(tail) => tail,
        Err(err) => {
            tracing::debug!(path = %path.display(), error = %err, "transcript unreadable");
            return false;
        }
    };
    tail.lines()
        .rev()
        .filter(|line| line.contains(&gate.call_id) && line.contains("user-rejected"))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .any(|entry| is_decline_of(&entry, gate))
}

fn is_decline_of(entry: &Value, gate: &PendingGate) -> bool {
    if entry["type"] != "user" || entry["toolDenialKind"] != "user-rejected" {
        return false;
    }
    let Some(content) = entry["message"]["content"].as_array() else {
        return false;
    };
    content.iter().any(|block| {
        block["type"] == "tool_result"
            && block["tool_use_id"] == gate.call_id.as_str()
            && !block["content"].to_string().contains(&gate.request_id)
    })
}

/// A tool's outcome and a short summary, from `tool_response`.
pub fn outcome_of(response: Option<&Value>) -> (Outcome, String) {
    let Some(response) = response else {
        return (Outcome::Succeeded, String::new());
    };
    let failed = response.get("is_error").and_then(Value::as_bool) == Some(true)
        || response.get("error").is_some_and(|e| !e.is_null())
        || response.get("success").and_then(Value::as_bool) == Some(false);
    let summary = match response {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let outcome = if failed {
        Outcome::Failed
    } else {
        Outcome::Succeeded
    };
    (outcome, summary.chars().take(1000).collect())
}

/// Handle one event end to end. Never fails: errors become `on_error`'s
/// answer, and "no decision" is `{}` (the installed command line treats no
/// output as a failure: a hook replaced by `/bin/true` prints nothing).
pub fn handle(host: &Toolgate, input: &str, on_error: OnError) -> Handled {
    answer_or_fail(HookRuntime::ClaudeCode, on_error, |decision| {
        let event = HookEvent::parse(input)?;
        // A call the person declined in the prompt ends its gate now, at
        // the latest (a daemon ends it within a second).
        host.end_declined_gates(Some(&event.gate_key()), declined_in_prompt)?;
        let answer = match event.hook_event_name.as_str() {
            "UserPromptSubmit" => {
                host.turn_of(&event.session_id, event.prompt_id.as_deref(), true)?;
                None
            }
            "PreToolUse" => {
                let request = event.to_request(event.turn(host)?)?;
                let evaluated = host.evaluate(&request)?;
                let output = answer(&evaluated);
                *decision = Some(evaluated);
                output
            }
            "PostToolUse" => {
                let request = event.to_request(event.turn(host)?)?;
                // The call ran, so if toolgate had asked, the person said yes
                // in Claude Code's own prompt: that gate is answered.
                if let Some(gate) = host.close_answered_gate(&request)? {
                    tracing::info!(request_id = %gate.request_id, policy = %gate.policy, "gate answered in Claude Code's prompt");
                }
                let (outcome, summary) = outcome_of(event.tool_response.as_ref());
                host.observe(&request, outcome, &summary);
                None
            }
            _ => None,
        };
        Ok(answer.unwrap_or_else(|| json!({})))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_names_split_into_server_and_tool() {
        assert_eq!(
            split_mcp("mcp__github__create_issue"),
            Some(("github", "create_issue"))
        );
        assert_eq!(split_mcp("mcp__fs__read__file"), Some(("fs", "read__file")));
        assert_eq!(split_mcp("Bash"), None);
        assert_eq!(split_mcp("mcp____x"), None);
    }

    #[test]
    fn permission_modes_map_to_execution_modes() {
        assert_eq!(mode(None), Mode::Interactive);
        assert_eq!(mode(Some("default")), Mode::Interactive);
        assert_eq!(mode(Some("plan")), Mode::Interactive);
        assert_eq!(mode(Some("acceptEdits")), Mode::Interactive);
        assert_eq!(
            mode(Some("bypassPermissions")),
            Mode::InteractiveAutoApprove
        );
    }

    #[test]
    fn a_call_a_person_approved_is_allowed_without_asking_again() {
        let mut decision = Decision::host_deny("toolu_1", String::new());
        decision.verdict = Verdict::Allow;
        decision.reason = None;
        assert_eq!(
            answer(&decision),
            None,
            "no decision: Claude Code's own flow"
        );
        decision.approved_by = Some("terminal".into());
        let answered = answer(&decision).unwrap();
        let output = &answered["hookSpecificOutput"];
        assert_eq!(output["permissionDecision"], "allow");
        assert!(
            output["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("approved this exact call (over `terminal`)"),
            "{answered}"
        );
    }

    fn gate_with(transcript: &std::path::Path) -> PendingGate {
        PendingGate {
            request_id: "feedc0de".into(),
            policy: "lease-gate".into(),
            user_id: DEFAULT_USER_ID.into(),
            thread_id: "s".into(),
            session_id: "s".into(),
            source_channel: CHANNEL.into(),
            tool: "Write".into(),
            call_id: "toolu_1".into(),
            arguments: "{}".into(),
            fingerprint: String::new(),
            pause: crate::gates::PauseKind::Approval {
                description: "Allow `Write`?".into(),
                allow_always: false,
            },
            risk: None,
            transcript_path: Some(transcript.to_path_buf()),
            created_at_ms: 0,
            expires_at_ms: u64::MAX,
        }
    }

    #[test]
    fn a_decline_is_read_from_the_transcript_and_only_a_decline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let gate = gate_with(&path);
        let rejected = |id: &str, content: &str| {
            json!({"type": "user", "toolDenialKind": "user-rejected", "message": {"content": [
                {"type": "tool_result", "tool_use_id": id, "content": content, "is_error": true}
            ]}})
            .to_string()
        };
        let cases = [
            (String::new(), false),
            ("not json user-rejected toolu_1".into(), false),
            (
                rejected("toolu_2", "The user doesn't want to proceed"),
                false,
            ),
            // `-p`: toolgate's own reason, naming the gate.
            (
                rejected("toolu_1", "toolgate (lease-gate asks): … feedc0de"),
                false,
            ),
            (
                rejected("toolu_1", "The user doesn't want to proceed"),
                true,
            ),
        ];
        for (line, declined) in cases {
            std::fs::write(&path, format!("{{\"type\":\"summary\"}}\n{line}\n")).unwrap();
            assert_eq!(declined_in_prompt(&gate), declined, "{line}");
        }
        // No transcript, or one that cannot be read: not declined.
        assert!(!declined_in_prompt(&gate_with(&dir.path().join("missing"))));
    }

    #[test]
    fn outcomes_come_from_the_response() {
        assert_eq!(
            outcome_of(Some(&json!({"is_error": true}))).0,
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(Some(&json!({"success": false}))).0,
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(Some(&json!({"stdout": "ok"}))).0,
            Outcome::Succeeded
        );
        assert_eq!(outcome_of(None).0, Outcome::Succeeded);
    }
}
