//! What the audit trail costs a decision: the bundled policies deciding
//! low-risk calls of one session (the warm steady path), with the chain on
//! and off, each run ending when its log entries and links are durable (so
//! the store's writer, which shares the cores, is counted). Rounds
//! alternate on and off on fresh stores; the medians are compared.
//!
//! `cargo bench --bench audit` (release; `TOOLGATE_BENCH_QUICK=1` for fewer
//! calls). The book's performance chapter reports it.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use toolgate::request::Mode;
use toolgate::{Config, Service, ToolRequest, Verdict};

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// The three bundled policies, the chain `on` or off.
fn host(dir: &Path, name: &str, on: bool) -> Service {
    let text = format!(
        "cache_dir = {cache:?}\n[log]\narguments = \"digest\"\n[audit]\nenabled = {on}\n\
         [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config]\nauto_plan = false\n\
         [plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n\
         [plugins.shadow-sentinel.config]\nmax_probes_per_turn = 0\n\
         [plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n",
        cache = dir.join("cache").display().to_string()
    );
    let config = Config::parse(&text, "bench", dir.to_path_buf()).unwrap();
    // (the three policies the `decide` benchmark composes)
    Service::open(config, Some(dir.join(name).into())).unwrap()
}

/// A low-risk call of one session, as the `decide` benchmark's steady path
/// makes it: a research thread (no planning), auto-approved.
fn read(i: usize) -> ToolRequest {
    let mut request = ToolRequest::new("Read", json!({"file_path": "src/lib.rs"}));
    request.session_id = "s-steady".into();
    request.thread_id = Some("t-1".into());
    request.thread_kind = "research".into();
    request.turn = i as u64;
    request.mode = Mode::InteractiveAutoApprove;
    request
}

/// Microseconds per decision over `calls` calls, until durable.
fn per_decision(host: &Service, calls: usize) -> f64 {
    let lease = r#"{"thread": "t-1", "actions": ["Read"]}"#;
    host.command("lease-gate", "lease-grant", lease).unwrap();
    for i in 0..200 {
        let decision = host.evaluate(&read(i)).unwrap();
        assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    }
    host.persist();
    let start = Instant::now();
    for i in 0..calls {
        assert_eq!(host.evaluate(&read(i)).unwrap().verdict, Verdict::Allow);
    }
    host.persist();
    start.elapsed().as_secs_f64() * 1e6 / calls as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list; we have no unit benches
    }
    let (calls, rounds) = if quick() { (5_000, 3) } else { (30_000, 11) };
    let dir = tempfile::tempdir().unwrap();
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Fresh stores each round, the order alternating; each round's
        // pair compared, as the machine's pace drifts between rounds.
        let mut pair = [0.0; 2];
        for chain in [round % 2 == 0, round % 2 == 1] {
            let host = host(dir.path(), &format!("r{round}-{chain}.redb"), chain);
            pair[chain as usize] = per_decision(&host, calls);
        }
        off.push(pair[0]);
        on.push(pair[1]);
        ratios.push(pair[1] / pair[0]);
    }
    let (off, on, ratio) = (median(off), median(on), median(ratios));
    println!("# toolgate audit bench\n");
    println!(
        "{calls} warm decisions of one session (lease-gate, shadow-sentinel, context-cost), \
         until durable; medians of {rounds} rounds on fresh stores, on and off alternating\n"
    );
    println!("| audit chain | µs per decision | cost of the chain |\n|---|---|---|");
    println!("| off | {off:.2} | |");
    println!(
        "| on | {on:.2} | {:+.1} % (the median of the rounds' ratios) |",
        (ratio - 1.0) * 100.0
    );
}
