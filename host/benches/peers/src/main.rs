//! One rule, three engines, the same calls. The rule: a call is allowed
//! when its thread holds a lease for the tool and the session's context is
//! under 600 000 tokens. Written once as a Cedar policy, once in Rego
//! (regorus), and served by toolgate's bundled lease-gate + context-cost
//! (sandboxed WebAssembly components, leases and counters in the redb
//! store), and by the same two policies' functions compiled natively over
//! that store (the floor under any sandbox). Each gets its request built per
//! call; Cedar also once more with every entity built once, up front (its
//! best case: a caller that keeps the leases in memory). The program checks
//! that all agree on every call, then prints p50/p99 per decision.

/// The allocator the `toolgate` binary runs with, for all three engines.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Instant;

use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request};
use context_cost::budget::CostConfig;
use serde_json::{Value, json};
use toolgate::request::Mode;
use toolgate::{Config, ToolRequest, Service, Verdict};

#[path = "../../support/native_floor.rs"]
mod native_floor;
use native_floor::Floor;

const MAX_TOKENS: u64 = 600_000;
const THREADS: usize = 100;
const CALLS: usize = 20_000;
const TOOLS: [&str; 3] = ["Read", "Bash", "Write"];

const CEDAR: &str = r#"
permit(principal, action == Action::"call", resource)
when { principal.leases.contains(resource.name) && context.context_tokens < 600000 };
"#;

const REGO: &str = r#"
package toolgate
import rego.v1
default allow := false
allow if {
    input.tool in input.leases
    input.context_tokens < 600000
}
"#;

/// The leases thread `t` holds.
fn leases(thread: usize) -> Vec<&'static str> {
    match thread % 3 {
        0 => vec!["Read", "Bash"],
        1 => vec!["Read"],
        _ => vec!["Read", "Bash", "Write"],
    }
}

/// Call `n`: thread, tool, context tokens.
fn call(n: usize) -> (usize, &'static str, u64) {
    let thread = n % THREADS;
    let tool = TOOLS[(n / THREADS) % TOOLS.len()];
    let tokens = ((n * 7_919) % 800) as u64 * 1_000;
    (thread, tool, tokens)
}

fn percentiles(mut micros: Vec<f64>) -> (f64, f64) {
    micros.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| micros[((micros.len() as f64 * q) as usize).min(micros.len() - 1)];
    (at(0.50), at(0.99))
}

struct Cedar {
    policies: PolicySet,
    authorizer: Authorizer,
    /// Every thread and tool as entities, built once: Cedar's best case,
    /// where the caller keeps its entities in memory between requests.
    all_entities: Entities,
}

impl Cedar {
    fn new() -> Self {
        let threads = (0..THREADS).map(|thread| thread_entity(thread));
        let tools = TOOLS.iter().map(|tool| tool_entity(tool));
        let all = Value::Array(threads.chain(tools).collect());
        Self {
            policies: CEDAR.parse().unwrap(),
            authorizer: Authorizer::new(),
            all_entities: Entities::from_json_value(all, None).unwrap(),
        }
    }

    /// The entities built for this request, as a caller that keeps none
    /// does (what toolgate's own row pays: the leases read per call).
    fn decide(&self, thread: usize, tool: &str, tokens: u64) -> bool {
        let entities = Value::Array(vec![thread_entity(thread), tool_entity(tool)]);
        let entities = Entities::from_json_value(entities, None).unwrap();
        self.decide_over(&entities, thread, tool, tokens)
    }

    /// Over the entities built once.
    fn decide_given(&self, thread: usize, tool: &str, tokens: u64) -> bool {
        self.decide_over(&self.all_entities, thread, tool, tokens)
    }

    fn decide_over(&self, entities: &Entities, thread: usize, tool: &str, tokens: u64) -> bool {
        let principal: EntityUid = format!(r#"Thread::"t-{thread}""#).parse().unwrap();
        let action: EntityUid = r#"Action::"call""#.parse().unwrap();
        let resource: EntityUid = format!(r#"Tool::"{tool}""#).parse().unwrap();
        let context = Context::from_json_value(json!({"context_tokens": tokens}), None).unwrap();
        let request = Request::new(principal, action, resource, context, None).unwrap();
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, entities);
        response.decision() == Decision::Allow
    }
}

fn thread_entity(thread: usize) -> Value {
    json!({"uid": {"type": "Thread", "id": format!("t-{thread}")},
           "attrs": {"leases": leases(thread)}, "parents": []})
}

fn tool_entity(tool: &str) -> Value {
    json!({"uid": {"type": "Tool", "id": tool}, "attrs": {"name": tool}, "parents": []})
}

fn rego_decide(engine: &mut regorus::Engine, thread: usize, tool: &str, tokens: u64) -> bool {
    let input = json!({"tool": tool, "leases": leases(thread), "context_tokens": tokens});
    engine.set_input(regorus::Value::from_json_str(&input.to_string()).unwrap());
    let allow = engine.eval_rule("data.toolgate.allow".into()).unwrap();
    allow == regorus::Value::from(true)
}

fn toolgate_host(dir: &std::path::Path) -> Service {
    let text = format!(
        "cache_dir = {cache:?}\n\
         [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config]\nauto_plan = false\n\
         [plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n\
         [plugins.context-cost.config]\nmax_tokens = {MAX_TOKENS}\nwarn_tokens = 0\nsubagents_only = false\n",
        cache = dir.join("cache").display().to_string()
    );
    let config = Config::parse(&text, "peers", dir.to_path_buf()).unwrap();
    let host = Service::open(config, Some(dir.join("peers.redb").into())).unwrap();
    for thread in 0..THREADS {
        let grant = json!({"thread": format!("t-{thread}"), "actions": leases(thread)});
        host.command("lease-gate", "lease-grant", &grant.to_string())
            .unwrap();
    }
    host
}

fn toolgate_decide(host: &Service, thread: usize, tool: &str, tokens: u64) -> bool {
    toolgate_decision(host, thread, tool, tokens, true).verdict == Verdict::Allow
}

/// toolgate's decision; `per_thread_session`: each thread is its own
/// session (warm instances are kept per session, so consecutive calls of
/// different sessions rotate through the pool), else all share one.
fn toolgate_decision(
    host: &Service,
    thread: usize,
    tool: &str,
    tokens: u64,
    per_thread_session: bool,
) -> toolgate::Decision {
    host.evaluate(&request(thread, tool, tokens, per_thread_session))
        .unwrap()
}

/// The native floor of toolgate's two policies: their own functions,
/// compiled into this program, reading the leases from the same store.
fn native_floor(host: &Service) -> Floor {
    Floor::new(Arc::clone(host.store()), 0, None).with_cost(CostConfig {
        warn_tokens: 0,
        max_tokens: MAX_TOKENS,
        subagents_only: false,
        ..CostConfig::default()
    })
}

fn native_decide(floor: &Floor, thread: usize, tool: &str, tokens: u64) -> bool {
    let request = request(thread, tool, tokens, true);
    floor.lease_gate(&request) && floor.context_cost(&request)
}

/// The call as toolgate (and its native floor) receives it.
fn request(thread: usize, tool: &str, tokens: u64, per_thread_session: bool) -> ToolRequest {
    let arguments: Value = match tool {
        "Bash" => json!({"command": "cargo test --workspace"}),
        _ => json!({"file_path": "src/lib.rs", "content": "x"}),
    };
    let mut request = ToolRequest::new(tool, arguments);
    request.session_id = if per_thread_session {
        format!("s-{thread}")
    } else {
        "s".into()
    };
    request.thread_id = Some(format!("t-{thread}"));
    request.thread_kind = "research".into();
    request.mode = Mode::InteractiveAutoApprove;
    request.context_tokens = Some(tokens);
    request
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let host = toolgate_host(dir.path());
    let cedar = Cedar::new();
    let floor = native_floor(&host);
    let mut rego = regorus::Engine::new();
    rego.add_policy("toolgate.rego".into(), REGO.into())
        .unwrap();

    // Agreement first, over every call.
    let mut allowed = 0;
    for n in 0..CALLS {
        let (thread, tool, tokens) = call(n);
        let expected = leases(thread).contains(&tool) && tokens < MAX_TOKENS;
        let answers = [
            cedar.decide(thread, tool, tokens),
            cedar.decide_given(thread, tool, tokens),
            rego_decide(&mut rego, thread, tool, tokens),
            toolgate_decide(&host, thread, tool, tokens),
            native_decide(&floor, thread, tool, tokens),
        ];
        assert!(
            answers.iter().all(|a| *a == expected),
            "call {n} (thread {thread}, {tool}, {tokens} tokens): expected {expected}, \
             cedar/cedar (entities once)/rego/toolgate/native said {answers:?}; toolgate's \
             reason: {:?}",
            toolgate_decision(&host, thread, tool, tokens, true).reason
        );
        allowed += usize::from(expected);
    }
    println!(
        "{CALLS} calls, {allowed} allowed: cedar (both ways), rego, toolgate and its native floor \
         agree on every one"
    );

    // Then the cost of one decision, the request built per call.
    let time = |name: &str, decide: &mut dyn FnMut(usize, &str, u64) -> bool| {
        let mut micros = Vec::with_capacity(CALLS);
        for n in 0..CALLS {
            let (thread, tool, tokens) = call(n);
            let start = Instant::now();
            std::hint::black_box(decide(thread, tool, tokens));
            micros.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let (p50, p99) = percentiles(micros);
        println!("{name:<34} p50 {p50:>7.1} µs   p99 {p99:>7.1} µs");
    };
    time("cedar-policy 4 (one policy)", &mut |t, tool, k| {
        cedar.decide(t, tool, k)
    });
    time("cedar-policy 4, entities given once", &mut |t, tool, k| {
        cedar.decide_given(t, tool, k)
    });
    time("regorus (Rego)", &mut |t, tool, k| {
        rego_decide(&mut rego, t, tool, k)
    });
    time("native floor (no sandbox, no log)", &mut |t, tool, k| {
        native_decide(&floor, t, tool, k)
    });
    time("toolgate, a session per thread", &mut |t, tool, k| {
        toolgate_decide(&host, t, tool, k)
    });
    time("toolgate, one session", &mut |t, tool, k| {
        toolgate_decision(&host, t, tool, k, false).verdict == Verdict::Allow
    });
}
