//! The Cursor hook adapter: one agent-hook event in (JSON on stdin), one
//! answer out (JSON on stdout), as Cursor's hooks (`hooks.json`, version 1)
//! exchange them.
//!
//! Events:
//! - `beforeShellExecution` (`command`, `cwd`) is decided as `Bash`;
//!   `beforeMCPExecution` (`tool_name`, `tool_input`, and the server's
//!   `url` or `command`) as the tool from its MCP server; `beforeReadFile`
//!   (`file_path`) as `Read`; `preToolUse` (`tool_name`, `tool_input`) as
//!   the mapped tool (see [`tool_for`]);
//! - `afterShellExecution`, `afterMCPExecution`, `afterFileEdit` (as
//!   `Edit`) and `postToolUse` record the outcome (and close a pause the
//!   person answered in Cursor's own prompt);
//! - `beforeSubmitPrompt` starts the conversation's next turn and answers
//!   `{"continue": true}`; anything else (`sessionStart`, `stop`, …) `{}`.
//!
//! Answers to the deciding events: **deny** → `permission: "deny"` with
//! the reason as `user_message` and `agent_message`; **pause** →
//! `permission: "ask"` (Cursor asks the person), except for
//! `beforeReadFile`, which cannot ask: a deny saying how to approve;
//! **allow** → no `permission` (Cursor's own approval rules still apply),
//! with the policies' notes as `agent_message`.
//!
//! The conversation (`conversation_id`) is the session and thread; a call's
//! id is Cursor's `tool_use_id` where present, else derived from the
//! generation and the call, so that a before-event and its after-event
//! name the same call.

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::Result;
use super::{
    Adapter, Event, EventKind, Install, InstallPlan, SettingsFile, how_to_approve, outcome_of,
    parse_event,
};
use super::{ConfigDir, RuntimeInfo, SystemHooks, object_input, required_tool_name, who_asks};
use crate::decision::{Decision, Outcome, Verdict};
use crate::request::{Origin, ToolRequest};
use toolgate_wire::InvalidRequest;
use toolgate_wire::protocol::{HookRuntime, OnError};

/// Cursor's agent hooks.
pub struct Cursor;

/// The events toolgate's hooks handle.
const EVENTS: [&str; 7] = [
    "beforeSubmitPrompt",
    "beforeShellExecution",
    "beforeMCPExecution",
    "beforeReadFile",
    "afterShellExecution",
    "afterMCPExecution",
    "afterFileEdit",
];

/// What toolgate knows of Cursor.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::Cursor,
    deciding_event: "beforeShellExecution",
    config_dir: ConfigDir {
        variable: None,
        then: "",
        under_home: ".cursor",
    },
    user_hooks: "hooks.json",
    guarded: &[".cursor/hooks.json"],
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &[],
    switches_off: super::no_switch_off,
    hook_timeout_secs: None,
    http_hooks: false,
    failure_answer,
    install: Install::hooks(settings),
    hook_help: "Answer one Cursor agent-hook event read from stdin.\n\n\
         Decides beforeShellExecution, beforeMCPExecution, beforeReadFile and preToolUse \
         (`{\"permission\": \"deny\"|\"ask\", …}`; `{}` to allow, with notes as agent_message); records \
         afterShellExecution, afterMCPExecution, afterFileEdit and postToolUse; \
         beforeSubmitPrompt starts the next turn. Through the store's daemon like `claude-code`; \
         always exits 0.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    let permission = match on_error {
        OnError::Allow => return json!({}),
        OnError::Ask => "ask",
        OnError::Deny => "deny",
    };
    json!({
        "permission": permission,
        "user_message": reason,
        "agent_message": reason,
    })
}

/// Enterprise hooks, which run beside the user's and the project's.
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: "/etc/cursor/hooks.json",
    lock: None,
};

/// Its hooks, as a tool's text names them.
const SETTINGS: &[SettingsFile] = &[SettingsFile::new(
    ".cursor",
    "hooks",
    "Cursor's hooks (.cursor/hooks.json)",
)];

impl Adapter for Cursor {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = CursorEvent::parse(input)?;
        let kind = match event.hook_event_name.as_str() {
            "beforeSubmitPrompt" => EventKind::NewTurn,
            name @ ("beforeShellExecution"
            | "beforeMCPExecution"
            | "beforeReadFile"
            | "preToolUse") => EventKind::Decide {
                request: event.to_request(0)?,
                can_ask: name != "beforeReadFile",
            },
            "afterShellExecution" | "afterMCPExecution" | "afterFileEdit" | "postToolUse" => {
                EventKind::ran(event.to_request(0)?, event.outcome())
            }
            _ => EventKind::Nothing,
        };
        Ok(Event {
            session: event.conversation_id,
            prompt: None,
            kind,
        })
    }

    fn answer(&self, decision: &Decision, can_ask: bool) -> Value {
        answer(decision, can_ask)
    }

    fn new_turn_answer(&self) -> Value {
        json!({"continue": true})
    }
}

/// No matchers; `failClosed` blocks the action if the hook itself
/// cannot run.
fn settings(plan: &InstallPlan<'_>) -> Value {
    let hook = json!([{"command": plan.command, "failClosed": true}]);
    let hooks: serde_json::Map<String, Value> = EVENTS
        .iter()
        .map(|event| (event.to_string(), hook.clone()))
        .collect();
    json!({"version": 1, "hooks": hooks})
}

/// One agent-hook event; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct CursorEvent {
    /// The conversation: toolgate's session and thread.
    pub conversation_id: String,
    /// `beforeShellExecution`, `beforeMCPExecution`, `preToolUse`, …
    pub hook_event_name: String,
    /// The agent's current generation (one model response, which may make
    /// several calls).
    #[serde(default)]
    pub generation_id: Option<String>,
    /// The tool call's id, where Cursor gives one (`preToolUse`,
    /// `postToolUse`).
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The conversation's transcript, when Cursor gives one.
    #[serde(default)]
    pub transcript_path: Option<std::path::PathBuf>,
    /// The shell command (shell events), or the MCP server's command (MCP
    /// events).
    #[serde(default)]
    pub command: Option<String>,
    /// The shell command's directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// A shell command's output (`afterShellExecution`).
    #[serde(default)]
    pub output: Option<String>,
    /// The tool (MCP and generic tool events).
    #[serde(default)]
    pub tool_name: Option<String>,
    /// Its arguments: an object, or an object as a JSON string.
    #[serde(default, deserialize_with = "super::present")]
    pub tool_input: Option<Value>,
    /// An MCP tool's result (`afterMCPExecution`).
    #[serde(default)]
    pub result_json: Option<Value>,
    /// A tool's result (`postToolUse`).
    #[serde(default)]
    pub tool_output: Option<Value>,
    /// The MCP server's name, when Cursor gives it.
    #[serde(default)]
    pub server: Option<String>,
    /// The MCP server's URL (remote servers).
    #[serde(default)]
    pub url: Option<String>,
    /// The file (`beforeReadFile`, `afterFileEdit`).
    #[serde(default)]
    pub file_path: Option<String>,
    /// The edits made (`afterFileEdit`).
    #[serde(default)]
    pub edits: Option<Value>,
}

/// Cursor's agent tools, as the bundled policies know them.
const TOOLS: &[(&str, &str)] = &[
    ("Shell", "Bash"),
    ("Terminal", "Bash"),
    ("Read", "Read"),
    ("Write", "Write"),
    ("Edit", "Edit"),
    ("StrReplace", "Edit"),
    ("MultiEdit", "Edit"),
    ("Delete", "Delete"),
    ("Grep", "Grep"),
    ("Glob", "Glob"),
    ("LS", "LS"),
    ("WebFetch", "WebFetch"),
    ("WebSearch", "WebSearch"),
];

/// The tool and origin toolgate decides on for a Cursor tool name:
/// `MCP:SERVER:TOOL` → `TOOL` from MCP server `SERVER`; a built-in name →
/// the policies' name for it; anything else → itself.
pub fn tool_for(name: &str) -> (String, Origin) {
    if let Some((server, tool)) = name
        .strip_prefix("MCP:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
    {
        return (tool.to_string(), Origin::Mcp(server.to_string()));
    }
    let mapped = TOOLS.iter().find(|(cursor, _)| *cursor == name);
    (
        mapped.map_or(name, |(_, ours)| ours).to_string(),
        Origin::Builtin,
    )
}

/// An MCP tool's origin from what `beforeMCPExecution` says of its server:
/// its `server` name, else its URL's host (and port), else the last word of
/// its command (`npx -y @scope/server-github` → `server-github`).
fn mcp_origin(event: &CursorEvent) -> Origin {
    let named = event.server.clone().filter(|s| !s.is_empty());
    let from_url = || {
        let url = event.url.as_deref()?;
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let host = rest.split(['/', '?', '#']).next()?;
        (!host.is_empty()).then(|| host.to_string())
    };
    let from_command = || {
        let last = event.command.as_deref()?.split_whitespace().last()?;
        Some(last.rsplit('/').next().unwrap_or(last).to_string())
    };
    let name = named.or_else(from_url).or_else(from_command);
    Origin::mcp_named(name.as_deref().unwrap_or("mcp"))
}

impl CursorEvent {
    /// The MCP tool's arguments: an object, or a string holding one.
    fn tool_input(&self, event: &str) -> Result<Value> {
        let input = object_input(event, "tool_input", self.tool_input.as_ref(), true)?;
        Ok(Value::Object(input))
    }

    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Cursor")
    }

    fn required<'a>(&self, field: &str, value: Option<&'a str>) -> Result<&'a str> {
        value.filter(|v| !v.is_empty()).ok_or_else(|| {
            InvalidRequest(format!("{} event without {field}", self.hook_event_name))
        })
    }

    /// The toolgate request for a tool event at `turn`.
    pub fn to_request(&self, turn: u64) -> Result<ToolRequest> {
        let event = self.hook_event_name.as_str();
        let (tool, origin, arguments) = match event {
            "beforeShellExecution" | "afterShellExecution" => {
                let command = self.required("command", self.command.as_deref())?;
                let mut arguments = json!({"command": command});
                if let Some(cwd) = &self.cwd {
                    arguments["cwd"] = json!(cwd);
                }
                ("Bash".to_string(), Origin::Builtin, arguments)
            }
            "beforeMCPExecution" | "afterMCPExecution" => {
                let name = required_tool_name(event, self.tool_name.as_deref())?;
                let (tool, origin) = match tool_for(name) {
                    (tool, Origin::Mcp(server)) => (tool, Origin::Mcp(server)),
                    _ => (name.to_string(), mcp_origin(self)),
                };
                (tool, origin, self.tool_input(event)?)
            }
            "beforeReadFile" => {
                let path = self.required("file_path", self.file_path.as_deref())?;
                (
                    "Read".to_string(),
                    Origin::Builtin,
                    json!({"file_path": path}),
                )
            }
            "afterFileEdit" => {
                let path = self.required("file_path", self.file_path.as_deref())?;
                let edits = self.edits.clone().unwrap_or(json!([]));
                let arguments = json!({"file_path": path, "edits": edits});
                ("Edit".to_string(), Origin::Builtin, arguments)
            }
            _ => {
                let name = required_tool_name(event, self.tool_name.as_deref())?;
                let (tool, origin) = tool_for(name);
                (tool, origin, self.tool_input(event)?)
            }
        };
        let mut request = ToolRequest::new(tool, arguments);
        request.origin = origin;
        request.call_id = self.call_id(&request);
        request.session_id = self.conversation_id.clone();
        request.channel = "cursor".into();
        request.turn = turn;
        request.transcript_path = self.transcript_path.clone();
        request.cwd = self.cwd.as_ref().map(std::path::PathBuf::from);
        Ok(request)
    }

    /// The call's id: Cursor's, else one derived from the generation and
    /// the call itself, so that a before-event and its after-event agree
    /// (and a pause answered in Cursor's prompt is closed when it runs).
    fn call_id(&self, request: &ToolRequest) -> Option<String> {
        if let Some(id) = self.tool_use_id.clone().filter(|id| !id.is_empty()) {
            return Some(id);
        }
        let generation = self.generation_id.as_deref().filter(|g| !g.is_empty())?;
        let call = json!([request.tool, request.origin, request.arguments]);
        let digest = Sha256::digest(call.to_string().as_bytes());
        Some(format!("{generation}:{}", hex::encode(&digest[..8])))
    }

    /// The result of an after-event, as an outcome and a short summary.
    fn outcome(&self) -> (Outcome, String) {
        let result = self
            .tool_output
            .as_ref()
            .or(self.result_json.as_ref())
            .cloned()
            .or_else(|| self.output.clone().map(Value::String));
        outcome_of(result.as_ref())
    }
}

/// The answer to a deciding event (see the module docs).
pub fn answer(decision: &Decision, can_ask: bool) -> Value {
    let notes: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
    let reason = decision.reason.clone().unwrap_or_default();
    let refuse = |permission: &str, message: String| json!({"permission": permission, "user_message": message, "agent_message": message});
    match decision.verdict {
        Verdict::Deny => refuse("deny", format!("toolgate denied this: {reason}")),
        Verdict::Pause if can_ask => refuse("ask", who_asks(decision)),
        Verdict::Pause => refuse(
            "deny",
            format!("{}{}", who_asks(decision), how_to_approve(decision)),
        ),
        Verdict::Allow if notes.is_empty() => json!({}),
        Verdict::Allow => json!({"agent_message": notes.join("\n\n")}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mcp_event(fields: Value) -> CursorEvent {
        let mut event = json!({
            "conversation_id": "c1",
            "hook_event_name": "beforeMCPExecution",
            "tool_name": "create_issue",
        });
        event
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(event).unwrap()
    }

    #[test]
    fn tool_names_map_onto_the_policies_vocabulary() {
        assert_eq!(tool_for("Shell"), ("Bash".into(), Origin::Builtin));
        assert_eq!(tool_for("StrReplace"), ("Edit".into(), Origin::Builtin));
        assert_eq!(tool_for("Todo"), ("Todo".into(), Origin::Builtin));
        assert_eq!(
            tool_for("MCP:github:create_issue"),
            ("create_issue".into(), Origin::Mcp("github".into()))
        );
        assert_eq!(tool_for("MCP::x"), ("MCP::x".into(), Origin::Builtin));
    }

    #[test]
    fn an_mcp_server_is_named_from_what_cursor_says_of_it() {
        let server = |fields| match mcp_origin(&mcp_event(fields)) {
            Origin::Mcp(server) => server,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            server(json!({"server": "github", "command": "npx x"})),
            "github"
        );
        let remote = json!({"url": "https://mcp.example.com:8443/mcp"});
        assert_eq!(server(remote), "mcp-example-com-8443");
        let local = json!({"command": "npx -y @modelcontextprotocol/server-github"});
        assert_eq!(server(local), "server-github");
        assert_eq!(server(json!({})), "mcp");
    }

    #[test]
    fn tool_input_may_be_an_object_or_json_in_a_string_and_nothing_else() {
        let input = |value: Option<Value>| {
            super::object_input("beforeMCPExecution", "tool_input", value.as_ref(), true)
                .map(Value::Object)
        };
        assert_eq!(input(Some(json!({"a": 1}))).unwrap(), json!({"a": 1}));
        assert_eq!(input(Some(json!("{\"a\": 1}"))).unwrap(), json!({"a": 1}));
        assert_eq!(input(None).unwrap(), json!({}));
        for malformed in [json!("not json"), json!("[1]"), json!(null), json!(3)] {
            let err = input(Some(malformed.clone())).unwrap_err().to_string();
            assert!(
                err.contains("`tool_input` must be a JSON object"),
                "{malformed}: {err}"
            );
        }
    }
}
