//! The OpenCode adapter (facts measured on 1.18.33).
//!
//! OpenCode has no command hooks: it loads JavaScript plugins. toolgate
//! ships one (`opencode_plugin.js`, written by `toolgate hook install --for
//! opencode`), a shim that runs the installed hook command for each event
//! and refuses the call on anything but a clear answer. Its events, in the
//! shape the shim sends them: `tool.execute.before` (decided; OpenCode runs
//! it before its own permission check, for built-in and MCP tools alike),
//! `tool.execute.after` (observed) and `chat.message` (a new prompt: the
//! session's next turn, bound by its message id).
//!
//! Mapping: `bash` is `Bash`; `write`, `edit`, `read` are `Write`, `Edit`,
//! `Read` with Claude Code's argument names added beside OpenCode's
//! (`filePath` → `file_path`, ...); `patch` is `Edit` with the files it
//! names; an MCP tool is `SERVER_TOOL` (OpenCode joins them with `_`), split
//! at the first underscore: a server whose name holds one is misread, so
//! name servers without.
//!
//! Answers: `{"decision": "allow"}` (with `notes`, which the shim adds to
//! the tool's output the model reads) or `{"decision": "deny", "reason"}`,
//! which the shim throws: the model reads the reason as the tool's error. A
//! plugin cannot make OpenCode ask, so a **pause** is a deny saying who asks
//! and how a person approves it, then the retry.
//!
//! Failing open, and what stops it: OpenCode skips a plugin that fails to
//! import (the shim imports only Node's `child_process`), waits forever on
//! a hook that never answers (the shim has a deadline), and loads no plugin
//! at all under `--pure` or `OPENCODE_PURE` (the guard refuses a command
//! that starts OpenCode so). Its config and plugins (`~/.config/opencode/`,
//! a project's `.opencode/`) are protected like the other runtimes'
//! settings.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Result;
use super::codex::patch_arguments;
use super::object_input;
use super::{
    Adapter, Event, EventKind, Install, InstallPlan, SettingsFile, how_to_approve, who_asks,
};
use super::{
    ConfigDir, RuntimeInfo, SystemHooks, SystemLock, edit_json_object, notes_text, starts_with_any,
    with_our_names,
};
use crate::decision::{Decision, Outcome, Verdict};
use crate::request::{Origin, ToolRequest};
use toolgate_wire::InvalidRequest;
use toolgate_wire::protocol::{HookRuntime, OnError};

/// How long the shim waits for toolgate's answer, ms.
const DEADLINE_MS: u64 = 60_000;

/// The shim, with its command and deadline still to fill in.
const PLUGIN: &str = include_str!("opencode_plugin.js");

/// OpenCode's own tools and toolgate's names for them.
const TOOLS: &[(&str, &str)] = &[
    ("bash", "Bash"),
    ("read", "Read"),
    ("write", "Write"),
    ("edit", "Edit"),
    ("multiedit", "Edit"),
    ("glob", "Glob"),
    ("grep", "Grep"),
    ("list", "LS"),
    ("webfetch", "WebFetch"),
    ("websearch", "WebSearch"),
    ("todowrite", "TodoWrite"),
    ("todoread", "TodoRead"),
    ("task", "Task"),
];

/// OpenCode's tools whose names hold an underscore (not MCP tools).
const UNDERSCORED_TOOLS: &[&str] = &["plan_enter", "plan_exit"];

/// One event as the shim sends it; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct OpenCodeEvent {
    /// `tool.execute.before`, `tool.execute.after` or `chat.message`.
    pub hook_event_name: String,
    /// The OpenCode session.
    pub session_id: String,
    /// The tool call's id.
    #[serde(default)]
    pub call_id: Option<String>,
    /// The new prompt's message id, on `chat.message`.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// The tool's arguments.
    #[serde(default, deserialize_with = "super::present")]
    pub args: Option<Value>,
    /// What the tool returned (its start), on `tool.execute.after`.
    #[serde(default)]
    pub output: Option<String>,
    /// The tool's metadata (`exit` for `bash`), on `tool.execute.after`.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// The project directory.
    #[serde(default)]
    pub cwd: Option<std::path::PathBuf>,
}

impl OpenCodeEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|err| {
            InvalidRequest(format!(
                "not an OpenCode event from toolgate's plugin ({err}); expected a JSON object \
                 with hook_event_name and session_id"
            ))
        })
    }

    /// The toolgate request for a tool event.
    pub fn to_request(&self) -> Result<ToolRequest> {
        let name = self
            .tool
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                InvalidRequest(format!("{} event without tool", self.hook_event_name))
            })?;
        let args = object_input(&self.hook_event_name, "args", self.args.as_ref(), false)?;
        let (tool, origin, arguments) = match TOOLS.iter().find(|(ours, _)| *ours == name) {
            Some((_, tool)) => (tool.to_string(), Origin::Builtin, claude_names(args)),
            None if name == "patch" || name == "apply_patch" => {
                let patch = ["patchText", "patch", "input"]
                    .iter()
                    .find_map(|key| args.get(*key).and_then(Value::as_str))
                    .unwrap_or_default();
                ("Edit".into(), Origin::Builtin, patch_arguments(patch))
            }
            None => match name.split_once('_') {
                Some((server, tool))
                    if !server.is_empty()
                        && !tool.is_empty()
                        && !UNDERSCORED_TOOLS.contains(&name) =>
                {
                    (tool.into(), Origin::Mcp(server.into()), Value::Object(args))
                }
                _ => (name.into(), Origin::Builtin, Value::Object(args)),
            },
        };
        let mut request = ToolRequest::new(tool, arguments);
        request.origin = origin;
        request.call_id = self.call_id.clone();
        request.session_id = self.session_id.clone();
        request.channel = HookRuntime::OpenCode.name().into();
        request.cwd = self.cwd.clone();
        Ok(request)
    }

    /// How a call that ran went: a shell command's exit status, else what
    /// it returned.
    fn outcome(&self) -> (Outcome, String) {
        let exit = self.metadata.as_ref().and_then(|m| m["exit"].as_i64());
        let outcome = match exit {
            Some(code) if code != 0 => Outcome::Failed,
            _ => Outcome::Succeeded,
        };
        let summary = self.output.as_deref().unwrap_or_default();
        (outcome, summary.chars().take(1000).collect())
    }
}

/// OpenCode's arguments with toolgate's names set from OpenCode's
/// (`filePath` → `file_path`, ...; see [`with_our_names`]).
fn claude_names(args: Map<String, Value>) -> Value {
    let field = |key: &str| args.get(key).cloned().unwrap_or(Value::Null);
    let fields = [
        ("file_path", field("filePath")),
        ("old_string", field("oldString")),
        ("new_string", field("newString")),
    ];
    with_our_names(Value::Object(args), fields)
}

/// Where system mode writes toolgate's plugin: OpenCode's own
/// admin-controlled directory.
const SYSTEM_PLUGIN: &str = "/etc/opencode/toolgate.js";

/// OpenCode, through toolgate's plugin.
pub struct OpenCode;

/// What toolgate knows of OpenCode.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::OpenCode,
    deciding_event: "tool.execute.before",
    config_dir: ConfigDir {
        variable: Some("XDG_CONFIG_HOME"),
        then: "",
        under_home: ".config",
    },
    user_hooks: "opencode/plugin/toolgate.js",
    guarded: &[".config/opencode"],
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &["opencode", "OPENCODE_PURE"],
    switches_off,
    hook_timeout_secs: None,
    http_hooks: false,
    failure_answer,
    install: Install {
        plugin,
        ..Install::hooks(settings)
    },
    hook_help: "Answer one OpenCode event from toolgate's OpenCode plugin (stdin).\n\n\
         The plugin (`hook install --for opencode` writes it) sends tool.execute.before (decided: \
         `{\"decision\": \"allow\"|\"deny\", …}`; a pause, which a plugin cannot ask, is a deny saying \
         how a person approves it; notes are added to the tool's output), tool.execute.after \
         (recorded) and chat.message (the next turn). Through the store's daemon like \
         `claude-code`; always exits 0.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    // toolgate's OpenCode plugin blocks on anything but a decision.
    match on_error {
        OnError::Allow => json!({"decision": "allow"}),
        OnError::Ask | OnError::Deny => json!({"decision": "deny", "reason": reason}),
    }
}

/// toolgate's plugin, root's, in the managed config's `plugin` list,
/// which OpenCode adds to every user's and no user can remove. (Under
/// `--pure` or `OPENCODE_PURE` it loads none: the guard refuses starting
/// it so.)
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: SYSTEM_PLUGIN,
    lock: Some(SystemLock {
        file: "/etc/opencode/opencode.json",
        edit: |text| {
            edit_json_object(text, |config| {
                let plugins = config
                    .entry("plugin")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .ok_or("`plugin` must be a list")?;
                if !plugins.iter().any(|p| p == SYSTEM_PLUGIN) {
                    plugins.push(json!(SYSTEM_PLUGIN));
                }
                Ok(())
            })
        },
        does: "toolgate's plugin in the managed plugin list",
        drop_ins: None,
    }),
};

const SETTINGS: &[SettingsFile] = &[
    SettingsFile::new(
        ".config",
        "opencode",
        "OpenCode's config and plugins (~/.config/opencode/)",
    ),
    SettingsFile::new(
        "",
        ".opencode",
        "a project's OpenCode config, plugins and custom tools (.opencode/), \
                 which can replace a built-in tool",
    ),
    SettingsFile::new(
        "",
        "opencode.json",
        "a project's OpenCode config (opencode.json, opencode.jsonc)",
    ),
];

/// OpenCode started with `--pure` or `OPENCODE_PURE` loads no plugin,
/// and one whose config moved (`XDG_CONFIG_HOME`, `HOME`) not toolgate's:
/// an agent could run its own OpenCode that toolgate never sees.
fn switches_off(words: &[&str]) -> Option<&'static str> {
    let pure = words.iter().any(|w| w.contains("OPENCODE_PURE"));
    // Another config (with its own plugins and tools), or the managed
    // one moved away (`OPENCODE_TEST_MANAGED_CONFIG_DIR`: 1.18.33).
    let switches = [
        "--pure",
        "XDG_CONFIG_HOME",
        "HOME",
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_DIR",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_TEST_MANAGED_CONFIG_DIR",
    ];
    (pure || starts_with_any(words, "opencode", &switches)).then_some(
        "start OpenCode without its plugins (--pure, OPENCODE_PURE) or with its config \
             moved, toolgate's plugin not among them",
    )
}

impl Adapter for OpenCode {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = OpenCodeEvent::parse(input)?;
        let kind = match event.hook_event_name.as_str() {
            "chat.message" => EventKind::NewTurn,
            "tool.execute.before" => EventKind::Decide {
                request: event.to_request()?,
                can_ask: false,
            },
            "tool.execute.after" => EventKind::ran(event.to_request()?, event.outcome()),
            _ => EventKind::Nothing,
        };
        Ok(Event {
            session: event.session_id,
            prompt: event.message_id,
            kind,
        })
    }

    fn answer(&self, decision: &Decision, _can_ask: bool) -> Value {
        answer(decision)
    }
}

/// Nothing to merge: OpenCode's hooks are the plugin file.
fn settings(_plan: &InstallPlan<'_>) -> Value {
    json!({})
}

fn plugin(plan: &InstallPlan<'_>) -> Option<String> {
    let command = serde_json::to_string(plan.command).expect("a string serializes");
    Some(
        PLUGIN
            .replace("__TOOLGATE_COMMAND__", &command)
            .replace("__TOOLGATE_DEADLINE_MS__", &DEADLINE_MS.to_string()),
    )
}

/// The answer to a `tool.execute.before` event (see the module docs).
pub fn answer(decision: &Decision) -> Value {
    let mut answer = match decision.verdict {
        Verdict::Allow => json!({"decision": "allow"}),
        Verdict::Deny => json!({
            "decision": "deny",
            "reason": decision.reason.clone().unwrap_or_default(),
        }),
        Verdict::Pause => json!({
            "decision": "deny",
            "reason": format!("{}{}", who_asks(decision), how_to_approve(decision)),
        }),
    };
    if let Some(notes) = notes_text(decision) {
        answer["notes"] = json!(notes);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tool: &str, args: Value) -> ToolRequest {
        let event = json!({"hook_event_name": "tool.execute.before", "session_id": "s",
                           "call_id": "c", "tool": tool, "args": args});
        match OpenCode.parse(&event.to_string()).unwrap().kind {
            EventKind::Decide { request, .. } => request,
            other => panic!("not a decision: {other:?}"),
        }
    }

    #[test]
    fn tools_map_onto_toolgates_names() {
        let write = request(
            "write",
            json!({"filePath": "/p/a", "content": "x", "file_path": "/p/decoy"}),
        );
        assert_eq!(
            (write.tool.as_str(), &write.arguments["file_path"]),
            ("Write", &json!("/p/a"))
        );
        let mcp = request("everything_get-env", json!({}));
        assert_eq!(
            (mcp.tool.as_str(), &mcp.origin),
            ("get-env", &Origin::Mcp("everything".into()))
        );
        assert_eq!(request("plan_exit", json!({})).origin, Origin::Builtin);
        let patch = request(
            "patch",
            json!({"patchText": "*** Begin Patch\n*** Add File: b.rs\n+x\n*** End Patch"}),
        );
        assert_eq!(patch.arguments["file_path"], "b.rs");
    }

    #[test]
    fn the_plugin_holds_the_command_as_a_javascript_string() {
        let plugin = (INFO.install.plugin)(&InstallPlan {
            command: "out=$(x 'a' \"b\")",
            url: None,
        })
        .unwrap();
        assert!(
            plugin.contains(r#"const COMMAND = "out=$(x 'a' \"b\")";"#),
            "{plugin}"
        );
        assert!(plugin.contains("const DEADLINE_MS = 60000;"));
        assert!(!plugin.contains("__TOOLGATE_"));
    }

    #[test]
    fn starting_opencode_without_plugins_is_seen() {
        let off = |words: &[&str]| switches_off(words).is_some();
        assert!(off(&["OPENCODE_PURE=1", "opencode", "run", "x"]));
        assert!(off(&["env", "OPENCODE_PURE=1", "opencode"]));
        assert!(off(&["/usr/bin/opencode", "run", "--pure", "do it"]));
        assert!(off(&["XDG_CONFIG_HOME=/tmp/x", "opencode", "run"]));
        assert!(!off(&["nix-shell", "--pure"]));
        assert!(!off(&["opencode", "run", "fix the --purely cosmetic bug"]));
    }
}
