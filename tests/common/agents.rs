//! The real agent CLIs from npm (Codex CLI, Copilot CLI, OpenCode), each in
//! a throwaway home, offline against a scripted model API on loopback, with
//! toolgate's hooks exactly as `toolgate hook install --for RUNTIME --write`
//! writes them; shared by their end-to-end tests and the hook-latency
//! benchmark.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use serde_json::json;

use super::chat_api::ChatApi;
use super::responses_api::{Item, ResponsesApi};

/// The config that pauses every shell command for a person.
pub const BASH_ALWAYS: &str =
    "[plugins.lease-gate.config.actions.Bash]\neffects = [\"execute\"]\napproval = \"always\"\n";

/// The config that lets every shell command through lease-gate unasked
/// (OpenCode's calls are interactive: routine commands would pause).
pub const BASH_UNASKED: &str =
    "[plugins.lease-gate.config.actions.Bash]\neffects = [\"execute\"]\napproval = \"never\"\n";

/// A scripted model API: what the model was sent back for each call.
pub trait ToolOutputs {
    /// Every tool result the model was sent: (call id, output).
    fn tool_outputs(&self) -> Vec<(String, String)>;
}

impl ToolOutputs for ResponsesApi {
    fn tool_outputs(&self) -> Vec<(String, String)> {
        ResponsesApi::tool_outputs(self)
    }
}

impl ToolOutputs for ChatApi {
    fn tool_outputs(&self) -> Vec<(String, String)> {
        ChatApi::tool_outputs(self)
    }
}

/// A run's status, output and the tool outputs so far, for a failure.
pub fn diagnosis(output: &std::process::Output, api: &dyn ToolOutputs) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}\ntool outputs: {:?}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        api.tool_outputs()
    )
}

/// The output the model read for call `id`.
pub fn output_of(api: &dyn ToolOutputs, id: &str, diagnosis: &str) -> String {
    api.tool_outputs()
        .into_iter()
        .find(|(call, _)| call == id)
        .map(|(_, output)| output)
        .unwrap_or_else(|| panic!("no output for {id}: {diagnosis}"))
}

/// Each of the calls `ids` was paused with a request id of its own, which
/// the model reads with who asks, and a person approves each from a
/// terminal of their own: every id a model is told resolves.
pub fn approve_each_pause(api: &dyn ToolOutputs, ids: &[&str], config: &Path, diagnosis: &str) {
    let mut seen: Vec<String> = Vec::new();
    for id in ids {
        let paused = output_of(api, id, diagnosis);
        assert!(
            paused.contains("toolgate (lease-gate asks)") && paused.contains("--request-id "),
            "the model reads who asks and how a person approves: {paused}"
        );
        let request_id = paused
            .split("--request-id ")
            .nth(1)
            .and_then(|rest| rest.split(['`', ' ']).next())
            .unwrap()
            .to_string();
        assert!(
            !seen.contains(&request_id),
            "{id} has an id of its own: {paused}"
        );
        super::hooks::resolve_at_a_terminal(config, &request_id, "approve");
        seen.push(request_id);
    }
}

/// Whether a `echo safe-call-ran` call's output is that it ran: its text,
/// and no refusal (which quotes the command too).
pub fn ran_unrefused(output: &str) -> bool {
    output.contains("safe-call-ran\n") && !output.contains("toolgate")
}

/// A shell call as Copilot's and OpenCode's models make it (`bash`).
pub fn bash(id: &str, command: &str) -> Item {
    Item::Call(
        id.into(),
        "bash".into(),
        json!({"command": command, "description": "run it"}),
    )
}

/// Running a program a test has just copied (the broken-toolgate tests):
/// while the copy was open for writing, a parallel test's fork may have
/// inherited its descriptor, and exec fails with ETXTBSY until that child
/// execs in turn; try again for a moment then.
pub trait OutputEvenIfJustCopied {
    fn output_even_if_just_copied(&mut self) -> std::process::Output;
}

impl OutputEvenIfJustCopied for Command {
    fn output_even_if_just_copied(&mut self) -> std::process::Output {
        for _ in 0..100 {
            match self.output() {
                Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other.unwrap(),
            }
        }
        self.output().unwrap()
    }
}

/// An OpenCode config whose only provider is the scripted chat API at
/// `base_url`, and whose own permission prompts are off (toolgate is what
/// decides here).
pub fn opencode_provider(base_url: &str) -> serde_json::Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Scripted",
            "options": {"baseURL": base_url, "apiKey": "offline-test-key"},
            "models": {"m": {"name": "m", "tool_call": true}},
        }},
        "model": "scripted/m",
        "small_model": "scripted/m",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"bash": "allow", "edit": "allow"},
    })
}

/// `toolgate --config CONFIG hook install --for RUNTIME --write FILE` run
/// from `toolgate` in `project` with exactly `env`; what it said on stderr.
fn install_hooks(
    toolgate: &Path,
    config: &Path,
    runtime: &str,
    file: &Path,
    project: &Path,
    env: Vec<(&'static str, String)>,
) -> String {
    let installed = Command::new(toolgate)
        .arg("--config")
        .arg(config)
        .args(["hook", "install", "--for", runtime, "--write"])
        .arg(file)
        .current_dir(project)
        .env_clear()
        .envs(env)
        .output_even_if_just_copied();
    let said = String::from_utf8_lossy(&installed.stderr).into_owned();
    assert!(installed.status.success(), "{said}");
    said
}

/// Run a real client to its end (bounded: a hung client must not hang the
/// suite), stdin closed, its output kept.
pub fn run_bounded(command: &mut Command) -> std::process::Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    super::wait_bounded(child, Duration::from_secs(240))
}

/// A toolgate config (the bundled policies and `extra`) in `dir`, with its
/// store: (config, store).
fn toolgate_config(dir: &Path, extra: &str) -> (PathBuf, PathBuf) {
    let config = dir.join("toolgate.toml");
    let body = format!(
        "store = \"state/toolgate.redb\"\n{}\n{extra}",
        toolgate::config::DEFAULT_CONFIG
    );
    std::fs::write(&config, super::config_text(&body)).unwrap();
    (config, dir.join("state/toolgate.redb"))
}

/// Measured on the release `tests/real-clients.json` pins.
pub const CODEX: &str = "@openai/codex";

/// Codex's `config.toml` for a run offline against the scripted
/// Responses API at `base_url` (key in `SCRIPTED_API_KEY`), with no
/// approval prompts and no sandbox: what runs is toolgate's to decide.
pub fn codex_config(base_url: &str) -> String {
    format!(
        "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\ncheck_for_update_on_startup = false\n\n\
         [model_providers.scripted]\nname = \"Scripted\"\nbase_url = \"{base_url}\"\n\
         wire_api = \"responses\"\nenv_key = \"SCRIPTED_API_KEY\"\n\
         request_max_retries = 0\nstream_max_retries = 0\n\n\
         [analytics]\nenabled = false\n\n[otel]\nexporter = \"none\"\n"
    )
}

/// A home with `CODEX_HOME` at `~/.codex` pointing Codex at `api`, a
/// project, and a toolgate config (the bundled policies) with its store.
pub struct CodexHome {
    pub dir: tempfile::TempDir,
    pub codex: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    pub config: PathBuf,
    pub store: PathBuf,
}

impl CodexHome {
    pub fn new(api: &ResponsesApi, extra: &str) -> Option<Self> {
        let modules = super::npm::node_modules(&[(CODEX, ".bin/codex")])?;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::fs::create_dir_all(project.join("build")).unwrap();
        std::fs::write(home.join(".codex/config.toml"), codex_config(&api.base_url)).unwrap();
        let (config, store) = toolgate_config(dir.path(), extra);
        Some(Self {
            codex: modules.join(".bin/codex"),
            dir,
            home,
            project,
            config,
            store,
        })
    }

    /// The environment Codex and the installer run in: nothing of the
    /// test's, `codex` on PATH (the installer trusts the hooks through it).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let bin = self.codex.parent().unwrap().display().to_string();
        vec![
            (
                "PATH",
                format!("{bin}:{}", std::env::var("PATH").unwrap_or_default()),
            ),
            ("HOME", self.home.display().to_string()),
            ("CODEX_HOME", self.home.join(".codex").display().to_string()),
            ("SCRIPTED_API_KEY", "offline-test-key".into()),
        ]
    }

    /// `toolgate hook install --for codex --write ~/.codex/hooks.json`
    /// from `toolgate`, in the project; what it said.
    pub fn install(&self, toolgate: &Path) -> String {
        let hooks = self.home.join(".codex/hooks.json");
        install_hooks(
            toolgate,
            &self.config,
            "codex",
            &hooks,
            &self.project,
            self.env(),
        )
    }

    /// One `codex exec` run of `prompt`; its output.
    pub fn run(&self, prompt: &str) -> std::process::Output {
        self.exec(&[prompt])
    }

    /// `codex exec` with `args` (a prompt, or `resume SESSION PROMPT`).
    pub fn exec(&self, args: &[&str]) -> std::process::Output {
        run_bounded(
            Command::new(&self.codex)
                .arg("exec")
                .args(args)
                .args(["--skip-git-repo-check", "--json", "--disable", "plugins"])
                .current_dir(&self.project)
                .env_clear()
                .envs(self.env()),
        )
    }
}

/// Measured on the release `tests/real-clients.json` pins.
pub const COPILOT: &str = "@github/copilot";

/// The `XDG_CACHE_HOME` where `copilot` has unpacked itself (~235 MB, on
/// its first run): once, shared by every test.
pub fn copilot_cache(copilot: &Path) -> PathBuf {
    let cache = super::npm::prefix().join("copilot-cache");
    static UNPACKED: Once = Once::new();
    UNPACKED.call_once(|| {
        let unpacked = Command::new(copilot)
            .arg("--version")
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap();
        assert!(unpacked.status.success(), "copilot --version: {unpacked:?}");
    });
    cache
}

/// A home pointing Copilot at `api`, a project, and a toolgate config (the
/// bundled policies) with its store.
pub struct CopilotHome {
    pub dir: tempfile::TempDir,
    pub copilot: PathBuf,
    pub cache: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    pub config: PathBuf,
    pub store: PathBuf,
    pub api: String,
}

impl CopilotHome {
    pub fn new(api: &ResponsesApi, extra: &str) -> Option<Self> {
        let modules = super::npm::node_modules(&[(COPILOT, ".bin/copilot")])?;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".copilot")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let (config, store) = toolgate_config(dir.path(), extra);
        let copilot = modules.join(".bin/copilot");
        Some(Self {
            cache: copilot_cache(&copilot),
            copilot,
            store,
            dir,
            home,
            project,
            config,
            api: api.base_url.clone(),
        })
    }

    /// The environment Copilot and the installer run in: nothing of the
    /// test's; offline, with the scripted model as its provider.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.home.display().to_string()),
            ("XDG_CACHE_HOME", self.cache.display().to_string()),
        ];
        env.extend(Self::offline_env(&self.api));
        env
    }

    /// What makes Copilot run offline, the scripted Responses API at
    /// `base_url` as its provider.
    pub fn offline_env(base_url: &str) -> Vec<(&'static str, String)> {
        vec![
            ("COPILOT_OFFLINE", "true".into()),
            ("COPILOT_PROVIDER_BASE_URL", base_url.into()),
            ("COPILOT_PROVIDER_API_KEY", "offline-test-key".into()),
            ("COPILOT_PROVIDER_TYPE", "openai".into()),
            ("COPILOT_PROVIDER_WIRE_API", "responses".into()),
            ("COPILOT_MODEL", "gpt-5.5".into()),
        ]
    }

    pub fn copilot_command(&self) -> Command {
        let mut command = Command::new(&self.copilot);
        command
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env());
        command
    }

    /// `toolgate hook install --for copilot --write
    /// ~/.copilot/hooks/toolgate.json` from `toolgate`, in the project.
    pub fn install(&self, toolgate: &Path) {
        let hooks = self.hooks_file();
        install_hooks(
            toolgate,
            &self.config,
            "copilot",
            &hooks,
            &self.project,
            self.env(),
        );
    }

    pub fn hooks_file(&self) -> PathBuf {
        self.home.join(".copilot/hooks/toolgate.json")
    }

    /// One `copilot -p` run of `prompt` (after `args`, e.g. `--resume=ID`).
    pub fn run(&self, args: &[&str], prompt: &str) -> std::process::Output {
        run_bounded(self.copilot_command().args(args).args([
            "-p",
            prompt,
            "--allow-all-tools",
            "--no-auto-update",
        ]))
    }
}

/// Measured on the release `tests/real-clients.json` pins.
pub const OPENCODE: &str = "opencode-ai";

/// A home whose OpenCode talks to `api`, a project, and a toolgate config
/// (the bundled policies) with its store.
pub struct OpenCodeHome {
    pub dir: tempfile::TempDir,
    pub opencode: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    pub config: PathBuf,
    pub store: PathBuf,
}

impl OpenCodeHome {
    pub fn new(api: &ChatApi, extra: &str) -> Option<Self> {
        let modules = super::npm::node_modules(&[(OPENCODE, ".bin/opencode")])?;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let project = dir.path().join("project");
        std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let provider = opencode_provider(&api.base_url);
        std::fs::write(
            home.join(".config/opencode/opencode.json"),
            provider.to_string(),
        )
        .unwrap();
        let (config, store) = toolgate_config(dir.path(), extra);
        Some(Self {
            opencode: modules.join(".bin/opencode"),
            store,
            dir,
            home,
            project,
            config,
        })
    }

    /// The environment OpenCode and the installer run in: nothing of the
    /// test's.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("HOME", self.home.display().to_string()),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ]
    }

    pub fn plugin(&self) -> PathBuf {
        self.home.join(".config/opencode/plugin/toolgate.js")
    }

    /// `toolgate hook install --for opencode --write
    /// ~/.config/opencode/plugin/toolgate.js` from `toolgate`.
    pub fn install(&self, toolgate: &Path) {
        let plugin = self.plugin();
        install_hooks(
            toolgate,
            &self.config,
            "opencode",
            &plugin,
            &self.project,
            self.env(),
        );
    }

    /// One `opencode run` of `prompt` (after `args`, e.g. `--continue`).
    pub fn run(&self, args: &[&str], prompt: &str) -> std::process::Output {
        run_bounded(
            Command::new(&self.opencode)
                .arg("run")
                .args(args)
                .arg(prompt)
                .current_dir(&self.project)
                .env_clear()
                .envs(self.env()),
        )
    }
}
