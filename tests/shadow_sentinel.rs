//! shadow-sentinel through the wasm boundary: the seed's classification,
//! budget, context and recording cases, and the probe over real HTTP against
//! a loopback model server.

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::model_server::{ModelServer, Reply, refused_url};
use common::{call, host};
use serde_json::json;
use toolgate::decision::{BudgetReport, PolicyVerdict, RiskLevel};
use toolgate::request::Origin;
use toolgate::{Outcome, ToolRequest, Verdict};

const ALLOW: &str = r#"{"verdict": "allow"}"#;
const POLICY: &str = "shadow-sentinel";

/// A host with only the sentinel, its table overridden by `table`, and the
/// probe pointed at `endpoint` (if any).
fn sentinel(table: &str, endpoint: Option<&str>) -> common::TestHost {
    let probe = endpoint
        .map(|url| format!("[probe]\nendpoint = {url:?}\nmodel = \"test-model\"\n"))
        .unwrap_or_default();
    host(&format!(
        "{probe}[plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n[plugins.shadow-sentinel.config]\n{table}\n"
    ))
}

fn in_session(tool: &str, session: &str, turn: u64) -> ToolRequest {
    let mut request = call(tool, json!({"command": "ls -la"}));
    request.session_id = session.into();
    request.turn = turn;
    request
}

fn mcp(tool: &str, server: &str) -> ToolRequest {
    let mut request = in_session(tool, "s", 1);
    request.origin = Origin::Mcp(server.into());
    request
}

/// Whether the sentinel probed this call (a budget slot was taken and the
/// model was asked) rather than skipping it.
fn probed(host: &toolgate::Service, request: &ToolRequest) -> bool {
    let decision = host.evaluate(request).unwrap();
    decision.policies[0].verdict != PolicyVerdict::Skip
}

fn category(host: &toolgate::Service, request: &ToolRequest) -> String {
    host.evaluate(request).unwrap().risk.category
}

#[test]
fn classification_follows_the_seed_and_claude_code_names() {
    let host = sentinel("", None);
    for (tool, expected) in [
        ("builtin:shell", "shell"),
        ("builtin:bash", "shell"),
        ("bash", "shell"),
        ("sh", "shell"),
        ("Bash", "shell"),
        ("builtin:write", "file-write"),
        ("builtin:edit", "file-write"),
        ("delete", "file-write"),
        ("Write", "file-write"),
        ("Edit", "file-write"),
        ("MultiEdit", "file-write"),
        ("NotebookEdit", "file-write"),
        ("builtin:read", "low"),
        ("builtin:search", "low"),
        ("Read", "low"),
        ("some-server_frobnicate", "low"),
    ] {
        assert_eq!(
            category(&host, &in_session(tool, "s", 1)),
            expected,
            "{tool}"
        );
    }
    assert_eq!(
        category(&host, &mcp("some-server_frobnicate", "some-server")),
        "mcp-unclassified"
    );
    // The seed's CI-1239 regression: the *default* patterns escalate a real
    // MCP write tool id.
    assert_eq!(
        category(&host, &mcp("fs-test_write_file", "fs-test")),
        "exfil-capable"
    );
    // The level orders this policy's categories among every policy's.
    for (request, level) in [
        (in_session("Read", "s", 1), RiskLevel::None),
        (mcp("some-server_frobnicate", "some-server"), RiskLevel::Low),
        (in_session("Write", "s", 1), RiskLevel::Medium),
        (mcp("fs-test_write_file", "fs-test"), RiskLevel::High),
        (in_session("Bash", "s", 1), RiskLevel::Critical),
    ] {
        assert_eq!(
            host.evaluate(&request).unwrap().risk.level,
            level,
            "{}",
            request.tool
        );
    }
}

#[test]
fn an_mcp_edit_tool_escalates_only_with_mcp_origin() {
    let host = sentinel("probe_patterns = [\"*edit*\"]", None);
    assert_eq!(
        category(&host, &in_session("github_edit_file", "s", 1)),
        "file-write"
    );
    assert_eq!(
        category(&host, &mcp("github_edit_file", "github")),
        "exfil-capable"
    );
}

#[test]
fn a_low_risk_call_is_skipped_without_a_probe() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("", Some(&server.url));
    let decision = host.evaluate(&in_session("Read", "s", 1)).unwrap();
    assert_eq!(decision.policies[0].verdict, PolicyVerdict::Skip);
    assert!(server.requests().is_empty(), "low risk adds no probe");
}

#[test]
fn the_shared_budget_runs_out_and_a_new_turn_resets_it() {
    // Budgets count questions a model answers.
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("max_probes_per_turn = 2", Some(&server.url));
    let shell = in_session("Bash", "s", 1);
    assert!(probed(&host, &shell));
    assert!(probed(&host, &shell));
    let third = host.evaluate(&shell).unwrap();
    assert_eq!(third.policies[0].verdict, PolicyVerdict::Skip);
    assert!(matches!(
        third.policies[0].budget,
        Some(BudgetReport::Exceeded(_))
    ));
    assert!(
        probed(&host, &in_session("Bash", "s", 2)),
        "a new turn resets the budget"
    );
    assert!(
        probed(&host, &in_session("Bash", "other", 1)),
        "budgets are per session"
    );
}

#[test]
fn exfil_capable_has_its_own_budget() {
    // Budgets count questions a model answers.
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel(
        "max_probes_per_turn = 1\nprobe_patterns = [\"*edit*\"]",
        Some(&server.url),
    );
    let exfil = mcp("server_edit_file", "server");
    assert!(probed(&host, &in_session("Bash", "s", 1)));
    assert!(
        !probed(&host, &in_session("Bash", "s", 1)),
        "shared budget spent"
    );
    assert!(
        probed(&host, &exfil),
        "exfil-capable is not starved by the shared budget"
    );
}

#[test]
fn exfil_capable_budget_is_finite() {
    // Budgets count questions a model answers.
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel(
        "max_probes_per_turn = 1\nprobe_patterns = [\"*edit*\"]",
        Some(&server.url),
    );
    let exfil = mcp("server_edit_file", "server");
    assert!(probed(&host, &exfil));
    assert!(probed(&host, &exfil));
    assert!(!probed(&host, &exfil), "2 x max, then skip");
}

#[test]
fn mcp_unclassified_leaves_a_slot_for_shell() {
    // Budgets count questions a model answers.
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("max_probes_per_turn = 2", Some(&server.url));
    let frob = mcp("some-server_frobnicate", "some-server");
    assert!(probed(&host, &frob));
    assert!(!probed(&host, &frob), "its share is max - 1");
    assert!(
        probed(&host, &in_session("Bash", "s", 1)),
        "the reserved slot"
    );
}

#[test]
fn at_budget_one_mcp_unclassified_gets_nothing() {
    let host = sentinel("max_probes_per_turn = 1", None);
    assert!(!probed(
        &host,
        &mcp("some-server_frobnicate", "some-server")
    ));
    assert!(probed(&host, &in_session("Bash", "s", 1)));
}

#[test]
fn at_budget_zero_every_category_skips() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel(
        "max_probes_per_turn = 0\nprobe_patterns = [\"*edit*\"]",
        Some(&server.url),
    );
    assert!(!probed(&host, &in_session("Bash", "s", 1)));
    assert!(!probed(&host, &in_session("Write", "s", 1)));
    assert!(!probed(&host, &mcp("some-server_frobnicate", "x")));
    assert!(!probed(&host, &mcp("server_edit_file", "server")));
    assert!(server.requests().is_empty());
}

#[test]
fn two_concurrent_decisions_never_both_take_the_last_slot() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = Arc::new(sentinel("max_probes_per_turn = 1", Some(&server.url)));
    for turn in 1..=10 {
        let barrier = Arc::new(Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (host, barrier) = (host.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    probed(&host, &in_session("Bash", "race", turn))
                })
            })
            .collect();
        let probes = racers
            .into_iter()
            .filter(|_| true)
            .map(|r| r.join().unwrap())
            .filter(|p| *p)
            .count();
        assert_eq!(probes, 1, "turn {turn}");
    }
    assert_eq!(server.requests().len(), 10);
}

#[test]
fn disabled_skips_everything_and_records_nothing() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("enabled = false", Some(&server.url));
    let request = in_session("Bash", "s", 1);
    let decision = host.evaluate(&request).unwrap();
    assert_eq!(decision.policies[0].verdict, PolicyVerdict::Skip);
    assert_eq!(decision.risk.category, "low");
    host.observe(&request, Outcome::Succeeded, "ran ls")
        .unwrap();
    host.persist();
    assert!(host.recent_events(10).unwrap().is_empty());
    assert!(server.requests().is_empty());
}

#[test]
fn observed_calls_are_recorded_with_a_cut_summary() {
    let host = sentinel("", None);
    let request = in_session("Bash", "s", 3);
    host.observe(&request, Outcome::Succeeded, "ran `ls -la`")
        .unwrap();
    host.observe(&request, Outcome::Failed, &"é".repeat(400))
        .unwrap();
    host.persist();
    let events = host.session_events(POLICY, "s", 10).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].kind, "tool_call");
    assert_eq!(events[0].tool.as_deref(), Some("Bash"));
    assert_eq!(events[0].turn, 3);
    assert_eq!(events[0].detail.as_deref(), Some("succeeded"));
    assert_eq!(events[0].summary.as_deref(), Some("ran `ls -la`"));
    assert_eq!(events[1].summary.as_deref().unwrap().chars().count(), 250);
}

/// Record `count` observed Bash calls for `session`, summaries `prefix-i`.
fn seed(host: &toolgate::Service, session: &str, prefix: &str, count: u64) {
    for i in 0..count {
        let request = in_session("Bash", session, i);
        host.observe(&request, Outcome::Succeeded, &format!("{prefix}-{i}"))
            .unwrap();
    }
    host.persist();
}

/// The context lines of the newest probe prompt.
fn context_lines(server: &ModelServer) -> Vec<String> {
    let prompt = server.user_prompts().pop().expect("a probe was sent");
    let (_, events) = prompt.split_once("Recent events:\n").unwrap();
    events
        .lines()
        .filter(|l| l.starts_with("[turn"))
        .map(|l| l.rsplit(" | ").next().unwrap().to_string())
        .collect()
}

fn probe_with_context(max_events: u32, own: u64, cross: u64) -> Vec<String> {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel(
        &format!("max_context_events = {max_events}"),
        Some(&server.url),
    );
    seed(&host, "other-session", "cross", cross);
    seed(&host, "current", "session", own);
    host.evaluate(&in_session("Bash", "current", 99)).unwrap();
    context_lines(&server)
}

#[test]
fn cross_session_history_reaches_the_probe() {
    let lines = probe_with_context(20, 0, 1);
    assert_eq!(lines, ["cross-0"]);
}

#[test]
fn a_heavy_session_still_leaves_half_for_other_sessions() {
    let lines = probe_with_context(4, 4, 3);
    assert_eq!(lines, ["cross-1", "cross-2", "session-2", "session-3"]);
}

#[test]
fn heavy_cross_session_history_does_not_trim_a_light_session() {
    let lines = probe_with_context(4, 1, 4);
    assert_eq!(lines, ["cross-2", "cross-3", "session-0"]);
}

#[test]
fn exactly_at_the_limit_nothing_is_dropped() {
    let lines = probe_with_context(4, 2, 2);
    assert_eq!(lines, ["cross-0", "cross-1", "session-0", "session-1"]);
}

#[test]
fn one_over_the_limit_drops_the_oldest_cross_session_event() {
    let lines = probe_with_context(4, 2, 3);
    assert_eq!(lines, ["cross-1", "cross-2", "session-0", "session-1"]);
}

#[test]
fn the_current_session_is_not_counted_twice() {
    let lines = probe_with_context(10, 2, 0);
    assert_eq!(lines, ["session-0", "session-1"]);
}

#[test]
fn probe_results_never_reach_the_probe() {
    let server = ModelServer::start(Reply::Content(
        r#"{"verdict": "deny", "reason": "MARKER-REASON"}"#.into(),
    ));
    let host = sentinel("", Some(&server.url));
    // Another session's probe (a deny) and this session's own earlier probe.
    assert_eq!(
        host.evaluate(&in_session("Bash", "other-session", 1))
            .unwrap()
            .verdict,
        Verdict::Deny
    );
    server.set_reply(Reply::Content(ALLOW.into()));
    host.evaluate(&in_session("Bash", "current", 1)).unwrap();
    host.persist();
    host.evaluate(&in_session("Bash", "current", 2)).unwrap();
    let prompt = server.user_prompts().pop().unwrap();
    assert!(prompt.contains("No earlier events."), "{prompt}");
    // The LLM-isolation invariant, over every request body sent.
    for body in server.requests().iter().map(|r| r.to_string()) {
        for forbidden in [
            "MARKER-REASON",
            "probe denied",
            "probe_result",
            "risk",
            "exfil",
            "file-write",
            "mcp-unclassified",
            "\"shell\"",
        ] {
            assert!(
                !body.contains(forbidden),
                "{forbidden:?} leaked into {body}"
            );
        }
    }
}

#[test]
fn observed_events_keep_their_risk_which_never_reaches_the_probe() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("", Some(&server.url));
    // Runtimes name their calls (Claude Code's tool_use_id): the outcome
    // reported later is matched to the decision by that id.
    let mut first = in_session("Bash", "s", 1);
    first.call_id = Some("toolu_1".into());
    let decided = host.evaluate(&first).unwrap();
    host.observe(&first, Outcome::Succeeded, "listed the files")
        .unwrap();
    host.persist();
    // The stream records the risk the call was decided at, and its origin.
    let events = host.session_events(POLICY, "s", 10).unwrap();
    let observed = events.iter().find(|e| e.kind == "tool_call").unwrap();
    let risk = observed
        .risk
        .as_ref()
        .expect("the event carries the call's risk");
    assert_eq!(decided.risk.category, "shell");
    assert_eq!(
        (risk.category.as_str(), risk.level),
        ("shell", RiskLevel::Critical)
    );
    assert_eq!(observed.origin, Some(Origin::Builtin));

    host.evaluate(&in_session("Bash", "s", 2)).unwrap();
    let prompt = server.user_prompts().pop().unwrap();
    assert!(prompt.contains("listed the files"), "{prompt}");
    for forbidden in ["critical", "\"shell\"", "name:Bash", "risk"] {
        assert!(
            !prompt.contains(forbidden),
            "{forbidden:?} leaked into {prompt}"
        );
    }
}

#[test]
fn the_probe_allows_and_denies_with_the_models_reason() {
    let server = ModelServer::start(Reply::Content(ALLOW.into()));
    let host = sentinel("", Some(&server.url));
    let rm = || {
        let mut r = in_session("Bash", "s", 1);
        r.arguments = json!({"command": "rm -rf build"});
        r
    };
    assert_eq!(host.evaluate(&rm()).unwrap().verdict, Verdict::Allow);
    let body = &server.requests()[0];
    assert_eq!(body["model"], "test-model");
    assert!(
        body["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("rm -rf build")
    );

    server.set_reply(Reply::Content(
        "Looking at this: {\"verdict\": \"deny\", \"reason\": \"wipes the disk\"}".into(),
    ));
    let decision = host.evaluate(&rm()).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.reason.as_deref(), Some("wipes the disk"));
    assert_eq!(decision.decided_by.as_deref(), Some(POLICY));
}

#[test]
fn a_prose_reply_allows_and_is_logged() {
    let server = ModelServer::start(Reply::Content("I think this is fine".into()));
    let host = sentinel("", Some(&server.url));
    let decision = host.evaluate(&in_session("Bash", "s", 1)).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    let logs = &decision.policies[0].logs;
    assert!(
        logs.iter()
            .any(|l| l.starts_with("warn:") && l.contains("could not be parsed")),
        "{logs:?}"
    );
}

#[test]
fn a_late_reply_fails_open_unless_deny_on_timeout() {
    let server = ModelServer::start(Reply::Delayed(Duration::from_millis(1500), ALLOW.into()));
    let open = sentinel("probe_timeout_ms = 200", Some(&server.url));
    let decision = open.evaluate(&in_session("Bash", "s", 1)).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(
        decision.policies[0]
            .logs
            .iter()
            .any(|l| l.contains("timed out"))
    );
    assert!(
        decision.policies[0].failure.is_none(),
        "waiting on the model is not the policy's deadline"
    );

    let closed = sentinel(
        "probe_timeout_ms = 200\ndeny_on_timeout = true",
        Some(&server.url),
    );
    let decision = closed.evaluate(&in_session("Bash", "s", 1)).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert!(decision.reason.unwrap().contains("timed out"));
}

#[test]
fn a_refused_connection_or_no_endpoint_fails_open_unless_deny_on_timeout() {
    let refused = refused_url();
    let open = sentinel("", Some(&refused));
    assert_eq!(
        open.evaluate(&in_session("Bash", "s", 1)).unwrap().verdict,
        Verdict::Allow
    );
    let closed = sentinel("deny_on_timeout = true", Some(&refused));
    assert_eq!(
        closed
            .evaluate(&in_session("Bash", "s", 1))
            .unwrap()
            .verdict,
        Verdict::Deny
    );

    let none = sentinel("", None);
    let decision = none.evaluate(&in_session("Bash", "s", 1)).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(
        decision.policies[0]
            .logs
            .iter()
            .any(|l| l.contains("no model endpoint"))
    );
}

/// With no model configured the sentinel stops putting risky calls to the
/// host (it takes the answer as standing for a minute): failing open, the
/// calls after the first are not probed at all; with `deny_on_timeout`,
/// each is refused as the first was, and recorded.
#[test]
fn with_no_model_the_sentinel_stops_asking_and_answers_as_asking_would() {
    let probe_results = |host: &toolgate::Service| {
        host.persist();
        host.session_events(POLICY, "s", 20)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "probe_result")
            .count()
    };
    let open = sentinel("", None);
    let verdicts: Vec<PolicyVerdict> = (1..=4)
        .map(|turn| {
            let decision = open.evaluate(&in_session("Bash", "s", turn)).unwrap();
            assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
            decision.policies[0].verdict
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            PolicyVerdict::Allow,
            PolicyVerdict::Skip,
            PolicyVerdict::Skip,
            PolicyVerdict::Skip
        ]
    );
    assert_eq!(probe_results(&open), 1);

    let closed = sentinel("deny_on_timeout = true", None);
    let decisions: Vec<_> = (1..=4)
        .map(|turn| closed.evaluate(&in_session("Bash", "s", turn)).unwrap())
        .collect();
    for decision in &decisions {
        assert_eq!(decision.verdict, Verdict::Deny, "{decision:?}");
        assert_eq!(decision.reason, decisions[0].reason);
        assert!(
            decision.policies[0]
                .logs
                .iter()
                .any(|l| l.contains("no model endpoint")),
            "{decision:?}"
        );
    }
    assert_eq!(probe_results(&closed), 4);
}

#[test]
fn a_long_multibyte_deny_reason_is_recorded_cut_safely() {
    let reason = "é".repeat(300);
    let server = ModelServer::start(Reply::Content(
        json!({"verdict": "deny", "reason": reason}).to_string(),
    ));
    let host = sentinel("", Some(&server.url));
    let decision = host.evaluate(&in_session("Bash", "s", 1)).unwrap();
    assert_eq!(
        decision.reason.as_deref(),
        Some(reason.as_str()),
        "the agent gets the whole reason"
    );
    host.persist();
    let events = host.session_events(POLICY, "s", 10).unwrap();
    let summary = events[0].summary.as_deref().unwrap();
    assert_eq!(events[0].kind, "probe_result");
    assert_eq!(summary, format!("probe denied: {}", "é".repeat(120)));
}

#[test]
fn the_models_reply_is_parsed_in_the_sandbox_by_the_policy_that_asked() {
    // The host asks the model (over real HTTP) and hands the raw reply to
    // shadow-sentinel's own `verdict.parse`: whatever the reply, a verdict.
    for (raw, expected) in [
        (r#"{"verdict": "allow"}"#, None),
        (
            r#"{"verdict": "deny", "reason": "suspicious pattern"}"#,
            Some("suspicious pattern"),
        ),
        (
            r#"{"verdict": "deny"}"#,
            Some("the safety probe denied this tool call"),
        ),
        ("I think this is fine", None),
        ("} {", None),
    ] {
        let server = ModelServer::start(Reply::Content(raw.into()));
        let host = sentinel("", Some(&server.url));
        let decision = host.evaluate(&in_session("Bash", "s", 1)).unwrap();
        match expected {
            None => assert_eq!(decision.verdict, Verdict::Allow, "{raw:?}"),
            Some(reason) => {
                assert_eq!(decision.verdict, Verdict::Deny, "{raw:?}");
                assert_eq!(decision.reason.as_deref(), Some(reason), "{raw:?}");
            }
        }
        assert_eq!(server.requests().len(), 1, "{raw:?}");
    }
}
