//! The OpenAI Codex CLI hook adapter (facts measured on 0.171).
//!
//! Events: `PreToolUse` is decided; `PostToolUse` is observed;
//! `UserPromptSubmit` starts the session's next turn (every event of a turn
//! carries its `turn_id`, which binds the calls to it); `SessionStart` only
//! makes sure the daemon runs; anything else is answered with `{}`.
//!
//! Mapping: `tool_name` `Bash` (Codex's `exec_command`) is `Bash` with its
//! `command`; `apply_patch` is `Edit`, with the patch and the files it
//! names; `mcp__SERVER__TOOL` is `TOOL` from MCP server `SERVER`; the
//! session is `session_id`; `permission_mode` maps as Claude Code's does.
//!
//! Answers: a **deny** is `permissionDecision: "deny"` with the reason
//! (what the model reads: "Command blocked by PreToolUse hook: …"). Codex
//! has no "ask" for a hook (an `ask` lets the tool run), so a **pause** is a
//! deny whose reason says who asks and how a person approves it, then the
//! retry. Notes on an allowed call become `additionalContext`.
//!
//! Failing closed: Codex runs the tool when a hook exits 1 or 127, times
//! out, or answers something it does not understand; only exit 2 with a
//! reason, or a deny, blocks. toolgate's hook always answers, and the
//! installed command line turns anything else into exit 2. Codex also runs
//! no hook a person has not trusted (silently), so the installer trusts the
//! hooks it wrote through Codex's own app-server (`hooks/list`, then
//! `config/batchWrite` of `hooks.state."KEY".trusted_hash`), as Codex's TUI
//! does when a person accepts them.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Result;
use super::claude_code::{mode, split_mcp};
use super::{
    Adapter, ConfigDir, Event, EventKind, Install, InstallPlan, RuntimeInfo, SettingsFile,
    SystemHooks, SystemLock, how_to_approve, outcome_of, parse_event,
};
use super::{notes_text, required_tool_name, runs, starts_with_any, tool_input, who_asks};
use crate::decision::{Decision, Verdict};
use crate::request::{Origin, ToolRequest};
use toolgate_wire::InvalidRequest;
use toolgate_wire::protocol::{HookRuntime, OnError};

/// How long Codex waits for toolgate's hook, seconds (its own default is
/// 600; a hook past its timeout lets the tool run, so it must be long
/// enough for a daemon that starts up and compiles).
const HOOK_TIMEOUT_SECS: u64 = 30;

/// How long the installer waits for Codex's app-server.
const APP_SERVER_WAIT: Duration = Duration::from_secs(30);

/// One hook event; unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct CodexEvent {
    /// The Codex session (its thread id).
    pub session_id: String,
    /// The turn (one user prompt and what follows); absent on SessionStart.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// The session's rollout file (JSONL).
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    /// The working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `SessionStart`, ...
    pub hook_event_name: String,
    /// `default`, `bypassPermissions`, ...
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// `Bash`, `apply_patch`, `mcp__SERVER__TOOL`, ...
    #[serde(default)]
    pub tool_name: Option<String>,
    /// The tool's input.
    #[serde(default, deserialize_with = "super::present")]
    pub tool_input: Option<Value>,
    /// The model's id for the call.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The result, for `PostToolUse`.
    #[serde(default)]
    pub tool_response: Option<Value>,
}

impl CodexEvent {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<Self> {
        parse_event(text, "Codex")
    }

    /// The toolgate request for a tool event.
    pub fn to_request(&self) -> Result<ToolRequest> {
        let name = required_tool_name(&self.hook_event_name, self.tool_name.as_deref())?;
        let input = tool_input(&self.hook_event_name, self.tool_input.as_ref())?;
        let (tool, origin, arguments) = match (name, split_mcp(name)) {
            (_, Some((server, tool))) => (tool.to_string(), Origin::Mcp(server.into()), input),
            ("apply_patch", None) => {
                let patch = input["command"].as_str().ok_or_else(|| {
                    InvalidRequest(format!(
                        "malformed {} event: apply_patch's `tool_input.command` must be the \
                         patch text; the call is refused",
                        self.hook_event_name
                    ))
                })?;
                ("Edit".to_string(), Origin::Builtin, patch_arguments(patch))
            }
            (name, None) => (name.to_string(), Origin::Builtin, input),
        };
        let mut request = ToolRequest::new(tool, arguments);
        request.origin = origin;
        request.call_id = self.tool_use_id.clone();
        request.session_id = self.session_id.clone();
        request.channel = HookRuntime::Codex.name().into();
        request.mode = mode(self.permission_mode.as_deref());
        request.transcript_path = self.transcript_path.clone();
        request.cwd = self.cwd.clone();
        Ok(request)
    }
}

/// An `apply_patch` patch (`*** Begin Patch …`) as an edit's arguments:
/// the patch, and the files it adds, updates, deletes or moves to, so the
/// policies and the guard see the paths.
pub(super) fn patch_arguments(patch: &str) -> Value {
    let files: Vec<&str> = patch
        .lines()
        .filter_map(|line| {
            [
                "*** Add File: ",
                "*** Update File: ",
                "*** Delete File: ",
                "*** Move to: ",
            ]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
        })
        .map(str::trim)
        .collect();
    json!({
        "file_path": files.first().copied().unwrap_or_default(),
        "file_paths": files,
        "patch": patch,
    })
}

/// Codex's system folder: its `config.toml` layer (and that layer's
/// `hooks.json`) and its enforced `requirements.toml`; no setting or
/// `CODEX_HOME` moves it.
const SYSTEM_DIR: &str = "/etc/codex";

/// Codex CLI's hooks.
pub struct Codex;

/// What toolgate knows of Codex CLI.
pub const INFO: RuntimeInfo = RuntimeInfo {
    runtime: HookRuntime::Codex,
    deciding_event: "PreToolUse",
    config_dir: ConfigDir {
        variable: Some("CODEX_HOME"),
        then: "",
        under_home: ".codex",
    },
    user_hooks: "hooks.json",
    guarded: &[".codex/hooks.json", ".codex/config.toml", ".codex/plugins"],
    settings_files: SETTINGS,
    system_hooks: Some(SYSTEM_HOOKS),
    switch_off_marks: &["codex"],
    switches_off,
    hook_timeout_secs: Some(HOOK_TIMEOUT_SECS),
    http_hooks: false,
    failure_answer,
    install: Install {
        trust_installed,
        ..Install::hooks(settings)
    },
    hook_help: "Answer one OpenAI Codex CLI hook event read from stdin.\n\n\
         Decides PreToolUse (a deny, or for a pause, which a Codex hook cannot ask, a deny saying \
         how a person approves it; notes as additionalContext; `{}` to allow), records \
         PostToolUse, UserPromptSubmit starts the next turn, SessionStart only starts the daemon. \
         Through the store's daemon like `claude-code`; always exits 0.",
};

/// What its hook prints when toolgate itself failed (see
/// [`crate::failure_answer`]).
fn failure_answer(on_error: OnError, reason: &str) -> Value {
    match on_error {
        OnError::Allow => json!({}),
        // Codex cannot ask in a hook (an "ask" lets the tool run): a
        // failure denies.
        OnError::Ask | OnError::Deny => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}),
    }
}

/// The system layer's `hooks.json`, whose hooks are managed (no user
/// setting disables them); `requirements.toml` then runs only managed
/// hooks and pins the hooks feature on, so `-c features.hooks=false`
/// and a user's or project's hooks change nothing.
const SYSTEM_HOOKS: SystemHooks = SystemHooks {
    file: "/etc/codex/hooks.json",
    lock: Some(SystemLock {
        file: "/etc/codex/requirements.toml",
        edit: only_managed_hooks,
        does: "allow_managed_hooks_only and the hooks feature pinned on: a user's, a \
                   project's or a flag's hooks are ignored, and hooks cannot be turned off",
        drop_ins: None,
    }),
};

const SETTINGS: &[SettingsFile] = &[
    SettingsFile::new(".codex", "hooks", "Codex's hooks (.codex/hooks.json)"),
    SettingsFile::new(
        ".codex",
        "config",
        "Codex's config, which holds its hooks and their trust (.codex/config.toml)",
    ),
    SettingsFile::new(".codex", "plugins", "Codex's plugins (.codex/plugins/)"),
    SettingsFile::new(
        "",
        ".codex-plugin",
        "a Codex plugin's manifest (.codex-plugin/)",
    ),
];

/// Codex started with its config elsewhere (`CODEX_HOME`, `HOME`) or
/// its hooks off or replaced by a setting on its command line (`-c
/// features.hooks=false`, `--config=…`, `-c…`, the older
/// `features.codex_hooks`, a whole `features` table, `hooks.…`) or by
/// `--disable hooks` runs without the hooks `toolgate hook install`
/// wrote (a system install's `requirements.toml` still holds).
fn switches_off(words: &[&str]) -> Option<&'static str> {
    let about_hooks = |setting: &str| {
        let key = setting.trim_start_matches(['"', '\'']);
        [
            "features.hooks",
            "features.codex_hooks",
            "features=",
            "features ",
            "hooks",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
    };
    let next_is = |i: usize, what: &dyn Fn(&str) -> bool| words.get(i + 1).is_some_and(|w| what(w));
    let off = || {
        words.iter().enumerate().any(|(i, word)| {
            let word = word.trim_start_matches(['"', '\'']);
            match word {
                "-c" | "--config" => next_is(i, &about_hooks),
                "--disable" => next_is(i, &|flag| flag.contains("hooks")),
                _ => {
                    (word
                        .strip_prefix("--config=")
                        .or_else(|| word.strip_prefix("-c").map(|v| v.trim_start_matches('='))))
                    .is_some_and(about_hooks)
                        || word
                            .strip_prefix("--disable=")
                            .is_some_and(|flag| flag.contains("hooks"))
                }
            }
        })
    };
    // Without the user config its hooks' trust is gone (so they are
    // skipped), and untrusted hooks may run and rewrite a call.
    let switches = [
        "CODEX_HOME",
        "HOME",
        "--ignore-user-config",
        "--dangerously-bypass-hook-trust",
    ];
    (runs(words, "codex") && off() || starts_with_any(words, "codex", &switches))
        .then_some("start Codex with its config moved or its hooks off")
}

impl Adapter for Codex {
    fn info(&self) -> &'static RuntimeInfo {
        &INFO
    }

    fn parse(&self, input: &str) -> Result<Event> {
        let event = CodexEvent::parse(input)?;
        let kind = match event.hook_event_name.as_str() {
            "UserPromptSubmit" => EventKind::NewTurn,
            "PreToolUse" => EventKind::Decide {
                request: event.to_request()?,
                can_ask: false,
            },
            "PostToolUse" => EventKind::ran(
                event.to_request()?,
                outcome_of(event.tool_response.as_ref()),
            ),
            _ => EventKind::Nothing,
        };
        Ok(Event {
            session: event.session_id,
            prompt: event.turn_id,
            kind,
        })
    }

    fn answer(&self, decision: &Decision, _can_ask: bool) -> Value {
        answer(decision)
    }
}

/// `hooks.json` in `CODEX_HOME` (the shape of Claude Code's settings):
/// commands with a timeout; `*` matches every tool.
fn settings(plan: &InstallPlan<'_>) -> Value {
    let hook = |matcher: Option<&str>| {
        let handler =
            json!({"type": "command", "command": plan.command, "timeout": HOOK_TIMEOUT_SECS});
        let mut entry = json!({"hooks": [handler]});
        if let Some(matcher) = matcher {
            entry["matcher"] = json!(matcher);
        }
        json!([entry])
    };
    json!({"hooks": {
        "SessionStart": hook(None),
        "UserPromptSubmit": hook(None),
        "PreToolUse": hook(Some("*")),
        "PostToolUse": hook(Some("*")),
    }})
}

/// Hooks in Codex's system folder are managed: Codex runs them with no
/// person's trust (and none can be given to them).
fn trust_installed(
    marker: &str,
    written: &std::path::Path,
) -> std::result::Result<Option<String>, String> {
    if written.parent() == Some(std::path::Path::new(SYSTEM_DIR)) {
        return Ok(Some(
            "hooks in /etc/codex are managed: Codex runs them without a person's trust".into(),
        ));
    }
    trust_hooks(marker).map(|trusted| {
        Some(format!(
            "trusted {trusted} of toolgate's hooks in Codex (as accepting them in its TUI does)"
        ))
    })
}

/// `requirements.toml` (its text, if any) with only managed hooks run and
/// the hooks feature pinned on; the rest of it kept as the admin wrote it,
/// comments and layout too.
fn only_managed_hooks(text: Option<&str>) -> std::result::Result<String, String> {
    let mut requirements: toml_edit::DocumentMut = text
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("is not TOML ({e})"))?;
    requirements["allow_managed_hooks_only"] = toml_edit::value(true);
    let features = requirements
        .entry("features")
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or("`features` must be a table")?;
    features.insert("hooks", toml_edit::value(true));
    Ok(requirements.to_string())
}

/// The answer to a `PreToolUse` event (see the module docs).
pub fn answer(decision: &Decision) -> Value {
    let notes = notes_text(decision);
    let deny = |reason: String| {
        let mut output = json!({
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        });
        if let Some(notes) = &notes {
            output["additionalContext"] = json!(notes);
        }
        json!({ "hookSpecificOutput": output })
    };
    match decision.verdict {
        Verdict::Deny => deny(decision.reason.clone().unwrap_or_default()),
        Verdict::Pause => deny(format!(
            "{}{}",
            who_asks(decision),
            how_to_approve(decision)
        )),
        Verdict::Allow => match notes {
            Some(notes) => json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "additionalContext": notes,
            }}),
            None => json!({}),
        },
    }
}

/// Trust, through `codex app-server`, every hook whose command contains
/// `marker` that Codex does not trust yet; how many were trusted.
fn trust_hooks(marker: &str) -> std::result::Result<usize, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    let mut server = AppServer::start()?;
    server.call(
        "initialize",
        json!({"clientInfo": {"name": "toolgate", "version": env!("CARGO_PKG_VERSION")}}),
    )?;
    server.notify("initialized")?;
    let listed = server.call("hooks/list", json!({"cwds": [cwd]}))?;
    let edits: Vec<Value> = listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|scope| scope["hooks"].as_array().cloned().unwrap_or_default())
        .filter(|hook| {
            hook["command"].as_str().is_some_and(|c| c.contains(marker))
                && !matches!(hook["trustStatus"].as_str(), Some("trusted" | "managed"))
        })
        .filter_map(|hook| {
            let (key, hash) = (hook["key"].as_str()?, hook["currentHash"].as_str()?);
            let key = key.replace('\\', "\\\\").replace('"', "\\\"");
            Some(json!({
                "keyPath": format!("hooks.state.\"{key}\".trusted_hash"),
                "value": hash,
                "mergeStrategy": "replace",
            }))
        })
        .collect();
    if !edits.is_empty() {
        server.call("config/batchWrite", json!({"edits": edits}))?;
    }
    Ok(edits.len())
}

/// `codex app-server`, spoken to over stdio (JSON-RPC, a message a line).
struct AppServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl AppServer {
    fn start() -> std::result::Result<Self, String> {
        let mut child = std::process::Command::new("codex")
            .arg("app-server")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run `codex app-server` ({e}) to trust the hooks; is Codex installed \
                     (`npm install -g @openai/codex`)? Without trust Codex runs none of them"
                )
            })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
            {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin,
            lines,
            next_id: 1,
        })
    }

    fn notify(&mut self, method: &str) -> std::result::Result<(), String> {
        let message = json!({"jsonrpc": "2.0", "method": method});
        writeln!(self.stdin, "{message}").map_err(|e| format!("codex app-server: {e}"))
    }

    /// Call `method`; its result, or its error as text.
    fn call(&mut self, method: &str, params: Value) -> std::result::Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{message}").map_err(|e| format!("codex app-server: {e}"))?;
        let deadline = std::time::Instant::now() + APP_SERVER_WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("codex app-server gave no answer to {method}"))?;
            let Ok(answer) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if answer["id"] != json!(id) {
                continue;
            }
            if let Some(error) = answer.get("error") {
                return Err(format!("codex app-server refused {method}: {error}"));
            }
            return Ok(answer["result"].clone());
        }
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_mode_keeps_an_admins_requirements_and_pins_hooks_on() {
        let admin = "allowed_approval_policies = [\"on-request\"]\n\n[features]\nhooks = false\nweb_search = true\n";
        let edited: toml::Table = only_managed_hooks(Some(admin)).unwrap().parse().unwrap();
        assert_eq!(edited["allow_managed_hooks_only"], true.into());
        assert_eq!(edited["features"]["hooks"], true.into());
        assert_eq!(edited["features"]["web_search"], true.into());
        assert_eq!(
            edited["allowed_approval_policies"][0].as_str(),
            Some("on-request")
        );
        let again = only_managed_hooks(Some(&toml::to_string(&edited).unwrap())).unwrap();
        assert_eq!(
            again.parse::<toml::Table>().unwrap(),
            edited,
            "a second run changes nothing"
        );
        assert!(only_managed_hooks(Some("features = 1")).is_err());
        assert!(only_managed_hooks(Some("[broken")).is_err());
    }

    /// An admin's file is theirs: what they wrote in it, comments and
    /// layout too, is kept; only the two settings change.
    #[test]
    fn system_mode_keeps_an_admins_comments_and_layout() {
        let admin = "# Set by IT (ticket 4711): approvals only on request.\n\
                     allowed_approval_policies = [\"on-request\"]  # not \"never\"\n\
                     features = { hooks = false, web_search = true }\n";
        let edited = only_managed_hooks(Some(admin)).unwrap();
        for kept in [
            "# Set by IT (ticket 4711): approvals only on request.",
            "allowed_approval_policies = [\"on-request\"]  # not \"never\"",
        ] {
            assert!(edited.contains(kept), "{kept} lost:\n{edited}");
        }
        let table: toml::Table = edited.parse().unwrap();
        assert_eq!(table["features"]["hooks"], true.into());
        assert_eq!(table["features"]["web_search"], true.into());
        assert_eq!(table["allow_managed_hooks_only"], true.into());
        assert_eq!(
            only_managed_hooks(Some(&edited)).unwrap(),
            edited,
            "a second run changes nothing"
        );
    }

    #[test]
    fn tools_map_onto_the_policies_vocabulary() {
        let event = |tool: &str, input: Value| {
            CodexEvent::parse(
                &json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input})
                    .to_string(),
            )
            .unwrap()
            .to_request()
            .unwrap()
        };
        let bash = event("Bash", json!({"command": "ls"}));
        assert_eq!(
            (bash.tool.as_str(), &bash.origin),
            ("Bash", &Origin::Builtin)
        );
        let mcp = event("mcp__github__create_issue", json!({"title": "x"}));
        assert_eq!(mcp.tool, "create_issue");
        assert_eq!(mcp.origin, Origin::Mcp("github".into()));
        let patch =
            "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: src/b.rs\n*** End Patch\n";
        let edit = event("apply_patch", json!({"command": patch}));
        assert_eq!(edit.tool, "Edit");
        assert_eq!(edit.arguments["file_path"], "a.txt");
        assert_eq!(edit.arguments["file_paths"], json!(["a.txt", "src/b.rs"]));
        assert_eq!(edit.arguments["patch"], patch);
    }
}
