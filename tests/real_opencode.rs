//! toolgate inside the real OpenCode (npm `opencode-ai`), run offline
//! (`opencode run`) against a scripted OpenAI-compatible chat API on
//! 127.0.0.1, with toolgate's plugin exactly as `toolgate hook install --for
//! opencode --write` writes it into a throwaway home's
//! `~/.config/opencode/plugin/`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::chat_api::ChatApi;
use common::hooks::{BIN, StopDaemon};
use common::responses_api::Item;
use serde_json::json;

/// Measured on the release `tests/real-clients.json` pins.
const OPENCODE: &str = "opencode-ai";

/// A home whose OpenCode talks to `api`, a project, and a toolgate config
/// (the bundled policies) with its store.
struct OpenCodeHome {
    dir: tempfile::TempDir,
    opencode: PathBuf,
    home: PathBuf,
    project: PathBuf,
    config: PathBuf,
    store: PathBuf,
}

impl OpenCodeHome {
    fn new(api: &ChatApi, extra: &str) -> Option<Self> {
        let modules = common::npm::node_modules(&[(OPENCODE, ".bin/opencode")])?;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let provider = json!({
            "$schema": "https://opencode.ai/config.json",
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": api.base_url, "apiKey": "offline-test-key"},
                "models": {"m": {"name": "m", "tool_call": true}},
            }},
            "model": "scripted/m",
            "small_model": "scripted/m",
            "autoupdate": false,
            "share": "disabled",
            // OpenCode's own prompts off: toolgate is what decides here.
            "permission": {"bash": "allow", "edit": "allow"},
        });
        std::fs::write(
            home.join(".config/opencode/opencode.json"),
            provider.to_string(),
        )
        .unwrap();
        let config = dir.path().join("toolgate.toml");
        let body = format!(
            "store = \"state/toolgate.redb\"\n{}\n{extra}",
            toolgate::config::DEFAULT_CONFIG
        );
        std::fs::write(&config, common::config_text(&body)).unwrap();
        Some(Self {
            opencode: modules.join(".bin/opencode"),
            store: dir.path().join("state/toolgate.redb"),
            dir,
            home,
            project,
            config,
        })
    }

    /// The environment OpenCode and the installer run in: nothing of the
    /// test's.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.home.display().to_string()),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ]
    }

    fn plugin(&self) -> PathBuf {
        self.home.join(".config/opencode/plugin/toolgate.js")
    }

    /// `toolgate hook install --for opencode --write
    /// ~/.config/opencode/plugin/toolgate.js` from `toolgate`.
    fn install(&self, toolgate: &Path) {
        let installed = Command::new(toolgate)
            .arg("--config")
            .arg(&self.config)
            .args(["hook", "install", "--for", "opencode", "--write"])
            .arg(self.plugin())
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&installed.stderr);
        assert!(installed.status.success(), "{said}");
    }

    /// One `opencode run` of `prompt` (after `args`, e.g. `--continue`).
    fn run(&self, args: &[&str], prompt: &str) -> std::process::Output {
        let child = Command::new(&self.opencode)
            .arg("run")
            .args(args)
            .arg(prompt)
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        common::wait_bounded(child, Duration::from_secs(240))
    }
}

fn diagnosis(output: &std::process::Output, api: &ChatApi) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}\ntool outputs: {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        api.tool_outputs()
    )
}

/// A shell call as OpenCode's model makes it.
fn bash(id: &str, command: &str) -> Item {
    Item::Call(
        id.into(),
        "bash".into(),
        json!({"command": command, "description": "run it"}),
    )
}

/// The output the model read for call `id`.
fn output_of(api: &ChatApi, id: &str, diagnosis: &str) -> String {
    api.tool_outputs()
        .into_iter()
        .find(|(call, _)| call == id)
        .map(|(_, output)| output)
        .unwrap_or_else(|| panic!("no output for {id}: {diagnosis}"))
}

#[test]
fn inside_opencode_parallel_calls_are_each_answered_and_switching_toolgate_off_is_refused() {
    let api = ChatApi::start(vec![
        // Three calls in one response, which OpenCode runs side by side: a
        // safe one, one removing toolgate's plugin, and one starting an
        // OpenCode that loads no plugin.
        vec![
            bash("call_safe", "echo safe-call-ran"),
            bash(
                "call_off",
                "rm -rf ~/.config/opencode/plugin && echo switched-off",
            ),
            bash("call_pure", "OPENCODE_PURE=1 opencode run 'touch pure.txt'"),
        ],
        vec![Item::Text("Understood; I leave it alone.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    let output = user.run(&[], "Say hello, then tidy up.");
    let diagnosis = diagnosis(&output, &api);
    assert!(output.status.success(), "{diagnosis}");
    assert!(
        output_of(&api, "call_safe", &diagnosis).contains("safe-call-ran"),
        "{diagnosis}"
    );
    for id in ["call_off", "call_pure"] {
        let refused = output_of(&api, id, &diagnosis);
        assert!(
            refused.contains("toolgate refused this call"),
            "toolgate's reason reaches the model: {refused}"
        );
    }
    assert!(
        output_of(&api, "call_pure", &diagnosis).contains("without its plugins"),
        "{diagnosis}"
    );
    assert!(user.plugin().exists(), "the command did not run");
    assert!(!user.project.join("pure.txt").exists(), "{diagnosis}");
}

#[test]
fn inside_opencode_a_broken_toolgate_blocks_the_tool() {
    let api = ChatApi::start(vec![
        vec![bash("call_touch", "touch ran.txt")],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    // The plugin runs a copy of toolgate, which the agent then breaks.
    let copy = user.dir.path().join("toolgate");
    std::fs::copy(BIN, &copy).unwrap();
    user.install(&copy);
    std::fs::write(&copy, "#!/bin/sh\nexit 1\n").unwrap();

    let output = user.run(&[], "Touch ran.txt.");
    let diagnosis = diagnosis(&output, &api);
    assert!(
        !user.project.join("ran.txt").exists(),
        "a broken hook must block the tool: {diagnosis}"
    );
    assert!(
        output_of(&api, "call_touch", &diagnosis).contains("so this call is blocked"),
        "{diagnosis}"
    );
}

/// The config that pauses every shell command for a person.
const BASH_ALWAYS: &str =
    "[plugins.lease-gate.config.actions.Bash]\neffects = [\"execute\"]\napproval = \"always\"\n";

#[test]
fn inside_opencode_a_pause_is_approved_from_a_terminal_and_the_retry_runs_once() {
    let api = ChatApi::start(vec![
        vec![bash("call_1", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("A person must approve it first.".into())],
        vec![bash("call_2", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("It ran.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    let first = user.run(&[], "Record that it ran.");
    let diagnosis = diagnosis(&first, &api);
    let paused = output_of(&api, "call_1", &diagnosis);
    assert!(
        paused.contains("toolgate (lease-gate asks)") && paused.contains("--request-id "),
        "the model reads who asks and how a person approves: {paused}"
    );
    assert!(!user.project.join("ran.txt").exists(), "{diagnosis}");
    let request_id = paused
        .split("--request-id ")
        .nth(1)
        .and_then(|rest| rest.split(['`', ' ']).next())
        .unwrap()
        .to_string();

    // The person approves from a terminal of their own.
    common::hooks::resolve_at_a_terminal(&user.config, &request_id, "approve");

    // The agent retries in the same session: it runs, once.
    let second = user.run(&["--continue"], "Approved; try again.");
    let diagnosis = self::diagnosis(&second, &api);
    output_of(&api, "call_2", &diagnosis);
    let ran = std::fs::read_to_string(user.project.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the approved call ran once: {diagnosis}"
    );
}
