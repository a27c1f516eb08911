//! The store backends under the bundled policies: `cargo bench --bench fleet`
//! (release build; needs PostgreSQL's server binaries, and starts its own
//! throwaway cluster on a Unix socket). `TOOLGATE_BENCH_QUICK=1` shrinks it.
//!
//! Prints markdown tables: the composed decision's p50/p99 on redb and on
//! PostgreSQL; decisions/s with 1, 2 and 3 hosts sharing one database; and
//! how a risky call's cost (its policies query the event history) grows
//! with 1 k → 1 M stored events.

#[path = "../../tests/common/missing.rs"]
mod missing;
#[path = "../../tests/common/pg_cluster.rs"]
mod pg_cluster;

/// The allocator the `toolgate` binary (the daemon) runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::{Config, Service, ToolRequest};

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// (p50, p99) of `samples`, µs.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

/// The bundled default config and policies on the store at `store`, with
/// room for a million of shadow-sentinel's events.
fn host(store: &str) -> Service {
    let limits = "[plugins.shadow-sentinel.limits]\n";
    let text = toolgate::config::DEFAULT_CONFIG
        .replace(limits, &format!("{limits}events_max = 2000000\n"));
    assert_ne!(
        text,
        toolgate::config::DEFAULT_CONFIG,
        "the default config changed shape"
    );
    let mut config = Config::parse(&text, "bench config", std::env::temp_dir()).unwrap();
    config.cache_dir = Some(std::env::temp_dir().join("toolgate-bench-cache"));
    Service::open(config, Some(store.into())).unwrap()
}

/// A low-risk call (Read): every policy runs, none asks the model.
fn low_risk(session: &str) -> ToolRequest {
    let mut request = ToolRequest::new("Read", json!({"file_path": "README.md"}));
    request.session_id = session.into();
    request.thread_kind = "foreground".into();
    request
}

/// A shell call in a turn of its own, so the turn's probe budget always
/// has room: shadow-sentinel takes a unit, reads the event history for its
/// question (no endpoint is configured, so it goes unanswered at once) and
/// records the result.
fn risky(session: &str, turn: u64) -> ToolRequest {
    let mut request = ToolRequest::new("Bash", json!({"command": format!("ls {turn}")}));
    request.session_id = session.into();
    request.turn = turn;
    request
}

fn latency(host: &Service, n: usize, request: impl Fn(usize) -> ToolRequest) -> (f64, f64) {
    for i in 0..n / 10 {
        host.evaluate(&request(i)).unwrap();
    }
    let samples = (0..n)
        .map(|i| {
            let call = request(i);
            let start = Instant::now();
            host.evaluate(&call).unwrap();
            start.elapsed()
        })
        .collect();
    percentiles(samples)
}

/// Decisions/s with `hosts` hosts on `store`, one client thread each.
fn throughput(store: &str, hosts: usize, window: Duration) -> f64 {
    let fleet: Vec<Arc<Service>> = (0..hosts).map(|_| Arc::new(host(store))).collect();
    for host in &fleet {
        host.evaluate(&low_risk("warm")).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = fleet
        .iter()
        .enumerate()
        .map(|(n, host)| {
            let (host, stop, done) = (host.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let session = format!("client-{n}");
                while !stop.load(Ordering::Relaxed) {
                    host.evaluate(&low_risk(&session)).unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
}

/// Fill shadow-sentinel's stream with `total` events over 100 sessions and
/// a few tools, straight in SQL (the writer would take minutes for 1 M).
fn fill_events(url: &str, total: usize) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .execute(
            "INSERT INTO events (policy, session_id, tool, kind, at_ms, body) \
             SELECT 'shadow-sentinel', 'session-' || (i % 100), \
                    (ARRAY['Bash','Read','Write','Edit'])[1 + i % 4], 'tool_call', \
                    (extract(epoch from now()) * 1000)::bigint, \
                    convert_to(json_build_object('policy','shadow-sentinel','session_id','session-' || (i % 100), \
                      'turn', i, 'kind','tool_call','tool',(ARRAY['Bash','Read','Write','Edit'])[1 + i % 4], \
                      'detail','succeeded','summary','ran something ' || i, \
                      'at_ms',(extract(epoch from now()) * 1000)::bigint)::text, 'UTF8') \
             FROM generate_series(1, $1::int) AS i",
            &[&(total as i32)],
        )
        .unwrap();
    client.batch_execute("ANALYZE events").unwrap();
}

fn main() {
    let Some(cluster) = pg_cluster::Cluster::start("the fleet benchmark") else {
        return;
    };
    let n = if quick() { 300 } else { 3000 };
    let window = Duration::from_secs(if quick() { 1 } else { 5 });
    let dir = tempfile::tempdir().unwrap();
    let redb = dir.path().join("bench.redb").display().to_string();
    let postgres = cluster.database();

    println!("| composed decision (3 bundled policies, low-risk call) | p50 µs | p99 µs |");
    println!("|---|---|---|");
    for (name, store) in [
        ("redb (embedded)", &redb),
        ("PostgreSQL (local socket)", &postgres),
    ] {
        let host = host(store);
        let (p50, p99) = latency(&host, n, |_| low_risk("latency"));
        println!("| {name} | {p50:.0} | {p99:.0} |");
    }

    println!();
    println!("| hosts on one store, one client thread each | decisions/s |");
    println!("|---|---|");
    println!(
        "| redb, 1 host (one process owns the file) | {:.0} |",
        throughput(&redb, 1, window)
    );
    for hosts in 1..=3 {
        let database = cluster.database();
        println!(
            "| PostgreSQL, {hosts} host{} | {:.0} |",
            if hosts == 1 { "" } else { "s" },
            throughput(&database, hosts, window)
        );
    }

    println!();
    println!("| stored events (PostgreSQL) | risky call p50 µs | p99 µs |");
    println!("|---|---|---|");
    let database = cluster.database();
    let host = host(&database); // creates the schema the fill writes to
    // Warm the host's instances and the server's caches and plans first.
    for turn in 0..n as u64 {
        host.evaluate(&risky("warm-up", turn)).unwrap();
    }
    let mut stored = 0;
    let sizes: &[usize] = if quick() {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000, 1_000_000]
    };
    for (round, &size) in sizes.iter().enumerate() {
        fill_events(&database, size - stored);
        stored = size;
        let first_turn = (round as u64 + 1) * 1_000_000;
        let (p50, p99) = latency(&host, n / 3, |i| risky("session-7", first_turn + i as u64));
        println!("| {size} | {p50:.0} | {p99:.0} |");
    }
}
