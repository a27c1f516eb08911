//! The real Claude Code CLI (npm), offline: where it is installed, a
//! throwaway home with toolgate's hooks installed, and one `-p` run
//! against a scripted Messages API.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::messages_api::MessagesApi;

/// Claude Code, at the release `tests/real-clients.json` pins (an exact
/// version: `@2.1` gave 2.1.197 on one machine while 2.1.332 was current).
pub const CLAUDE_CODE: &str = "@anthropic-ai/claude-code";

/// The installed `claude`, installing it if needed; `None` (with the reason
/// printed) only when npm cannot reach the registry.
pub fn claude_binary() -> Option<PathBuf> {
    let modules = super::npm::node_modules(&[(CLAUDE_CODE, ".bin/claude")])?;
    Some(modules.join(".bin/claude"))
}

/// As [`claude_binary`], for the oldest release the docs claim
/// (`"oldest-supported"` in `tests/real-clients.json`).
pub fn oldest_claude_binary() -> Option<PathBuf> {
    let modules = super::npm::oldest_supported(CLAUDE_CODE, ".bin/claude")?;
    Some(modules.join(".bin/claude"))
}

/// What a `-p` run said, for a failed assertion: its exit status, the
/// requests the model API saw, its stdout and stderr.
pub fn diagnosis(output: &std::process::Output, api: &MessagesApi) -> String {
    format!(
        "status {:?}\nrequests: {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        api.seen(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The result of tool call `id` that model turn `turn` carried: whether it
/// is an error, and its text.
/// The session a `-p --output-format stream-json` run names (for
/// `--resume`); panics with `diagnosis` if it names none.
pub fn session_of(run: &std::process::Output, diagnosis: &str) -> String {
    String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|event| event["session_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("Claude Code named no session: {diagnosis}"))
}

pub fn result_in(turns: &[Value], turn: usize, id: &str, diagnosis: &str) -> (bool, String) {
    let (_, is_error, text) = turns
        .get(turn)
        .map(tool_results)
        .unwrap_or_default()
        .into_iter()
        .find(|(tool_use, ..)| tool_use == id)
        .unwrap_or_else(|| panic!("no result for {id} in turn {turn}: {diagnosis}"));
    (is_error, text)
}

/// The `tool_result` blocks of a request's messages, by `tool_use_id`.
pub fn tool_results(request: &Value) -> Vec<(String, bool, String)> {
    let mut results = Vec::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let content = match &block["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                results.push((
                    block["tool_use_id"].as_str().unwrap_or("").to_string(),
                    block["is_error"] == json!(true),
                    content,
                ));
            }
        }
    }
    results
}

/// A home and project for one Claude Code user, a config (the bundled
/// policies plus `extra`) with its store beside it, and the hooks installed
/// by `toolgate` (a path to the binary) into the home's settings.
/// The real Claude Code and a home with toolgate's hooks installed, on
/// the bundled default config plus `extra`; the daemon the hooks start
/// stops when it drops (before the home is removed).
pub struct Installed {
    _stop: super::hooks::StopDaemon,
    pub claude: PathBuf,
    pub user: ClaudeHome,
}

/// [`Installed`], or `None` where Claude Code is skipped on purpose (see
/// [`claude_binary`]).
pub fn installed(extra: &str) -> Option<Installed> {
    let claude = claude_binary()?;
    let user = ClaudeHome::new(extra);
    user.install(Path::new(super::hooks::BIN));
    Some(Installed {
        _stop: super::hooks::StopDaemon(user.store.clone()),
        claude,
        user,
    })
}

pub struct ClaudeHome {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub config: PathBuf,
    pub store: PathBuf,
}

impl ClaudeHome {
    pub fn new(extra: &str) -> Self {
        Self::with_policies(&format!("{}\n{extra}", toolgate::config::DEFAULT_CONFIG))
    }

    /// A home whose config is `policies` alone (no bundled defaults).
    pub fn with_policies(policies: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        for d in [home.join(".claude"), project.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let config = dir.path().join("toolgate.toml");
        let body = format!("store = \"state/toolgate.redb\"\n{policies}");
        std::fs::write(&config, super::config_text(&body)).unwrap();
        let store = dir.path().join("state/toolgate.redb");
        Self {
            dir,
            home,
            project,
            config,
            store,
        }
    }

    /// What the interactive TUI asks of a first run, answered: onboarding
    /// done, the project trusted, the offline API key accepted (else it
    /// goes to the network or stops at a dialog).
    pub fn seed_interactive(&self) {
        let key_suffix = &OFFLINE_KEY[OFFLINE_KEY.len() - 20..];
        let state = json!({
            "hasCompletedOnboarding": true,
            "projects": {self.project.display().to_string(): {
                "hasTrustDialogAccepted": true,
                "hasCompletedProjectOnboarding": true,
            }},
            "customApiKeyResponses": {"approved": [key_suffix], "rejected": []},
        });
        std::fs::write(self.home.join(".claude/.claude.json"), state.to_string()).unwrap();
    }

    /// `toolgate hook install --write` from `toolgate`; what it wrote.
    pub fn install(&self, toolgate: &Path) -> String {
        self.install_with(&mut Command::new(toolgate))
    }

    /// As [`ClaudeHome::install`], with `claude` first on the installer's
    /// `PATH`: the release it writes the hooks for.
    pub fn install_seeing(&self, toolgate: &Path, claude: &Path) -> String {
        let path = format!(
            "{}:{}",
            claude.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        self.install_with(Command::new(toolgate).env("PATH", path))
    }

    fn install_with(&self, command: &mut Command) -> String {
        let settings = self.home.join(".claude/settings.json");
        let installed = command
            .arg("--config")
            .arg(&self.config)
            .args(["hook", "install", "--write"])
            .arg(&settings)
            .output()
            .unwrap();
        assert!(installed.status.success(), "{installed:?}");
        std::fs::read_to_string(&settings).unwrap()
    }
}

/// The config that pauses every `Write` for a person.
pub const WRITE_ALWAYS: &str = "[plugins.lease-gate.config.actions.Write]\neffects = [\"write-local\"]\napproval = \"always\"\n";

/// The model the scripted API plays.
pub const MODEL: &str = "claude-sonnet-4-5";

/// The API key Claude Code is given (the scripted API takes any).
const OFFLINE_KEY: &str = "sk-ant-offline-test-key-0000";

/// The environment the real Claude Code runs in, offline: `home`'s
/// settings, `api` as the model, nothing sent anywhere else.
pub fn offline_env(home: &Path, api: &MessagesApi) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.display().to_string()),
        ("IS_SANDBOX", "1".into()),
        (
            "CLAUDE_CONFIG_DIR",
            home.join(".claude").display().to_string(),
        ),
        ("ANTHROPIC_BASE_URL", api.base_url.clone()),
        ("ANTHROPIC_API_KEY", OFFLINE_KEY.into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("TERM", "xterm-256color".into()),
    ]
}

/// Run the real Claude Code once, `-p`, in `project` with `home`'s
/// settings, against `api`, with `extra` arguments; its output.
pub fn run_claude(
    claude: &Path,
    home: &Path,
    project: &Path,
    api: &MessagesApi,
    prompt: &str,
    extra: &[&str],
) -> std::process::Output {
    super::agents::run_bounded(
        Command::new(claude)
            .args(["-p", prompt])
            .args(["--output-format", "stream-json", "--verbose"])
            .args(["--setting-sources", "user", "--model", MODEL])
            .args(extra)
            .current_dir(project)
            .env_clear()
            .envs(offline_env(home, api)),
    )
}
