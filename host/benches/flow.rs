//! What the `flow` policy costs a decision: the bundled policies deciding
//! the calls of one working session (a Read, a `git status`, an Edit in
//! the project), with nothing added, with a policy that allows everything
//! added last (what any fourth policy costs: its sandbox crossing), and
//! with `flow` added last. Rounds rotate the three on fresh stores; each
//! round's differences are taken, and their medians reported: flow's cost
//! over nothing, and over the allow-all policy (its own work: reading the
//! call, and the host's label reads and path resolutions it asks for).
//!
//! `cargo bench --bench flow` (release; `TOOLGATE_BENCH_QUICK=1` for fewer
//! calls; `TOOLGATE_BENCH_PROFILE=flow` decides with `flow` alone for a
//! minute, to run under `perf record` with `TOOLGATE_PERF_MAP=1`;
//! `TOOLGATE_BENCH_FLOW=PATH` measures that build of the policy instead of
//! the bundled one, to compare two builds run after run). The book's
//! performance chapter reports it.

/// The allocator the `toolgate` binary runs with: under glibc's, the store's
/// writer thread freeing what the deciding thread allocated made the two
/// wait on each other, and each policy's host-side allocations added to
/// that wait outside the time it reports.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use toolgate::request::Mode;
use toolgate::{Config, Service, ToolRequest, Verdict};

fn quick() -> bool {
    std::env::var_os("TOOLGATE_BENCH_QUICK").is_some()
}

/// What is added last to the three bundled policies.
#[derive(Clone, Copy)]
enum Added {
    Nothing,
    AllowAll,
    Flow,
}

/// The three bundled policies of the `decide` benchmark, and `added` last.
fn host(dir: &Path, name: &str, added: Added) -> Service {
    let allow_all = Path::new(env!("TOOLGATE_GUEST_DIR")).join("flip_allow_policy.wasm");
    let flow = match added {
        Added::Nothing => String::new(),
        Added::AllowAll => format!(
            "[plugins.allow-all]\npath = {:?}\npriority = 40\n",
            allow_all.display().to_string()
        ),
        Added::Flow => {
            let flow = std::env::var("TOOLGATE_BENCH_FLOW").unwrap_or("bundled:flow".into());
            format!("[plugins.flow]\npath = {flow:?}\npriority = 40\n")
        }
    };
    let text = format!(
        "cache_dir = {cache:?}\n\
         [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config]\nauto_plan = false\n\
         [plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n\
         [plugins.shadow-sentinel.config]\nmax_probes_per_turn = 0\n\
         [plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n{flow}",
        cache = dir.join("cache").display().to_string()
    );
    let config = Config::parse(&text, "bench", dir.to_path_buf()).unwrap();
    Service::open(config, Some(dir.join(name).into())).unwrap()
}

/// The `i`th call of one working session in `project`.
fn call(i: usize, project: &Path) -> ToolRequest {
    let (tool, arguments) = match i % 3 {
        0 => ("Read", json!({"file_path": project.join("src/lib.rs")})),
        1 => ("Bash", json!({"command": "git status --short"})),
        _ => (
            "Edit",
            json!({"file_path": project.join("src/lib.rs"), "old_string": "a", "new_string": "b"}),
        ),
    };
    let mut request = ToolRequest::new(tool, arguments);
    request.session_id = "s-work".into();
    request.thread_id = Some("t-1".into());
    request.thread_kind = "research".into();
    request.turn = i as u64;
    request.mode = Mode::InteractiveAutoApprove;
    request.cwd = Some(project.to_path_buf());
    request
}

/// Microseconds per decision over `calls` calls, until durable; and the
/// mean time inside the policy added last, as each decision reports it.
fn per_decision(host: &Service, calls: usize, project: &Path) -> (f64, f64) {
    let lease = r#"{"thread": "t-1", "actions": ["Read", "Bash", "Edit"]}"#;
    host.command("lease-gate", "lease-grant", lease).unwrap();
    for i in 0..300 {
        let decision = host.evaluate(&call(i, project)).unwrap();
        assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    }
    host.persist();
    let mut inside = 0;
    let start = Instant::now();
    for i in 0..calls {
        let decision = host.evaluate(&call(i, project)).unwrap();
        assert_eq!(decision.verdict, Verdict::Allow);
        let last = decision.policies.iter().find(|p| p.priority == 40);
        inside += last.map_or(0, |p| p.duration_us);
    }
    host.persist();
    let per = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
    (per, inside as f64 / calls as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a list; we have no unit benches
    }
    // Many short rounds rather than a few long ones: this kind of machine
    // (a shared VM) drifts over seconds, and a round's three runs, side by
    // side, see the same drift.
    let (calls, rounds) = if quick() { (3_000, 3) } else { (6_000, 55) };
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/lib.rs"), "a\n").unwrap();
    if let Some(added) = std::env::var_os("TOOLGATE_BENCH_PROFILE") {
        let added = match added.to_str() {
            Some("flow") => Added::Flow,
            Some("allow-all") => Added::AllowAll,
            _ => Added::Nothing,
        };
        let host = host(dir.path(), "profile.redb", added);
        let (per, inside) = per_decision(&host, 1_000_000, &project);
        println!("{per:.2} µs per decision, {inside:.2} inside the policy added last");
        return;
    }
    let mut times: [Vec<f64>; 3] = Default::default();
    let mut insides: [Vec<f64>; 3] = Default::default();
    let (mut cost, mut own) = (Vec::new(), Vec::new());
    let order = [Added::Nothing, Added::AllowAll, Added::Flow];
    for round in 0..rounds {
        let mut took = [0.0; 3];
        for step in 0..3 {
            let at = (round + step) % 3;
            let host = host(dir.path(), &format!("r{round}-{at}.redb"), order[at]);
            let (per, inside) = per_decision(&host, calls, &project);
            took[at] = per;
            insides[at].push(inside);
        }
        for (at, time) in took.iter().enumerate() {
            times[at].push(*time);
        }
        cost.push(took[2] - took[0]);
        own.push(took[2] - took[1]);
    }
    let [nothing, allow_all, flow] = times.map(median);
    let [_, allow_all_inside, flow_inside] = insides.map(median);
    println!("# toolgate flow bench\n");
    println!(
        "{calls} warm decisions of one working session (Read, git status, Edit in the \
         project; lease-gate, shadow-sentinel, context-cost), until durable; medians of \
         {rounds} rounds on fresh stores, the order rotating\n"
    );
    println!("| added last | µs per decision | µs inside it (its `duration_us`) |\n|---|---|---|");
    println!("| nothing | {nothing:.2} | |");
    println!("| a policy that allows everything | {allow_all:.2} | {allow_all_inside:.2} |");
    println!("| flow | {flow:.2} | {flow_inside:.2} |");
    println!(
        "\nflow's cost: {:+.2} µs per decision over nothing, {:+.2} µs over a policy that \
         allows everything (medians of the rounds' differences)",
        median(cost),
        median(own)
    );
}
