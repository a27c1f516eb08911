//! The `toolgate` command: evaluate tool calls, manage plugins and pending
//! gates, and run policies' admin commands.

/// glibc's malloc takes an arena lock when one thread frees what another
/// allocated — the store's writer thread frees every decision's log entry —
/// and the waits showed as scheduler time in the decision's profile; with
/// mimalloc the warm decision's p99 halved (see docs/src/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod audit;
mod bench;
mod check;
mod doctor;
mod flows;
mod gates;
mod hook;
mod log;
mod mcp;
mod new;
mod plugins;
mod release;
mod replay;
mod serve;
mod setup;
mod shadow;
mod store;
mod target;
mod userns;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use toolgate::Config;
use toolgate::daemon::DaemonRequest;
use toolgate::locations::StoreLocation;

use crate::target::Ctx;

/// A WebAssembly policy-plugin host for AI-agent runtimes.
///
/// Before an agent runs a tool, ask toolgate: it runs every loaded policy
/// over the proposed call and answers allow, deny (with a reason) or pause
/// (for a person's approval or credentials), plus notes for the agent.
///
/// Without --config, the bundled default config is used. While the store's
/// daemon runs (`toolgate serve`, or started by the first hook), every
/// command goes through it; otherwise commands open the store themselves.
#[derive(Parser)]
#[command(name = "toolgate", version, propagate_version = true)]
struct Cli {
    /// The config file (TOML). Default: the bundled default config.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The store (a redb file or a `postgres://` URL); overrides the config's `store`.
    #[arg(long, global = true, value_name = "FILE|URL")]
    store: Option<PathBuf>,

    #[command(subcommand)]
    command: Subcommands,
}

#[derive(Subcommand)]
enum Subcommands {
    /// Evaluate tool calls and print each decision as JSON.
    ///
    /// Each REQUEST is a JSON file (or - for stdin) holding one call, e.g.
    /// {"tool": "Bash", "arguments": {"command": "ls"}}; see
    /// examples/requests/. Exit status: 0 every call allowed, 3 some call
    /// denied, 4 some call paused (and none denied), 1 error, 2 usage.
    Check(check::CheckArgs),
    /// List, inspect, sign, push, pull and reload plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// List calls paused for a person, watch for new ones, and resolve
    /// them (as a person). Also `toolgate approvals …`.
    #[command(subcommand, visible_alias = "approvals")]
    Gates(gates::GatesCommand),
    /// Run a policy's admin command: toolgate command PLUGIN NAME [ARGS-JSON].
    ///
    /// Goes through the store's daemon (started if needed), which runs it
    /// only for a person at a terminal of their own.
    Command {
        /// The plugin's name in the config.
        plugin: String,
        /// The command (see `toolgate plugins list`).
        name: String,
        /// JSON arguments.
        #[arg(default_value = "{}")]
        args: String,
    },
    /// Agent-runtime hooks: the adapters for Claude Code, Gemini CLI,
    /// Cursor, Codex CLI, Copilot CLI and OpenCode, and their installer.
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// Run the daemon: policies stay warm behind a Unix socket.
    Serve(serve::ServeArgs),
    /// Be the policy point between an MCP client and an MCP server.
    ///
    /// The client launches `toolgate mcp -- SERVER-COMMAND...` in place of
    /// the server. Every tools/call is decided through the store's daemon
    /// (started if needed): allowed calls are forwarded and their outcome
    /// recorded, denied ones answered with an error result holding the
    /// reason, paused ones asked in the client (MCP elicitation) when it can
    /// and the gateway holds the `mcp` channel's token. Resource reads,
    /// prompts and the server's sampling, elicitation and roots requests
    /// are decided the same way; notifications and listings pass through.
    Mcp(mcp::McpArgs),
    /// Create a new policy crate.
    #[command(subcommand)]
    New(new::NewCommand),
    /// Run table-driven fixture cases against a policy.
    ///
    /// POLICY is a .wasm file, bundled:NAME, or a policy project's
    /// directory (a crate's target/wasm32-wasip2/release/CRATE.wasm, or the
    /// .wasm a Python or TypeScript project built). Prints PASS/FAIL per
    /// case with what differed; exits 1 if any case failed.
    Test {
        /// The policy.
        policy: String,
        /// Fixture files (TOML or JSON).
        #[arg(required = true)]
        fixtures: Vec<PathBuf>,
    },
    /// Show the decision log, newest last.
    Log(log::LogArgs),
    /// The audit trail: prove it whole (`verify`), write it out (`export`
    /// as JSON lines or CEF), and this host's public key (`key`).
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Flow labels: what sessions took in (secrets, untrusted text) and
    /// which files hold it (`list`); lifting them is a person's (`clear`).
    #[command(subcommand)]
    Flows(flows::FlowsCommand),
    /// Decide the logged calls again with a candidate set of plugins and
    /// show what would change (exit 3 if anything would, 0 if not).
    ///
    /// Needs calls logged with `[log] arguments = "full"`.
    Replay(replay::ReplayArgs),
    /// Shadow plugins: how they would have decided, against the live ones.
    #[command(subcommand)]
    Shadow(shadow::ShadowCommand),
    /// The store's size per table and per policy; compacting it.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Install toolgate: `system` (as root: the agent's user owns nothing
    /// toolgate relies on) or `user` (per-user, as `hook install`).
    #[command(subcommand)]
    Setup(setup::SetupCommand),
    /// Check this install: which runtimes' hooks are there and whether they
    /// fail closed, user or system mode and what it protects, whether the
    /// running daemon serves the config the hooks name. Prints the fix for
    /// each problem; exit 1 when protection is missing.
    Doctor(doctor::DoctorArgs),
    /// Verify a downloaded release (its signed SHA256SUMS), or sign one.
    #[command(subcommand)]
    Release(release::ReleaseCommand),
    /// Measure the config's judgment on a labelled corpus of tool calls.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Show the newest events in the policies' event streams.
    Events {
        /// How many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOOLGATE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Subcommands::Serve(_) | Subcommands::Mcp(_) | Subcommands::Hook(_)
    ) {
        end_quietly_on_a_closed_pipe();
    }
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolgate: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// A command whose reader went away (`toolgate check … | head -1`) ends as
/// `grep` does, by SIGPIPE, instead of panicking in `println!` (Rust
/// ignores SIGPIPE and reports EPIPE). Not for the daemon, the gateway or a
/// hook, which must outlive a peer that hangs up and answer by exit code.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: restoring a signal's default disposition, before any thread
    // is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let loaded = match &cli.config {
        Some(path) => Config::load(path),
        None => Config::bundled_default(),
    };
    let config = match (loaded, &cli.command) {
        (Ok(config), _) => config,
        // A hook answers even then: the runtimes run the tool on exit 1.
        (Err(err), Subcommands::Hook(command)) if command.adapter().is_some() => {
            let (runtime, args) = command.adapter().expect("checked");
            return Ok(hook::config_failed(runtime, args, &err));
        }
        (Err(err), _) => return Err(err.into()),
    };
    let ctx = Ctx {
        config,
        config_path: cli.config.clone(),
        store_override: cli.store.as_deref().map(StoreLocation::from),
    };
    match cli.command {
        Subcommands::Hook(hook::HookCommand::Install {
            write,
            connect,
            runtime,
            transport,
            restart_daemon,
        }) => hook::install(
            &ctx,
            hook::InstallRequest {
                write: write.as_ref(),
                connect: connect.as_ref(),
                runtime,
                transport,
                restart_daemon,
            },
        ),
        Subcommands::Hook(command) => {
            let (runtime, args) = command.adapter().expect("install is matched above");
            Ok(hook::run(runtime, args, &ctx))
        }
        Subcommands::Serve(args) => serve::run(&ctx, &args),
        Subcommands::Mcp(args) => mcp::run(&ctx, args),
        Subcommands::New(command) => new::run(command),
        Subcommands::Test { policy, fixtures } => test_fixtures(&policy, &fixtures, &ctx.config),
        Subcommands::Log(args) => log::run(&ctx.target(None)?, &args),
        Subcommands::Audit(command) => audit::run(&ctx, command),
        Subcommands::Flows(command) => flows::run(&ctx, command),
        Subcommands::Plugins(command) => plugins::run(&ctx, command),
        Subcommands::Check(args) => check::run(&ctx.target(None)?, &args),
        Subcommands::Gates(command) => gates::run(&ctx, command),
        Subcommands::Command { plugin, name, args } => admin_command(&ctx, plugin, name, &args),
        Subcommands::Store(command) => store::run(&ctx, command),
        Subcommands::Shadow(command) => shadow::run(&ctx, command),
        Subcommands::Replay(args) => replay::run(&ctx, &args),
        Subcommands::Doctor(args) => doctor::run(&args),
        Subcommands::Bench(command) => bench::run(&ctx, command),
        Subcommands::Setup(command) => setup::run(command),
        Subcommands::Release(command) => release::run(command),
        Subcommands::Events { limit } => {
            let events = ctx.target(None)?.call(DaemonRequest::Events { limit })?;
            for row in events.as_array().into_iter().flatten() {
                println!("{row}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `toolgate command`: a policy's admin command, run by the daemon.
fn admin_command(ctx: &Ctx, plugin: String, name: String, args: &str) -> anyhow::Result<ExitCode> {
    let args: serde_json::Value =
        serde_json::from_str(args).context("ARGS must be JSON, e.g. '{\"thread\": \"t1\"}'")?;
    let request = DaemonRequest::Command { plugin, name, args };
    // The daemon checks that a person runs it: never in this process.
    match ctx.daemon()?.call(request)? {
        serde_json::Value::String(text) => println!("{text}"),
        answer => println!("{answer}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate test`: run fixture files, print a line per case and a summary.
fn test_fixtures(policy: &str, files: &[PathBuf], config: &Config) -> anyhow::Result<ExitCode> {
    let source = resolve_policy(policy)?;
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let fixtures = toolgate::fixtures::parse(file)?;
        for outcome in toolgate::fixtures::run(&source, &fixtures, config.cache_path())? {
            if outcome.passed() {
                passed += 1;
                println!("PASS {}", outcome.name);
            } else {
                failed += 1;
                println!("FAIL {}", outcome.name);
                for difference in &outcome.differences {
                    println!("     {difference}");
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The one component a Python or TypeScript project (`toolgate new policy
/// --lang …`) has built at its top level.
fn built_component(dir: &std::path::Path) -> anyhow::Result<String> {
    let build = if dir.join("package.json").exists() {
        "`npm run build`"
    } else if dir.join("app.py").exists() {
        "the componentize-py command its README gives"
    } else {
        anyhow::bail!(
            "{} is a directory with no Cargo.toml, package.json or app.py: name the .wasm file",
            dir.display()
        );
    };
    let built: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "wasm"))
        .collect();
    match built.as_slice() {
        [one] => Ok(one.display().to_string()),
        [] => anyhow::bail!("{} has no .wasm yet; build it with {build}", dir.display()),
        _ => anyhow::bail!(
            "{} has several .wasm files; name the one to test",
            dir.display()
        ),
    }
}

/// A policy argument: a file, `bundled:NAME`, or a project directory.
fn resolve_policy(policy: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(policy);
    if !path.is_dir() {
        return Ok(policy.to_string());
    }
    if !path.join("Cargo.toml").exists() {
        return built_component(path);
    }
    let manifest: toml::Table = std::fs::read_to_string(path.join("Cargo.toml"))
        .with_context(|| format!("cannot read {policy}/Cargo.toml"))?
        .parse()
        .with_context(|| format!("{policy}/Cargo.toml is not valid TOML"))?;
    let name = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(|n| n.replace('-', "_"))
        .with_context(|| format!("no [package] name in {policy}/Cargo.toml"))?;
    let wasm = path
        .join("target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    anyhow::ensure!(
        wasm.exists(),
        "{} does not exist; build it with `cargo build --release --target wasm32-wasip2` in {policy}",
        wasm.display()
    );
    Ok(wasm.display().to_string())
}
