//! `toolgate-hook`: the thin hook client that `toolgate hook install`
//! writes into an agent runtime's settings.
//!
//! A hook runs once per tool call, so its process start is on the agent's
//! critical path. This binary uses only `toolgate-wire` — neither wasmtime
//! nor the store: it
//! reads the event from stdin, sends it to the store's daemon in one round
//! trip (the socket was resolved at install time), and prints the answer.
//! If the daemon is not answering, or answers with an error, it hands the
//! same event to the full command given after `--` (`toolgate … hook
//! RUNTIME`), which starts the daemon or answers in-process, and passes
//! on its output and exit status. It never fails open by itself.
//!
//! It answers only from the daemon it expects: the socket's peer must run as
//! `--daemon-uid` (default: this user), from the kernel's word
//! (`SO_PEERCRED`); anything else at that path is refused with a deny.
//!
//! With `--deadline SECS` it answers with the failure answer (`--on-error`)
//! once that much time has passed without an answer: a runtime that runs
//! the tool when its hook times out (Copilot CLI, Codex CLI) gets a deny
//! before its own timeout, even from a daemon that hangs (stopped with
//! SIGSTOP, say).
//!
//! Usage: `toolgate-hook --socket PATH [--runtime NAME] [--on-error
//! deny|ask|allow] [--daemon-uid UID] [--deadline SECS] --
//! TOOLGATE-COMMAND…`

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;
use toolgate_wire::client::{Client, ClientError};
use toolgate_wire::peer;
use toolgate_wire::protocol::{ConfigIdentity, DaemonRequest, HookRuntime, OnError};

const USAGE: &str = "usage: toolgate-hook --socket PATH [--runtime NAME] [--on-error deny|ask|allow] \
     [--daemon-uid UID] [--deadline SECS] -- TOOLGATE-COMMAND...";

/// Set by whoever prints the answer first: the answer, or the deadline's
/// failure answer. Exactly one is printed.
static ANSWERED: AtomicBool = AtomicBool::new(false);

/// The full command's pid while it runs (0: none), for the deadline to
/// stop it.
static FULL_COMMAND: AtomicU32 = AtomicU32::new(0);

/// Print `text` as the hook's answer unless another answer was printed.
fn answer(text: &str) {
    if !ANSWERED.swap(true, Ordering::SeqCst) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{text}");
        let _ = stdout.flush();
    }
}

/// What the hook's own arguments (before `--`) say.
struct Options {
    socket: Option<String>,
    on_error: OnError,
    runtime: HookRuntime,
    daemon_uid: u32,
    deadline: Option<Duration>,
}

impl Options {
    /// The options, or `None` if one is unknown or its value unreadable.
    fn parse(ours: &[String]) -> Option<Self> {
        let mut options = Self {
            socket: None,
            on_error: OnError::Deny,
            runtime: HookRuntime::default(),
            daemon_uid: peer::own_uid(),
            deadline: None,
        };
        let mut words = ours.iter();
        while let Some(word) = words.next() {
            let value = words.next()?;
            match word.as_str() {
                "--socket" => options.socket = Some(value.clone()),
                "--runtime" => options.runtime = HookRuntime::from_name(value)?,
                "--daemon-uid" => options.daemon_uid = value.parse().ok()?,
                "--deadline" => {
                    options.deadline = Some(Duration::from_secs(value.parse().ok()?));
                }
                "--on-error" => {
                    options.on_error = match value.as_str() {
                        "deny" => OnError::Deny,
                        "ask" => OnError::Ask,
                        "allow" => OnError::Allow,
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
        Some(options)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--help" | "-h") => {
            println!(
                "toolgate-hook: the thin hook client an agent runtime runs before each tool call. \
                 It sends the event to toolgate's daemon over SOCKET and prints the answer; \
                 without a daemon it runs TOOLGATE-COMMAND (the full `toolgate hook …`). \
                 `toolgate hook install` writes its command line for you.\n\n{USAGE}"
            );
            return ExitCode::SUCCESS;
        }
        Some("--version" | "-V") => {
            println!("toolgate-hook {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let Some(split) = args.iter().position(|a| a == "--") else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let (ours, fallback) = (&args[..split], &args[split + 1..]);
    let Some(options) = Options::parse(ours) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let Options {
        socket,
        on_error,
        runtime,
        daemon_uid,
        deadline,
    } = options;
    if let Some(deadline) = deadline {
        answer_by(deadline, runtime, on_error);
    }
    let mut event = String::new();
    if std::io::stdin().read_to_string(&mut event).is_err() {
        event.clear(); // the full command reports the unreadable input
    }
    let asked = socket.map(|socket| Daemon {
        socket,
        uid: daemon_uid,
    });
    match asked.map(|daemon| daemon.ask(runtime, &event, on_error, fallback)) {
        Some(Asked::Answer(text)) => answer(&text),
        Some(Asked::Impostor(why)) => {
            answer(&toolgate_runtimes::failure_answer(runtime, on_error, &why).to_string())
        }
        Some(Asked::NoAnswer) | None => {
            return run_full_command(fallback, runtime, on_error, &event);
        }
    }
    ExitCode::SUCCESS
}

/// Once `deadline` has passed without an answer: the failure answer, the
/// full command stopped, and the process gone.
fn answer_by(deadline: Duration, runtime: HookRuntime, on_error: OnError) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        let why = format!("no answer within {} s", deadline.as_secs());
        answer(&toolgate_runtimes::failure_answer(runtime, on_error, &why).to_string());
        // The runtime waits for every holder of the hook's output to
        // close it: stop the full command too (it holds only pipes to
        // this process, never the runtime's).
        let pid = FULL_COMMAND.load(Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: our own child, not yet reaped (reaping it clears
            // FULL_COMMAND first).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        std::process::exit(0);
    });
}

/// The daemon this hook expects: where it listens and as whom it runs.
struct Daemon {
    socket: String,
    uid: u32,
}

/// What asking the daemon gave.
enum Asked {
    /// The text to print.
    Answer(String),
    /// Something other than the daemon serves the socket: why.
    Impostor(String),
    /// No daemon answered (not running, busy, or an error): the full
    /// command takes over.
    NoAnswer,
}

impl Daemon {
    fn ask(
        &self,
        runtime: HookRuntime,
        event: &str,
        on_error: OnError,
        fallback: &[String],
    ) -> Asked {
        let Some(config) = config_named(fallback) else {
            return Asked::NoAnswer;
        };
        let request = DaemonRequest::Hook {
            runtime,
            event: event.to_string(),
            on_error,
            config: Some(config),
        };
        // A busy daemon is not waited for: the full command answers.
        let client = Client::new(&self.socket)
            .with_daemon_uid(self.uid)
            .with_busy_wait(Duration::ZERO);
        match client.call(&request) {
            Ok(Value::String(text)) if !text.is_empty() => Asked::Answer(text),
            Err(ClientError::NotTheDaemon(why)) => Asked::Impostor(why),
            _ => Asked::NoAnswer,
        }
    }
}

/// The config the full command names (`--config FILE`, else the bundled
/// default), so the daemon refuses if it serves another; `None` when the
/// file cannot be read (the full command then reports it).
fn config_named(command: &[String]) -> Option<ConfigIdentity> {
    let mut words = command.iter();
    while let Some(word) = words.next() {
        if word == "--config" {
            return ConfigIdentity::read(Path::new(words.next()?)).ok();
        }
        if let Some(path) = word.strip_prefix("--config=") {
            return ConfigIdentity::read(Path::new(path)).ok();
        }
    }
    Some(ConfigIdentity::Bundled)
}

/// Hand the event to the full `toolgate … hook RUNTIME` command; its
/// answer is printed as ours (so a deadline that passes meanwhile prints
/// one answer, not two), and its exit status passed on.
fn run_full_command(
    command: &[String],
    runtime: HookRuntime,
    on_error: OnError,
    event: &str,
) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    // Its output through pipes of ours, so that when a deadline ends this
    // process nothing of the runtime's is left open by it (or by a daemon
    // it starts).
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) => {
            // A runtime lets a tool run when its hook fails (exit 1): answer
            // with the fail mode ourselves instead.
            let reason = format!("toolgate-hook cannot run {program}: {err}");
            answer(&toolgate_runtimes::failure_answer(runtime, on_error, &reason).to_string());
            return ExitCode::SUCCESS;
        }
    };
    FULL_COMMAND.store(child.id(), Ordering::SeqCst);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(event.as_bytes());
    }
    let forwarding = child.stderr.take().map(|mut from| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut std::io::stderr());
        })
    });
    let mut output = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut output);
    }
    FULL_COMMAND.store(0, Ordering::SeqCst);
    let status = child.wait();
    let output = output.trim_end();
    if !output.is_empty() {
        answer(output);
    }
    if let Some(forwarding) = forwarding {
        let _ = forwarding.join();
    }
    match status {
        Ok(status) => ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8),
        Err(_) => ExitCode::from(1),
    }
}
