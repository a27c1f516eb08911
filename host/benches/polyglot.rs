//! Policies in Python and TypeScript beside the Rust one:
//! `cargo bench --bench polyglot` (release build).
//!
//! One behaviour in three languages — context-cost's warn/stop: the bundled
//! Rust policy and its ports in `examples/policies/context-budget/`, which
//! pass the same fixture file — measured the same way: the component's size,
//! compiling it (an empty cache) and loading it compiled (a warm cache), the
//! compiled artifact's size, a decision on a fresh instance and on a warm
//! one, and the resident memory each warm instance holds. The Python and
//! TypeScript components are built from source with the pinned toolchains
//! (as `tests/polyglot.rs` builds them).

/// The allocator the `toolgate` binary (the daemon) runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The tests' builder of Python and TypeScript policies (and what it
// reports when a toolchain is missing).
#[allow(dead_code)]
#[path = "../../tests/common/missing.rs"]
mod missing;
#[allow(dead_code)]
#[path = "../../tests/common/polyglot.rs"]
mod polyglot;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use polyglot::Language;
use toolgate::{Config, Service, ToolRequest, Verdict};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Warm instances measured for the memory each holds (the pool keeps at
/// most 32 idle per plugin version).
const INSTANCES: usize = 24;

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// A host with `wasm` as its one plugin, caching compiled components in
/// `cache`, its instances kept warm or not.
fn open(wasm: &Path, cache: &Path, store: &Path, reuse: bool) -> (Service, Duration) {
    let text = format!(
        "cache_dir = {:?}\n[plugins.budget]\npath = {:?}\npriority = 1\n\
         [plugins.budget.config]\nmax_tokens = 400000\n\
         [plugins.budget.limits]\nreuse_instances = {reuse}\nspare_instances = 0\n",
        cache.display().to_string(),
        wasm.display().to_string()
    );
    let config = Config::parse(&text, "bench", PathBuf::from(".")).unwrap();
    let started = Instant::now();
    let host = Service::open(config, Some(store.to_path_buf().into())).unwrap();
    (host, started.elapsed())
}

/// A subagent's call past the warn threshold: every policy measures,
/// accounts and allows with a note.
fn call(session: usize) -> ToolRequest {
    let mut request: ToolRequest = serde_json::from_value(serde_json::json!({
        "tool": "Read",
        "arguments": { "file_path": "src/lib.rs" },
        "is_subagent": true,
        "context_tokens": 268_000,
    }))
    .unwrap();
    request.session_id = format!("s-{session}");
    request.thread_id = Some(format!("s-{session}"));
    request
}

fn decide(host: &Service, session: usize) {
    let decision = host.evaluate(&call(session)).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.notes.len(), 1, "{decision:?}");
}

/// The median of `n` timed runs of `f`, µs.
fn p50(n: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut samples: Vec<Duration> = (0..n)
        .map(|i| {
            let started = Instant::now();
            f(i);
            started.elapsed()
        })
        .collect();
    samples.sort();
    samples[n / 2].as_secs_f64() * 1e6
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    kib * 1024
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        dir_bytes(&path)
                    } else {
                        e.metadata().map_or(0, |m| m.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// One row: the policy in one language.
struct Row {
    language: &'static str,
    size: u64,
    compile: Duration,
    load: Duration,
    artifact: u64,
    fresh: f64,
    warm: f64,
    memory: u64,
}

fn measure(language: &'static str, wasm: &Path) -> Row {
    let n = if quick() { 100 } else { 1000 };
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");
    let (_, compile) = open(wasm, &cache, &scratch.path().join("a.redb"), true);
    let artifact = dir_bytes(&cache);
    let (warm_host, load) = open(wasm, &cache, &scratch.path().join("b.redb"), true);
    for i in 0..50 {
        decide(&warm_host, i % 2);
    }
    let warm = p50(n, |_| decide(&warm_host, 0));
    // The resident memory each warm instance holds: one per session.
    let before = rss_bytes();
    for session in 1_000..1_000 + INSTANCES {
        decide(&warm_host, session);
    }
    let memory = rss_bytes().saturating_sub(before) / INSTANCES as u64;
    drop(warm_host);
    // No warm instance and no spare: each decision instantiates afresh.
    let (fresh_host, _) = open(wasm, &cache, &scratch.path().join("c.redb"), false);
    for i in 0..20 {
        decide(&fresh_host, i);
    }
    let fresh = p50(n / 4, |i| decide(&fresh_host, i));
    Row {
        language,
        size: std::fs::metadata(wasm).unwrap().len(),
        compile,
        load,
        artifact,
        fresh,
        warm,
        memory,
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list; we have no unit benches
    }
    let source = |language: Language| {
        Path::new(ROOT)
            .join("examples/policies/context-budget")
            .join(language.flag())
    };
    let build = |language: Language| {
        polyglot::build(language, "context-budget", &source(language), &["account"])
            .expect("the toolchain is installed (.ci/setup)")
    };
    let rust = Path::new(env!("TOOLGATE_GUEST_DIR")).join("context_cost.wasm");
    let rows = [
        measure("Rust (the bundled context-cost)", &rust),
        measure("Python (componentize-py)", &build(Language::Python)),
        measure("TypeScript (jco, QuickJS)", &build(Language::TypeScript)),
    ];
    println!("# The same policy in three languages\n");
    println!(
        "| language | component | compile | load compiled | compiled artifact | \
         decision, fresh instance p50 | decision, warm p50 | × Rust warm | memory per warm instance |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {} | {:.0} ms | {:.1} ms | {} | {:.0} µs | {:.1} µs | {:.1}× | {} |",
            row.language,
            mib(row.size),
            row.compile.as_secs_f64() * 1e3,
            row.load.as_secs_f64() * 1e3,
            mib(row.artifact),
            row.fresh,
            row.warm,
            row.warm / rows[0].warm,
            mib(row.memory),
        );
    }
}
