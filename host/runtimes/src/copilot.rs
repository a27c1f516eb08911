//! The GitHub Copilot CLI hook adapter (facts measured on 1.0.102).
//!
//! Events: Copilot's own hook format (`~/.copilot/hooks/*.json`, camelCase
//! events) sends no event name, so an event is known by its shape: a
//! `toolName` with a `toolResult` ran (`postToolUse`, observed); a
//! `toolName` alone is proposed (`preToolUse`, decided); a `prompt` is a new
//! turn (`userPromptSubmitted`); anything else (`sessionStart` with its
//! `source`, `sessionEnd`) is answered with `{}`. No event carries a turn
//! or call id.
//!
//! Mapping: `bash` is `Bash` (and `write_bash`, which types into a running
//! shell, is `Bash` with what it types); `create` is `Write`, `edit` is
//! `Edit` and `view` is `Read`, with Claude Code's argument names added
//! beside Copilot's; `apply_patch` (a patch as a string) is `Edit` with the
//! files it names; an MCP tool is `SERVER-TOOL`, split after the longest
//! server name of Copilot's built-in `github-mcp-server` and the user's MCP
//! config (`~/.copilot/mcp-config.json`; not the project's, which the agent
//! writes), else at the first hyphen (Copilot's own tools have none).
//!
//! Answers: a **deny** is `permissionDecision: "deny"` with the reason (the
//! model reads "Denied by preToolUse hook: …"). A **pause** is `"ask"` with
//! who asks and how a person approves: Copilot's own prompt asks the
//! person in its TUI (the call then runs, and its `postToolUse` closes the
//! gate); a run that cannot ask (`-p`) denies it with that reason, and the
//! retry after an approval runs. An approved call is `"allow"`, which also
//! spares the person Copilot's own prompt. Notes become `additionalContext`.
//!
//! A person's decline in Copilot's prompt runs no hook; Copilot records it
//! in the session's event log (`~/.copilot/session-state/SESSION/
//! events.jsonl`: a `tool.execution_complete` with error code `denied`,
//! "Denied by user via preToolUse hook prompt", quoting toolgate's reason,
//! which names the request id). That ends the gate, as Claude Code's
//! transcript does; a `-p` run's automatic "unable to ask" denial does not
//! (a person may still approve from a terminal). Reading the log can end a
//! gate, never approve one.
//!
//! Failing closed: Copilot denies the tool when a `preToolUse` hook exits
//! non-zero (1, 2, 127); it runs the tool when the hook times out, prints
//! what it cannot parse, or the hooks file itself is broken. toolgate's
//! hook always answers JSON, the installed command line turns anything else
//! into exit 2, the timeout is long enough for a daemon that starts and
//! compiles, and the guard refuses calls that touch Copilot's hook files.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Result;
use super::codex::patch_arguments;
use super::{
    Adapter, Event, EventKind, Install, InstallPlan, SettingsFile, how_to_approve, parse_event,
};
use super::{
    ConfigDir, RuntimeInfo, notes_text, object_input, starts_with_any, who_asks, with_our_names,
};
use super::{SystemHooks, SystemLock, allow_managed_hooks_only};
use crate::decision::{Decision, Outcome, Verdict};
use crate::gates::PendingGate;
use crate::request::{Origin, ToolRequest};
use toolgate_wire::InvalidRequest;
use toolgate_wire::protocol::{HookRuntime, OnError};

/// How long Copilot waits for toolgate's hook, seconds (its default is 30;
/// a hook past its timeout lets the tool run, so it must be long enough for
/// a daemon that starts up and compiles).
const HOOK_TIMEOUT_SECS: u64 = 60;

/// Copilot's hook files, for the guard: its user hooks directory and
/// settings (which can hold hooks, or `disableAllHooks`), its config, and a
/// repository's hooks and Copilot settings.
const SETTINGS: &[SettingsFile] = &[
    SettingsFile::new(".copilot", "hooks", "Copilot CLI's hooks (.copilot/hooks/)"),
    SettingsFile::new(
        ".copilot",
        "settings",
        "Copilot CLI's settings, which can hold or disable its hooks (.copilot/settings.json)",
    ),
    SettingsFile::new(
        ".copilot",
        "config",
        "Copilot CLI's config (.copilot/config.json)",
    ),
    SettingsFile::new(
        ".github",
        "hooks",
        "a repository's Copilot hooks (.github/hooks/)",
    ),
    SettingsFile::new(
        ".github/copilot",
        "settings",
        "a repository's Copilot settings, which can disable every hook \
         (.github/copilot/settings.json)",
    ),
    // Extensions run code of their own and rewrite a call's arguments
    // (`modifiedArgs`), beside the hooks.
    SettingsFile::new(
        ".github",
        "extensions",
        "a repository's Copilot extensions (.github/extensions/)",
    ),
    SettingsFile::new(
        ".copilot",
        "extensions",
        "Copilot CLI's extensions (.copilot/extensions/)",
    ),
    SettingsFile::new(
        ".copilot",
        "pkg",
        "Copilot CLI's unpacked code, which it runs (.copilot/pkg/)",
    ),
    SettingsFile::new(
        ".cache/copilot",
        "pkg",
        "Copilot CLI's unpacked code, which it runs (~/.cache/copilot/pkg/)",
    ),
];

/// The user-level files among [`SETTINGS`], under the home.
const UNDER_HOME: &[&str] = &[
    ".copilot/hooks",
    ".copilot/settings.json",
    ".copilot/config.json",
    ".copilot/mcp-config.json",
    ".copilot/installed-plugins",
    ".copilot/extensions",
    ".copilot/pkg",
    ".cache/copilot",
];

/// The MCP server Copilot CLI has built in (in no config).
const BUILTIN_MCP_SERVERS: &[&str] = &["github-mcp-server"];

/// One hook event, any kind (see the module docs); unknown fields are
/// ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopilotEvent {
    /// The Copilot session.
    pub session_id: String,
    /// The working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The prompt, on `userPromptSubmitted`.
    #[serde(default)]
    pub prompt: Option<String>,
    /// `bash`, `apply_patch`, `view`, `SERVER-TOOL`, ...
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's arguments: an object, or a string (a JSON object, or a
    /// freeform tool's input such as `apply_patch`'s patch).
    #[serde(default, deserialize_with = "super::present")]
    pub tool_args: Option<Value>,
    /// The result, on `postToolUse`.
    #[serde(default)]
    pub tool_result: Option<Value>,
}

/// A Copilot CLI tool (`name`, its `args`) as toolgate names it: the
/// built-in tools as Claude Code's (`bash` is `Bash`, `create` is `Write`,
/// with their fields renamed), `SERVER-TOOL` an MCP server's.
fn in_our_names(name: &str, args: Value) -> (String, Origin, Value) {
    let field = |key: &str| args.get(key).cloned().unwrap_or(Value::Null);
    match name {
        "bash" => ("Bash".into(), Origin::Builtin, args),
        "write_bash" => {
            let typed = field("input");
            (
                "Bash".into(),
                Origin::Builtin,
                with_our_names(args, [("command", typed)]),
            )
        }
        "create" => {
            let fields = [
                ("file_path", field("path")),
                ("content", field("file_text")),
            ];
            (
                "Write".into(),
                Origin::Builtin,
                with_our_names(args, fields),
            )
        }
        "edit" => {
            let fields = [
                ("file_path", field("path")),
                ("old_string", field("old_str")),
                ("new_string", field("new_str")),
            ];
            ("Edit".into(), Origin::Builtin, with_our_names(args, fields))
        }
        "view" => {
            let path = field("path");
            (
                "Read".into(),
                Origin::Builtin,
                with_our_names(args, [("file_path", path)]),
            )
        }
        "apply_patch" => {
            let patch = match &args {
                Value::String(patch) => patch.clone(),
                other => other["input"]
                    .as_str()
                    .or(other["patch"].as_str())
                    .unwrap_or_default()
                    .to_string(),
            };
            ("Edit".into(), Origin::Builtin, patch_arguments(&patch))
        }
        name if name.contains('-') => {
            let (server, tool) = split_mcp(name, &mcp_servers());
            (tool.to_string(), Origin::Mcp(server.to_string()), args)
        }
        name => (name.to_string(), Origin::Builtin, args),
    }
}

impl CopilotEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Copilot CLI")
    }

    /// The toolgate request for a tool event.
    pub fn to_request(&self) -> Result<ToolRequest> {
        let name = self
            .tool_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| InvalidRequest("Copilot CLI tool event without toolName".into()))?;
        // Copilot sends the arguments as a JSON string; `apply_patch`'s
        // may be the patch itself.
        let args = match &self.tool_args {
            Some(Value::String(patch))
                if name == "apply_patch" && !patch.trim_start().starts_with('{') =>
            {
                Value::String(patch.clone())
            }
            args => Value::Object(object_input(
                "Copilot CLI tool",
                "toolArgs",
                args.as_ref(),
                true,
            )?),
        };
        let patch_text = |args: &Value| match args {
            Value::String(_) => true,
            other => other["input"].is_string() || other["patch"].is_string(),
        };
        if name == "apply_patch" && !patch_text(&args) {
            return Err(InvalidRequest(
                "malformed Copilot CLI tool event: apply_patch's `toolArgs` must hold the patch \
                 text; the call is refused"
                    .into(),
            ));
        }
        let (tool, origin, arguments) = in_our_names(name, args);
        let mut request = ToolRequest::new(tool, arguments);
        request.origin = origin;
        request.session_id = self.session_id.clone();
        request.channel = HookRuntime::Copilot.name().into();
        request.cwd = self.cwd.clone();
        request.transcript_path = copilot_home().map(|home| {
            home.join("session-state")
                .join(&self.session_id)
                .join("events.jsonl")
        });
        Ok(request)
    }

    /// How a call that ran went: Copilot's `resultType` is `success` or
    /// something else (`failure`, `denied`, ...), and its text is what the
    /// model read.
    fn outcome(&self) -> (Outcome, String) {
        let result = self.tool_result.as_ref();
        let kind = result.and_then(|r| r["resultType"].as_str());
        let outcome = match kind {
            Some("success") | None => Outcome::Succeeded,
            Some(_) => Outcome::Failed,
        };
        let text = result
            .and_then(|r| r["textResultForLlm"].as_str())
            .unwrap_or_default();
        (outcome, text.chars().take(1000).collect())
    }
}

/// `SERVER-TOOL` split after the longest of `servers` it starts with, else
/// at its first hyphen.
fn split_mcp<'a>(name: &'a str, servers: &[String]) -> (&'a str, &'a str) {
    let configured = servers
        .iter()
        .filter(|server| {
            name.len() > server.len() + 1
                && name.starts_with(server.as_str())
                && name.as_bytes()[server.len()] == b'-'
        })
        .max_by_key(|server| server.len());
    match configured {
        Some(server) => (&name[..server.len()], &name[server.len() + 1..]),
        None => name.split_once('-').unwrap_or((name, "")),
    }
}

/// How large an MCP config toolgate reads.
const MAX_MCP_CONFIG: u64 = 1 << 20;

/// Copilot's own directory for this process's user: `$COPILOT_HOME`, else
/// `~/.copilot`.
fn copilot_home() -> Option<PathBuf> {
    std::env::var_os("COPILOT_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::home_dir().map(|home| home.join(".copilot")))
}

/// The MCP server names toolgate trusts for the split: Copilot's built-in
/// one and those in the user's config (in [`copilot_home`], protected by
/// the guard), read only as a regular file without blocking. Not a
/// project's `.mcp.json`: the agent writes the project, and could name a
/// server `fs-delete` to make `fs-delete-file` a tool `file`.
fn mcp_servers() -> Vec<String> {
    let configured = copilot_home()
        .map(|home| home.join("mcp-config.json"))
        .and_then(|file| crate::transcript::read_small(&file, MAX_MCP_CONFIG).ok())
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|config| {
            config["mcpServers"]
                .as_object()
                .map(|servers| servers.keys().cloned().collect::<Vec<_>>())
        })
        .unwrap_or_default();
    BUILTIN_MCP_SERVERS
        .iter()
        .map(|name| name.to_string())
        .chain(configured)
        .collect()
}

/// Copilot CLI's hooks.
pub struct Copilot;

/// What toolgate knows of Copilot CLI.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::Copilot,
    deciding_event: "preToolUse",
    config_dir: ConfigDir {
        variable: Some("COPILOT_HOME"),
        then: "",
        under_home: ".copilot",
    },
    user_hooks: "hooks/toolgate.json",
    guarded: UNDER_HOME,
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &["copilot"],
    switches_off,
    hook_timeout_secs: Some(HOOK_TIMEOUT_SECS),
    http_hooks: false,
    failure_answer,
    install: Install::hooks(settings),
    hook_help: "Answer one GitHub Copilot CLI hook event read from stdin.\n\n\
         Known by its shape (Copilot names no event): decides preToolUse (`{\"permissionDecision\": \
         \"deny\"|\"ask\"|\"allow\", …}`; for a pause `ask`, which Copilot's TUI asks the person and a \
         `-p` run denies with how a person approves; notes as additionalContext; `{}` to allow), \
         records postToolUse, userPromptSubmitted starts the next turn, sessionStart only starts \
         the daemon. Through the store's daemon like `claude-code`; always exits 0.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    // Copilot asks in its own prompt (a run that cannot ask denies).
    let decision = match on_error {
        OnError::Allow => return json!({}),
        OnError::Ask => "ask",
        OnError::Deny => "deny",
    };
    json!({
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    })
}

/// A policy hook (`/etc/github-copilot/policy.d/`, root's, which no
/// setting, flag or variable disables), and the managed settings'
/// `allowManagedHooksOnly`: a user's, a repository's and a plugin's
/// hooks are ignored.
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: "/etc/github-copilot/policy.d/toolgate.json",
    lock: Some(SystemLock {
        file: "/etc/github-copilot/managed-settings.json",
        edit: allow_managed_hooks_only,
        does: "allowManagedHooksOnly: user, repository and plugin hooks are ignored",
        drop_ins: None,
    }),
};

/// Copilot started with its config elsewhere (`COPILOT_HOME`,
/// `--config-dir`, `HOME`, `XDG_CONFIG_HOME`) reads none of toolgate's
/// hooks: an agent could run its own Copilot that toolgate never sees.
fn switches_off(words: &[&str]) -> Option<&'static str> {
    // Its native runtime reads managed settings from a test path when
    // `COPILOT_TEST_MANAGED_SETTINGS_FILE_PATH` names one.
    let moved = [
        "COPILOT_HOME",
        "--config-dir",
        "HOME",
        "XDG_CONFIG_HOME",
        "COPILOT_TEST_MANAGED_SETTINGS_FILE_PATH",
        "--plugin-dir",
    ];
    // Its launcher runs whatever code it finds in these (unsigned).
    let other_code = [
        "COPILOT_CLI_DIST_DIR",
        "COPILOT_PKG_CACHE_HOME",
        "COPILOT_CACHE_HOME",
        "XDG_CACHE_HOME",
        "--prefer-version",
    ];
    if starts_with_any(words, "copilot", &other_code) {
        return Some("start Copilot CLI from code of another place or version");
    }
    // Extensions (their own code, beside the hooks, in either mode: no
    // managed setting kept one out in 1.0.102) load only in
    // experimental mode, and under `-p` only when asked to.
    let extensions = ["--experimental", "GITHUB_COPILOT_PROMPT_MODE_EXTENSIONS"];
    if starts_with_any(words, "copilot", &extensions) {
        return Some("start Copilot CLI loading extensions, whose code runs beside the hooks");
    }
    starts_with_any(words, "copilot", &moved)
        .then_some("start Copilot CLI with its config moved, toolgate's hooks not in it")
}

impl Adapter for Copilot {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = CopilotEvent::parse(input)?;
        let kind = match (&event.tool_name, &event.tool_result, &event.prompt) {
            (Some(_), Some(_), _) => EventKind::ran(event.to_request()?, event.outcome()),
            (Some(_), None, _) => EventKind::Decide {
                request: event.to_request()?,
                can_ask: true,
            },
            (None, _, Some(_)) => EventKind::NewTurn,
            (None, _, None) => EventKind::Nothing,
        };
        Ok(Event {
            session: event.session_id,
            prompt: None,
            kind,
        })
    }

    fn answer(&self, decision: &Decision, _can_ask: bool) -> Value {
        answer(decision)
    }

    fn decline_detector(&self) -> Option<fn(&PendingGate) -> bool> {
        Some(declined_in_prompt)
    }
}

/// A hooks file of Copilot's own format (`version` 1): commands run by
/// bash, with a timeout.
fn settings(plan: &InstallPlan<'_>) -> Value {
    let hook = json!([{"type": "command", "bash": plan.command, "timeoutSec": HOOK_TIMEOUT_SECS}]);
    json!({"version": 1, "hooks": {
        "sessionStart": hook,
        "userPromptSubmitted": hook,
        "preToolUse": hook,
        "postToolUse": hook,
    }})
}

/// How much of the end of a session's event log is searched for a decline.
const DECLINE_SEARCH_BYTES: u64 = 256 * 1024;

/// What Copilot records when the person declines a hook's "ask".
const DECLINED_BY_THE_PERSON: &str = "Denied by user via preToolUse hook prompt";

/// Whether the person declined `gate`'s call in Copilot's prompt (see the
/// module docs): a denied tool execution whose message quotes this gate's
/// request id.
pub fn declined_in_prompt(gate: &PendingGate) -> bool {
    let Some(path) = gate.transcript_path.as_deref() else {
        return false;
    };
    let owner = crate::request::owner_of_user(&gate.user_id);
    let Ok(tail) = crate::transcript::read_tail(path, DECLINE_SEARCH_BYTES, owner) else {
        return false;
    };
    let quoted = format!("--request-id {}`", gate.request_id);
    tail.lines()
        .rev()
        .filter(|line| line.contains(DECLINED_BY_THE_PERSON) && line.contains(&quoted))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .any(|entry| {
            let error = &entry["data"]["error"];
            entry["type"] == "tool.execution_complete"
                && error["code"] == "denied"
                && error["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(DECLINED_BY_THE_PERSON) && m.contains(&quoted))
        })
}

/// The answer to a `preToolUse` event (see the module docs).
pub fn answer(decision: &Decision) -> Value {
    let mut answer = match decision.verdict {
        Verdict::Deny => json!({
            "permissionDecision": "deny",
            "permissionDecisionReason": decision.reason.clone().unwrap_or_default(),
        }),
        Verdict::Pause => json!({
            "permissionDecision": "ask",
            "permissionDecisionReason": format!("{}{}", who_asks(decision), how_to_approve(decision)),
        }),
        Verdict::Allow if decision.approved_by.is_some() => json!({
            "permissionDecision": "allow",
            "permissionDecisionReason": "toolgate: a person approved this exact call",
        }),
        Verdict::Allow => json!({}),
    };
    if let Some(notes) = notes_text(decision) {
        answer["additionalContext"] = json!(notes);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_tool_splits_after_the_longest_configured_server() {
        let servers = ["my".to_string(), "my-server".to_string()];
        assert_eq!(split_mcp("my-server-echo", &servers), ("my-server", "echo"));
        assert_eq!(
            split_mcp("everything-get-env", &[]),
            ("everything", "get-env")
        );
        assert_eq!(split_mcp("my-x", &servers), ("my", "x"));
    }

    #[test]
    fn events_are_known_by_their_shape() {
        let parse = |text: &str| Copilot.parse(text).unwrap().kind;
        let pre = r#"{"sessionId":"s","cwd":"/p","toolName":"bash","toolArgs":{"command":"ls"}}"#;
        assert!(matches!(parse(pre), EventKind::Decide { request, .. } if request.tool == "Bash"));
        let post = r#"{"sessionId":"s","toolName":"bash","toolArgs":{"command":"ls"},
            "toolResult":{"resultType":"failure","textResultForLlm":"no"}}"#;
        assert!(matches!(
            parse(post),
            EventKind::Ran {
                outcome: Outcome::Failed,
                ..
            }
        ));
        assert!(matches!(
            parse(r#"{"sessionId":"s","prompt":"hi"}"#),
            EventKind::NewTurn
        ));
        let start = r#"{"sessionId":"s","source":"new","initialPrompt":"hi"}"#;
        assert!(matches!(parse(start), EventKind::Nothing));
        assert!(Copilot.parse(r#"{"toolName":"bash"}"#).is_err());
    }

    #[test]
    fn arguments_as_a_json_string_and_a_patch_are_read() {
        let request = |name: &str, args: Value| {
            CopilotEvent {
                session_id: "s".into(),
                cwd: None,
                prompt: None,
                tool_name: Some(name.into()),
                tool_args: Some(args),
                tool_result: None,
            }
            .to_request()
            .unwrap()
        };
        let create = request("create", json!(r#"{"path":"/p/a.txt","file_text":"x"}"#));
        assert_eq!(create.tool, "Write");
        assert_eq!(create.arguments["file_path"], "/p/a.txt");
        assert_eq!(create.arguments["path"], "/p/a.txt");
        let patch = request(
            "apply_patch",
            json!("*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** End Patch"),
        );
        assert_eq!(patch.tool, "Edit");
        assert_eq!(patch.arguments["file_path"], "src/a.rs");
        // The model's own `command` or `file_path` beside the real field is
        // a decoy: what toolgate judges is what the tool will use.
        let decoy = request(
            "create",
            json!({"path": "/h/.bashrc", "file_text": "x", "file_path": "/p/ok"}),
        );
        assert_eq!(decoy.arguments["file_path"], "/h/.bashrc");
        let typed = request(
            "write_bash",
            json!({"shellId": "1", "input": "rm -rf x\n", "command": "ls"}),
        );
        assert_eq!(
            (typed.tool.as_str(), typed.arguments["command"].as_str()),
            ("Bash", Some("rm -rf x\n"))
        );
    }

    #[test]
    fn a_projects_mcp_config_does_not_steer_the_split() {
        let project = tempfile::tempdir().unwrap();
        let config = json!({"mcpServers": {"fs-delete": {"command": "x"}}});
        std::fs::write(project.path().join(".mcp.json"), config.to_string()).unwrap();
        let request = CopilotEvent {
            session_id: "s".into(),
            cwd: Some(project.path().to_path_buf()),
            prompt: None,
            tool_name: Some("fs-delete-file".into()),
            tool_args: Some(json!({})),
            tool_result: None,
        }
        .to_request()
        .unwrap();
        assert_eq!(
            (request.tool.as_str(), &request.origin),
            ("delete-file", &Origin::Mcp("fs".into()))
        );
        assert_eq!(
            split_mcp("github-mcp-server-get_me", &mcp_servers()),
            ("github-mcp-server", "get_me")
        );
    }
}
