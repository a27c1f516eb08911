//! toolgate inside the real GitHub Copilot CLI (npm `@github/copilot`), run
//! offline (`copilot -p`, `COPILOT_OFFLINE`, a bring-your-own-key provider
//! on 127.0.0.1 speaking the Responses API), with the hooks exactly as
//! `toolgate hook install --for copilot --write` writes them into a
//! throwaway home's `~/.copilot/hooks/`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use common::hooks::{BIN, StopDaemon};
use common::responses_api::{Item, ResponsesApi};
use serde_json::json;

/// Measured on the release `tests/real-clients.json` pins.
const COPILOT: &str = "@github/copilot";

/// A home pointing Copilot at `api`, a project, and a toolgate config (the
/// bundled policies) with its store.
struct CopilotHome {
    dir: tempfile::TempDir,
    copilot: PathBuf,
    cache: PathBuf,
    home: PathBuf,
    project: PathBuf,
    config: PathBuf,
    store: PathBuf,
    api: String,
}

impl CopilotHome {
    fn new(api: &ResponsesApi, extra: &str) -> Option<Self> {
        let modules = common::npm::node_modules(&[(COPILOT, ".bin/copilot")])?;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".copilot")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let config = dir.path().join("toolgate.toml");
        let body = format!(
            "store = \"state/toolgate.redb\"\n{}\n{extra}",
            toolgate::config::DEFAULT_CONFIG
        );
        std::fs::write(&config, common::config_text(&body)).unwrap();
        let user = Self {
            copilot: modules.join(".bin/copilot"),
            // Copilot unpacks itself (~235 MB) into its cache on first run:
            // once, shared by every test.
            cache: common::npm::prefix().join("copilot-cache"),
            store: dir.path().join("state/toolgate.redb"),
            dir,
            home,
            project,
            config,
            api: api.base_url.clone(),
        };
        static UNPACKED: Once = Once::new();
        UNPACKED.call_once(|| {
            let unpacked = user.copilot_command().arg("--version").output().unwrap();
            assert!(unpacked.status.success(), "copilot --version: {unpacked:?}");
        });
        Some(user)
    }

    /// The environment Copilot and the installer run in: nothing of the
    /// test's; offline, with the scripted model as its provider.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.home.display().to_string()),
            ("XDG_CACHE_HOME", self.cache.display().to_string()),
            ("COPILOT_OFFLINE", "true".into()),
            ("COPILOT_PROVIDER_BASE_URL", self.api.clone()),
            ("COPILOT_PROVIDER_API_KEY", "offline-test-key".into()),
            ("COPILOT_PROVIDER_TYPE", "openai".into()),
            ("COPILOT_PROVIDER_WIRE_API", "responses".into()),
            ("COPILOT_MODEL", "gpt-5.5".into()),
        ]
    }

    fn copilot_command(&self) -> Command {
        let mut command = Command::new(&self.copilot);
        command
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env());
        command
    }

    /// `toolgate hook install --for copilot --write
    /// ~/.copilot/hooks/toolgate.json` from `toolgate`, in the project.
    fn install(&self, toolgate: &Path) {
        let installed = Command::new(toolgate)
            .arg("--config")
            .arg(&self.config)
            .args(["hook", "install", "--for", "copilot", "--write"])
            .arg(self.hooks_file())
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&installed.stderr);
        assert!(installed.status.success(), "{said}");
    }

    fn hooks_file(&self) -> PathBuf {
        self.home.join(".copilot/hooks/toolgate.json")
    }

    /// One `copilot -p` run of `prompt` (after `args`, e.g. `--resume=ID`).
    fn run(&self, args: &[&str], prompt: &str) -> std::process::Output {
        let child = self
            .copilot_command()
            .args(args)
            .args(["-p", prompt, "--allow-all-tools", "--no-auto-update"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        common::wait_bounded(child, Duration::from_secs(240))
    }
}

fn diagnosis(output: &std::process::Output, api: &ResponsesApi) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}\ntool outputs: {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        api.tool_outputs()
    )
}

/// A shell call as Copilot's model makes it.
fn bash(id: &str, command: &str) -> Item {
    Item::Call(
        id.into(),
        "bash".into(),
        json!({"command": command, "description": "run it"}),
    )
}

/// The output the model read for call `id`.
fn output_of(api: &ResponsesApi, id: &str, diagnosis: &str) -> String {
    api.tool_outputs()
        .into_iter()
        .find(|(call, _)| call == id)
        .map(|(_, output)| output)
        .unwrap_or_else(|| panic!("no output for {id}: {diagnosis}"))
}

#[test]
fn inside_copilot_parallel_calls_are_each_answered_and_switching_toolgate_off_is_refused() {
    let api = ResponsesApi::start(vec![
        // Two calls in one response, which Copilot runs side by side: a
        // safe one, and an agent switching toolgate off.
        vec![
            bash("call_safe", "echo safe-call-ran"),
            bash("call_off", "rm -rf ~/.copilot/hooks && echo switched-off"),
        ],
        vec![Item::Text("Understood; I leave it alone.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, "") else {
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
    let refused = output_of(&api, "call_off", &diagnosis);
    assert!(
        refused.contains("Denied by preToolUse hook") && refused.contains("toolgate"),
        "toolgate's reason reaches the model: {refused}"
    );
    assert!(user.hooks_file().exists(), "the command did not run");
}

#[test]
fn inside_copilot_a_broken_toolgate_blocks_the_tool() {
    let api = ResponsesApi::start(vec![
        vec![bash("call_touch", "touch ran.txt")],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    // The hooks run a copy of toolgate, which the agent then breaks.
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
        output_of(&api, "call_touch", &diagnosis).contains("Denied by preToolUse hook"),
        "{diagnosis}"
    );
}

/// The config that pauses every shell command for a person.
const BASH_ALWAYS: &str =
    "[plugins.lease-gate.config.actions.Bash]\neffects = [\"execute\"]\napproval = \"always\"\n";

#[test]
fn inside_copilot_a_pause_is_approved_from_a_terminal_and_the_retry_runs_once() {
    let api = ResponsesApi::start(vec![
        vec![bash("call_1", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("A person must approve it first.".into())],
        vec![bash("call_2", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("It ran.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    // `-p` cannot ask: Copilot denies the `ask` with toolgate's reason.
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
    // Its closing summary names the session: `copilot --resume=ID`.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr)
    );
    let session = said
        .split("--resume=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session to resume: {diagnosis}"))
        .to_string();

    // The person approves from a terminal of their own.
    common::hooks::resolve_at_a_terminal(&user.config, &request_id, "approve");

    // The agent retries in the same session: it runs, once.
    let resume = format!("--resume={session}");
    let second = user.run(&[&resume], "Approved; try again.");
    let diagnosis = self::diagnosis(&second, &api);
    assert!(
        output_of(&api, "call_2", &diagnosis).contains("exit code 0"),
        "{diagnosis}"
    );
    let ran = std::fs::read_to_string(user.project.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the approved call ran once: {diagnosis}"
    );
}
