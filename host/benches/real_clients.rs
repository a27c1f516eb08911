//! `cargo bench --bench real_clients`: what toolgate's hooks add to each
//! tool call inside the real agent CLIs (Claude Code over command and HTTP
//! hooks, Codex CLI, Copilot CLI, OpenCode), at the versions
//! `tests/real-clients.json` pins, offline against the tests' scripted model
//! APIs on loopback.
//!
//! Each CLI runs one prompt whose model makes shell calls one after another
//! (`echo ok`), in two homes: one with toolgate installed as `hook install`
//! writes it (its daemon warm: a first run is not counted), one without,
//! with few calls and with many. The runs alternate; medians are compared.
//! Per call: the extra time with toolgate for the extra calls, divided by
//! their number, so what a run pays once (its session start and prompt
//! hooks, the CLI's own start) falls out; it is what a person waits for per
//! call: the hook's process (or HTTP request), the daemon's decision and
//! durable commit when it wrote state, and the outcome hook after the call. Per run: the extra
//! time of the short run beyond its calls. `TOOLGATE_BENCH_QUICK=1` for a
//! short run; `TOOLGATE_BENCH_ONLY=claude-code,codex` for some runtimes.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use common::agents::{BASH_UNASKED, CodexHome, CopilotHome, OpenCodeHome, bash};
use common::chat_api::ChatApi;
use common::claude_code::{ClaudeHome, claude_binary, run_claude, tool_results};
use common::hooks::{BIN, StopDaemon};
use common::messages_api::{Block, MessagesApi};
use common::responses_api::{Item, ResponsesApi};
use serde_json::json;

/// Claude Code runs without asking (lease-gate then lets routine commands
/// through, as in the tests).
const BYPASS: &[&str] = &["--permission-mode", "bypassPermissions"];

struct Plan {
    /// Calls in a short and in a long run.
    few: usize,
    many: usize,
    /// Timed runs of each kind.
    runs: usize,
}

fn main() {
    let quick = std::env::var_os("TOOLGATE_BENCH_QUICK").is_some();
    let plan = if quick {
        Plan {
            few: 2,
            many: 10,
            runs: 2,
        }
    } else {
        Plan {
            few: 5,
            many: 40,
            runs: 5,
        }
    };
    println!(
        "runs of {} and {} shell calls, {} of each with and without toolgate (medians)\n",
        plan.few, plan.many, plan.runs
    );
    println!(
        "| runtime | run of {} calls without → with toolgate | added per call | added per run |",
        plan.many
    );
    println!("|---|---|---|---|");
    // TOOLGATE_BENCH_ONLY=claude-code,codex,copilot,opencode: only these.
    let only = std::env::var("TOOLGATE_BENCH_ONLY").ok();
    let wanted = |runtime: &str| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|name| name.trim() == runtime))
    };
    if wanted("claude-code") {
        claude_code(&plan, false);
        claude_code(&plan, true);
    }
    if wanted("codex") {
        codex(&plan);
    }
    if wanted("copilot") {
        copilot(&plan);
    }
    if wanted("opencode") {
        opencode(&plan);
    }
}

/// Time `run(with_toolgate, calls)` as the plan says, alternating, after
/// one uncounted run each way; print the row.
fn measure(name: &str, plan: &Plan, mut run: impl FnMut(bool, usize)) {
    let mut timed = |with: bool, calls: usize| {
        let started = Instant::now();
        run(with, calls);
        started.elapsed().as_secs_f64() * 1e3
    };
    timed(true, plan.few);
    timed(false, plan.few);
    let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for _ in 0..plan.runs {
        for (w, with) in [false, true].into_iter().enumerate() {
            for (c, calls) in [plan.few, plan.many].into_iter().enumerate() {
                times[w][c].push(timed(with, calls));
            }
        }
    }
    let [[without_few, without_many], [with_few, with_many]] = times.map(|t| t.map(median));
    let extra_calls = (plan.many - plan.few) as f64;
    let per_call = ((with_many - with_few) - (without_many - without_few)) / extra_calls;
    let per_run = (with_few - without_few) - per_call * plan.few as f64;
    println!(
        "| {name} | {without_many:.0} → {with_many:.0} ms | {per_call:.2} ms | {per_run:.0} ms |"
    );
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// A run must have made every call, or it measured something else.
/// Every one of the `calls` ran, none refused (`results`: what the model
/// read for each): a refused call costs less than one that runs, and would
/// flatter toolgate.
fn ran_all(output: &Output, results: &[String], calls: usize, what: &str) {
    let ran = results
        .iter()
        .filter(|r| r.contains("ok") && !r.contains("toolgate"))
        .count();
    assert!(
        ran >= calls,
        "{what}: {ran} of {calls} calls ran: {results:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The texts of `outputs` (call id, output).
fn texts(outputs: Vec<(String, String)>) -> Vec<String> {
    outputs.into_iter().map(|(_, text)| text).collect()
}

fn claude_code(plan: &Plan, http: bool) {
    let Some(claude) = claude_binary() else {
        return;
    };
    let script = |calls: usize| -> Vec<Vec<Block>> {
        (0..calls)
            .map(|i| {
                let input = json!({"command": "echo ok", "description": "say ok"});
                vec![Block::ToolUse(
                    format!("toolu_{i:04}"),
                    "Bash".into(),
                    input,
                )]
            })
            .chain([vec![Block::Text("Done.".into())]])
            .collect()
    };
    let api = MessagesApi::start(script(plan.few));
    let extra = if http {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        format!("[daemon]\nhttp = \"127.0.0.1:{port}\"\n")
    } else {
        String::new()
    };
    let with = ClaudeHome::new(&extra);
    let without = ClaudeHome::new("");
    let _stop = StopDaemon(with.store.clone());
    let transport = if http { "http" } else { "command" };
    let installed = Command::new(BIN)
        .arg("--config")
        .arg(&with.config)
        .args(["hook", "install", "--transport", transport, "--write"])
        .arg(with.home.join(".claude/settings.json"))
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");
    let name = format!("Claude Code 2.1.332, {transport} hooks");
    measure(&name, plan, |on, calls| {
        let home = if on { &with } else { &without };
        api.reset(script(calls));
        let output = run_claude(&claude, &home.home, &home.project, &api, "Say ok.", BYPASS);
        let results = api.turns().last().map(tool_results).unwrap_or_default();
        let results: Vec<String> = results.into_iter().map(|(.., text)| text).collect();
        ran_all(&output, &results, calls, &name);
    });
}

fn codex(plan: &Plan) {
    let script = |calls: usize| -> Vec<Vec<Item>> {
        (0..calls)
            .map(|i| vec![Item::Shell(format!("call_{i}"), "echo ok".into())])
            .chain([vec![Item::Text("Done.".into())]])
            .collect()
    };
    let api = ResponsesApi::start(script(plan.few));
    let (Some(with), Some(without)) = (CodexHome::new(&api, ""), CodexHome::new(&api, "")) else {
        return;
    };
    let _stop = StopDaemon(with.store.clone());
    with.install(Path::new(BIN));
    measure("Codex CLI 0.171.0", plan, |on, calls| {
        api.reset(script(calls));
        let output = if on { &with } else { &without }.run("Say ok.");
        ran_all(&output, &texts(api.tool_outputs()), calls, "Codex");
    });
}

fn copilot(plan: &Plan) {
    let script = |calls: usize| -> Vec<Vec<Item>> {
        (0..calls)
            .map(|i| vec![bash(&format!("call_{i}"), "echo ok")])
            .chain([vec![Item::Text("Done.".into())]])
            .collect()
    };
    let api = ResponsesApi::start(script(plan.few));
    let (Some(with), Some(without)) = (
        CopilotHome::new(&api, BASH_UNASKED),
        CopilotHome::new(&api, ""),
    ) else {
        return;
    };
    let _stop = StopDaemon(with.store.clone());
    with.install(Path::new(BIN));
    measure("Copilot CLI 1.0.102", plan, |on, calls| {
        api.reset(script(calls));
        let output = if on { &with } else { &without }.run(&[], "Say ok.");
        ran_all(&output, &texts(api.tool_outputs()), calls, "Copilot");
    });
}

fn opencode(plan: &Plan) {
    let script = |calls: usize| -> Vec<Vec<Item>> {
        (0..calls)
            .map(|i| vec![bash(&format!("call_{i}"), "echo ok")])
            .chain([vec![Item::Text("Done.".into())]])
            .collect()
    };
    let api = ChatApi::start(script(plan.few));
    let (Some(with), Some(without)) = (
        OpenCodeHome::new(&api, BASH_UNASKED),
        OpenCodeHome::new(&api, ""),
    ) else {
        return;
    };
    let _stop = StopDaemon(with.store.clone());
    with.install(Path::new(BIN));
    measure("OpenCode 1.18.33 (plugin)", plan, |on, calls| {
        api.reset(script(calls));
        let output = if on { &with } else { &without }.run(&[], "Say ok.");
        ran_all(&output, &texts(api.tool_outputs()), calls, "OpenCode");
    });
}
