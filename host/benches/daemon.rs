//! The daemon under many agents: `cargo bench --bench daemon` (release
//! build). Starts the `toolgate` binary as a daemon on the bundled default
//! config and policies, then has 64 socket clients ask for decisions at
//! once, as fast as they are answered. `TOOLGATE_BENCH_QUICK=1` shrinks it.
//!
//! Prints a markdown table: decisions/s, each request's p50/p99 as its
//! client saw it, and the daemon's resident memory as the run goes, for
//! clients that ask again as soon as they are answered — keeping their
//! connection (the MCP gateway, the Python and Node packages) or with a
//! connection per request (hook processes, without the process start) —
//! and for clients paced to a total rate, as agents that think between
//! calls are (the latency at that rate). A long run (1 000 000 decisions, or 100 000 quick) shows the
//! memory over time. The clients run on the same machine as the daemon. `TOOLGATE_BENCH_BIN`
//! runs another build's `toolgate` as the daemon (an A/B).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::ToolRequest;
use toolgate::daemon::{Client, DaemonRequest};

/// How many clients ask at once (`TOOLGATE_BENCH_CLIENTS`, default 64).
fn clients() -> usize {
    std::env::var("TOOLGATE_BENCH_CLIENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// A daemon process, stopped on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(dir: &Path) -> Self {
        let config = dir.join("toolgate.toml");
        // TOOLGATE_BENCH_CONFIG: more config, appended (`[log] enabled =
        // false`, to see what the log costs).
        // The socket open to every user, as in system mode: the slow
        // connections come from another user.
        let text = format!(
            "cache_dir = {:?}\n{}\n[daemon]\nsocket_mode = 0o666\n{}",
            dir.join("cache").display().to_string(),
            toolgate::config::DEFAULT_CONFIG,
            std::env::var("TOOLGATE_BENCH_CONFIG").unwrap_or_default()
        );
        std::fs::write(&config, text).unwrap();
        // Another user reaches the socket through this directory.
        let mut open = std::fs::metadata(dir).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut open, 0o711);
        std::fs::set_permissions(dir, open).unwrap();
        let store = dir.join("toolgate.redb");
        let socket = toolgate::daemon::socket_for_store(&store);
        // TOOLGATE_BENCH_BIN: another build's binary, for an A/B.
        let binary = std::env::var_os("TOOLGATE_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_toolgate").into());
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(&store)
            .args(["serve", "--socket"])
            .arg(&socket)
            .env("TOOLGATE_LOG", "warn")
            .spawn()
            .expect("start the toolgate daemon");
        let started = Instant::now();
        while !Client::new(&socket).is_up() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the daemon did not answer within a minute"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, socket }
    }

    /// Resident memory, MiB.
    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib / 1024.0
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A low-risk call from `client`'s own session: every bundled policy
/// decides it, and all allow.
fn decision(client: usize, n: usize) -> DaemonRequest {
    let mut request = ToolRequest::new("Read", json!({"file_path": format!("/src/f{n}.rs")}));
    request.session_id = format!("agent-{client}");
    request.call_id = Some(format!("c{client}-{n}"));
    DaemonRequest::Evaluate { request }
}

struct Run {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    /// Resident memory (MiB) after each tenth of the run.
    rss: Vec<f64>,
}

/// How the clients ask.
#[derive(Clone, Copy)]
enum Load {
    /// Each client's next request as soon as its last is answered, on a
    /// connection it keeps, or on a new connection each time.
    Closed { keep: bool },
    /// All clients together at this many requests per second, each at its
    /// own steady pace on a kept connection (a client that falls behind
    /// asks again at once).
    Paced(f64),
}

/// `total` decisions from [`clients`] clients at once.
fn run(daemon: &Daemon, total: usize, load: Load) -> Run {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut rss = Vec::new();
    let started = Instant::now() + Duration::from_millis(20);
    let mut samples: Vec<Duration> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients())
            .map(|c| {
                let (next, done) = (&next, &done);
                scope.spawn(move || {
                    let mut client = Client::new(&daemon.socket);
                    if !matches!(load, Load::Closed { keep: false }) {
                        client = client.keeping_connections();
                    }
                    let mut times = Vec::with_capacity(total / clients() + 1);
                    while next.fetch_add(1, Ordering::Relaxed) < total {
                        let asked = match load {
                            Load::Closed { .. } => Instant::now(),
                            Load::Paced(rate) => {
                                let nth = (times.len() * clients() + c) as f64;
                                let due = started + Duration::from_secs_f64(nth / rate);
                                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                                Instant::now()
                            }
                        };
                        let answer = client.call(&decision(c, times.len())).unwrap();
                        times.push(asked.elapsed());
                        assert_eq!(answer["verdict"], "allow", "{answer}");
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    times
                })
            })
            .collect();
        for tenth in 1..=10 {
            while done.load(Ordering::Relaxed) < total * tenth / 10
                && workers.iter().any(|w| !w.is_finished())
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            rss.push(daemon.rss_mib());
        }
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let elapsed = started.elapsed();
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    Run {
        per_sec: samples.len() as f64 / elapsed.as_secs_f64(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        rss,
    }
}

fn row(case: &str, total: usize, run: &Run) {
    let rss = |i: usize| run.rss[i];
    println!(
        "| {case} | {total} | {:.0} | {:.0} | {:.0} | {:.1} → {:.1} → {:.1} |",
        run.per_sec,
        run.p50_us,
        run.p99_us,
        rss(0),
        rss(4),
        rss(9)
    );
}

/// How many slow connections the last run holds open.
const SLOW: usize = 500;

/// Hold `SLOW` connections to `socket`, each having sent the first byte
/// of a request and nothing more, until stdin closes: a user whose agent
/// (or anything of its) wants to wear the daemon down. Run as another
/// user by [`slow_connections`].
fn hold_slow(socket: &Path) {
    use std::io::{Read as _, Write as _};
    let held: Vec<_> = (0..SLOW)
        .filter_map(|_| {
            let mut stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
            stream.write_all(b"{").ok()?;
            Some(stream)
        })
        .collect();
    println!("{}", held.len());
    let _ = std::io::stdin().read(&mut [0]);
}

/// [`SLOW`] slow connections from `nobody` (when this runs as root; else
/// from this user, whose connection cap then refuses most), held until
/// the child is dropped; how many the daemon took.
fn slow_connections(daemon: &Daemon) -> (Child, String) {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    let mut holder = Command::new(std::env::current_exe().unwrap());
    holder
        .arg("--hold-slow")
        .arg(&daemon.socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let nobody = toolgate_wire::peer::uid_of("nobody");
    let who = match nobody {
        Some(uid) if toolgate_wire::peer::own_uid() == 0 => {
            holder.uid(uid);
            "another user (nobody)"
        }
        _ => "this same user",
    };
    let mut child = holder.spawn().expect("the slow-connection holder starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, format!("{} held by {who}", line.trim()))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list; we have no unit benches
    }
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, socket] = &args[..]
        && flag == "--hold-slow"
    {
        return hold_slow(Path::new(socket));
    }
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let (short, long) = if quick() {
        (20_000, 100_000)
    } else {
        (100_000, 1_000_000)
    };
    let kept = Load::Closed { keep: true };
    // Warm: every client's session has its warm instances.
    run(&daemon, clients() * 20, kept);
    println!(
        "\n## The daemon under {} concurrent socket clients\n",
        clients()
    );
    println!(
        "bundled default config and policies; a low-risk `Read` per request, each client its \
         own session; started with {:.1} MiB resident after warm-up\n",
        daemon.rss_mib()
    );
    println!(
        "| clients' connections | decisions | decisions/s | p50 µs | p99 µs | daemon RSS MiB (10 % → 50 % → 100 %) |"
    );
    println!("|---|---|---|---|---|---|");
    row("kept", short, &run(&daemon, short, kept));
    let fresh = Load::Closed { keep: false };
    row("one per request", short, &run(&daemon, short, fresh));
    for rate in [10_000.0, 20_000.0] {
        let case = format!("kept, paced at {rate:.0}/s in all");
        row(&case, short, &run(&daemon, short, Load::Paced(rate)));
    }
    let plain = run(&daemon, short, kept);
    let (mut holder, held) = slow_connections(&daemon);
    let slowed = run(&daemon, short, kept);
    drop(holder.stdin.take());
    let _ = holder.wait();
    row("kept (again, just before)", short, &plain);
    row(
        &format!("kept, {SLOW} slow connections open: {held}"),
        short,
        &slowed,
    );
    println!(
        "\np99 with the slow connections open: {:.2}× the run just before (target ≤ 2×)",
        slowed.p99_us / plain.p99_us
    );
    row("kept, long run", long, &run(&daemon, long, kept));
}
