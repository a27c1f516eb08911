//! The Gemini CLI hook adapter: one hook event in (its JSON on stdin), one
//! answer out (JSON on stdout).
//!
//! Events: `BeforeTool` is decided; `AfterTool` is observed; `BeforeAgent`
//! (a prompt, before planning) starts the session's next turn;
//! `SessionStart` only makes sure the daemon runs; every other event is
//! answered with `{}`.
//!
//! Gemini CLI has no "ask" answer for a hook, so a **pause** becomes a deny
//! whose reason tells the person how to approve (`toolgate gates resolve`
//! from a terminal of their own) and the agent to retry; an approved retry
//! then runs. **Notes** on an allowed call become `systemMessage` (shown to
//! the person; Gemini CLI has no agent-facing context on `BeforeTool`).
//!
//! Tool names are mapped onto the vocabulary the bundled policies'
//! catalogues and risk classes use (see [`tool_for`]); an MCP tool keeps its
//! server as origin (from `mcp_context`, else `mcp_<server>_<tool>`).

use serde::Deserialize;
use serde_json::{Value, json};

use super::Result;
use super::{
    Adapter, Event, EventKind, Install, InstallPlan, SettingsFile, how_to_approve, outcome_of,
    parse_event,
};
use super::{
    ConfigDir, RuntimeInfo, SystemHooks, SystemLock, edit_json_object, required_tool_name,
    settings_at, starts_with_any, tool_input, who_asks,
};
use crate::decision::{Decision, Verdict};
use crate::request::{Origin, ToolRequest};
use toolgate_wire::protocol::{HookRuntime, OnError};

/// Gemini CLI's hooks.
pub struct GeminiCli;

/// What toolgate knows of Gemini CLI.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::GeminiCli,
    deciding_event: "BeforeTool",
    config_dir: ConfigDir {
        variable: Some("GEMINI_CLI_HOME"),
        then: ".gemini",
        under_home: ".gemini",
    },
    user_hooks: "settings.json",
    guarded: &[".gemini/settings.json", ".gemini/extensions"],
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &["gemini"],
    switches_off,
    hook_timeout_secs: None,
    http_hooks: false,
    failure_answer,
    install: Install {
        switched_off_by_user,
        ..Install::hooks(settings)
    },
    hook_help: "Answer one Gemini CLI hook event read from stdin.\n\n\
         Handles BeforeTool (`{\"decision\": \"deny\", \"reason\": …}` for a deny, and for a pause, \
         which Gemini CLI cannot ask: the reason says how a person approves it; notes as \
         systemMessage; `{}` to allow), AfterTool (records the outcome), BeforeAgent (starts the \
         next turn) and SessionStart (only starts the daemon). Through the store's daemon like \
         `claude-code`; always exits 0.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    match on_error {
        OnError::Allow => json!({}),
        // Gemini CLI cannot ask in a hook: a failure denies.
        OnError::Ask | OnError::Deny => json!({"decision": "deny", "reason": reason}),
    }
}

/// System settings: they override the user's, and their hooks merge
/// with the user's. Their `hooksConfig.enabled` has the last word over
/// a user's or project's (a single value), and `admin.extensions`
/// keeps every extension out (an extension's hooks rewrite a call after
/// toolgate's). A user's `hooksConfig.disabled` still switches a hook
/// off (lists merge as a union), as does Gemini CLI started with its
/// system settings moved: only self-protection refuses those.
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: SYSTEM_SETTINGS,
    lock: Some(SystemLock {
        file: SYSTEM_SETTINGS,
        edit: pin_hooks_on,
        does: "hooksConfig.enabled pinned on and admin.extensions.enabled off: a user's \
                   or project's switch and extensions are overridden (a user's \
                   hooksConfig.disabled, merged as a union, is refused by self-protection \
                   only)",
        drop_ins: None,
    }),
};

const SETTINGS: &[SettingsFile] = &[
    SettingsFile::new(
        ".gemini",
        "settings",
        "Gemini CLI's hook settings (.gemini/settings.json)",
    ),
    // An extension's hooks rewrite a call's input after toolgate's.
    SettingsFile::new(
        ".gemini",
        "extensions",
        "Gemini CLI's extensions (.gemini/extensions/)",
    ),
];

/// Gemini CLI started with another home (`GEMINI_CLI_HOME`, `HOME`)
/// reads none of the hooks `toolgate hook install` wrote, and with its
/// system settings or defaults elsewhere none of a system install's.
fn switches_off(words: &[&str]) -> Option<&'static str> {
    let moved = [
        "GEMINI_CLI_HOME",
        "HOME",
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
        "GEMINI_CLI_SYSTEM_DEFAULTS_PATH",
    ];
    starts_with_any(words, "gemini", &moved)
        .then_some("start Gemini CLI with its settings moved, toolgate's hooks not in them")
}

impl Adapter for GeminiCli {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = GeminiEvent::parse(input)?;
        let kind = match event.hook_event_name.as_str() {
            "BeforeAgent" => EventKind::NewTurn,
            "BeforeTool" => EventKind::Decide {
                request: event.to_request(0)?,
                can_ask: false,
            },
            "AfterTool" => EventKind::ran(
                event.to_request(0)?,
                outcome_of(event.tool_response.as_ref()),
            ),
            _ => EventKind::Nothing,
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
}

/// Commands only (Gemini CLI has no HTTP hooks); matchers are regexes.
fn settings(plan: &InstallPlan<'_>) -> Value {
    let hook = |matcher: Option<&str>| {
        let mut entry = json!({"hooks": [{"type": "command", "command": plan.command}]});
        if let Some(matcher) = matcher {
            entry["matcher"] = json!(matcher);
        }
        json!([entry])
    };
    json!({"hooks": {
        "SessionStart": hook(None),
        "BeforeTool": hook(Some(".*")),
        "AfterTool": hook(Some(".*")),
        "BeforeAgent": hook(None),
    }})
}

/// A user's or project's `hooksConfig.disabled` naming toolgate's hook
/// (merged over the system settings as a union), the system settings
/// moved away, and without the system lock `hooksConfig.enabled: false`.
fn switched_off_by_user(locked: bool) -> Vec<(String, &'static str)> {
    let project = std::env::current_dir()
        .ok()
        .map(|d| d.join(".gemini/settings.json"));
    let mut found = Vec::new();
    for (path, settings) in settings_at(INFO.user_hooks().into_iter().chain(project)) {
        let hooks_config = &settings["hooksConfig"];
        let names_toolgate = hooks_config["disabled"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|name| name.as_str().is_some_and(|n| n.contains("toolgate")));
        if names_toolgate {
            found.push((
                path.clone(),
                "names toolgate's hook under hooksConfig.disabled",
            ));
        }
        if !locked && hooks_config["enabled"] == json!(false) {
            found.push((path, "sets hooksConfig.enabled: false"));
        }
    }
    for variable in [
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
        "GEMINI_CLI_SYSTEM_DEFAULTS_PATH",
    ] {
        if let Some(moved) = std::env::var_os(variable).filter(|v| locked && v != SYSTEM_SETTINGS) {
            found.push((
                format!("{variable}={}", moved.to_string_lossy()),
                "moves the system settings away",
            ));
        }
    }
    found
}

/// Gemini CLI's system settings (overrides) on Linux.
const SYSTEM_SETTINGS: &str = "/etc/gemini-cli/settings.json";

/// `text` (Gemini CLI's system settings) with the hooks system pinned on
/// and extensions off; everything else kept.
fn pin_hooks_on(text: Option<&str>) -> std::result::Result<String, String> {
    edit_json_object(text, |settings| {
        let mut set = |path: &[&str], value: Value| -> std::result::Result<(), String> {
            let (last, parents) = path.split_last().expect("a path names a key");
            let mut table = &mut *settings;
            for key in parents {
                table = table
                    .entry(key.to_string())
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .ok_or_else(|| format!("has `{key}` that is not an object"))?;
            }
            table.insert(last.to_string(), value);
            Ok(())
        };
        set(&["hooksConfig", "enabled"], json!(true))?;
        set(&["admin", "extensions", "enabled"], json!(false))
    })
}

/// One hook event; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct GeminiEvent {
    /// The Gemini CLI session.
    pub session_id: String,
    /// The session's transcript.
    #[serde(default)]
    pub transcript_path: Option<std::path::PathBuf>,
    /// `BeforeTool`, `AfterTool`, `BeforeAgent`, `SessionStart`, ...
    pub hook_event_name: String,
    /// The tool, for tool events.
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The model's arguments, for tool events.
    #[serde(default, deserialize_with = "super::present")]
    pub tool_input: Option<Value>,
    /// The result, for `AfterTool`.
    #[serde(default)]
    pub tool_response: Option<Value>,
    /// For MCP tools: the server and the tool's own name.
    #[serde(default)]
    pub mcp_context: Option<McpContext>,
    /// The directory Gemini CLI runs in.
    #[serde(default)]
    pub cwd: Option<std::path::PathBuf>,
}

/// What Gemini CLI says of an MCP tool.
#[derive(Debug, Clone, Deserialize)]
pub struct McpContext {
    /// The server's name in Gemini CLI's config.
    pub server_name: String,
    /// The tool's name on that server.
    pub tool_name: String,
}

/// Gemini CLI's built-in tools, as the bundled policies know them.
const TOOLS: &[(&str, &str)] = &[
    ("run_shell_command", "Bash"),
    ("read_file", "Read"),
    ("read_many_files", "Read"),
    ("write_file", "Write"),
    ("replace", "Edit"),
    ("glob", "Glob"),
    ("search_file_content", "Grep"),
    ("list_directory", "LS"),
    ("web_fetch", "WebFetch"),
    ("google_web_search", "WebSearch"),
];

/// The tool and origin toolgate decides on for a Gemini CLI tool.
pub fn tool_for(name: &str, mcp: Option<&McpContext>) -> (String, Origin) {
    if let Some(mcp) = mcp {
        return (mcp.tool_name.clone(), Origin::Mcp(mcp.server_name.clone()));
    }
    if let Some((server, tool)) = name
        .strip_prefix("mcp_")
        .and_then(|rest| rest.split_once('_'))
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
    {
        return (tool.to_string(), Origin::Mcp(server.to_string()));
    }
    let mapped = TOOLS.iter().find(|(gemini, _)| *gemini == name);
    (
        mapped.map_or(name, |(_, ours)| ours).to_string(),
        Origin::Builtin,
    )
}

impl GeminiEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Gemini CLI")
    }

    /// The toolgate request for a tool event at `turn`.
    pub fn to_request(&self, turn: u64) -> Result<ToolRequest> {
        let name = required_tool_name(&self.hook_event_name, self.tool_name.as_deref())?;
        let (tool, origin) = tool_for(name, self.mcp_context.as_ref());
        let input = tool_input(&self.hook_event_name, self.tool_input.as_ref())?;
        let mut request = ToolRequest::new(tool, input);
        request.origin = origin;
        request.session_id = self.session_id.clone();
        request.channel = "gemini-cli".into();
        request.turn = turn;
        request.transcript_path = self.transcript_path.clone();
        request.cwd = self.cwd.clone();
        Ok(request)
    }
}

/// The answer to a `BeforeTool` event.
pub fn answer(decision: &Decision) -> Value {
    let notes: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
    let reason = decision.reason.clone().unwrap_or_default();
    match decision.verdict {
        Verdict::Deny => json!({"decision": "deny", "reason": reason}),
        Verdict::Pause => {
            let asked = format!("{}{}", who_asks(decision), how_to_approve(decision));
            json!({"decision": "deny", "reason": asked})
        }
        Verdict::Allow if notes.is_empty() => json!({}),
        Verdict::Allow => json!({"systemMessage": notes.join("\n\n")}),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_system_settings_pin_the_hooks_on_and_extensions_off() {
        let text = r#"{"hooks": {"BeforeTool": []}, "hooksConfig": {"notifications": false}}"#;
        let pinned: Value = serde_json::from_str(&pin_hooks_on(Some(text)).unwrap()).unwrap();
        assert_eq!(pinned["hooksConfig"]["enabled"], true);
        assert_eq!(pinned["hooksConfig"]["notifications"], false);
        assert_eq!(pinned["admin"]["extensions"]["enabled"], false);
        assert_eq!(pinned["hooks"]["BeforeTool"], json!([]));
        let err = pin_hooks_on(Some(r#"{"admin": true}"#)).unwrap_err();
        assert!(err.contains("`admin`"), "{err}");
    }

    use super::*;

    #[test]
    fn tool_names_map_onto_the_policies_vocabulary() {
        assert_eq!(
            tool_for("run_shell_command", None),
            ("Bash".into(), Origin::Builtin)
        );
        assert_eq!(tool_for("replace", None), ("Edit".into(), Origin::Builtin));
        assert_eq!(
            tool_for("save_memory", None),
            ("save_memory".into(), Origin::Builtin)
        );
        assert_eq!(
            tool_for("mcp_github_create_issue", None),
            ("create_issue".into(), Origin::Mcp("github".into()))
        );
        let context = McpContext {
            server_name: "my_server".into(),
            tool_name: "do_thing".into(),
        };
        assert_eq!(
            tool_for("mcp_my_server_do_thing", Some(&context)),
            ("do_thing".into(), Origin::Mcp("my_server".into())),
            "mcp_context wins over splitting the name"
        );
    }
}
