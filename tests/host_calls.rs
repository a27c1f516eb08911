//! Sandbox, round 2: the host-call surface. A policy cannot hold a decision
//! with host calls, grow the host or the store without bound, or carry one
//! user's data to another through a warm instance; and instances go back to
//! their pool from every path, with fresh per-evaluation budgets.

mod common;

use common::model_server::{ModelServer, Reply};
use common::{call, guest, host, scripted};
use serde_json::json;
use toolgate::decision::PolicyVerdict;
use toolgate::{ToolRequest, Toolgate};

/// A host running the hostile policy's `attack` with `limits`, after `top`
/// (top-level config keys).
fn hostile(attack: &str, limits: &str, top: &str) -> common::TestHost {
    host(&format!(
        "{top}\n[plugins.hostile]\npath = {:?}\npriority = 1\n[plugins.hostile.config]\nattack = \"{attack}\"\n[plugins.hostile.limits]\n{limits}\n",
        guest("hostile-policy").display().to_string(),
    ))
}

fn attack_as(user: &str, session: &str) -> ToolRequest {
    let mut request = call("attack", json!({}));
    request.user_id = user.into();
    request.session_id = session.into();
    request
}

fn notes(host: &Toolgate, request: &ToolRequest) -> Vec<String> {
    let decision = host.evaluate(request).unwrap();
    decision.notes.into_iter().map(|n| n.text).collect()
}

fn instances_created(host: &Toolgate, plugin: &str) -> u64 {
    host.plugin_statuses()
        .into_iter()
        .find(|p| p.name == plugin)
        .unwrap()
        .instances_created
}

#[test]
fn a_probe_loop_is_bounded_in_decide_and_in_observe() {
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let host = hostile(
        "probe-loop",
        "deadline_ms = 200\nprobe_max_calls = 3\nprobe_max_wait_ms = 1000",
        &format!(
            "[probe]\nendpoint = {:?}\nmax_timeout_ms = 60000",
            model.url
        ),
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let result = &decision.policies[0];
    assert!(
        result
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("deadline")),
        "{result:?}"
    );
    assert_eq!(model.requests().len(), 3, "at most probe_max_calls probes");

    // The PostToolUse side: observing returns, with the same budget.
    host.observe(&call("attack", json!({})), toolgate::Outcome::Succeeded, "");
    assert_eq!(model.requests().len(), 6);
    // The next ordinary call is decided normally.
    let next = host.evaluate(&call("Read", json!({}))).unwrap();
    assert_eq!(next.policies[0].verdict, PolicyVerdict::Allow);
}

#[test]
fn a_slow_model_cannot_stretch_a_call_past_its_wall_clock_ceiling() {
    // Each probe would wait 2 s; the evaluation may wait 300 ms in all.
    let model = ModelServer::start(Reply::Delayed(
        std::time::Duration::from_secs(2),
        "ALLOW".into(),
    ));
    let host = hostile(
        "probe-loop",
        "deadline_ms = 200\nprobe_max_calls = 10\nprobe_max_wait_ms = 300",
        &format!(
            "[probe]\nendpoint = {:?}\nmax_timeout_ms = 60000",
            model.url
        ),
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert!(
        decision.policies[0]
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("deadline"))
    );
    assert_eq!(
        model.requests().len(),
        1,
        "the first probe used the whole wait budget; none followed"
    );
}

#[test]
fn every_field_a_policy_hands_the_host_is_capped() {
    let host = hostile("huge-event-fields", "", "");
    host.evaluate(&call("attack", json!({}))).unwrap();
    host.store().persist();
    let events = host.store().recent_events(10).unwrap();
    let (_, event) = events.last().expect("the event was kept, cut");
    assert!(event.session_id.len() <= 256 && event.kind.len() <= 256);
    assert!(event.tool.as_ref().unwrap().len() <= 256);
    assert!(event.summary.as_ref().unwrap().len() <= 1024);
    assert!(event.detail.as_ref().unwrap().len() <= 1024);

    let keys = hostile("state-key-max", "", "");
    let notes = notes(&keys, &call("attack", json!({})));
    assert_eq!(notes, ["state-key-max: Ok(()) / Err(StateError::TooLarge)"]);
}

#[test]
fn reads_are_capped_whatever_limit_the_policy_asks() {
    let common::TestHost { host, dir } = hostile("event-flood", "events_per_call = 5000", "");
    host.evaluate(&call("attack", json!({}))).unwrap();
    host.store().persist();
    drop(host);
    // The same store, read by the same plugin name with another attack.
    let (config, _config_dir) = common::config(&format!(
        "[plugins.hostile]\npath = {:?}\n[plugins.hostile.config]\nattack = \"read-max\"\n",
        guest("hostile-policy").display().to_string()
    ));
    let host = Toolgate::open(config, Some(dir.path().join("toolgate.redb"))).unwrap();
    let notes = notes(&host, &call("attack", json!({})));
    assert_eq!(notes, ["read-max: 0 keys, 1000 events"]);
}

#[test]
fn an_event_flood_stops_at_the_policys_quota_and_the_file_stops_growing() {
    let host = hostile("event-flood", "events_max = 1000", "");
    let size = |host: &Toolgate| {
        host.store().persist();
        host.store().stats().unwrap()
    };
    let mut sizes = Vec::new();
    for round in 0..30 {
        let decision = host.evaluate(&call("attack", json!({}))).unwrap();
        assert_eq!(
            decision.policies[0].verdict,
            PolicyVerdict::Allow,
            "round {round}"
        );
        let stats = size(&host);
        assert!(stats.policies["hostile"].events <= 1000, "{stats:?}");
        sizes.push(stats.file_bytes);
    }
    // Each decision could append only 256 (events_per_call); the stream
    // holds at most its quota; freed pages are reused.
    assert_eq!(size(&host).policies["hostile"].events, 1000);
    eprintln!("file sizes: {sizes:?}");
    assert!(
        sizes[29] <= sizes[14],
        "the file kept growing once the quota bit: {sizes:?}"
    );
}

#[test]
fn a_warm_instance_never_carries_one_users_memory_to_another() {
    let host = hostile("remember-user", "", "");
    assert_eq!(notes(&host, &attack_as("alice", "s1")), ["seen-before: []"]);
    // Bob's call gets an instance that never served Alice.
    assert_eq!(notes(&host, &attack_as("bob", "s2")), ["seen-before: []"]);
    // Another session of Alice's, by default, neither.
    assert_eq!(notes(&host, &attack_as("alice", "s3")), ["seen-before: []"]);
    // The same session is served warm.
    assert_eq!(
        notes(&host, &attack_as("alice", "s1")),
        ["seen-before: [alice]"]
    );
}

#[test]
fn pre_post_pre_uses_one_instance() {
    let host = host(&scripted("keeper", 1, "verdict = \"allow\""));
    let request = call("Bash", json!({"command": "ls"}));
    host.evaluate(&request).unwrap();
    host.observe(&request, toolgate::Outcome::Succeeded, "ok");
    host.evaluate(&request).unwrap();
    host.command("keeper", "decided", "{}").unwrap();
    host.evaluate(&request).unwrap();
    // One instance for the session's calls, one for the operator's command.
    assert_eq!(instances_created(&host, "keeper"), 2);
}

#[test]
fn every_evaluation_has_its_whole_log_budget() {
    let host = hostile("log-kib", "log_max_bytes = 16384", "");
    for i in 0..100 {
        let decision = host.evaluate(&call("attack", json!({}))).unwrap();
        assert_eq!(
            decision.policies[0].logs.len(),
            1,
            "evaluation {i} lost its log line"
        );
    }
    assert_eq!(
        instances_created(&host, "hostile"),
        1,
        "all on one warm instance"
    );
}

#[test]
fn an_instance_that_returned_an_oversized_answer_is_not_reused() {
    let host = hostile("oversized-once", "max_output_bytes = 16384", "");
    let first = host.evaluate(&call("attack", json!({}))).unwrap();
    assert!(
        first.policies[0]
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("over its 16384-byte limit"))
    );
    // A fresh instance: its first call (it oversteps again).
    let second = host.evaluate(&call("attack", json!({}))).unwrap();
    assert!(second.policies[0].failure.is_some(), "{second:?}");
    assert_eq!(instances_created(&host, "hostile"), 2);
}

#[test]
fn expired_gates_and_resolutions_are_swept() {
    let host = host(&format!(
        "gate_ttl_secs = 1\n{}",
        scripted("approver", 1, "verdict = \"pause\"\nreason = \"ok?\"")
    ));
    // One gate resolved (leaving a resolution), one left pending.
    let first = call("Bash", json!({"command": "a"}));
    common::approve(&host, &host.evaluate(&first).unwrap());
    host.evaluate(&call("Bash", json!({"command": "b"})))
        .unwrap();
    let rows = |host: &Toolgate, table: &str| {
        host.store()
            .stats()
            .unwrap()
            .tables
            .get(table)
            .map_or(0, |t| t.rows)
    };
    assert_eq!(
        (rows(&host, "gates"), rows(&host, "gate_resolutions")),
        (1, 1)
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let report = host.store().sweep().unwrap();
    assert_eq!((report.gates, report.resolutions), (1, 1));
    assert_eq!(
        (rows(&host, "gates"), rows(&host, "gate_resolutions")),
        (0, 0)
    );
}
