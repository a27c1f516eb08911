//! One daemon, two OS users: how much one user's flood delays another's
//! decisions. `cargo bench --bench tenants`, as root (it makes the users
//! `tgbench-flood` and `tgbench-agent` if they are missing, and runs its
//! clients as them). Release build, the bundled default config and
//! policies, the socket open to every user as system mode opens it.
//!
//! The agent asks for a decision every 20 ms, one connection per request
//! (a hook process's pattern), alone and then while the flooding user
//! holds `TOOLGATE_BENCH_FLOOD` (default 64) connections asking as fast as
//! they are answered. Prints a markdown table of the agent's latencies
//! (as its client saw them) and how many of its requests were answered
//! `busy`, and how many of the flood's were. `TOOLGATE_BENCH_QUICK=1`
//! shortens it; `TOOLGATE_BENCH_BIN` runs another build's `toolgate` as
//! the daemon (an A/B).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const FLOOD_USER: &str = "tgbench-flood";
const AGENT_USER: &str = "tgbench-agent";

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// One evaluate request line, for `session`.
fn request_line(session: &str, n: usize) -> String {
    let request = json!({"op": "evaluate", "request": {
        "tool": "Bash",
        "arguments": {"command": format!("git status && ls -la src/{n}")},
        "session_id": session,
    }});
    format!("{request}\n")
}

/// Ask once on `stream`; whether the answer was `busy`.
fn ask(stream: &mut UnixStream, reader: &mut BufReader<UnixStream>, line: &str) -> bool {
    stream.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    reader.read_line(&mut answer).unwrap();
    assert!(answer.starts_with("{\"ok\""), "{answer}");
    answer.contains("\"busy\"")
}

/// The flooding user's part: `clients` connections asking as fast as
/// they are answered for `secs`; prints answered and busy counts.
fn flood(socket: &Path, clients: usize, secs: f64) {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let counts: Vec<(usize, usize)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || {
                    let mut stream = UnixStream::connect(socket).unwrap();
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let (mut answered, mut busy) = (0, 0);
                    while Instant::now() < until {
                        let line = request_line(&format!("flood-{c}"), answered + busy);
                        match ask(&mut stream, &mut reader, &line) {
                            true => busy += 1,
                            false => answered += 1,
                        }
                    }
                    (answered, busy)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let answered: usize = counts.iter().map(|c| c.0).sum();
    let busy: usize = counts.iter().map(|c| c.1).sum();
    println!("{answered} {busy}");
}

/// The agent's part: `n` requests 20 ms apart, each on a new connection;
/// prints each latency (µs, negative when answered `busy`).
fn agent(socket: &Path, n: usize) {
    for i in 0..n {
        let asked = Instant::now();
        let mut stream = UnixStream::connect(socket).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let busy = ask(&mut stream, &mut reader, &request_line("agent", i));
        let micros = asked.elapsed().as_micros() as i64;
        println!("{}", if busy { -micros } else { micros });
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This bench's binary run as `user` in `role`.
fn as_user(user: &str, role: &str, socket: &Path, args: &[String]) -> Child {
    Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(std::env::current_exe().unwrap())
        .env("TOOLGATE_BENCH_ROLE", role)
        .env("TOOLGATE_BENCH_SOCKET", socket)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("runuser runs")
}

fn ensure_user(name: &str) {
    let known = Command::new("id").arg(name).output().unwrap();
    if !known.status.success() {
        let made = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .status()
            .unwrap();
        assert!(made.success(), "useradd {name}");
    }
}

/// A daemon on the bundled default config with its socket open to every
/// user, stopped on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("toolgate.toml");
        let text = format!(
            "cache_dir = {:?}\n{}\n[daemon]\nsocket_mode = 0o666\n",
            dir.path().join("cache").display().to_string(),
            toolgate::config::DEFAULT_CONFIG,
        );
        std::fs::write(&config, text).unwrap();
        let socket = dir.path().join("toolgate.sock");
        // TOOLGATE_BENCH_BIN: another build's binary, for an A/B.
        let binary = std::env::var_os("TOOLGATE_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_toolgate").into());
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .args(["serve", "--socket"])
            .arg(&socket)
            .env("TOOLGATE_LOG", "warn")
            .spawn()
            .expect("start the toolgate daemon");
        let client = toolgate::daemon::Client::new(&socket);
        let started = Instant::now();
        while !client.is_up() {
            assert!(started.elapsed() < Duration::from_secs(60), "no daemon");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's `n` requests, while `flood` (if any) runs; a table row.
fn measure(daemon: &Daemon, case: &str, n: usize, flood: Option<usize>) {
    let secs = n as f64 * 0.025 + 2.0;
    let flooding = flood.map(|clients| {
        let args = [clients.to_string(), secs.to_string()];
        let child = as_user(FLOOD_USER, "flood", &daemon.socket, &args);
        std::thread::sleep(Duration::from_secs(1));
        child
    });
    let agent = as_user(AGENT_USER, "agent", &daemon.socket, &[n.to_string()]);
    let said = agent.wait_with_output().unwrap();
    assert!(said.status.success(), "the agent's client failed");
    let times: Vec<i64> = String::from_utf8_lossy(&said.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let busy = times.iter().filter(|t| **t < 0).count();
    let mut micros: Vec<f64> = times.iter().map(|t| t.unsigned_abs() as f64).collect();
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize] / 1000.0;
    let flood_counts = match flooding {
        None => "—".to_string(),
        Some(child) => {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let mut counts = text.split_whitespace();
            let (answered, busy) = (counts.next().unwrap_or("?"), counts.next().unwrap_or("?"));
            format!("{answered} answered, {busy} busy")
        }
    };
    println!(
        "| {case} | {n} | {:.1} | {:.1} | {:.1} | {busy} | {flood_counts} |",
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

fn main() {
    if let Ok(role) = std::env::var("TOOLGATE_BENCH_ROLE") {
        let socket = PathBuf::from(std::env::var_os("TOOLGATE_BENCH_SOCKET").unwrap());
        let arg = |i: usize| std::env::args().nth(i).unwrap();
        match role.as_str() {
            "flood" => flood(&socket, arg(1).parse().unwrap(), arg(2).parse().unwrap()),
            _ => agent(&socket, arg(1).parse().unwrap()),
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists; nothing to run
    }
    if toolgate_wire::peer::own_uid() != 0 {
        eprintln!("the tenants bench runs its clients as two OS users of its own: run it as root");
        std::process::exit(2);
    }
    ensure_user(FLOOD_USER);
    ensure_user(AGENT_USER);
    let clients: usize = std::env::var("TOOLGATE_BENCH_FLOOD")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64);
    let n = if quick() { 100 } else { 500 };
    let daemon = Daemon::start();
    println!(
        "| case | agent's decisions | p50 ms | p99 ms | max ms | agent's `busy` | the flood's requests |"
    );
    println!("|---|---|---|---|---|---|---|");
    measure(&daemon, "the agent alone", n, None);
    measure(
        &daemon,
        &format!("another user floods with {clients} connections"),
        n,
        Some(clients),
    );
}
