//! One kind of decision in a loop, for a sampling profiler: where the
//! benchmark (`cargo bench --bench decide`) says how long, this says where.
//!
//! ```sh
//! cargo build --release --example profile_decide
//! perf record -e cpu-clock --call-graph dwarf,16384 \
//!     target/release/examples/profile_decide warm 20000
//! perf report --children --sort symbol
//! ```
//!
//! Cases: `warm` (one session's consecutive calls), `fresh` (each call from
//! another of 1 000 sessions, back to back), `fresh-paced` (the same with
//! a millisecond between calls), `allow` / `allow-warm` (one allow-only
//! policy), `allow20` / `allow20-warm` (twenty), `big` / `big-warm` (a 100 KB argument), `code-warm` (100 KB of
//! code-like text), `rhythm` (PreToolUse then PostToolUse over 8 sessions of
//! 2 users), `throughput` (warm calls on two threads, a session each, as
//! decisions/s, with the CPU time the deciding threads and the store's
//! writer thread spent per decision), `everyday` (the bundled default
//! config over `tests/corpus/everyday.jsonl` in one session, with each
//! policy's share), `deadline` (ROUNDS of 16 calls looping at once into
//! a policy with a 200 ms deadline, on as many threads: when each was cut,
//! and each policy's whole time; the bound `under_load` tests). It prints
//! p50 and p99; the compiled
//! components are cached in the system's temporary directory so a second
//! run profiles no compiling. `PROFILE_LOG=off` runs the bundled policies
//! with the decision log off, to see what logging costs; `PROFILE_SPARES=N`
//! keeps N spare instances per policy (0: none; see `limits.spare_instances`).

/// The allocator the `toolgate` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::request::Mode;
use toolgate::{Config, Service, ToolRequest, Verdict};

const USAGE: &str = "usage: profile_decide \
    warm|fresh|fresh-paced|allow|allow-warm|allow20|allow20-warm|big|big-warm|code-warm|rhythm|throughput|everyday [CALLS] \
    | deadline [ROUNDS]";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "warm".into());
    let calls: Option<usize> = match args.next() {
        Some(n) => Some(n.parse().map_err(|_| anyhow::anyhow!("{USAGE}"))?),
        None => None,
    };
    if case == "deadline" {
        return deadline_under_load(calls.unwrap_or(5));
    }
    let calls = calls.unwrap_or(20_000);
    let allow_only = match case.as_str() {
        "allow" | "allow-warm" => 1,
        "allow20" | "allow20-warm" => 20,
        _ => 0,
    };
    let dir = tempfile::tempdir()?;
    let host = Service::open(
        config(dir.path(), allow_only)?,
        Some(dir.path().join("p.redb").into()),
    )?;
    if allow_only == 0 {
        for thread in 0..1000 {
            let grant = json!({"thread": format!("t-{thread}"), "actions": ["Read", "Bash"]});
            host.command("lease-gate", "lease-grant", &grant.to_string())?;
        }
    }
    if case == "throughput" {
        return throughput(&host, calls);
    }
    if case == "everyday" {
        return everyday(calls);
    }
    let letters = "x".repeat(100_000);
    let line = "let path = \"src/lib.rs\"; // see docs/guide.md (x <= y)\n";
    let code = line.repeat(100_000 / line.len() + 1)[..100_000].to_string();
    let read = || json!({"file_path": "src/lib.rs"});
    let make = |i: usize| -> anyhow::Result<ToolRequest> {
        Ok(match case.as_str() {
            "warm" | "allow-warm" | "allow20-warm" | "rhythm" => request("Read", read(), i, true),
            "fresh" | "fresh-paced" | "allow" | "allow20" => request("Read", read(), i, false),
            "big" => request(
                "Bash",
                json!({"command": "cargo test", "description": letters}),
                i,
                false,
            ),
            "big-warm" => request(
                "Bash",
                json!({"command": "cargo test", "description": letters}),
                i,
                true,
            ),
            "code-warm" => request(
                "Bash",
                json!({"command": "cargo test", "description": code}),
                i,
                true,
            ),
            _ => anyhow::bail!("{USAGE}"),
        })
    };
    let mut decide = Vec::with_capacity(calls);
    let mut observe = Vec::with_capacity(calls);
    for i in 0..200 + calls {
        let mut request = make(i)?;
        if case == "fresh-paced" {
            std::thread::sleep(PACE);
        }
        if case == "rhythm" {
            request.user_id = format!("user-{}", i % 2);
            request.session_id = format!("rhythm-{}", i % 8);
            request.thread_id = Some(format!("t-{}", i % 8));
            request.call_id = Some(format!("call-{i}"));
        }
        let start = Instant::now();
        let decision = host.evaluate(&request)?;
        let decided = start.elapsed();
        anyhow::ensure!(
            decision.verdict == Verdict::Allow,
            "call {i} was not allowed: {:?}",
            decision.reason
        );
        let start = Instant::now();
        if case == "rhythm" {
            host.observe(&request, toolgate::Outcome::Succeeded, "ok")
                .unwrap();
        }
        if i >= 200 {
            decide.push(decided);
            observe.push(start.elapsed());
        }
    }
    println!("{case}: decide {}", summary(decide));
    let (made, spares) = host.plugin_statuses().iter().fold((0, 0), |(m, s), p| {
        (m + p.instances_created, s + p.instances_from_spares)
    });
    println!("  instances that served calls: {made}, of them spares made ahead: {spares}");
    if case == "rhythm" {
        println!("{case}: observe {}", summary(observe));
    }
    Ok(())
}

/// The bundled default config (safeguards and self-protection included)
/// over toolgate's everyday corpus (`tests/corpus/everyday.jsonl`), one
/// session's consecutive calls in a project (the corpus's `/home/dev/app`
/// made this run's), round and round: the whole
/// decision (self-protection included), the policies' part of it
/// (`duration_us`), self-protection's judgment alone and each policy's
/// share.
fn everyday(calls: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project)?;
    let project_text = project.display().to_string();
    let cache = std::env::temp_dir().join("toolgate-profile-cache");
    let text = format!(
        "cache_dir = {:?}\n{}",
        cache.display().to_string(),
        toolgate::config::DEFAULT_CONFIG
    );
    let config = Config::parse(&text, "profile", dir.path().to_path_buf())?;
    let store = dir.path().join("p.redb");
    let plane = toolgate::guard::ControlPlane::for_config(&config, &store);
    let host = Service::open(config, Some(store.into()))?;
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/corpus/everyday.jsonl"
    );
    let cases: Vec<serde_json::Value> = std::fs::read_to_string(corpus)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let mut whole = Vec::with_capacity(calls);
    let mut policies = Vec::with_capacity(calls);
    let mut guard = Vec::with_capacity(calls);
    let mut shares: std::collections::BTreeMap<String, Vec<Duration>> = Default::default();
    for i in 0..200 + calls {
        let case = &cases[i % cases.len()];
        let tool = case["tool"].as_str().unwrap_or("Bash");
        // The corpus's project is this run's.
        let input = case["input"]
            .to_string()
            .replace("/home/dev/app", &project_text);
        let mut request = ToolRequest::new(tool, serde_json::from_str(&input)?);
        request.session_id = "s-everyday".into();
        request.turn = (i / 10) as u64;
        request.cwd = Some(project.clone());
        let start = Instant::now();
        let decision = host.evaluate(&request)?;
        let took = start.elapsed();
        anyhow::ensure!(
            decision.verdict == Verdict::Allow,
            "{tool} {} was not allowed: {:?}",
            case["input"],
            decision.reason
        );
        if i >= 200 {
            whole.push(took);
            let start = Instant::now();
            anyhow::ensure!(plane.check(&request).is_none(), "self-protection refused");
            guard.push(start.elapsed());
            policies.push(Duration::from_micros(decision.duration_us));
            for policy in &decision.policies {
                shares
                    .entry(policy.name.clone())
                    .or_default()
                    .push(Duration::from_micros(policy.duration_us));
            }
        }
    }
    println!("everyday: the whole decision {}", summary(whole));
    println!("  of it the policies (duration_us) {}", summary(policies));
    println!("  self-protection alone {}", summary(guard));
    for (name, samples) in shares {
        println!("  {name}: {}", summary(samples));
    }
    Ok(())
}

/// The gap between `fresh-paced` calls: a thousand sessions' calls a
/// second, far more than one daemon's agents make, but with the idle
/// moments between calls that a real host has.
const PACE: Duration = Duration::from_millis(1);

/// `calls` warm decisions on each of two threads, each thread its own
/// session (so its own warm instances), as decisions per second.
fn throughput(host: &Service, calls: usize) -> anyhow::Result<()> {
    let writer_before = thread_cpu_ns(STORE_WRITER);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|t| {
                scope.spawn(move || -> anyhow::Result<Option<u64>> {
                    for i in 0..calls {
                        let mut request =
                            request("Read", json!({"file_path": "src/lib.rs"}), i, true);
                        request.session_id = format!("s-steady-{t}");
                        let decision = host.evaluate(&request)?;
                        anyhow::ensure!(
                            decision.verdict == Verdict::Allow,
                            "{:?}",
                            decision.reason
                        );
                    }
                    Ok(own_cpu_ns())
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a deciding thread panicked"))
            .sum::<anyhow::Result<Option<u64>>>()
    })
    .map(|deciders| {
        let decisions = 2 * calls;
        let rate = decisions as f64 / started.elapsed().as_secs_f64();
        println!("throughput: {rate:.0} decisions/s on 2 threads");
        let per_decision = |ns: u64| ns as f64 / 1000.0 / decisions as f64;
        if let Some(ns) = deciders {
            println!(
                "  deciding threads' CPU: {:.1} µs per decision",
                per_decision(ns)
            );
        }
        let writer = thread_cpu_ns(STORE_WRITER).zip(writer_before);
        if let Some((after, before)) = writer {
            let ns = after.saturating_sub(before);
            println!(
                "  store writer's CPU:    {:.1} µs per decision",
                per_decision(ns)
            );
        }
    })
}

/// The redb store's writer thread, as the kernel names it (15 bytes of
/// `toolgate-event-writer`).
const STORE_WRITER: &str = "toolgate-event-";

/// The calling thread's CPU time so far (Linux: `schedstat`), if known.
fn own_cpu_ns() -> Option<u64> {
    schedstat_ns(std::path::Path::new("/proc/thread-self/schedstat"))
}

/// The CPU time so far of this process's thread whose name starts with
/// `name` (as the kernel shows it: 15 bytes at most), if there is one.
fn thread_cpu_ns(name: &str) -> Option<u64> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            comm.starts_with(name)
                .then(|| schedstat_ns(&task.path().join("schedstat")))
                .flatten()
        })
}

fn schedstat_ns(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The bundled three policies with planning off (the leases decide), or
/// `allow_only` allow-only policies with no host calls at all.
fn config(dir: &std::path::Path, allow_only: usize) -> anyhow::Result<Config> {
    let cache = std::env::temp_dir().join("toolgate-profile-cache");
    let plugins = if allow_only > 0 {
        let flip = std::path::Path::new(env!("TOOLGATE_GUEST_DIR")).join("flip_allow_policy.wasm");
        let mut plugins = String::from("[log]\nenabled = false\n");
        for n in 0..allow_only {
            plugins += &format!(
                "[plugins.allow-{n}]\npath = {:?}\npriority = {n}\n",
                flip.display().to_string()
            );
        }
        plugins
    } else {
        "[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config]\nauto_plan = false\n\
         [plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n\
         [plugins.shadow-sentinel.config]\nmax_probes_per_turn = 0\n\
         [plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n"
            .to_string()
    };
    // `PROFILE_LOG=off`: the same decisions with the decision log off, to
    // see what logging costs.
    let log = match std::env::var("PROFILE_LOG").as_deref() {
        Ok("off") if allow_only == 0 => "[log]\nenabled = false\n",
        _ => "",
    };
    let text = format!(
        "cache_dir = {:?}\n{log}{plugins}",
        cache.display().to_string()
    );
    let mut config = Config::parse(&text, "profile", dir.to_path_buf())?;
    // `PROFILE_SPARES=N`: keep N spare instances per policy (0: none).
    if let Ok(spares) = std::env::var("PROFILE_SPARES") {
        let spares = spares.parse()?;
        for plugin in config.plugins.values_mut() {
            plugin.limits.spare_instances = spares;
        }
    }
    Ok(config)
}

/// A call of thread `t-(i mod 1000)`, in one session (`warm`) or in
/// session `s-(i mod 1000)`.
fn request(tool: &str, arguments: serde_json::Value, i: usize, warm: bool) -> ToolRequest {
    let mut request = ToolRequest::new(tool, arguments);
    request.session_id = if warm {
        "s-steady".into()
    } else {
        format!("s-{}", i % 1000)
    };
    request.thread_id = Some(format!("t-{}", i % 1000));
    request.thread_kind = "research".into();
    request.turn = i as u64;
    request.mode = Mode::InteractiveAutoApprove;
    request
}

/// 16 calls at once into the hostile test policy's endless loop, with a
/// 200 ms deadline, `rounds` times: the latest cut and the longest whole
/// time of each round (the figure `under_load::a_deadline_holds_with_
/// sixteen_looping_calls` bounds).
fn deadline_under_load(rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let hostile = std::path::Path::new(env!("TOOLGATE_GUEST_DIR")).join("hostile_policy.wasm");
    let text = format!(
        "cache_dir = {:?}\n[plugins.hostile]\npath = {:?}\n[plugins.hostile.config]\n\
         attack = \"loop\"\n[plugins.hostile.limits]\ndeadline_ms = 200\n",
        std::env::temp_dir()
            .join("toolgate-profile-cache")
            .display()
            .to_string(),
        hostile.display().to_string()
    );
    let config = Config::parse(&text, "profile", dir.path().to_path_buf())?;
    let host = std::sync::Arc::new(Service::open(
        config,
        Some(dir.path().join("d.redb").into()),
    )?);
    for round in 0..rounds {
        let calls: Vec<_> = (0..16)
            .map(|n| {
                let host = std::sync::Arc::clone(&host);
                std::thread::spawn(move || -> anyhow::Result<(u64, u64)> {
                    let mut request = request("attack", json!({}), n, false);
                    request.session_id = format!("looping-{round}-{n}");
                    let decision = host.evaluate(&request)?;
                    let policy = &decision.policies[0];
                    let failure = policy.failure.clone().unwrap_or_default();
                    let cut = (failure.split("cut after ").nth(1))
                        .and_then(|rest| rest.split(' ').next()?.parse().ok())
                        .ok_or_else(|| anyhow::anyhow!("no deadline cut in {failure:?}"))?;
                    Ok((cut, policy.duration_us / 1000))
                })
            })
            .collect();
        let mut cuts = Vec::new();
        let mut whole = Vec::new();
        for call in calls {
            let (cut, took) = call
                .join()
                .map_err(|_| anyhow::anyhow!("a call panicked"))??;
            cuts.push(cut);
            whole.push(took);
        }
        println!(
            "deadline 200 ms, 16 looping calls: latest cut {} ms, longest whole time {} ms",
            cuts.iter().max().unwrap_or(&0),
            whole.iter().max().unwrap_or(&0)
        );
    }
    Ok(())
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!(
        "p50 {:?}, p99 {:?} over {} calls",
        at(0.5),
        at(0.99),
        samples.len()
    )
}
