//! The `toolgate` command: evaluate tool calls, manage plugins and pending
//! gates, and run policies' admin commands.

mod check;
mod gates;
mod hook;
mod log;
mod new;
mod plugins;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use toolgate::{Config, Toolgate};

/// A WebAssembly policy-plugin host for AI-agent runtimes.
///
/// Before an agent runs a tool, ask toolgate: it runs every loaded policy
/// over the proposed call and answers allow, deny (with a reason) or pause
/// (for a person's approval or credentials), plus notes for the agent.
///
/// Without --config, the bundled default config is used.
#[derive(Parser)]
#[command(name = "toolgate", version, propagate_version = true)]
struct Cli {
    /// The config file (TOML). Default: the bundled default config.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The store (redb file); overrides the config's `store`.
    #[arg(long, global = true, value_name = "FILE")]
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
    /// List, inspect and validate plugins.
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// List and resolve calls paused for a person.
    #[command(subcommand)]
    Gates(gates::GatesCommand),
    /// Run a policy's admin command: toolgate command PLUGIN NAME [ARGS-JSON].
    Command {
        /// The plugin's name in the config.
        plugin: String,
        /// The command (see `toolgate plugins list`).
        name: String,
        /// JSON arguments.
        #[arg(default_value = "{}")]
        args: String,
    },
    /// Agent-runtime hooks: the Claude Code adapter and its installer.
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// Run the daemon: policies stay warm behind a Unix socket.
    Serve(serve::ServeArgs),
    /// Create a new policy crate.
    #[command(subcommand)]
    New(new::NewCommand),
    /// Run table-driven fixture cases against a policy.
    ///
    /// POLICY is a .wasm file, bundled:NAME, or a policy crate's directory
    /// (its target/wasm32-wasip2/release/CRATE.wasm). Prints PASS/FAIL per
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
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolgate: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::bundled_default()?,
    };
    let open = || -> anyhow::Result<Toolgate> {
        Toolgate::open(config.clone(), cli.store.clone()).context("cannot start toolgate")
    };
    match cli.command {
        Subcommands::Hook(hook::HookCommand::ClaudeCode(args)) => {
            Ok(hook::claude_code(&args, open))
        }
        Subcommands::Hook(hook::HookCommand::Install { write, connect }) => {
            hook::install(write.as_ref(), connect.as_ref(), cli.config.as_ref())
        }
        Subcommands::Serve(args) => serve::run(open()?, &args),
        Subcommands::New(command) => new::run(command),
        Subcommands::Test { policy, fixtures } => test_fixtures(&policy, &fixtures, &config),
        Subcommands::Log(args) => log::run(&open()?, &args),
        Subcommands::Plugins(plugins::PluginsCommand::Reload { socket }) => plugins::reload(socket),
        Subcommands::Plugins(plugins::PluginsCommand::Inspect { file, json }) => {
            plugins::inspect(&file, json)
        }
        Subcommands::Plugins(plugins::PluginsCommand::List {
            json,
            socket: Some(socket),
        }) => plugins::list_remote(&socket, json),
        Subcommands::Plugins(plugins::PluginsCommand::List { json, socket: None }) => {
            plugins::list(&open()?.plugin_statuses(), json)
        }
        Subcommands::Check(args) => check::run(&open()?, &args),
        Subcommands::Gates(command) => gates::run(&open()?, command),
        Subcommands::Command { plugin, name, args } => {
            serde_json::from_str::<serde_json::Value>(&args)
                .context("ARGS must be JSON, e.g. '{\"thread\": \"t1\"}'")?;
            println!("{}", open()?.command(&plugin, &name, &args)?);
            Ok(ExitCode::SUCCESS)
        }
        Subcommands::Events { limit } => {
            let host = open()?;
            for (seq, event) in host.store().recent_events(limit)? {
                println!("{}", serde_json::json!({"seq": seq, "event": event}));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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

/// A policy argument: a file, `bundled:NAME`, or a crate directory.
fn resolve_policy(policy: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(policy);
    if !path.is_dir() {
        return Ok(policy.to_string());
    }
    let manifest = std::fs::read_to_string(path.join("Cargo.toml"))
        .with_context(|| format!("{policy} is a directory without a Cargo.toml"))?;
    let name = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("name = "))
        .map(|n| n.trim_matches('"').replace('-', "_"))
        .with_context(|| format!("no package name in {policy}/Cargo.toml"))?;
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
