//! `toolgate hook`: the Claude Code hook adapter and its installer.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use toolgate::daemon::{DaemonRequest, HookRuntime};
use toolgate::hooks::{self, InstallPlan, Needs, OnError};
use toolgate::store::Store;

use crate::target::{Ctx, store_wait};

#[derive(clap::Subcommand)]
pub enum HookCommand {
    /// One subcommand per runtime (`claude-code`, `codex`, …), from the
    /// runtimes' list: see [`RuntimeHook`].
    #[command(flatten)]
    Runtime(RuntimeHook),
    /// Print the hooks toolgate needs in an agent runtime's settings (Claude
    /// Code's settings.json by default), or merge them into a settings file
    /// with --write.
    Install {
        /// Merge into this settings file (created if missing) instead of
        /// printing, e.g. ~/.claude/settings.json, ~/.gemini/settings.json,
        /// ~/.cursor/hooks.json, ~/.copilot/hooks/toolgate.json,
        /// ~/.config/opencode/plugin/toolgate.js (OpenCode: toolgate's
        /// plugin, written whole) or ~/.codex/hooks.json (for Codex the
        /// installer then trusts toolgate's hooks through `codex
        /// app-server`: Codex runs no untrusted hook).
        #[arg(long, value_name = "SETTINGS.json")]
        write: Option<PathBuf>,
        /// Make the hooks use the daemon at this socket instead of the
        /// store's own.
        #[arg(long, value_name = "SOCKET")]
        connect: Option<PathBuf>,
        /// The agent runtime whose settings to write.
        #[arg(long = "for", value_parser = runtime_arg(), default_value = HookRuntime::default().name())]
        runtime: HookRuntime,
        /// How Claude Code reaches toolgate: `http` (in-process requests to
        /// the daemon's `[daemon] http` address, no process per call; a
        /// daemon that is down blocks), `command` (a process per call), or
        /// `auto`: http when the config serves HTTP and Claude Code has
        /// HTTP hooks (2.1.295+), else command. SessionStart is always a
        /// command: it starts the daemon.
        #[arg(long, value_enum, default_value_t = Transport::Auto)]
        transport: Transport,
        /// Stop a daemon that serves the store with another config (which
        /// would refuse every call of these hooks as a mismatch), so the
        /// next hook starts one with this config: a config switch in one
        /// command.
        #[arg(long)]
        restart_daemon: bool,
    },
}

impl HookCommand {
    /// The runtime and flags of an adapter subcommand (not `install`).
    pub fn adapter(&self) -> Option<(HookRuntime, &HookArgs)> {
        match self {
            HookCommand::Runtime(hook) => Some((hook.runtime, &hook.args)),
            HookCommand::Install { .. } => None,
        }
    }
}

/// `toolgate hook RUNTIME`: answer one of that runtime's hook events. The
/// subcommands are made from `hooks::RUNTIMES` (each runtime's name and
/// help are in its `RuntimeInfo`), so a new runtime needs nothing here.
pub struct RuntimeHook {
    runtime: HookRuntime,
    args: HookArgs,
}

impl clap::FromArgMatches for RuntimeHook {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, matches)) = matches.subcommand() else {
            return Err(clap::Error::new(clap::error::ErrorKind::MissingSubcommand));
        };
        let runtime = HookRuntime::from_name(name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))?;
        let args = <HookArgs as clap::FromArgMatches>::from_arg_matches(matches)?;
        Ok(Self { runtime, args })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Subcommand for RuntimeHook {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        hooks::RUNTIMES.into_iter().fold(command, |command, info| {
            // The first paragraph, without its period (as clap's derive
            // writes a doc comment's).
            let first = info.hook_help.split("\n\n").next().unwrap_or_default();
            let about = first.strip_suffix('.').unwrap_or(first);
            let runtime = clap::Command::new(info.runtime.name())
                .about(about)
                .long_about(info.hook_help);
            command.subcommand(<HookArgs as clap::Args>::augment_args(runtime))
        })
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        Self::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        HookRuntime::from_name(name).is_some()
    }
}

#[derive(clap::Args)]
pub struct HookArgs {
    /// Use the daemon at SOCKET instead of the store's own (STORE.sock).
    #[arg(long, value_name = "SOCKET")]
    connect: Option<PathBuf>,
    /// Answer in this process, without a daemon (slower: policies load for
    /// every event; waits for the store if another process holds it).
    #[arg(long)]
    no_daemon: bool,
    /// When the daemon can neither be reached nor started: evaluate
    /// in-process (`in-process`) or answer with --on-error (`fail`).
    #[arg(long, value_enum, default_value_t = Fallback::InProcess)]
    fallback: Fallback,
    /// What to answer when toolgate itself fails.
    #[arg(long, value_enum, default_value_t = OnErrorArg::Deny)]
    on_error: OnErrorArg,
}

/// `--for NAME`: a runtime by its name on the command line.
fn runtime_arg() -> impl clap::builder::TypedValueParser<Value = HookRuntime> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(HookRuntime::ALL.map(HookRuntime::name))
        .map(|name: String| HookRuntime::from_name(&name).expect("one of the possible values"))
}

/// The answer when toolgate itself failed.
fn failure(runtime: HookRuntime, on_error: OnError, message: &str) -> String {
    hooks::failure_answer(runtime, on_error, message).to_string()
}

/// How a runtime's hooks reach toolgate.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// HTTP where the config and the runtime allow it, else a command.
    Auto,
    /// A process per event.
    Command,
    /// An HTTP request to the daemon per event (Claude Code only).
    Http,
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

/// Run the adapter of `runtime`.
pub fn run(runtime: HookRuntime, args: &HookArgs, ctx: &Ctx) -> ExitCode {
    let on_error = OnError::from(args.on_error);
    let failure = |message: &str| failure(runtime, on_error, message);
    let mut input = String::new();
    let answer = match std::io::stdin().read_to_string(&mut input) {
        Err(err) => failure(&format!("cannot read stdin: {err}")),
        Ok(_) => {
            // A panic must not become a silent allow.
            let run =
                std::panic::AssertUnwindSafe(|| answer_event(runtime, args, ctx, &input, on_error));
            std::panic::catch_unwind(run).unwrap_or_else(|_| failure("toolgate panicked"))
        }
    };
    println!("{answer}");
    ExitCode::SUCCESS
}

/// The answer of a hook whose config could not be loaded: the runtime's
/// failure answer (a deny by default), never an exit 1, which the runtimes
/// read as "run the tool".
pub fn config_failed(runtime: HookRuntime, args: &HookArgs, error: &toolgate::Error) -> ExitCode {
    // Read the event first: a runtime whose write fails may count the hook
    // as failed, and some let the tool run then.
    let _ = std::io::stdin().read_to_string(&mut String::new());
    let message = format!("its config cannot be loaded: {error}");
    println!(
        "{}",
        failure(runtime, OnError::from(args.on_error), &message)
    );
    ExitCode::SUCCESS
}

/// Through the daemon (started if needed), else as --fallback says.
fn answer_event(
    runtime: HookRuntime,
    args: &HookArgs,
    ctx: &Ctx,
    input: &str,
    on_error: OnError,
) -> String {
    if args.no_daemon {
        return in_process(runtime, ctx, input, on_error);
    }
    let request = DaemonRequest::Hook {
        runtime,
        event: input.to_string(),
        on_error,
        config: ctx.config.identity.clone(),
    };
    let client = ctx
        .client(args.connect.as_ref())
        .map_err(|e| format!("{e:#}"));
    let answered = client.and_then(|client| match client.call(&request) {
        Err(toolgate::daemon::ClientError::Unreachable { .. }) => ctx
            .launcher(args.connect.as_ref())
            .map_err(|err| format!("{err:#}"))
            .and_then(|launcher| launcher.ensure_running().map_err(|e| e.to_string()))
            .and_then(|client| client.call(&request).map_err(|e| e.to_string())),
        other => other.map_err(|e| e.to_string()),
    });
    match answered {
        Ok(Value::String(output)) => output,
        Ok(_) => failure(
            runtime,
            on_error,
            "the daemon answered a hook event with no answer",
        ),
        Err(err) if matches!(args.fallback, Fallback::Fail) => failure(runtime, on_error, &err),
        Err(err) => {
            tracing::warn!(error = %err, "no daemon; answering in-process");
            in_process(runtime, ctx, input, on_error)
        }
    }
}

/// Answer in this process, loading policies only for tool events.
fn in_process(runtime: HookRuntime, ctx: &Ctx, input: &str, on_error: OnError) -> String {
    let failure = |message: &str| failure(runtime, on_error, message);
    let adapter = hooks::adapter(runtime);
    let event = match adapter.parse(input) {
        Ok(event) => event,
        Err(err) => return failure(&err.to_string()),
    };
    let answered = match event.needs() {
        Needs::Nothing => Ok("{}".to_string()),
        Needs::Store => Store::open_location(&ctx.store_location(), store_wait(&ctx.config))
            .and_then(|store| store.turns().next_turn(&event.session))
            .map(|_| adapter.new_turn_answer().to_string())
            .map_err(anyhow::Error::from),
        Needs::Policies => ctx
            .service()
            .and_then(|service| Ok(service.hook(runtime, input, on_error)?.output)),
    };
    answered.unwrap_or_else(|err| failure(&format!("{err:#}")))
}

/// What `hook install` gives a runtime: hooks merged into its settings, or
/// a plugin of toolgate's written whole.
pub enum Installed {
    /// The hooks, to merge into the runtime's settings file.
    Settings(Value),
    /// A plugin's source (OpenCode).
    Plugin(String),
}

/// How long before a runtime's hook timeout the thin client answers with
/// the failure answer (process start and the runtime's own reading).
const HOOK_DEADLINE_MARGIN_SECS: u64 = 5;

/// The hooks toolgate needs in `runtime`'s settings.
pub fn settings(
    ctx: &Ctx,
    connect: Option<&PathBuf>,
    runtime: HookRuntime,
    transport: Transport,
) -> anyhow::Result<Installed> {
    let exe = std::env::current_exe().context("cannot find the toolgate binary's path")?;
    let words = full_command(ctx, &exe, connect, runtime)?;
    let words = behind_thin_client(ctx, &exe, connect, runtime, words)?;
    let command = shlex::try_join(words.iter().map(String::as_str))
        .context("a path holds a NUL byte and cannot go in a shell command")?;
    let command = fail_closed(&command);
    let info = hooks::info(runtime);
    let install = info.install;
    // A daemon of its own user serves several OS users, and only its socket
    // says which one asks: HTTP hooks would be refused.
    let system_mode = ctx.config.daemon.user.is_some();
    let http = match (transport, info.http_hooks, ctx.config.daemon.http) {
        (Transport::Command, ..) => None,
        (Transport::Http, ..) if system_mode => anyhow::bail!(
            "in system mode hooks reach the daemon over its socket, where the kernel names the \
             calling user; HTTP cannot tell users apart (install with --transport command)"
        ),
        (Transport::Auto, ..) if system_mode => None,
        (Transport::Http, true, Some(address)) => Some(address),
        (Transport::Http, true, None) => anyhow::bail!(
            "HTTP hooks need the daemon to serve HTTP: set [daemon] http = \"127.0.0.1:7878\" \
             in the config (or install with --transport command)"
        ),
        (Transport::Http, false, _) => anyhow::bail!(
            "{} has no HTTP hooks; install it with --transport command",
            runtime.name()
        ),
        // HTTP only where the installed release also blocks by itself
        // when a hook fails (a down daemon must block).
        (Transport::Auto, true, address) if (install.release_is_current)() => address,
        (Transport::Auto, ..) => None,
    };
    let url = http
        .map(|address| hook_url(address, runtime, ctx))
        .transpose()?;
    let plan = InstallPlan {
        command: &command,
        url: url.as_deref(),
    };
    Ok(match (install.plugin)(&plan) {
        Some(source) => Installed::Plugin(source),
        None => Installed::Settings((install.settings)(&plan)),
    })
}

/// The words of the full hook command: this binary with the config and
/// store it runs with.
fn full_command(
    ctx: &Ctx,
    exe: &Path,
    connect: Option<&PathBuf>,
    runtime: HookRuntime,
) -> anyhow::Result<Vec<String>> {
    let mut words = vec![exe.display().to_string()];
    if let Some(config) = &ctx.config_path {
        let config = std::fs::canonicalize(config)
            .with_context(|| format!("cannot find {}", config.display()))?;
        words.extend(["--config".into(), config.display().to_string()]);
    }
    if let Some(store) = &ctx.store_override {
        if store.holds_password() {
            anyhow::bail!(
                "--store {store} holds a password, and the installed hook line goes into the \
                 agent's own settings and onto every hook's command line; leave it out of the URL \
                 and give it to the daemon as PGPASSWORD or in a PGPASSFILE"
            );
        }
        let store = crate::target::absolute_store(store.clone())?;
        words.extend([
            "--store".into(),
            store.as_argument().to_string_lossy().into_owned(),
        ]);
    }
    words.extend(["hook".into(), runtime.name().into()]);
    if let Some(socket) = connect {
        words.extend(["--connect".into(), socket.display().to_string()]);
    }
    Ok(words)
}

/// `words` behind the thin client, when it was built beside this binary:
/// it answers through the daemon without loading wasmtime, and hands
/// anything else to the full command.
fn behind_thin_client(
    ctx: &Ctx,
    exe: &Path,
    connect: Option<&PathBuf>,
    runtime: HookRuntime,
    mut words: Vec<String>,
) -> anyhow::Result<Vec<String>> {
    let thin = exe.with_file_name("toolgate-hook");
    if !thin.is_file() {
        return Ok(words);
    }
    let socket = ctx.socket(connect);
    let mut thin_words = vec![
        thin.display().to_string(),
        "--socket".into(),
        std::path::absolute(&socket)?.display().to_string(),
        "--runtime".into(),
        runtime.name().into(),
    ];
    // A daemon of its own user (system mode): only its socket is believed.
    if ctx.config.daemon.user.is_some() {
        thin_words.extend(["--daemon-uid".into(), ctx.daemon_uid()?.to_string()]);
    }
    // A runtime that runs the tool when its hook times out gets the
    // failure answer first.
    if let Some(timeout) = hooks::info(runtime).hook_timeout_secs {
        let deadline = timeout.saturating_sub(HOOK_DEADLINE_MARGIN_SECS).max(1);
        thin_words.extend(["--deadline".into(), deadline.to_string()]);
    }
    thin_words.push("--".into());
    thin_words.append(&mut words);
    Ok(thin_words)
}

/// The shell line a runtime runs for `command`, failing closed. Claude
/// Code, Gemini CLI and Cursor run the tool when a hook exits 1, when its
/// program is missing (127), and when it exits 0 with nothing on stdout (a
/// hook replaced by `/bin/true`). toolgate's hooks always exit 0 with a
/// non-empty answer, so anything else becomes exit 2, which each of them
/// reads as "block", with the reason on stderr.
pub fn fail_closed(command: &str) -> String {
    format!(
        "out=$({command}) && [ -n \"$out\" ] && printf '%s\\n' \"$out\" || {{ echo \
         'toolgate: the hook failed or gave no answer, so this call is blocked (is toolgate \
         installed? `toolgate hook install` writes the hook again)' >&2; exit 2; }}"
    )
}

/// What the hooks are, for the person installing them.
fn describe(settings: &Value) -> String {
    let text = settings.to_string();
    let transport = if text.contains("\"type\":\"http\"") {
        "HTTP to the daemon (SessionStart as a command, to start it)"
    } else {
        "a command per event"
    };
    let failure = if text.contains("onFailure") {
        "; a failed hook blocks the tool (onFailure: block, and exit 2)"
    } else {
        "; a failed hook blocks the tool (exit 2)"
    };
    format!("{transport}{failure}")
}

/// The URL of the daemon's HTTP hook for `runtime`, naming the config the
/// way the command hook does.
fn hook_url(
    address: std::net::SocketAddr,
    runtime: HookRuntime,
    ctx: &Ctx,
) -> anyhow::Result<String> {
    let mut url = format!("http://{address}/v1/hooks/{}", runtime.name());
    if let Some(config) = &ctx.config_path {
        let config = std::fs::canonicalize(config)
            .with_context(|| format!("cannot find {}", config.display()))?;
        let encoded: String = config
            .display()
            .to_string()
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect();
        url.push_str("?config=");
        url.push_str(&encoded);
    }
    Ok(url)
}

/// What `hook install` was asked for.
pub struct InstallRequest<'a> {
    pub write: Option<&'a PathBuf>,
    pub connect: Option<&'a PathBuf>,
    pub runtime: HookRuntime,
    pub transport: Transport,
    pub restart_daemon: bool,
}

pub fn install(ctx: &Ctx, asked: InstallRequest<'_>) -> anyhow::Result<ExitCode> {
    let written = write_hooks(
        ctx,
        asked.write,
        asked.connect,
        asked.runtime,
        asked.transport,
    )?;
    if asked.write.is_some() {
        switch_daemon(ctx, asked.restart_daemon)?;
    }
    Ok(written)
}

/// A daemon serving the store with another config than the hooks now
/// name refuses every call as a mismatch: say so, or stop it (`restart`)
/// so the next hook starts one with this config.
fn switch_daemon(ctx: &Ctx, restart: bool) -> anyhow::Result<()> {
    let store = ctx
        .store_override
        .as_ref()
        .and_then(|s| s.file())
        .map(Path::to_path_buf);
    let Some((pid, serving)) =
        crate::doctor::serving_another(ctx.config_path.as_deref(), store.as_deref())
    else {
        return Ok(());
    };
    if !restart {
        eprintln!(
            "note: the daemon (pid {pid}) serves {serving}, not these hooks' config: it refuses \
             every call as a mismatch until it stops. Run this install again with \
             --restart-daemon (or `kill -TERM {pid}`); the next hook starts one with this config"
        );
        return Ok(());
    }
    crate::target::stop_daemon(&ctx.socket(None), pid)?;
    eprintln!(
        "stopped the daemon (pid {pid}) that served {serving}; the next hook starts one with \
         this config"
    );
    Ok(())
}

fn write_hooks(
    ctx: &Ctx,
    write: Option<&PathBuf>,
    connect: Option<&PathBuf>,
    runtime: HookRuntime,
    transport: Transport,
) -> anyhow::Result<ExitCode> {
    let ours = match settings(ctx, connect, runtime, transport)? {
        Installed::Settings(ours) => ours,
        Installed::Plugin(source) => return install_plugin(write, &source),
    };
    let markers = [
        format!("hook {}", runtime.name()),
        format!("/v1/hooks/{}", runtime.name()),
    ];
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
    let root = settings
        .as_object_mut()
        .context("the settings file must hold a JSON object")?;
    if let Some(version) = ours.get("version") {
        root.entry("version").or_insert_with(|| version.clone());
    }
    let hooks = root.entry("hooks").or_insert_with(|| json!({}));
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
        list.retain(|entry| {
            let text = entry.to_string();
            !markers.iter().any(|marker| text.contains(marker.as_str()))
        });
        list.extend(entries.as_array().expect("built above").iter().cloned());
    }
    replace_keeping_a_backup(path, &(serde_json::to_string_pretty(&settings)? + "\n"))?;
    eprintln!(
        "toolgate hooks written to {}: {}",
        path.display(),
        describe(&ours)
    );
    match (hooks::info(runtime).install.trust_installed)(&markers[0], path) {
        Ok(Some(done)) => eprintln!("{done}"),
        Ok(None) => {}
        Err(problem) => anyhow::bail!("the hooks are written but {problem}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Write toolgate's plugin to `write` (whole: it is toolgate's own file),
/// or print it.
fn install_plugin(write: Option<&PathBuf>, source: &str) -> anyhow::Result<ExitCode> {
    let Some(path) = write else {
        print!("{source}");
        return Ok(ExitCode::SUCCESS);
    };
    replace_keeping_a_backup(path, source)?;
    eprintln!(
        "toolgate's plugin written to {}: every tool call asks toolgate first; a failed or \
         missing answer blocks the call",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Write `text` to `path` (its directory created), keeping what was there
/// as `PATH.bak`. Whole or not at all (written beside, then renamed): a
/// half-written hooks file makes some runtimes run every tool unchecked.
fn replace_keeping_a_backup(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    if path.exists() {
        let mut backup = path.as_os_str().to_owned();
        backup.push(".bak");
        std::fs::copy(path, &backup)
            .with_context(|| format!("cannot back up {} first", path.display()))?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut beside = path.as_os_str().to_owned();
    beside.push(".toolgate-new");
    let beside = PathBuf::from(beside);
    std::fs::write(&beside, text).with_context(|| format!("cannot write {}", beside.display()))?;
    std::fs::rename(&beside, path).with_context(|| format!("cannot write {}", path.display()))
}
