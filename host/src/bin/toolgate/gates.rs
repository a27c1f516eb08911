//! `toolgate gates`: calls paused for a person.

use std::process::ExitCode;

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;

use anyhow::Context as _;
use toolgate::daemon::DaemonRequest;
use toolgate::daemon::peer::TERMINAL;
use toolgate::gates::{GateResolution, PauseKind, PendingGate};
use toolgate::standing::{AlwaysRule, StandingApprovals};

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum GatesCommand {
    /// List pending (unexpired) gates as JSON lines (arguments redacted).
    List {
        /// Only this user's.
        #[arg(long)]
        user: Option<String>,
    },
    /// Resolve a pending gate, as a person.
    ///
    /// By default you resolve it from your terminal: toolgate shows the
    /// paused call on it and asks you to type `yes`, and the daemon checks
    /// that the request comes from a terminal of your own (not the agent's,
    /// not a process without one). A channel adapter resolves with
    /// --channel NAME --token-file FILE instead (see `[approvals] tokens`).
    Resolve(ResolveArgs),
    /// Sign in to the approvals inbox in a browser: prints a link with a
    /// one-time code (valid 5 minutes, once).
    ///
    /// Only for a person at a terminal of their own (checked by the daemon
    /// like `resolve`); the daemon must serve HTTP (`[daemon] http`).
    Open,
    /// List the standing approvals (a person's "always" answers), one JSON
    /// line each, and the file that keeps them: review it, and delete an
    /// entry to take it back.
    Always,
    /// Print a one-line notice for each new pause, and when it goes, until
    /// interrupted: for a person working in a terminal.
    Watch {
        /// Only this user's.
        #[arg(long)]
        user: Option<String>,
        /// How often to look.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
        interval: std::time::Duration,
    },
}

/// `gates resolve`'s arguments.
#[derive(clap::Args)]
pub struct ResolveArgs {
    /// The request id (from `gates list`).
    #[arg(long)]
    request_id: String,
    /// What you decide.
    #[arg(long, value_enum)]
    decision: DecisionArg,
    /// With `approve`: also for every later run of this exact call by
    /// this user's agents in this project (its working directory and
    /// below), where the pausing policy offers it. toolgate keeps it as
    /// a rule in the standing approvals file (`gates always` lists
    /// them; delete an entry to take it back).
    #[arg(long)]
    always: bool,
    /// With `authenticated`: the credential supplied.
    #[arg(long)]
    credential: Option<String>,
    /// The gate's user (default: found from the request id).
    #[arg(long)]
    user: Option<String>,
    /// The gate's thread (default: found from the request id).
    #[arg(long)]
    thread: Option<String>,
    /// Resolve as this channel adapter instead of from the terminal.
    #[arg(long, requires = "token_file")]
    channel: Option<String>,
    /// The channel's token, read from this file.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Do not ask for confirmation on the terminal (the daemon still
    /// checks that a person's terminal asks).
    #[arg(long)]
    yes: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecisionArg {
    /// Approve the call.
    Approve,
    /// The credential is now available.
    Authenticated,
    /// Refuse the call.
    Deny,
}

pub fn run(ctx: &Ctx, command: GatesCommand) -> anyhow::Result<ExitCode> {
    match command {
        GatesCommand::Watch { user, interval } => watch(ctx, user, interval),
        GatesCommand::Open => open(ctx),
        GatesCommand::List { user } => list(ctx, user),
        GatesCommand::Always => always(ctx),
        GatesCommand::Resolve(args) => resolve(ctx, args),
    }
}

/// `gates resolve`: as a person at their terminal (confirmed there), or as
/// a channel adapter with its token; the daemon checks either.
fn resolve(ctx: &Ctx, args: ResolveArgs) -> anyhow::Result<ExitCode> {
    let ResolveArgs {
        request_id,
        decision,
        always,
        credential,
        user,
        thread,
        channel,
        token_file,
        yes,
    } = args;
    let resolution = match decision {
        DecisionArg::Approve => GateResolution::Approve { always },
        DecisionArg::Deny => GateResolution::Deny,
        DecisionArg::Authenticated => GateResolution::Authenticated {
            credential: credential.context("--decision authenticated needs --credential NAME")?,
        },
    };
    // Resolutions are the daemon's to check: never in this process.
    let daemon = ctx.daemon()?;
    let gates: Vec<PendingGate> =
        serde_json::from_value(daemon.call(DaemonRequest::Gates { user: None })?)?;
    let gate = gates
        .into_iter()
        .find(|g| g.request_id == request_id)
        .with_context(|| {
            format!("no pending gate has request id {request_id}; see `toolgate gates list`")
        })?;
    let token = match &token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the token file {}", file.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let standing =
        (decision == DecisionArg::Approve && always && ctx.config.keeps_always(&gate.policy))
            .then(|| AlwaysRule::for_gate(&gate, "terminal"))
            .flatten()
            .map(|_| ctx.config.always_path(&ctx.store_location()));
    if channel.is_none() && !yes && !confirm_on_terminal(&gate, decision, standing.as_deref())? {
        eprintln!("toolgate: not resolved");
        return Ok(ExitCode::from(1));
    }
    let resolved = daemon.call(DaemonRequest::Resolve {
        user: user.unwrap_or_else(|| gate.user_id.clone()),
        thread: thread.unwrap_or_else(|| gate.thread_id.clone()),
        request_id,
        channel: channel.unwrap_or_else(|| TERMINAL.into()),
        token,
        resolution,
    })?;
    println!("{resolved}");
    match standing {
        Some(file) => eprintln!(
            "toolgate: remembered: {} (rule in {}; `toolgate gates always` lists them)",
            always_scope(&gate),
            file.display()
        ),
        None if always => eprintln!(
            "toolgate: no standing approval: {} keeps \"always\" itself, if it offered it (a \
             policy's answers become rules with [plugins.{}] always = \"project\")",
            gate.policy, gate.policy
        ),
        None => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// A one-time link (and code) that signs the person into the inbox.
fn open(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let login = ctx.daemon()?.call(DaemonRequest::WebLogin)?;
    let field = |name: &str| login[name].as_str().unwrap_or_default().to_string();
    println!("Open this link in your browser to sign in (once, within 5 minutes):");
    println!("  {}", field("url"));
    println!(
        "or go to {} and enter the code {}",
        field("inbox"),
        field("code")
    );
    Ok(ExitCode::SUCCESS)
}

/// The pending gates, one JSON line each.
fn list(ctx: &Ctx, user: Option<String>) -> anyhow::Result<ExitCode> {
    let gates: Vec<PendingGate> =
        serde_json::from_value(ctx.target(None)?.call(DaemonRequest::Gates { user })?)?;
    for gate in gates {
        println!("{}", serde_json::to_string(&gate)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// `gates always`: the standing approvals, read from their file.
fn always(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let file = ctx.config.always_path(&ctx.store_location());
    let standing = StandingApprovals::open(Some(file.clone()))?;
    let rules = standing.rules();
    eprintln!(
        "toolgate: {} standing approval(s) in {}",
        rules.len(),
        file.display()
    );
    for rule in rules {
        println!("{}", serde_json::to_string(&rule)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a standing approval of `gate` holds, in a person's words.
fn always_scope(gate: &PendingGate) -> String {
    let place = match &gate.project {
        Some(project) => format!("in {} and below", project.display()),
        None => "where no working directory is reported".into(),
    };
    format!(
        "this exact {} call by {}'s agents {place} runs without asking {}",
        gate.tool, gate.user_id, gate.policy
    )
}

/// Show the paused call on the controlling terminal and ask the person to
/// type `yes`. No terminal is an error: an agent's tools have none.
fn confirm_on_terminal(
    gate: &PendingGate,
    decision: DecisionArg,
    standing: Option<&std::path::Path>,
) -> anyhow::Result<bool> {
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .context(
            "no terminal to confirm on: resolving from the terminal needs a person at one \
             (a channel adapter uses --channel and --token-file)",
        )?;
    let what = match &gate.pause {
        PauseKind::Approval { description, .. } => description.clone(),
        PauseKind::Authentication { credential, .. } => format!("credential `{credential}`"),
    };
    let verb = match decision {
        DecisionArg::Approve if standing.is_some() => "approve it from now on",
        DecisionArg::Approve => "approve it",
        DecisionArg::Authenticated => "supply the credential for it",
        DecisionArg::Deny => "deny it",
    };
    let always = standing.map_or_else(String::new, |file| {
        format!(
            "  always: {} (a rule in {})\n",
            always_scope(gate),
            file.display()
        )
    });
    write!(
        tty,
        "\ntoolgate: paused by {policy} for {user} on thread {thread}\n  tool: {tool}\n  \
         arguments: {arguments}\n  asks: {what}\n{always}Type yes to {verb}: ",
        policy = gate.policy,
        user = gate.user_id,
        thread = gate.thread_id,
        tool = gate.tool,
        arguments = gate.arguments,
    )?;
    tty.flush()?;
    let mut answer = String::new();
    std::io::BufReader::new(tty).read_line(&mut answer)?;
    Ok(answer.trim().eq_ignore_ascii_case("yes"))
}

/// `gates watch`: poll the daemon (started if needed) and print what
/// changed.
fn watch(
    ctx: &Ctx,
    user: Option<String>,
    interval: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    let daemon = ctx.daemon()?;
    let mut shown: std::collections::BTreeMap<String, PendingGate> = Default::default();
    let mut stdout = std::io::stdout();
    loop {
        let request = DaemonRequest::Gates { user: user.clone() };
        let gates: Vec<PendingGate> = serde_json::from_value(daemon.call(request)?)?;
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        for gate in &gates {
            if !shown.contains_key(&gate.request_id) {
                writeln!(stdout, "{now} {}", notice(gate))?;
            }
        }
        shown.retain(|id, gate| {
            let pending = gates.iter().any(|g| &g.request_id == id);
            if !pending {
                let _ = writeln!(
                    stdout,
                    "{now} gone: {} {} (resolved or expired)",
                    gate.tool, id
                );
            }
            pending
        });
        for gate in gates {
            shown.entry(gate.request_id.clone()).or_insert(gate);
        }
        stdout.flush()?;
        std::thread::sleep(interval);
    }
}

/// One line about a pause, with how to answer it.
fn notice(gate: &PendingGate) -> String {
    let mut arguments: String = gate.arguments.chars().take(120).collect();
    if arguments.len() < gate.arguments.len() {
        arguments.push('…');
    }
    format!(
        "PAUSED {tool} {arguments} by {policy} for {user} on {thread}; answer with: toolgate \
         gates resolve --request-id {id} --decision approve|deny",
        tool = gate.tool,
        policy = gate.policy,
        user = gate.user_id,
        thread = gate.thread_id,
        id = gate.request_id,
    )
}
