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
//! - turns: each `UserPromptSubmit` event starts the session's next turn;
//!   every event until the next prompt carries its `prompt_id`, which binds
//!   the calls to that turn;
//! - a decline in Claude Code's own prompt runs no hook: it is read from the
//!   transcript (see [`declined_in_prompt`]);
//! - `PreSkillShellCommand` (a skill's or command's inline shell,
//!   `` !`…` ``, run while its text is rendered, under no `PreToolUse`) is
//!   a shell call decided as any other, that cannot ask: Claude Code runs it
//!   only on no decision or `allow`, and reads `ask` (and a rewrite) as a
//!   refusal, "a skill can't wait for" approval.
//!
//! Settings: `PreToolUse`, `PreSkillShellCommand`, `PostToolUse` and
//! `UserPromptSubmit` as commands or HTTP hooks, `SessionStart` always a
//! command (it starts the daemon); since 2.1.295 each handler also says
//! `onFailure: "block"`. A release without `PreSkillShellCommand` ignores
//! that entry with a warning (seen in 2.1.295).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::Result;
use super::edit_json_object;
use super::{Adapter, Event, EventKind, Install, InstallPlan, SettingsFile, parse_event};
use super::{
    ConfigDir, DropIns, RuntimeInfo, SystemHooks, SystemLock, allow_managed_hooks_only,
    how_to_approve, required_tool_name, who_asks,
};
use super::{settings_at, starts_with_any, tool_input};
use crate::decision::{Decision, Verdict};
use crate::gates::PendingGate;
use crate::request::{Mode, Origin, ToolRequest};

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
    #[serde(default, deserialize_with = "super::present")]
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

use toolgate_wire::protocol::{HookRuntime, OnError};

/// The channel Claude Code's calls come from.
pub const CHANNEL: &str = "claude-code";

/// How much of a transcript's end is searched for a decline: the decline
/// is written when the person answers, so it is near the end when the
/// daemon looks (every second) or at the session's next event.
const DECLINE_SEARCH_BYTES: u64 = 512 * 1024;

/// Claude Code's hooks.
pub struct ClaudeCode;

/// The first release with HTTP hooks and `onFailure` for hooks.
const CURRENT_SINCE: (u32, u32, u32) = (2, 1, 295);
/// How long Claude Code waits for a hook, in seconds, before it counts as
/// failed (and so blocks): a decision takes microseconds and a daemon
/// starting up compiles in about a second, but a daemon stopped with
/// SIGSTOP answers never (Claude Code's own default is 600 s for tool
/// events).
const HOOK_TIMEOUT_SECS: u64 = 30;

/// Claude Code's managed settings on Linux: the admin's, over every other.
const MANAGED_SETTINGS: &str = "/etc/claude-code/managed-settings.json";

/// What toolgate knows of Claude Code.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::ClaudeCode,
    deciding_event: "PreToolUse",
    config_dir: ConfigDir {
        variable: Some("CLAUDE_CONFIG_DIR"),
        then: "",
        under_home: ".claude",
    },
    user_hooks: "settings.json",
    guarded: &[
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".claude/dev-mods",
        ".claude/plugins",
        ".claude/skills",
        ".claude/commands",
        ".claude/agents",
        ".claude/cowork_settings.json",
        ".claude/cowork_plugins",
    ],
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &["claude"],
    switches_off,
    hook_timeout_secs: None,
    http_hooks: true,
    failure_answer,
    install: Install {
        extensions_beside,
        switched_off_by_user,
        release_is_current: installed_release_is_current,
        ..Install::hooks(settings)
    },
    hook_help: "Answer one Claude Code hook event read from stdin.\n\n\
         Sends the event to the store's daemon in one round trip, starting the daemon first if \
         none is running (one per store, race-free, logging to STORE.daemon.log). Handles \
         PreToolUse (prints Claude Code's hook JSON: deny, ask, or notes as additionalContext; \
         nothing for a plain allow), PostToolUse (records the outcome; closes a pause that Claude \
         Code's own prompt answered), UserPromptSubmit (starts the next turn) and SessionStart \
         (only starts the daemon). Always exits 0: an internal failure is answered with \
         --on-error.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    match on_error {
        OnError::Allow => json!({}),
        OnError::Ask => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": reason,
        }}),
        // `decision: block` blocks whatever the event was (a failure
        // may come before the event is read): Claude Code then drops a
        // `hookSpecificOutput` for another event with a warning instead
        // of counting the answer as a failed hook, so a broken toolgate
        // blocks a prompt with this reason too.
        OnError::Deny => json!({
            "decision": "block",
            "reason": reason,
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            },
        }),
    }
}

/// Managed settings, with `allowManagedHooksOnly`: a user's or a
/// project's hooks (and their `disableAllHooks`) are ignored.
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: MANAGED_SETTINGS,
    lock: Some(SystemLock {
        file: MANAGED_SETTINGS,
        edit: managed_hooks_only,
        does: "allowManagedHooksOnly and no disableAllHooks, allowManagedModsOnly and \
                   forceHotReloadPrompt, disableSkillShellExecution and disableSideloadFlags: \
                   user and project hooks, mods, skills' inline shell and sideloaded plugins \
                   are kept out, managed hooks run",
        drop_ins: Some(DropIns {
            dir: "/etc/claude-code/managed-settings.d",
            extension: "json",
            undoes: undoes_managed_hooks_only,
        }),
    }),
};

/// Its hook settings, and where the extensions it runs inside itself
/// live: a mod (`dev-mods/`) or a plugin's mod can watch a tool call,
/// rewrite it or answer it without the hooks (2.1.287 and later), so
/// writing one is switching toolgate off.
const SETTINGS: &[SettingsFile] = &[
    SettingsFile::new(
        ".claude",
        "settings",
        "Claude Code's hook settings (.claude/settings*.json)",
    ),
    SettingsFile::new(
        ".claude",
        "dev-mods",
        "Claude Code's mods (.claude/dev-mods/)",
    ),
    SettingsFile::new(
        ".claude",
        "plugins",
        "Claude Code's plugins (.claude/plugins/)",
    ),
    // A skill's or a command's inline shell runs without
    // PreToolUse; an agent's frontmatter hooks can rewrite a call.
    SettingsFile::new(
        ".claude",
        "skills",
        "Claude Code's skills (.claude/skills/)",
    ),
    SettingsFile::new(
        ".claude",
        "commands",
        "Claude Code's commands (.claude/commands/)",
    ),
    SettingsFile::new(
        ".claude",
        "agents",
        "Claude Code's agents (.claude/agents/)",
    ),
    SettingsFile::new(
        ".claude",
        "cowork_",
        "Claude Code's cowork settings and plugins (.claude/cowork_*)",
    ),
    SettingsFile::new(
        "",
        ".claude-plugin",
        "a Claude Code plugin's manifest (.claude-plugin/)",
    ),
];

/// Claude Code started with its user settings elsewhere
/// (`CLAUDE_CONFIG_DIR`, `HOME`), some left out (`--setting-sources`),
/// hooks skipped (`--safe-mode`, `--bare`, `CLAUDE_CODE_SIMPLE`) or
/// settings handed to it (`--settings`, a file or inline JSON, may say
/// `disableAllHooks` in any spelling JSON allows) runs without the
/// hooks `toolgate hook install` wrote; plugins loaded for the session
/// (`--plugin-dir`, `--plugin-url`, `CLAUDE_CODE_PLUGIN_DIRS`) bring
/// mods that can answer a tool call themselves. Managed settings' hooks still
/// run in each case (2.1.332, `tests/system_mode.rs`): these matter in
/// user mode.
fn switches_off(words: &[&str]) -> Option<&'static str> {
    let switches = [
        "CLAUDE_CONFIG_DIR",
        "HOME",
        "--setting-sources",
        "--settings",
        "--bare",
        "CLAUDE_CODE_SIMPLE",
        "--safe-mode",
        "CLAUDE_CODE_SAFE_MODE",
        // Plugins (and their mods) loaded from elsewhere for a session.
        "--plugin-dir",
        "--plugin-dir-no-mcp",
        "--plugin-url",
        "CLAUDE_CODE_PLUGIN_DIRS",
        "CLAUDE_CODE_PLUGIN_CACHE_DIR",
        "CLAUDE_CODE_PLUGIN_SEED_DIR",
        "CLAUDE_CODE_USE_COWORK_PLUGINS",
        // Settings handed in as the managed tier, and launches that
        // keep a person's own config or hooks out (2.1.332).
        "--managed-settings",
        "--managed-settings-in-initialize",
        "--restricted",
        "CLAUDE_CODE_RESTRICTED",
        "CLAUDE_CODE_RESTRICT_PERSONAL_CONFIG",
        "CLAUDE_CODE_PERSONAL_HOOKS_OFF",
    ];
    starts_with_any(words, "claude", &switches)
        .then_some("start Claude Code with its settings moved, its hooks off or plugins loaded")
}

impl Adapter for ClaudeCode {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = HookEvent::parse(input)?;
        let kind = match event.hook_event_name.as_str() {
            "UserPromptSubmit" => EventKind::NewTurn,
            "PreToolUse" => EventKind::Decide {
                request: event.to_request(0)?,
                can_ask: true,
            },
            "PreSkillShellCommand" => EventKind::Decide {
                request: event.to_request(0)?,
                can_ask: false,
            },
            "PostToolUse" => {
                EventKind::ran_with_output(event.to_request(0)?, event.tool_response.as_ref())
            }
            _ => EventKind::Nothing,
        };
        Ok(Event {
            session: event.session_id,
            prompt: event.prompt_id,
            kind,
        })
    }

    fn answer(&self, decision: &Decision, _can_ask: bool) -> Value {
        answer(decision).unwrap_or_else(|| json!({}))
    }

    /// `PreToolUse`'s `updatedInput`.
    fn applies_rewrites(&self) -> bool {
        true
    }

    /// `PostToolUse`'s `updatedToolOutput` (Claude Code 2.1.332): the text
    /// the model reads instead of the tool's output.
    fn output_answer(&self, check: &crate::output::OutputCheck) -> Option<Value> {
        let text = check.output.as_ref()?;
        Some(json!({"hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "updatedToolOutput": text,
        }}))
    }

    /// No decision: Claude Code's own rules (`permissions.allow`,
    /// `--allowedTools`) then settle the call, and in `default`,
    /// `acceptEdits` and `plan` it asks a person for what they do not
    /// allow. Not in `bypassPermissions` or `dontAsk`, where it would run
    /// anything unasked.
    fn own_rules_answer(&self, request: &ToolRequest) -> Option<Value> {
        (request.mode == Mode::Interactive).then(|| json!({}))
    }

    fn decline_detector(&self) -> Option<fn(&PendingGate) -> bool> {
        Some(declined_in_prompt)
    }
}

fn settings(plan: &InstallPlan<'_>) -> Value {
    let current = installed_release_is_current();
    let hook = |matcher: Option<&str>, may_be_http: bool| {
        let mut handler = match plan.url {
            Some(url) if may_be_http => json!({"type": "http", "url": url}),
            _ => json!({"type": "command", "command": plan.command}),
        };
        if current {
            handler["onFailure"] = json!("block");
            handler["timeout"] = json!(HOOK_TIMEOUT_SECS);
        }
        let mut entry = json!({"hooks": [handler]});
        if let Some(matcher) = matcher {
            entry["matcher"] = json!(matcher);
        }
        json!([entry])
    };
    // SessionStart starts the daemon (and compiles the policies) before
    // the session's first tool call, so it is always a command.
    json!({"hooks": {
        "SessionStart": hook(None, false),
        "PreToolUse": hook(Some("*"), true),
        "PreSkillShellCommand": hook(Some("*"), true),
        "PostToolUse": hook(Some("*"), true),
        "UserPromptSubmit": hook(None, true),
    }})
}

/// The folders under its config folder (`dev-mods/…`) and the plugins
/// `plugins/installed_plugins.json` lists: each can carry a mod, which
/// can watch, rewrite or answer a tool call inside Claude Code.
fn extensions_beside(settings: &Path) -> Vec<String> {
    let Some(dir) = settings.parent() else {
        return Vec::new();
    };
    let mods = std::fs::read_dir(dir.join("dev-mods"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| format!("dev-mods/{}", entry.file_name().to_string_lossy()));
    let installed = std::fs::read_to_string(dir.join("plugins/installed_plugins.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok());
    let plugins = installed
        .as_ref()
        .and_then(|v| v.get("plugins").unwrap_or(v).as_object())
        .into_iter()
        .flat_map(|plugins| plugins.keys())
        .filter(|name| *name != "version")
        .map(|name| format!("plugin {name}"));
    let mut found: Vec<String> = mods.chain(plugins).collect();
    found.sort();
    found
}

/// Without the managed lock, `disableAllHooks: true` at any level the
/// user or the project writes (user, project, local settings) turns
/// toolgate's hooks off. (Under the lock, managed hooks run whatever
/// those say.)
///
/// Managed settings the admin wrote without toolgate's hooks shadow
/// them too: `allowManagedHooksOnly` keeps every user and project hook
/// from running, and their `disableAllHooks` every hook.
fn switched_off_by_user(locked: bool) -> Vec<(String, &'static str)> {
    if locked {
        return Vec::new();
    }
    let project = std::env::current_dir().ok().map(|dir| {
        [".claude/settings.json", ".claude/settings.local.json"].map(|file| dir.join(file))
    });
    let user = INFO.user_hooks();
    let mut found: Vec<(String, &'static str)> =
        settings_at(user.into_iter().chain(project.into_iter().flatten()))
            .into_iter()
            .filter(|(_, settings)| settings["disableAllHooks"] == json!(true))
            .map(|(path, _)| (path, "sets disableAllHooks: true"))
            .collect();
    for (path, managed) in settings_at([PathBuf::from(MANAGED_SETTINGS)]) {
        if managed["allowManagedHooksOnly"] == json!(true) {
            found.push((
                path.clone(),
                "sets allowManagedHooksOnly without toolgate's hooks: only the admin's hooks \
                 run, never these",
            ));
        }
        if managed["disableAllHooks"] == json!(true) {
            found.push((path, "sets disableAllHooks: true, for every hook"));
        }
    }
    found
}

/// Whether the `claude` on PATH has HTTP hooks and `onFailure` (asked
/// once per process). An older release is told to upgrade: its hooks
/// still fail closed through the installed command line.
fn installed_release_is_current() -> bool {
    static CURRENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CURRENT.get_or_init(|| match installed_version() {
        Some(version) if version < CURRENT_SINCE => {
            eprintln!(
                "note: Claude Code {}.{}.{} has no \"onFailure\" for hooks; upgrade to \
                 2.1.295 or later for Claude Code to block by itself when a hook fails",
                version.0, version.1, version.2
            );
            false
        }
        _ => true,
    })
}

/// The version `claude --version` reports, if a `claude` is installed.
fn installed_version() -> Option<(u32, u32, u32)> {
    let out = std::process::Command::new("claude")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

/// `MAJOR.MINOR.PATCH` at the start of a `--version` line.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().next()?;
    let mut parts = word.splitn(3, '.').map(|p| p.parse().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

impl HookEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Claude Code")
    }

    /// The toolgate request for a tool event at `turn`.
    pub fn to_request(&self, turn: u64) -> Result<ToolRequest> {
        let name = required_tool_name(&self.hook_event_name, self.tool_name.as_deref())?;
        let (tool, origin) = match split_mcp(name) {
            Some((server, tool)) => (tool.to_string(), Origin::Mcp(server.to_string())),
            None => (name.to_string(), Origin::Builtin),
        };
        let input = tool_input(&self.hook_event_name, self.tool_input.as_ref())?;
        let mut request = ToolRequest::new(tool, input);
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

/// A `PreToolUse` event as Claude Code sends it, for replaying calls
/// through the installed hook path (`toolgate bench corpus`).
pub fn pre_tool_use_event(
    session: &str,
    cwd: &std::path::Path,
    permission_mode: &str,
    tool: &str,
    input: &Value,
    tool_use_id: &str,
) -> (HookRuntime, String) {
    let event = json!({
        "session_id": session,
        "transcript_path": "",
        "cwd": cwd,
        "permission_mode": permission_mode,
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": tool_use_id,
    });
    (HookRuntime::ClaudeCode, event.to_string())
}

/// What Claude Code does with a hook's answer to `PreToolUse`: `allow`
/// (also for no decision: the call runs), `ask` or `deny`.
pub fn permission_decision(answer: &Value) -> &str {
    answer
        .pointer("/hookSpecificOutput/permissionDecision")
        .and_then(Value::as_str)
        .unwrap_or("allow")
}

/// The answer to a `PreToolUse` event: deny → `deny` with the reason; pause
/// → `ask` with the reason, which policy asks and how else a person
/// answers, and the same as a `systemMessage` (Claude Code's own prompt for
/// `Write`/`Edit` shows no hook reason; a system message reaches the
/// person in every mode); allow that a person's earlier answer let through
/// → `allow` (they already answered for this exact call; Claude Code would
/// ask them again); allow with notes → no decision (Claude Code's
/// normal permission flow applies) and the notes as `additionalContext`;
/// allow without notes → nothing (printed as `{}`). A call a policy
/// rewrote carries the arguments to run with as `updatedInput`, allowed or
/// asked about alike.
pub fn answer(decision: &Decision) -> Option<Value> {
    let mut answer = verdict_answer(decision);
    if let (Some(arguments), false) = (&decision.arguments, decision.verdict == Verdict::Deny) {
        let answer = answer
            .get_or_insert_with(|| json!({"hookSpecificOutput": {"hookEventName": "PreToolUse"}}));
        answer["hookSpecificOutput"]["updatedInput"] = arguments.clone();
    }
    answer
}

fn verdict_answer(decision: &Decision) -> Option<Value> {
    let notes = super::notes_text(decision);
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
    let owner = crate::request::owner_of_user(&gate.user_id);
    if gate.call_id.is_empty() {
        return false;
    }
    let tail = match crate::transcript::read_tail(path, DECLINE_SEARCH_BYTES, owner) {
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

/// What a managed-settings drop-in sets that undoes [`managed_hooks_only`]
/// when Claude Code merges it over the file (2.1.332 let a drop-in's
/// `disableAllHooks` turn the managed hooks off, and one that empties or
/// nulls `hooks` did not: measured); the mod options are judged both
/// where Claude Code reads them and at the top level. A file with comments
/// or a trailing comma stopped it before any tool ran, so such a file
/// undoes nothing.
fn undoes_managed_hooks_only(text: &str) -> Option<&'static str> {
    // It reads a file that starts with a byte-order mark (measured).
    let settings: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()?;
    if settings.get("disableAllHooks") == Some(&Value::Bool(true)) {
        return Some("disableAllHooks: true, which turns the managed hooks off too");
    }
    if settings.get("allowManagedHooksOnly") == Some(&Value::Bool(false)) {
        return Some(
            "allowManagedHooksOnly: false, which lets a user's and a project's hooks, and a \
             mod's hooks module, run",
        );
    }
    if let Some((_, undoes)) = TOP_LOCKS
        .iter()
        .find(|(key, _)| settings.get(key) == Some(&Value::Bool(false)))
    {
        return Some(undoes);
    }
    let options = mod_policy_options(&settings);
    let set_to = |key: &str, value: bool| {
        [options, Some(&settings)]
            .iter()
            .flatten()
            .any(|o| o.get(key) == Some(&Value::Bool(value)))
    };
    MOD_LOCKS
        .iter()
        .find(|(key, _)| set_to(key, false))
        .or_else(|| MODS_SET_ASIDE.iter().find(|(key, _)| set_to(key, true)))
        .map(|(_, undoes)| *undoes)
}

/// Where Claude Code reads the policy's options on mods: the built-in
/// `sec-default` plugin's options in the managed settings (2.1.332).
const MOD_POLICY: [&str; 3] = ["pluginConfigs", "sec-default@builtin", "options"];

/// The top-level switches system mode turns on, with what turning each off
/// does. With `allowManagedHooksOnly`, `disableSideloadFlags` is what kept
/// a mod out in 2.1.332 (measured under `-p`): a mod's hooks module does not
/// load, and `--plugin-dir` or `CLAUDE_CODE_PLUGIN_DIRS` stops Claude Code
/// before it starts.
const TOP_LOCKS: [(&str, &str); 2] = [
    (
        "disableSideloadFlags",
        "disableSideloadFlags: false, which lets --plugin-dir and CLAUDE_CODE_PLUGIN_DIRS load a \
         plugin and its mod",
    ),
    (
        "disableSkillShellExecution",
        "disableSkillShellExecution: false, which runs a skill's inline shell (decided by \
         toolgate, but never asked of a person)",
    ),
];

/// The mod options system mode turns on, with what turning each off does.
/// Claude Code documents them as the switch; measured in 2.1.332 under
/// `-p`, they alone kept no mod out (see [`TOP_LOCKS`]).
const MOD_LOCKS: [(&str, &str); 2] = [
    (
        "allowManagedModsOnly",
        "allowManagedModsOnly: false, which lets a user's mods (dev-mods/, plugins) run and \
         answer tool calls without the hooks",
    ),
    (
        "forceHotReloadPrompt",
        "forceHotReloadPrompt: false, which loads a mod written during a session without asking \
         a person",
    ),
];

/// The mod options that lift the policy over mods, with what each does.
const MODS_SET_ASIDE: [(&str, &str); 2] = [
    (
        "allowModsToOverrideDenyRules",
        "allowModsToOverrideDenyRules: true, which lets mods override deny rules",
    ),
    (
        "allowModsToWriteUserSettings",
        "allowModsToWriteUserSettings: true, which lets mods write the user's settings",
    ),
];

/// The mod policy's options in `settings`, if it has them.
fn mod_policy_options(settings: &Value) -> Option<&Value> {
    MOD_POLICY
        .iter()
        .try_fold(settings, |value, key| value.get(key))
}

/// Managed settings with `allowManagedHooksOnly`, no skill's inline shell
/// (it cannot wait for a person, and a release without
/// `PreSkillShellCommand` runs it under no hook) and no sideloaded plugin
/// ([`TOP_LOCKS`]), only managed mods (`allowManagedModsOnly`:
/// a mod can answer a tool call without any hook) and a person asked
/// before a mod written during a session loads, with what would lift
/// them set aside; and no `disableAllHooks: true`, which in managed
/// settings turns off the managed hooks too (an admin's leftover would
/// switch toolgate off).
fn managed_hooks_only(text: Option<&str>) -> std::result::Result<String, String> {
    let locked = allow_managed_hooks_only(text)?;
    edit_json_object(Some(&locked), |settings| {
        if settings.get("disableAllHooks") == Some(&Value::Bool(true)) {
            settings.remove("disableAllHooks");
        }
        for (key, _) in TOP_LOCKS {
            settings.insert(key.into(), json!(true));
        }
        let mut options = &mut *settings;
        for key in MOD_POLICY {
            options = options
                .entry(key)
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .ok_or_else(|| format!("has a {key} that is not a JSON object"))?;
        }
        for (key, _) in MOD_LOCKS {
            options.insert(key.into(), json!(true));
        }
        for (key, _) in MODS_SET_ASIDE {
            options.remove(key);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managed_lock_keeps_an_admins_settings_but_not_a_managed_switch_off() {
        let before = r#"{"disableAllHooks": true, "model": "opus", "env": {"A": "1"}}"#;
        let edited: Value =
            serde_json::from_str(&managed_hooks_only(Some(before)).unwrap()).unwrap();
        assert_eq!(
            edited,
            json!({
                "allowManagedHooksOnly": true,
                "disableSkillShellExecution": true,
                "disableSideloadFlags": true,
                "model": "opus",
                "env": {"A": "1"},
                "pluginConfigs": {"sec-default@builtin": {"options": {
                    "allowManagedModsOnly": true,
                    "forceHotReloadPrompt": true,
                }}},
            })
        );
        // Once locked, the edit changes nothing: what doctor checks.
        let again = managed_hooks_only(Some(&edited.to_string())).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), edited);
        let kept = r#"{"disableAllHooks": false}"#;
        let edited: Value = serde_json::from_str(&managed_hooks_only(Some(kept)).unwrap()).unwrap();
        assert_eq!(edited["disableAllHooks"], json!(false));
        assert!(managed_hooks_only(Some("[1]")).is_err());
        // What lets a user's mods past the policy is set aside; an admin's
        // other options stay.
        let lifted = r#"{"pluginConfigs": {"sec-default@builtin": {"options":
            {"allowManagedModsOnly": false, "allowModsToOverrideDenyRules": true,
             "allowModsToWriteUserSettings": true, "theme": "dark"}}}}"#;
        let edited: Value =
            serde_json::from_str(&managed_hooks_only(Some(lifted)).unwrap()).unwrap();
        assert_eq!(
            edited["pluginConfigs"]["sec-default@builtin"]["options"],
            json!({"allowManagedModsOnly": true, "forceHotReloadPrompt": true, "theme": "dark"})
        );
        assert!(managed_hooks_only(Some(r#"{"pluginConfigs": []}"#)).is_err());
    }

    #[test]
    fn a_drop_in_undoes_the_lock_with_either_setting() {
        for undoing in [
            r#"{"disableAllHooks": true}"#,
            r#"{"allowManagedHooksOnly": false, "model": "opus"}"#,
            "\u{feff}{\"disableAllHooks\": true}",
            r#"{"pluginConfigs": {"sec-default@builtin": {"options": {"allowManagedModsOnly": false}}}}"#,
            r#"{"pluginConfigs": {"sec-default@builtin": {"options": {"forceHotReloadPrompt": false}}}}"#,
            r#"{"pluginConfigs": {"sec-default@builtin": {"options": {"allowModsToOverrideDenyRules": true}}}}"#,
            r#"{"pluginConfigs": {"sec-default@builtin": {"options": {"allowModsToWriteUserSettings": true}}}}"#,
            r#"{"allowManagedModsOnly": false}"#,
            r#"{"disableSideloadFlags": false}"#,
            r#"{"disableSkillShellExecution": false}"#,
        ] {
            assert!(undoes_managed_hooks_only(undoing).is_some(), "{undoing}");
        }
        for keeping in [
            r#"{"disableAllHooks": false, "allowManagedHooksOnly": true}"#,
            r#"{"hooks": {}}"#,
            "not JSON: Claude Code skips it",
        ] {
            assert_eq!(undoes_managed_hooks_only(keeping), None, "{keeping}");
        }
    }

    #[test]
    fn versions_are_read_from_the_version_line() {
        assert_eq!(parse_version("2.1.332 (Claude Code)\n"), Some((2, 1, 332)));
        assert_eq!(parse_version("nonsense"), None);
        assert!(parse_version("2.1.197 (Claude Code)").unwrap() < CURRENT_SINCE);
    }

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
            user_id: crate::request::DEFAULT_USER_ID.into(),
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
            policy_sha256: String::new(),
            rewritten_sha256: None,
            project: None,
            always_digest: None,
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
}
