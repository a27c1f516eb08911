//! `toolgate hook`: the Claude Code hook adapter and its installer.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use toolgate::claude_code::{self, HookBackend, OnError};
use toolgate::daemon::Client;

#[derive(clap::Subcommand)]
pub enum HookCommand {
    /// Answer one Claude Code hook event read from stdin.
    ///
    /// Handles PreToolUse (prints Claude Code's hook JSON: deny, ask, or
    /// notes as additionalContext; nothing for a plain allow), PostToolUse
    /// (records the outcome) and UserPromptSubmit (starts the next turn).
    /// Always exits 0: an internal failure is answered with --on-error.
    ClaudeCode(ClaudeCodeArgs),
    /// Print the Claude Code settings.json hooks for toolgate, or merge them
    /// into a settings file with --write.
    Install {
        /// Merge into this settings file (created if missing) instead of
        /// printing, e.g. ~/.claude/settings.json or .claude/settings.json.
        #[arg(long, value_name = "SETTINGS.json")]
        write: Option<PathBuf>,
        /// Make the hooks forward to the daemon at this socket.
        #[arg(long, value_name = "SOCKET")]
        connect: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
pub struct ClaudeCodeArgs {
    /// Forward to the daemon at SOCKET instead of loading policies here.
    #[arg(long, value_name = "SOCKET")]
    connect: Option<PathBuf>,
    /// With --connect, when the daemon is down: evaluate in-process
    /// (`in-process`) or answer with --on-error (`fail`).
    #[arg(long, value_enum, default_value_t = Fallback::InProcess)]
    fallback: Fallback,
    /// What to answer when toolgate itself fails.
    #[arg(long, value_enum, default_value_t = OnErrorArg::Deny)]
    on_error: OnErrorArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Fallback {
    InProcess,
    Fail,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum OnErrorArg {
    /// Deny, saying toolgate failed and how to diagnose it.
    Deny,
    /// Ask the person.
    Ask,
    /// Leave it to Claude Code's normal permission flow.
    Allow,
}

impl From<OnErrorArg> for OnError {
    fn from(arg: OnErrorArg) -> Self {
        match arg {
            OnErrorArg::Deny => OnError::Deny,
            OnErrorArg::Ask => OnError::Ask,
            OnErrorArg::Allow => OnError::Allow,
        }
    }
}

/// Run the adapter. `open` builds the in-process host when needed.
pub fn claude_code(
    args: &ClaudeCodeArgs,
    open: impl FnOnce() -> anyhow::Result<toolgate::Toolgate>,
) -> ExitCode {
    let on_error = OnError::from(args.on_error);
    let mut input = String::new();
    let answer = match std::io::stdin().read_to_string(&mut input) {
        Err(err) => claude_code::failure_answer(on_error, &format!("cannot read stdin: {err}"))
            .map(|v| v.to_string()),
        Ok(_) => {
            // A panic must not become a silent allow.
            let run = std::panic::AssertUnwindSafe(|| answer_event(args, &input, on_error, open));
            std::panic::catch_unwind(run).unwrap_or_else(|_| {
                claude_code::failure_answer(on_error, "toolgate panicked").map(|v| v.to_string())
            })
        }
    };
    if let Some(answer) = answer {
        println!("{answer}");
    }
    ExitCode::SUCCESS
}

fn answer_event(
    args: &ClaudeCodeArgs,
    input: &str,
    on_error: OnError,
    open: impl FnOnce() -> anyhow::Result<toolgate::Toolgate>,
) -> Option<String> {
    if let Some(socket) = &args.connect {
        let client = Client::new(socket);
        if client.is_up() {
            return claude_code::handle(&client, input, on_error);
        }
        if matches!(args.fallback, Fallback::Fail) {
            let message = format!(
                "the toolgate daemon at {} is not answering",
                socket.display()
            );
            return claude_code::failure_answer(on_error, &message).map(|v| v.to_string());
        }
        tracing::warn!(socket = %socket.display(), "daemon not answering; evaluating in-process");
    }
    match open() {
        Ok(host) => claude_code::handle(&host as &dyn HookBackend, input, on_error),
        Err(err) => {
            claude_code::failure_answer(on_error, &format!("{err:#}")).map(|v| v.to_string())
        }
    }
}

/// The hooks toolgate needs in Claude Code's settings.
pub fn settings(connect: Option<&PathBuf>, config: Option<&PathBuf>) -> anyhow::Result<Value> {
    let exe = std::env::current_exe().context("cannot find the toolgate binary's path")?;
    let mut command = format!("'{}'", exe.display());
    if let Some(config) = config {
        let config = std::fs::canonicalize(config)
            .with_context(|| format!("cannot find {}", config.display()))?;
        command.push_str(&format!(" --config '{}'", config.display()));
    }
    command.push_str(" hook claude-code");
    if let Some(socket) = connect {
        command.push_str(&format!(" --connect '{}'", socket.display()));
    }
    let hook = |matcher: Option<&str>| {
        let mut entry = json!({"hooks": [{"type": "command", "command": command}]});
        if let Some(matcher) = matcher {
            entry["matcher"] = json!(matcher);
        }
        json!([entry])
    };
    Ok(json!({
        "hooks": {
            "PreToolUse": hook(Some("*")),
            "PostToolUse": hook(Some("*")),
            "UserPromptSubmit": hook(None),
        }
    }))
}

pub fn install(
    write: Option<&PathBuf>,
    connect: Option<&PathBuf>,
    config: Option<&PathBuf>,
) -> anyhow::Result<ExitCode> {
    let ours = settings(connect, config)?;
    let Some(path) = write else {
        println!("{}", serde_json::to_string_pretty(&ours)?);
        return Ok(ExitCode::SUCCESS);
    };
    let mut settings: Value = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| {
            format!("{} is not valid JSON; fix or move it first", path.display())
        })?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    let hooks = settings
        .as_object_mut()
        .context("the settings file must hold a JSON object")?
        .entry("hooks")
        .or_insert_with(|| json!({}));
    for (event, entries) in ours["hooks"].as_object().expect("built above") {
        let list = hooks
            .as_object_mut()
            .context("`hooks` in the settings file must be an object")?
            .entry(event.clone())
            .or_insert_with(|| json!([]));
        let list = list
            .as_array_mut()
            .with_context(|| format!("`hooks.{event}` must be an array"))?;
        // Replace an earlier toolgate entry rather than adding a second one.
        list.retain(|entry| !entry.to_string().contains("hook claude-code"));
        list.extend(entries.as_array().expect("built above").iter().cloned());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(&settings)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("toolgate hooks written to {}", path.display());
    Ok(ExitCode::SUCCESS)
}
