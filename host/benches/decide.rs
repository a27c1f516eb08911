//! toolgate's benchmark: `cargo bench --bench decide` (release build).
//!
//! Prints markdown tables: composed decisions (p50/p99, decisions/s on 1 and
//! 2 threads) against a native-Rust floor of the same three policies over the
//! same store, each policy alone, host overhead, cold start, hot swap, hook
//! round trips, store throughput, and scaling curves. `TOOLGATE_BENCH_QUICK=1`
//! shrinks the sizes for a fast look.
//!
//! The native floor lives here, not in the product: it calls the policies'
//! own pure functions natively and does the same store operations directly.

/// The allocator the `toolgate` binary (the daemon) runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::decision_log::{ArgumentsView, PendingLogEntry};
use toolgate::request::Mode;
use toolgate::store::{Store, StoredEvent};
use toolgate::{Config, Service, ToolRequest, Verdict};

/// Run a hook command once with `event` on stdin; it must succeed.
fn run_hook(command: &mut Command, event: &str) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(event.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

/// The rules of `examples/rules.toml`, none of which a `Read` fires.
const RULES_NONE_FIRES: &str = r#"rule = [
  { tool = "mcp:everything/get-env", action = "deny", reason = "r" },
  { tool = "Bash", args.command = { regex = '^\s*git\s+push\b' }, action = "ask", reason = "r" },
  { tool = "WebFetch", action = "deny", reason = "r", limit = { calls = 20, per = "turn" } },
  { tool = ["Write", "Edit"], args.file_path = "*.lock", action = "deny", reason = "r" },
]"#;

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

fn guest(package: &str) -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR")).join(format!("{}.wasm", package.replace('-', "_")))
}

/// Latency summary of `samples` (µs), and their distribution for the
/// book's plots.
struct Summary {
    p50: f64,
    p99: f64,
    /// The 0th to 100th percentile, one per percent (µs).
    percentiles: Vec<f64>,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    Summary {
        p50: at(0.50),
        p99: at(0.99),
        percentiles: (0..=100).map(|p| at(p as f64 / 100.0)).collect(),
    }
}

/// What the run measured, as data: the latency distributions of the
/// table rows and the scaling curves, written to `TOOLGATE_BENCH_JSON` (if
/// set) for `docs/perf/plot.py`, which draws the book's plots from it.
#[derive(Default)]
struct Recorded {
    /// The table the rows recorded now belong to.
    section: String,
    distributions: Vec<Value>,
    curves: std::collections::BTreeMap<String, Vec<(f64, f64)>>,
}

static RECORDED: std::sync::Mutex<Option<Recorded>> = std::sync::Mutex::new(None);

fn record(f: impl FnOnce(&mut Recorded)) {
    f(RECORDED
        .lock()
        .unwrap()
        .get_or_insert_with(Recorded::default));
}

/// A table's heading, printed and remembered for the rows under it.
fn heading(title: &str) {
    println!("\n## {title}\n");
    record(|r| r.section = title.to_string());
}

/// One point `(x, p50 µs)` of the scaling curve `name`.
fn point(name: &str, x: f64, p50: f64) {
    record(|r| r.curves.entry(name.to_string()).or_default().push((x, p50)));
}

fn write_recorded() {
    let Some(path) = std::env::var_os("TOOLGATE_BENCH_JSON") else {
        return;
    };
    let recorded = RECORDED.lock().unwrap().take().unwrap_or_default();
    let data = json!({
        "machine": machine(),
        "date_ms": toolgate::now_ms(),
        "quick": quick(),
        "distributions": recorded.distributions,
        "curves": recorded.curves,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&data).unwrap()).unwrap();
    println!(
        "\nwrote the distributions and curves to {}",
        Path::new(&path).display()
    );
}

/// Time `n` runs of `f` after `warm` warm-up runs.
fn time(n: usize, warm: usize, mut f: impl FnMut(usize)) -> Summary {
    for i in 0..warm {
        f(i);
    }
    let samples = (0..n)
        .map(|i| {
            let start = Instant::now();
            f(warm + i);
            start.elapsed()
        })
        .collect();
    summarize(samples)
}

/// Decisions per second with `threads` threads deciding `per_thread` times.
fn throughput(threads: usize, per_thread: usize, f: impl Fn(usize, usize) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let f = &f;
            scope.spawn(move || (0..per_thread).for_each(|i| f(t, i)));
        }
    });
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

/// A loopback chat-completions server that answers `allow` at once.
fn instant_model() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let answer = r#"{"choices":[{"message":{"role":"assistant","content":"{\"verdict\": \"allow\"}"}}]}"#;
                let _ = write!(
                    reader.into_inner(),
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    url
}

fn bundled_config(dir: &Path, probe: Option<&str>, max_probes: u32, extra: &str) -> Config {
    let probe = probe
        .map(|url| format!("[probe]\nendpoint = {url:?}\n"))
        .unwrap_or_default();
    let text = format!(
        "cache_dir = {cache:?}\n[log]\narguments = \"digest\"\n{probe}\
         [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config]\nauto_plan = false\n\
         [plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n\
         [plugins.shadow-sentinel.config]\nmax_probes_per_turn = {max_probes}\n\
         [plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n{extra}",
        cache = dir.join("cache").display().to_string()
    );
    Config::parse(&text, "bench", dir.to_path_buf()).unwrap()
}

fn open(config: Config, dir: &Path, store: &str) -> Service {
    Service::open(config, Some(dir.join(store).into())).unwrap()
}

/// 100 000 sentinel events over 1 000 sessions and 1 000 leases.
fn prefill(host: &Service, events: usize, leases: usize) {
    let store = host.store();
    for n in 0..events {
        store.events().append_event(StoredEvent {
            policy: "shadow-sentinel".into(),
            session_id: format!("s-{}", n % 1000),
            turn: (n / 1000) as u64,
            kind: "tool_call".into(),
            tool: Some(if n % 3 == 0 { "Bash" } else { "Read" }.into()),
            origin: None,
            risk: None,
            detail: Some("succeeded".into()),
            summary: Some(format!("ran step {n}")),
            at_ms: n as u64,
        });
        if n % 4000 == 3999 {
            store.maintenance().persist();
        }
    }
    store.maintenance().persist();
    for t in 0..leases {
        host.command(
            "lease-gate",
            "lease-grant",
            &json!({"thread": format!("t-{t}"), "actions": ["Read", "Bash", "Grep"]}).to_string(),
        )
        .unwrap();
    }
}

/// A decision log of `entries` entries: at its default `max_entries`
/// (100 000) it is a daemon's that has run a while, where every entry the
/// writer appends also costs it one it trims.
fn fill_decision_log(host: &Service, entries: usize) {
    let store = host.store();
    let request = low(0);
    let decision = host.evaluate(&request).unwrap();
    for n in 0..entries {
        let text = request.arguments_text();
        store.log().log_decision(PendingLogEntry::new(
            &request,
            text,
            &decision,
            ArgumentsView::Digest,
        ));
        if n % 4000 == 3999 {
            store.maintenance().persist(); // the log's buffer holds a few thousand at most
        }
    }
    store.maintenance().persist();
}

fn request(tool: &str, args: Value, n: usize) -> ToolRequest {
    let mut request = ToolRequest::new(tool, args);
    request.session_id = format!("s-{}", n % 1000);
    request.thread_id = Some(format!("t-{}", n % 1000));
    request.thread_kind = "research".into(); // no planning: the prefilled leases decide
    request.turn = n as u64; // a fresh probe budget each call
    request.mode = Mode::InteractiveAutoApprove;
    request
}

fn low(n: usize) -> ToolRequest {
    request("Read", json!({"file_path": "src/lib.rs"}), n)
}

fn shell(n: usize) -> ToolRequest {
    request("Bash", json!({"command": "cargo test --workspace"}), n)
}

/// The same three policies' logic as plain native Rust over the same store.
#[path = "support/native_floor.rs"]
mod native;

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

/// Claude Code's rhythm: PreToolUse (decide), PostToolUse (observe), the
/// next PreToolUse, for 8 sessions of 2 users taking turns. Every session's
/// instances stay warm, so the steady path instantiates nothing.
fn rhythm(host: &Service, n: usize) {
    let session = |i: usize| {
        let mut request = low(i);
        request.user_id = format!("user-{}", i % 2);
        request.session_id = format!("rhythm-{}", i % 8);
        request.thread_id = Some(format!("t-{}", i % 8));
        request.call_id = Some(format!("call-{i}"));
        request
    };
    let created = || -> u64 {
        host.plugin_statuses()
            .iter()
            .map(|p| p.instances_created)
            .sum()
    };
    let step = |i: usize| {
        let request = session(i);
        assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
        host.observe(&request, toolgate::Outcome::Succeeded, "ok")
            .unwrap();
    };
    (0..64).for_each(step); // every session has had its first call
    let before = created();
    let mut decide = Vec::with_capacity(n);
    let mut observe = Vec::with_capacity(n);
    for i in 64..64 + n {
        let request = session(i);
        let start = Instant::now();
        assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
        decide.push(start.elapsed());
        let start = Instant::now();
        host.observe(&request, toolgate::Outcome::Succeeded, "ok")
            .unwrap();
        observe.push(start.elapsed());
    }
    let fresh = created() - before;
    row(
        "Claude Code's rhythm, 8 sessions of 2 users taking turns: PreToolUse",
        &summarize(decide),
        &format!("{fresh} instances created in {n} steady rounds"),
    );
    row(
        "the same rhythm: PostToolUse (observe)",
        &summarize(observe),
        "",
    );
}

fn row(name: &str, s: &Summary, extra: &str) {
    println!("| {name} | {:.1} | {:.1} | {extra} |", s.p50, s.p99);
    record(|r| {
        r.distributions
            .push(json!({"section": r.section, "case": name, "note": extra, "percentiles_us": s.percentiles}))
    });
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list; we have no unit benches
    }
    let n = if quick() { 300 } else { 3000 };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    println!(
        "# toolgate bench\n\nmachine: {}; date: {}\n",
        machine(),
        toolgate::now_ms()
    );
    let model = instant_model();

    // ---- composed decision, warm, prefilled store
    heading("Composed decision (lease-gate + shadow-sentinel + context-cost), warm");
    println!(
        "store: 100 000 sentinel events over 1 000 sessions, 1 000 leases; \
         the decision log full (100 000 entries)\n"
    );
    println!("| case | p50 µs | p99 µs | notes |\n|---|---|---|---|");
    let skip_host = open(bundled_config(d, None, 0, ""), d, "skip.redb");
    prefill(&skip_host, if quick() { 10_000 } else { 100_000 }, 1000);
    fill_decision_log(&skip_host, if quick() { 10_000 } else { 100_000 });
    let probe_host = open(
        bundled_config(d, Some(&model), 1_000_000, ""),
        d,
        "probe.redb",
    );
    prefill(&probe_host, if quick() { 10_000 } else { 100_000 }, 1000);
    let check = |host: &Service, r: ToolRequest| {
        assert_eq!(host.evaluate(&r).unwrap().verdict, Verdict::Allow)
    };
    let low_wasm = time(n, 200, |i| check(&skip_host, low(i)));
    let shell_skip = time(n, 200, |i| check(&skip_host, shell(i)));
    let shell_probe = time(n / 3, 50, |i| check(&probe_host, shell(i)));
    let tput = |host: &Service, threads: usize, make: fn(usize) -> ToolRequest| {
        throughput(threads, n / threads, |t, i| {
            check(host, make(t * 100_000 + i))
        })
    };
    let (low1, low2) = (tput(&skip_host, 1, low), tput(&skip_host, 2, low));
    let (sh1, sh2) = (tput(&skip_host, 1, shell), tput(&skip_host, 2, shell));
    row(
        "low-risk `Read`",
        &low_wasm,
        &format!("{low1:.0}/s on 1 thread, {low2:.0}/s on 2"),
    );
    row(
        "`Bash`, probe skipped (budget 0)",
        &shell_skip,
        &format!("{sh1:.0}/s on 1 thread, {sh2:.0}/s on 2"),
    );
    row(
        "`Bash`, probe to an instant loopback model",
        &shell_probe,
        "HTTP round trip + budget write + context queries",
    );
    // Every call above comes from another of 1 000 sessions, so each needs
    // fresh instances (warm ones never cross sessions). A session's own
    // consecutive calls — Claude Code's rhythm — run warm:
    let one_session = |i: usize| {
        let mut request = low(i);
        request.session_id = "s-steady".into();
        request.thread_id = Some("t-1".into());
        request
    };
    let steady = time(n, 200, |i| check(&skip_host, one_session(i)));
    // Each thread its own session, so each keeps its own warm instances.
    // 20 × n decisions (60 000, about a second; 6 000 quick): long enough
    // for the store's writer, which shares the two cores, to be measured
    // at its own pace.
    let steady_tput = |threads: usize| {
        throughput(threads, n * 20 / threads, |t, i| {
            let mut request = one_session(i);
            request.session_id = format!("s-steady-{t}");
            check(&skip_host, request)
        })
    };
    let (steady1, steady2) = (steady_tput(1), steady_tput(2));
    row(
        "low-risk `Read`, one session's consecutive calls (warm instances)",
        &steady,
        &format!(
            "the per-session steady path; {steady1:.0}/s on 1 thread, {steady2:.0}/s on 2 (a session per thread)"
        ),
    );
    rhythm(&skip_host, n);

    // ---- the native floor
    heading("Native floor (the same logic as plain Rust over the same store)");
    println!("| case | p50 µs | p99 µs | wasm/native (p50) |\n|---|---|---|---|");
    let floor_skip = native::Floor::new(Arc::clone(skip_host.store()), 0, None);
    let floor_probe = native::Floor::new(Arc::clone(probe_host.store()), 1_000_000, Some(&model));
    let low_native = time(n, 200, |i| {
        assert_eq!(floor_skip.decide(&low(i + 500_000)), Verdict::Allow)
    });
    let shell_native = time(n, 200, |i| {
        assert_eq!(floor_skip.decide(&shell(i + 500_000)), Verdict::Allow)
    });
    let probe_native = time(n / 3, 50, |i| {
        assert_eq!(floor_probe.decide(&shell(i + 500_000)), Verdict::Allow)
    });
    row(
        "low-risk `Read`",
        &low_native,
        &format!("{:.1}×", low_wasm.p50 / low_native.p50),
    );
    row(
        "`Bash`, probe skipped",
        &shell_native,
        &format!("{:.1}×", shell_skip.p50 / shell_native.p50),
    );
    row(
        "`Bash`, probe",
        &probe_native,
        &format!("{:.1}×", shell_probe.p50 / probe_native.p50),
    );
    drop(floor_skip);
    drop(floor_probe);

    // ---- each policy alone, and host overhead
    heading("Each policy alone, and the host's own overhead");
    println!("| policy | p50 µs | p99 µs | call |\n|---|---|---|---|");
    let mut warm_rows = Vec::new();
    for (name, path, make, table) in [
        (
            "allow-only (host overhead)",
            guest("flip-allow-policy").display().to_string(),
            low as fn(usize) -> ToolRequest,
            "",
        ),
        (
            "context-cost",
            "bundled:context-cost".into(),
            low as fn(usize) -> ToolRequest,
            "",
        ),
        (
            "shadow-sentinel (low risk)",
            "bundled:shadow-sentinel".into(),
            low as fn(usize) -> ToolRequest,
            "",
        ),
        (
            "lease-gate",
            "bundled:lease-gate".into(),
            low as fn(usize) -> ToolRequest,
            "auto_plan = true",
        ),
        ("rules (none)", "bundled:rules".into(), low, ""),
        (
            "rules (4, none fires)",
            "bundled:rules".into(),
            low,
            RULES_NONE_FIRES,
        ),
        (
            "rules (a limit counting each call)",
            "bundled:rules".into(),
            low,
            "rule = [{ tool = \"Read\", action = \"deny\", reason = \"r\", limit = { calls = 1000000000, per = \"session\" } }]",
        ),
    ] {
        let text = format!(
            "cache_dir = {:?}\n[log]\nenabled = false\n[plugins.one]\npath = {path:?}\npriority = 1\n[plugins.one.config]\n{table}\n",
            d.join("cache").display().to_string()
        );
        let host = open(
            Config::parse(&text, "bench", d.to_path_buf()).unwrap(),
            d,
            &format!("{name}.redb").replace(' ', "-"),
        );
        let call = |i: usize, session: Option<&str>| {
            let mut r = make(i);
            r.thread_kind = "foreground".into();
            r.thread_id = Some("one-thread".into()); // planned once, in the warm-up
            if let Some(session) = session {
                r.session_id = session.into();
            }
            host.evaluate(&r).unwrap();
        };
        let s = time(n, 200, |i| call(i, None));
        row(
            name,
            &s,
            "`Read`, another of 1 000 sessions each call (fresh instance)",
        );
        warm_rows.push((name, time(n, 200, |i| call(i, Some("one-session")))));
    }
    for (name, s) in warm_rows {
        row(name, &s, "`Read`, one session's calls (warm instance)");
    }

    // ---- cold start and hot swap
    heading("Cold start and hot swap");
    println!("| case | ms |\n|---|---|");
    let cold = |cache: &Path| {
        let start = Instant::now();
        let text = format!(
            "cache_dir = {:?}\n[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n[plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n[plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n",
            cache.display().to_string()
        );
        let host = open(
            Config::parse(&text, "bench", d.to_path_buf()).unwrap(),
            d,
            &format!("cold-{}.redb", toolgate::now_ms()),
        );
        host.evaluate(&low(1)).unwrap();
        start.elapsed().as_secs_f64() * 1e3
    };
    let empty_cache = d.join("cold-cache");
    println!(
        "| start to first decision, 3 policies, empty cache | {:.1} |",
        cold(&empty_cache)
    );
    println!(
        "| start to first decision, 3 policies, warm cache | {:.1} |",
        cold(&empty_cache)
    );
    let swap_dir = d.join("swap");
    std::fs::create_dir_all(&swap_dir).unwrap();
    let flip = swap_dir.join("flip.wasm");
    std::fs::copy(guest("flip-allow-policy"), &flip).unwrap();
    std::fs::write(
        swap_dir.join("toolgate.toml"),
        format!(
            "cache_dir = {:?}\n[plugins.flip]\npath = \"flip.wasm\"\npriority = 1\n",
            d.join("cache").display().to_string()
        ),
    )
    .unwrap();
    let swap_host = Arc::new(open(
        Config::load(&swap_dir.join("toolgate.toml")).unwrap(),
        d,
        "swap.redb",
    ));
    // Median ms from a swap (the other build renamed into place) to the new
    // version serving, waiting with `apply` (an explicit reload, or nothing).
    let swap_median = |apply: &dyn Fn()| {
        let mut times = Vec::new();
        for i in 0..10 {
            let (version, want) = if i % 2 == 0 {
                ("flip-deny-policy", Verdict::Deny)
            } else {
                ("flip-allow-policy", Verdict::Allow)
            };
            let start = Instant::now();
            std::fs::copy(guest(version), swap_dir.join("next.tmp")).unwrap();
            std::fs::rename(swap_dir.join("next.tmp"), &flip).unwrap();
            apply();
            while swap_host.evaluate(&low(i)).unwrap().verdict != want {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "a swap was missed"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        times[5]
    };
    println!(
        "| file lands → new version serving, explicit reload (median of 10) | {:.2} |",
        swap_median(&|| {
            swap_host.reload().unwrap();
        })
    );
    let _watch = swap_host.watch(Duration::from_millis(2)).unwrap();
    println!(
        "| file lands → new version serving, watcher at 2 ms (median of 10) | {:.2} |",
        swap_median(&|| {})
    );

    // ---- hook round trip
    heading("Claude Code hook round trip");
    println!("| case | p50 ms | p99 ms |\n|---|---|---|");
    let bin = env!("CARGO_BIN_EXE_toolgate");
    let event = |name: &str, session: &str| {
        json!({"session_id": session, "hook_event_name": name, "tool_name": "Read", "tool_input": {"file_path": "a"}, "permission_mode": "default", "tool_use_id": "t"}).to_string()
    };
    let hook_once = |store: &Path, extra: &[&str], payload: &str| {
        run_hook(
            Command::new(bin)
                .arg("--store")
                .arg(store)
                .args(["hook", "claude-code"])
                .args(extra)
                .env("XDG_CACHE_HOME", d.join("cache-xdg")),
            payload,
        )
    };
    let stop_daemon = |store: &Path| {
        let client = toolgate::daemon::Client::new(toolgate::daemon::socket_for_store(store));
        if let Ok(health) = client.call(&toolgate::daemon::DaemonRequest::Health) {
            let pid = health["pid"].to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            while client.is_up() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let pre = event("PreToolUse", "bench");
    let in_process_store = d.join("hook-in-process.redb");
    let per_process = time(if quick() { 10 } else { 40 }, 2, |_| {
        hook_once(&in_process_store, &["--no-daemon"], &pre)
    });
    println!(
        "| a process per call, no daemon (`--no-daemon`) | {:.2} | {:.2} |",
        per_process.p50 / 1e3,
        per_process.p99 / 1e3
    );
    // A new session: SessionStart starts the store's daemon; then the first
    // PreToolUse. Each round uses a new store, so a new daemon.
    let rounds = if quick() { 3 } else { 10 };
    let mut starts = Vec::new();
    let mut firsts = Vec::new();
    for round in 0..rounds {
        let store = d.join(format!("hook-session-{round}.redb"));
        let started = Instant::now();
        hook_once(&store, &[], &event("SessionStart", "new"));
        starts.push(started.elapsed());
        let started = Instant::now();
        hook_once(&store, &[], &event("PreToolUse", "new"));
        firsts.push(started.elapsed());
        stop_daemon(&store);
    }
    let starts = summarize(starts);
    let firsts = summarize(firsts);
    println!(
        "| SessionStart with no daemon running (starts it; compiled-artifact cache warm) | {:.2} | {:.2} |",
        starts.p50 / 1e3,
        starts.p99 / 1e3
    );
    println!(
        "| first PreToolUse of a new session (after SessionStart) | {:.2} | {:.2} |",
        firsts.p50 / 1e3,
        firsts.p99 / 1e3
    );
    let store = d.join("hook-daemon.redb");
    hook_once(&store, &[], &event("SessionStart", "bench"));
    let via_daemon = time(if quick() { 20 } else { 200 }, 5, |_| {
        hook_once(&store, &[], &pre)
    });
    println!(
        "| `toolgate hook claude-code`, daemon running (process start + one round trip + durable commit) | {:.2} | {:.2} |",
        via_daemon.p50 / 1e3,
        via_daemon.p99 / 1e3
    );
    // What `toolgate hook install` writes: the thin client, falling back to
    // the full command.
    let thin = env!("CARGO_BIN_EXE_toolgate-hook");
    let socket = toolgate::daemon::socket_for_store(&store);
    let thin_once = || {
        run_hook(
            Command::new(thin)
                .arg("--socket")
                .arg(&socket)
                .arg("--")
                .arg(bin)
                .arg("--store")
                .arg(&store)
                .args(["hook", "claude-code"]),
            &pre,
        )
    };
    let via_thin = time(if quick() { 20 } else { 200 }, 5, |_| thin_once());
    println!(
        "| the installed hook: `toolgate-hook` thin client, daemon running | {:.2} | {:.2} |",
        via_thin.p50 / 1e3,
        via_thin.p99 / 1e3
    );
    // The command line `toolgate hook install` writes: sh -c, the
    // fail-closed wrapper, the thin client. Beside it, the floor of any
    // command hook: sh -c around a program that reads the event and prints
    // an answer.
    let installed_line = format!(
        "out=$({thin} --socket {} -- {bin} --store {} hook claude-code) && [ -n \"$out\" ] && printf '%s\\n' \"$out\" || exit 2",
        socket.display(),
        store.display()
    );
    let shell_once = |line: &str| run_hook(Command::new("/bin/sh").args(["-c", line]), &pre);
    let via_line = time(if quick() { 20 } else { 200 }, 5, |_| {
        shell_once(&installed_line)
    });
    println!(
        "| the installed command line (`sh -c`, fail-closed wrapper, thin client), daemon running | {:.2} | {:.2} |",
        via_line.p50 / 1e3,
        via_line.p99 / 1e3
    );
    let floor = time(if quick() { 20 } else { 200 }, 5, |_| {
        shell_once("cat > /dev/null; echo '{}'")
    });
    println!(
        "| the floor of a command hook: `sh -c 'cat > /dev/null; echo {{}}'` | {:.2} | {:.2} |",
        floor.p50 / 1e3,
        floor.p99 / 1e3
    );
    let client = toolgate::daemon::Client::new(&socket);
    let hook_request = toolgate::daemon::DaemonRequest::Hook {
        runtime: toolgate::daemon::HookRuntime::ClaudeCode,
        event: pre.clone(),
        on_error: Default::default(),
        config: None,
    };
    let client_only = time(n, 100, |_| {
        client.call(&hook_request).unwrap();
    });
    println!(
        "| daemon client in-process (socket round trip + decision + durable commit) | {:.3} | {:.3} |",
        client_only.p50 / 1e3,
        client_only.p99 / 1e3
    );
    stop_daemon(&store);

    // Claude Code's HTTP hook: what it sends (a POST of the event) to a
    // daemon serving HTTP; no process per call. Claude Code's client may or
    // may not keep the connection: both are timed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut http_daemon = Command::new(bin)
        .arg("--store")
        .arg(&store)
        .args(["serve", "--http", &format!("127.0.0.1:{port}")])
        .env("XDG_CACHE_HOME", d.join("cache-xdg"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !client.is_up() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let url = format!("http://127.0.0.1:{port}/v1/hooks/claude-code");
    let post = |agent: &ureq::Agent| {
        let mut response = agent.post(&url).send(pre.as_str()).unwrap();
        assert_eq!(response.status(), 200);
        response.body_mut().read_to_string().unwrap();
    };
    let kept: ureq::Agent = ureq::Agent::config_builder().build().into();
    let keep_alive = time(if quick() { 50 } else { 500 }, 10, |_| post(&kept));
    let fresh = time(if quick() { 50 } else { 500 }, 10, |_| {
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        post(&agent)
    });
    println!(
        "| HTTP hook (`POST /v1/hooks/claude-code`), daemon running, a new connection per call | {:.3} | {:.3} |",
        fresh.p50 / 1e3,
        fresh.p99 / 1e3
    );
    println!(
        "| HTTP hook, one kept-alive connection | {:.3} | {:.3} |",
        keep_alive.p50 / 1e3,
        keep_alive.p99 / 1e3
    );
    let _ = Command::new("kill")
        .args(["-TERM", &http_daemon.id().to_string()])
        .status();
    let _ = http_daemon.wait();

    // ---- store
    heading("Store");
    println!("| case | result |\n|---|---|");
    let store = Store::open(&d.join("store-bench.redb")).unwrap();
    let count = if quick() { 20_000 } else { 200_000 };
    let start = Instant::now();
    for i in 0..count {
        store.events().append_event(StoredEvent {
            policy: "p".into(),
            session_id: format!("s-{}", i % 100),
            turn: i as u64,
            kind: "tool_call".into(),
            tool: Some("Bash".into()),
            origin: None,
            risk: None,
            detail: None,
            summary: Some("x".repeat(100)),
            at_ms: i as u64,
        });
        if i % 2000 == 1999 {
            store.maintenance().persist(); // stay under the queue bound
        }
    }
    store.maintenance().persist();
    println!(
        "| event append, batched commits | {:.0} events/s |",
        count as f64 / start.elapsed().as_secs_f64()
    );
    let durable = time(if quick() { 50 } else { 300 }, 10, |i| {
        store
            .state()
            .state_put("p", &format!("k{}", i % 10), Some(b"value"), u64::MAX)
            .unwrap();
    });
    println!(
        "| one policy-state write (own transaction, group-committed) | p50 {:.0} µs, p99 {:.0} µs |",
        durable.p50, durable.p99
    );
    let gate = toolgate::gates::PendingGate {
        request_id: String::new(),
        policy: "p".into(),
        user_id: "u".into(),
        thread_id: "t".into(),
        session_id: "s".into(),
        source_channel: "cli".into(),
        tool: "Bash".into(),
        call_id: "c".into(),
        arguments: "{}".into(),
        fingerprint: String::new(),
        pause: toolgate::gates::PauseKind::Approval {
            description: "ok?".into(),
            allow_always: false,
        },
        risk: None,
        transcript_path: None,
        created_at_ms: 0,
        expires_at_ms: u64::MAX,
        policy_sha256: String::new(),
        rewritten_sha256: None,
        project: None,
        always_digest: None,
    };
    let gates = time(if quick() { 50 } else { 300 }, 10, |_| {
        store.gates().insert_gate(&gate).unwrap()
    });
    println!(
        "| one durable commit (a pending gate, fsync) | p50 {:.0} µs, p99 {:.0} µs |",
        gates.p50, gates.p99
    );
    drop(store);

    // ---- scaling
    heading("Scaling");
    println!("| stored events | `Bash` with probe p50 µs | low-risk p50 µs |\n|---|---|---|");
    let scale_host = open(
        bundled_config(d, Some(&model), 1_000_000, "").clone_without_log(),
        d,
        "scale.redb",
    );
    prefill(&scale_host, 0, 1000);
    let mut stored = 0;
    let sizes: &[usize] = if quick() {
        &[1_000, 10_000, 100_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    for &size in sizes {
        prefill(&scale_host, size - stored, 0);
        stored = size;
        let probe = time(n / 6, 20, |i| check(&scale_host, shell(i + size)));
        let low_s = time(n / 3, 50, |i| check(&scale_host, low(i + size)));
        println!("| {size} | {:.1} | {:.1} |", probe.p50, low_s.p50);
        point("stored events: `Bash` with a probe", size as f64, probe.p50);
        point("stored events: low-risk `Read`", size as f64, low_s.p50);
    }
    println!("\n| policies (allow-only) | p50 µs, fresh instances | p50 µs, warm |\n|---|---|---|");
    for count in [1, 5, 10, 20] {
        let mut text = format!(
            "cache_dir = {:?}\n[log]\nenabled = false\n",
            d.join("cache").display().to_string()
        );
        for p in 0..count {
            text.push_str(&format!(
                "[plugins.p{p}]\npath = {:?}\npriority = {p}\n",
                guest("flip-allow-policy").display().to_string()
            ));
        }
        let host = open(
            Config::parse(&text, "bench", d.to_path_buf()).unwrap(),
            d,
            &format!("policies-{count}.redb"),
        );
        let fresh = time(n / 3, 50, |i| {
            host.evaluate(&low(i)).unwrap();
        });
        let warm = time(n / 3, 50, |i| {
            let mut request = low(i);
            request.session_id = "one-session".into();
            host.evaluate(&request).unwrap();
        });
        println!("| {count} | {:.1} | {:.1} |", fresh.p50, warm.p50);
        point("policies: fresh instances", count as f64, fresh.p50);
        point("policies: warm instances", count as f64, warm.p50);
    }
    println!(
        "\n| argument size (in a `Bash` call's `description`) | p50 µs (3 bundled policies, probe skipped), fresh instances | warm | warm, code-like text |\n|---|---|---|---|"
    );
    let args_host = open(bundled_config(d, None, 0, ""), d, "args.redb");
    prefill(&args_host, 0, 1000);
    // Code-like text has paths, quotes and operators for the self-protection
    // scan to split; a run of one letter has none.
    let line = "let path = \"src/lib.rs\"; // see docs/guide.md (x <= y)\n";
    for size in [100usize, 10_000, 100_000, 1_000_000] {
        let letters = "x".repeat(size);
        let code = line.repeat(size / line.len() + 1)[..size].to_string();
        let runs = if size >= 100_000 { 50 } else { n / 3 };
        let measure = |content: &str, session: Option<&str>| {
            time(runs, 10, |i| {
                // The argument rides in `description`: a `command` past the
                // 64 KiB the guard reads as shell text is refused.
                let mut r = request(
                    "Bash",
                    json!({"command": "cargo test --workspace", "description": content}),
                    i,
                );
                if let Some(session) = session {
                    r.session_id = session.into();
                }
                check(&args_host, r);
            })
        };
        let fresh = measure(&letters, None);
        let warm = measure(&letters, Some("one-session"));
        let code = measure(&code, Some("one-session"));
        println!(
            "| {size} B | {:.1} | {:.1} | {:.1} |",
            fresh.p50, warm.p50, code.p50
        );
        point("argument size: fresh instances", size as f64, fresh.p50);
        point("argument size: warm", size as f64, warm.p50);
        point("argument size: warm, code-like text", size as f64, code.p50);
    }
    write_recorded();
}

trait WithoutLog {
    fn clone_without_log(self) -> Self;
}

impl WithoutLog for Config {
    fn clone_without_log(mut self) -> Self {
        self.log.enabled = false;
        self
    }
}
