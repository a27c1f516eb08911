//! `toolgate serve`: the daemon.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use toolgate::daemon::{Daemon, DaemonOptions, DaemonRequest};

use crate::target::Ctx;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The Unix socket to listen on. Default: the store's, STORE.sock
    /// beside the store file, where hooks and commands look for it.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve HTTP on this loopback address (GET /health, GET /metrics,
    /// POST /v1/rpc, the approvals inbox at /approvals), e.g.
    /// 127.0.0.1:9464. Default: the config's daemon.http.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Reload when the config file or a plugin changes, this many ms after
    /// the last change of a burst (0 = no watching: only on SIGHUP or
    /// `toolgate plugins reload`).
    #[arg(long, default_value_t = 500)]
    watch_ms: u64,
    /// Stop after this many seconds without a request (0 = never).
    /// Default: the config's daemon.idle_exit_secs.
    #[arg(long, value_name = "SECS")]
    idle_exit_secs: Option<u64>,
    /// Take over from a daemon that serves the socket already (one a hook
    /// started, or the build before an upgrade): ask it to stop (SIGTERM),
    /// wait for it, and serve; one a hook starts meanwhile is stopped too.
    /// Without it, a running daemon is left alone and this refuses.
    #[arg(long)]
    replace: bool,
}

/// How long `--replace` keeps trying to take the store over.
const TAKE_OVER_WITHIN: Duration = Duration::from_secs(60);

pub fn run(ctx: &Ctx, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let socket = ctx.socket(args.socket.as_ref());
    let host = Arc::new(take_over(ctx, &socket, args.replace)?);
    let limits = &ctx.config.daemon;
    if let Some(user) = &limits.user {
        refuse_another_user(user)?;
    }
    let idle_exit = args.idle_exit_secs.unwrap_or(limits.idle_exit_secs);
    let notifier = toolgate::notify::Notifier::start(&ctx.config.notify)?.map(Arc::new);
    let options = DaemonOptions {
        max_in_flight: limits.max_in_flight.get() as usize,
        idle_exit: (idle_exit > 0).then(|| Duration::from_secs(idle_exit)),
        notifier,
        socket_mode: limits.socket_mode,
        max_connections_per_user: limits.max_connections_per_user.get() as usize,
    };
    // Requests run on the blocking pool, bounded: a burst of short
    // connections grew it to hundreds of threads.
    let blocking_threads = options.max_in_flight + 16;
    let daemon = Daemon::new(host, options);
    let _watcher = match args.watch_ms {
        0 => None,
        ms => Some(daemon.service().watch(Duration::from_millis(ms))?),
    };
    // Dropped after the daemon: it sends what the daemon decided until it
    // stopped.
    let _audit_export = toolgate::audit_export::ship::Shipper::start(
        Arc::clone(daemon.service()),
        daemon.audit_export_counters(),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking_threads)
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let reloader = Arc::clone(&daemon);
        tokio::spawn(async move {
            let Ok(mut hup) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            else {
                return;
            };
            while hup.recv().await.is_some() {
                let daemon = Arc::clone(&reloader);
                let _ = tokio::task::spawn_blocking(move || match daemon.reload() {
                    Ok(report) => tracing::info!(?report, "reloaded on SIGHUP"),
                    Err(err) => tracing::error!(error = %err, "reload on SIGHUP failed"),
                })
                .await;
            }
        });
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("cannot listen for SIGTERM");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        eprintln!("toolgate: serving on {}", socket.display());
        Arc::clone(&daemon)
            .serve(&socket, args.http.or(limits.http), shutdown)
            .await
            .with_context(|| format!("cannot serve on {}", socket.display()))
    })?;
    // Never wait for ever on the blocking pool; then drain the store.
    runtime.shutdown_timeout(Duration::from_secs(5));
    let restart = daemon.must_restart();
    drop(daemon);
    Ok(stopped(restart))
}

/// The store opened for serving at `socket`. A daemon serving there
/// already is refused, or with `replace` stopped, as is one that a hook
/// starts before this process has the store (under load a hook can win
/// that race): then the store is tried again, for up to
/// [`TAKE_OVER_WITHIN`].
fn take_over(ctx: &Ctx, socket: &Path, replace: bool) -> anyhow::Result<toolgate::Toolgate> {
    let deadline = std::time::Instant::now() + TAKE_OVER_WITHIN;
    loop {
        if let Ok(health) = toolgate::daemon::Client::new(socket).call(&DaemonRequest::Health) {
            let pid = health["pid"].as_u64().unwrap_or_default() as u32;
            anyhow::ensure!(
                replace && pid != 0,
                "a toolgate daemon (pid {pid}) already serves {}; pass --replace to take over \
                 from it (an upgrade), stop it first (SIGTERM), or pass another --socket",
                socket.display()
            );
            crate::target::stop_daemon(socket, pid)?;
            eprintln!(
                "toolgate: took over from the daemon (pid {pid}) that served {}",
                socket.display()
            );
        }
        match ctx.open() {
            Err(err) if replace && store_busy(&err) && std::time::Instant::now() < deadline => {}
            opened => return opened,
        }
    }
}

/// Whether `err` says another process holds the store.
fn store_busy(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref(),
            Some(toolgate::Error::StoreBusy { .. })
        )
    })
}

/// Refuse to serve a config whose daemon runs as `user` as anyone else.
fn refuse_another_user(user: &str) -> anyhow::Result<()> {
    let uid = toolgate_wire::peer::uid_of(user)
        .with_context(|| format!("[daemon] user = {user:?}, but there is no such user"))?;
    anyhow::ensure!(
        uid == toolgate_wire::peer::own_uid(),
        "this config's daemon runs as {user} (uid {uid}), not as this user: start it as \
         that user (`runuser -u {user} -- toolgate --config CONFIG serve`, or the toolgate \
         systemd service)"
    );
    Ok(())
}

/// Say why serving stopped; the exit status. A store that must be opened
/// again (`restart`: its disk failed a write and now takes them again) is
/// opened by this process started afresh, as it was started (same pid,
/// so a supervisor sees no exit); if that cannot be done it exits with
/// EX_TEMPFAIL, for the supervisor (the next hook, systemd) to start one.
fn stopped(restart: bool) -> ExitCode {
    if restart {
        eprintln!("toolgate: the store's disk takes writes again; starting afresh to open it");
        let err = afresh();
        eprintln!(
            "toolgate: stopped: cannot start afresh ({err}); a fresh daemon opens the store \
             again (the next hook starts one; the systemd unit restarts it)"
        );
        return ExitCode::from(75);
    }
    eprintln!("toolgate: stopped");
    ExitCode::SUCCESS
}

/// Replace this process with the same program and arguments; returns
/// only if that failed.
fn afresh() -> std::io::Error {
    use std::os::unix::process::CommandExt as _;
    let starts = std::env::var(toolgate::daemon::FRESH_STARTS)
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    match std::env::current_exe() {
        Ok(program) => std::process::Command::new(program)
            .args(std::env::args_os().skip(1))
            .env(toolgate::daemon::FRESH_STARTS, (starts + 1).to_string())
            .exec(),
        Err(err) => err,
    }
}
