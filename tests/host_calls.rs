//! Sandbox, round 2: the host-call surface. A policy cannot hold a decision
//! with host calls, grow the host or the store without bound, or carry one
//! user's data to another through a warm instance; and instances go back to
//! their pool from every path, with fresh per-evaluation budgets.

use crate::common;

use common::model_server::{ModelServer, Reply};
use common::{call, guest, host, scripted};
use serde_json::json;
use toolgate::decision::PolicyVerdict;
use toolgate::{Service, ToolRequest};

/// A host running the hostile policy's `attack` with `limits`, after `top`
/// (top-level config keys).
fn hostile(attack: &str, limits: &str, top: &str) -> common::TestHost {
    host(&format!("{top}\n{}", hostile_plugin(attack, limits)))
}

/// The `[plugins.hostile]` tables.
fn hostile_plugin(attack: &str, limits: &str) -> String {
    format!(
        "[plugins.hostile]\npath = {:?}\npriority = 1\n[plugins.hostile.config]\nattack = \"{attack}\"\n[plugins.hostile.limits]\n{limits}\n",
        guest("hostile-policy").display().to_string(),
    )
}

fn attack_as(user: &str, session: &str) -> ToolRequest {
    let mut request = call("attack", json!({}));
    request.user_id = user.into();
    request.session_id = session.into();
    request
}

fn notes(host: &Service, request: &ToolRequest) -> Vec<String> {
    let decision = host.evaluate(request).unwrap();
    decision.notes.into_iter().map(|n| n.text).collect()
}

fn status(host: &Service, plugin: &str) -> toolgate::plugins::PluginStatus {
    host.plugin_statuses()
        .into_iter()
        .find(|p| p.name == plugin)
        .unwrap()
}

fn instances_created(host: &Service, plugin: &str) -> u64 {
    status(host, plugin).instances_created
}

/// Wait for the chores thread to have `n` spares of `plugin` ready
/// (yielding between looks; ten million looks is far more than it needs).
fn wait_for_spares(host: &Service, plugin: &str, n: usize) {
    for _ in 0..10_000_000 {
        if status(host, plugin).spare_instances >= n {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the chores thread never made {n} spares of {plugin}");
}

/// The `[probe]` table pointing at `model`.
fn probe_at(model: &ModelServer) -> String {
    format!(
        "[probe]\nendpoint = {:?}\nmax_timeout_ms = 60000",
        model.url
    )
}

/// The one note the hostile parser leaves: what the host handed it.
fn parsed_reply(host: &Service) -> String {
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(
        decision.policies[0].verdict,
        PolicyVerdict::Allow,
        "{decision:?}"
    );
    decision.notes.into_iter().map(|n| n.text).collect()
}

#[test]
fn a_question_waits_no_longer_than_the_policys_probe_budget() {
    // The policy asks with a 600 s timeout; the model answers after 2 s; the
    // policy's limits allow 300 ms of waiting. Had the host honoured the
    // policy's timeout, the parser would have seen the answer.
    let model = ModelServer::start(Reply::Delayed(
        std::time::Duration::from_secs(2),
        "ALLOW".into(),
    ));
    let host = hostile("ask-slow", "probe_max_wait_ms = 300", &probe_at(&model));
    assert_eq!(
        parsed_reply(&host),
        "reply: ModelReply::Unanswered(ModelError::Timeout)"
    );
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn the_reply_reaches_the_parser_of_the_policy_that_asked() {
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let host = hostile("ask-slow", "", &probe_at(&model));
    assert_eq!(
        parsed_reply(&host),
        r#"reply: ModelReply::Answered("ALLOW")"#
    );
    let asked = &model.requests()[0];
    assert_eq!(asked["messages"][0]["content"], "system");
    assert_eq!(asked["messages"][1]["content"], "user");
}

#[test]
fn probe_limits_of_zero_forbid_questions_without_asking() {
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let host = hostile("ask-slow", "probe_max_calls = 0", &probe_at(&model));
    assert_eq!(
        parsed_reply(&host),
        "reply: ModelReply::Unanswered(ModelError::BudgetSpent)"
    );
    assert!(model.requests().is_empty());
}

#[test]
fn no_endpoint_reaches_the_parser_as_not_configured() {
    let host = hostile("ask-slow", "", "");
    assert_eq!(
        parsed_reply(&host),
        "reply: ModelReply::Unanswered(ModelError::NotConfigured)"
    );
}

/// The hostile policy, fail-closed, running `attack`: its failure.
fn fail_closed_failure(attack: &str, model: &ModelServer) -> (toolgate::Decision, String) {
    let host = host(&format!(
        "{}\n[plugins.hostile]\npath = {:?}\npriority = 1\nfail_mode = \"closed\"\n[plugins.hostile.config]\nattack = \"{attack}\"\n",
        probe_at(model),
        guest("hostile-policy").display().to_string(),
    ));
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let failure = decision.policies[0].failure.clone().unwrap_or_default();
    (decision, failure)
}

#[test]
fn a_reply_the_policy_cannot_parse_is_handled_by_its_fail_mode() {
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let (decision, failure) = fail_closed_failure("ask-unparseable", &model);
    assert_eq!(decision.verdict, toolgate::Verdict::Deny);
    assert!(
        failure.contains("could not parse the model's reply: this reply means nothing to me"),
        "{failure}"
    );
    // Fail-open turns the same failure into an abstention.
    let host = hostile("ask-unparseable", "", &probe_at(&model));
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(decision.verdict, toolgate::Verdict::Allow);
    assert_eq!(decision.policies[0].verdict, PolicyVerdict::Skip);
}

#[test]
fn one_question_per_decision_and_a_bounded_question() {
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let (decision, failure) = fail_closed_failure("ask-twice", &model);
    assert_eq!(decision.verdict, toolgate::Verdict::Deny);
    assert!(failure.contains("asked the model again"), "{failure}");
    assert_eq!(
        model.requests().len(),
        1,
        "the second question was never sent"
    );

    let (decision, failure) = fail_closed_failure("ask-huge", &model);
    assert_eq!(decision.verdict, toolgate::Verdict::Deny);
    assert!(failure.contains("over its 262144-byte limit"), "{failure}");
    assert_eq!(model.requests().len(), 1, "a 1 MiB question is never sent");
}

#[test]
fn asking_without_a_parser_is_a_failure_of_the_policy() {
    // The scripted policy asks but exports no `verdict` interface.
    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let host = host(&format!(
        "{}\n{}",
        probe_at(&model),
        scripted("asker", 1, "verdict = \"ask\"")
    ));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    let failure = decision.policies[0].failure.as_deref().unwrap_or_default();
    assert!(
        failure.contains("does not export toolgate:policy/verdict@0.4.0"),
        "{failure}"
    );
}

#[test]
fn every_field_a_policy_hands_the_host_is_capped() {
    let host = hostile("huge-event-fields", "", "");
    host.evaluate(&call("attack", json!({}))).unwrap();
    host.persist();
    let events = host.recent_events(10).unwrap();
    let (_, event) = events.last().expect("the event was kept, cut");
    assert!(event.session_id.len() <= 256 && event.kind.len() <= 256);
    assert!(event.tool.as_ref().unwrap().len() <= 256);
    assert!(event.summary.as_ref().unwrap().len() <= 1024);
    assert!(event.detail.as_ref().unwrap().len() <= 1024);

    let keys = hostile("state-key-max", "", "");
    let notes = notes(&keys, &call("attack", json!({})));
    assert_eq!(notes, ["state-key-max: Ok(()) / Err(StateError::TooLarge)"]);
}

/// host.wit promises `too-large` past the host's caps, but past its copy
/// limit (4 MiB) the host would have to copy what it refuses: the call
/// traps there (`sandbox::get_many_answers_at_most_its_cap`). So the
/// helper crate answers before the call, as the host would have, and the
/// policy goes on (Python and TypeScript: `polyglot`).
#[test]
fn past_the_copy_limit_the_helpers_answer_as_the_host_would_and_the_policy_goes_on() {
    let host = hostile(
        "helpers-past-copy-limit",
        "memory_mib = 512\ndeadline_ms = 10000",
        "",
    );
    let notes = notes(&host, &call("attack", json!({})));
    assert_eq!(
        notes,
        [
            "helpers: Err(StateError::TooLarge) / Err(StateError::TooLarge) / Err(StateError::TooLarge) / Ok(None) / Ok([])"
        ]
    );
    host.persist();
    let events = host.recent_events(10).unwrap();
    let (_, event) = events.last().expect("the event was kept, cut");
    assert_eq!((event.kind.len(), event.session_id.len()), (256, 256));
    assert_eq!(event.summary.as_ref().map(String::len), Some(1024));
}

/// Found by `store::redb_and_postgres_agree…`'s review: a key with NUL was
/// stored by redb and a storage error on PostgreSQL; now no backend takes
/// one, so a policy behaves the same on each.
#[test]
fn a_state_key_with_nul_is_refused_on_every_backend_alike() {
    let keys = hostile("state-key-nul", "", "");
    let notes = notes(&keys, &call("attack", json!({})));
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = &notes[0];
    assert!(
        note.starts_with(
            "state-key-nul: Err(StateError::Storage(\"a state key may not contain NUL"
        ),
        "{note}"
    );
    assert!(
        note.contains("/ Ok(None) / Err(StateError::Storage("),
        "{note}"
    );
}

#[test]
fn reads_are_capped_whatever_limit_the_policy_asks() {
    let common::TestHost { host, dir } = hostile("event-flood", "events_per_call = 5000", "");
    host.evaluate(&call("attack", json!({}))).unwrap();
    host.persist();
    drop(host);
    // The same store, read by the same plugin name with another attack.
    let (config, _config_dir) = common::config(&format!(
        "[plugins.hostile]\npath = {:?}\n[plugins.hostile.config]\nattack = \"read-max\"\n",
        guest("hostile-policy").display().to_string()
    ));
    let host = Service::open(config, Some(dir.path().join("toolgate.redb").into())).unwrap();
    let notes = notes(&host, &call("attack", json!({})));
    assert_eq!(notes, ["read-max: 0 keys, 1000 events"]);
}

#[test]
fn an_event_flood_stops_at_the_policys_quota_and_the_file_stops_growing() {
    let host = hostile("event-flood", "events_max = 1000", "");
    let size = |host: &Service| {
        host.persist();
        host.store_stats().unwrap()
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
fn a_fresh_instance_sees_nothing_an_earlier_one_wrote_to_memory() {
    // Each evaluation gets a fresh instance, typically in the slot the last
    // one used. Whatever the host does to make that cheap (it resets written
    // pages in place where the kernel reports them), the memory must start
    // from the policy's image: no marker, near or 8 MiB into the heap.
    let host = hostile("remember-far", "reuse_instances = false", "");
    for round in 0..5 {
        let user = format!("user-{round}");
        assert_eq!(
            notes(&host, &attack_as(&user, &user)),
            ["marked-pages: 0"],
            "round {round}"
        );
    }
    assert_eq!(instances_created(&host, "hostile"), 5);
    // The probe does see what stays: a warm instance of one session keeps
    // its memory, marker included (32 sampled pages of 8 MiB).
    let host = hostile("remember-far", "", "");
    assert_eq!(notes(&host, &attack_as("alice", "s1")), ["marked-pages: 0"]);
    assert_eq!(
        notes(&host, &attack_as("alice", "s1")),
        ["marked-pages: 32"]
    );
    assert_eq!(notes(&host, &attack_as("bob", "s2")), ["marked-pages: 0"]);
}

#[test]
fn a_new_session_gets_a_spare_that_served_no_one() {
    // After a call needed a fresh instance, spares are made off the
    // decision path and opened as a fresh instance is. They serve no call
    // until one takes them, so another user's session finds one as clean as
    // a fresh instance: no marker from alice's call in its memory.
    let host = hostile("remember-far", "", "");
    assert_eq!(notes(&host, &attack_as("alice", "s1")), ["marked-pages: 0"]);
    wait_for_spares(&host, "hostile", 2);
    for user in ["bob", "carol"] {
        assert_eq!(notes(&host, &attack_as(user, user)), ["marked-pages: 0"]);
    }
    let status = status(&host, "hostile");
    assert_eq!(
        (status.instances_created, status.instances_from_spares),
        (3, 2),
        "alice's instance made for her call, bob's and carol's spares"
    );
    // Alice's warm instance still serves her session (and has her marker).
    assert_eq!(
        notes(&host, &attack_as("alice", "s1")),
        ["marked-pages: 32"]
    );
}

#[test]
fn a_host_dropped_while_making_spares_lets_go_of_its_store() {
    // Every first call below queues 16 spares to be made on the chores
    // thread, and each spare holds the store. Dropping the host must wait
    // for that work, or the next open of the same file finds it in use.
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.redb");
    for round in 0..20 {
        let plugin = hostile_plugin("remember-far", "spare_instances = 16");
        // Not waiting for a store another holder has open.
        let (config, _config_dir) = common::config(&format!("store_wait_ms = 0\n{plugin}"));
        let host = Service::open(config, Some(store.clone().into()))
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        let harmless = call("Read", json!({"file_path": "README.md"}));
        host.evaluate(&harmless).unwrap();
        drop(host);
    }
}

#[test]
fn pre_post_pre_uses_one_instance() {
    let host = host(&scripted("keeper", 1, "verdict = \"allow\""));
    let request = call("Bash", json!({"command": "ls"}));
    host.evaluate(&request).unwrap();
    host.observe(&request, toolgate::Outcome::Succeeded, "ok")
        .unwrap();
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
    let rows = |host: &Service, table: &str| {
        host.store_stats()
            .unwrap()
            .tables
            .get(table)
            .map_or(0, |t| t.rows)
    };
    assert_eq!(
        (
            rows(&host, "pending_gates"),
            rows(&host, "gate_resolutions")
        ),
        (1, 1)
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let report = host.sweep().unwrap();
    assert_eq!((report.gates, report.resolutions), (1, 1));
    assert_eq!(
        (
            rows(&host, "pending_gates"),
            rows(&host, "gate_resolutions")
        ),
        (0, 0)
    );
}
