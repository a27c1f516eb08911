//! Composition rules, proven with real wasm policies through the real
//! pipeline: the first deny wins and stops lower priorities; pause beats
//! allow; skip abstains; notes accumulate; risk takes the highest.

use crate::common;

use common::{call, host, scripted};
use serde_json::json;
use toolgate::Verdict;
use toolgate::decision::{PolicyVerdict, RiskLevel};

fn decided_count(host: &toolgate::Service, plugin: &str) -> u64 {
    host.command(plugin, "decided", "{}")
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn allow_plus_deny_is_deny_attributed_to_the_denier() {
    let host = host(&format!(
        "{}{}",
        scripted("allower", 10, "verdict = \"allow\""),
        scripted(
            "denier",
            20,
            "verdict = \"deny\"\nreason = \"no shells today\""
        ),
    ));
    let decision = host
        .evaluate(&call("Bash", json!({"command": "ls"})))
        .unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decided_by.as_deref(), Some("denier"));
    assert_eq!(decision.reason.as_deref(), Some("no shells today"));
    let verdicts: Vec<_> = decision
        .policies
        .iter()
        .map(|p| (p.name.as_str(), p.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("allower", PolicyVerdict::Allow),
            ("denier", PolicyVerdict::Deny)
        ]
    );
}

#[test]
fn a_deny_short_circuits_lower_priority_policies() {
    let host = host(&format!(
        "{}{}{}",
        scripted("first", 1, "verdict = \"allow\""),
        scripted("blocker", 2, "verdict = \"deny\"\nreason = \"stop\""),
        scripted(
            "never",
            3,
            "verdict = \"allow\"\nnotes = [\"should not appear\"]"
        ),
    ));
    let decision = host.evaluate(&call("Write", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert!(decision.policies.iter().all(|p| p.name != "never"));
    assert!(decision.notes.is_empty());
    // The short-circuited policy's decide never ran: its counter is untouched.
    assert_eq!(decided_count(&host, "never"), 0);
    assert_eq!(decided_count(&host, "first"), 1);
    assert_eq!(decided_count(&host, "blocker"), 1);
}

#[test]
fn pause_beats_allow_and_creates_a_pending_gate() {
    let host = host(&format!(
        "{}{}",
        scripted(
            "pauser",
            5,
            "verdict = \"pause\"\nreason = \"Run the deploy script?\""
        ),
        scripted("allower", 1, "verdict = \"allow\""),
    ));
    let decision = host
        .evaluate(&call("Bash", json!({"command": "./deploy"})))
        .unwrap();
    assert_eq!(decision.verdict, Verdict::Pause);
    assert_eq!(decision.decided_by.as_deref(), Some("pauser"));
    assert_eq!(decision.reason.as_deref(), Some("Run the deploy script?"));
    let pause = decision.pause.expect("a pause carries its gate");
    let gates = host.gates(None).unwrap();
    assert_eq!(gates.len(), 1);
    assert_eq!(gates[0].request_id, pause.request_id);
    assert_eq!(gates[0].policy, "pauser");
}

#[test]
fn a_deny_after_a_pause_still_wins() {
    let host = host(&format!(
        "{}{}",
        scripted("pauser", 1, "verdict = \"pause\"\nreason = \"ask\""),
        scripted("denier", 2, "verdict = \"deny\"\nreason = \"never\""),
    ));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decided_by.as_deref(), Some("denier"));
    assert!(decision.pause.is_none());
    assert!(
        host.gates(None).unwrap().is_empty(),
        "no gate for a denied call"
    );
}

#[test]
fn skip_abstains() {
    let only_skips = host(&scripted("abstainer", 1, "verdict = \"skip\""));
    let decision = only_skips.evaluate(&call("Read", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(decision.decided_by, None);
    assert_eq!(decision.policies[0].verdict, PolicyVerdict::Skip);

    let skip_then_deny = host(&format!(
        "{}{}",
        scripted("abstainer", 1, "verdict = \"skip\""),
        scripted("denier", 2, "verdict = \"deny\"\nreason = \"no\""),
    ));
    let decision = skip_then_deny.evaluate(&call("Read", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decided_by.as_deref(), Some("denier"));
}

#[test]
fn notes_accumulate_from_every_policy_that_ran() {
    let host = host(&format!(
        "{}{}{}",
        scripted("a", 1, "verdict = \"allow\"\nnotes = [\"note from a\"]"),
        scripted(
            "b",
            2,
            "verdict = \"skip\"\nnotes = [\"note from b\", \"second from b\"]"
        ),
        scripted(
            "c",
            3,
            "verdict = \"deny\"\nreason = \"no\"\nnotes = [\"note from c\"]"
        ),
    ));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    let notes: Vec<_> = decision
        .notes
        .iter()
        .map(|n| (n.policy.as_str(), n.text.as_str()))
        .collect();
    assert_eq!(
        notes,
        [
            ("a", "note from a"),
            ("b", "note from b"),
            ("b", "second from b"),
            ("c", "note from c"),
        ]
    );
}

#[test]
fn priority_order_wins_over_config_order() {
    // Written in reverse; the lower number must run (and deny) first.
    let host = host(&format!(
        "{}{}",
        scripted("zz-late", 50, "verdict = \"deny\"\nreason = \"late\""),
        scripted("aa-early", -5, "verdict = \"deny\"\nreason = \"early\""),
    ));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    assert_eq!(decision.decided_by.as_deref(), Some("aa-early"));
    assert_eq!(decision.policies.len(), 1);

    let host = host_with_order();
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    let order: Vec<_> = decision.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(order, ["one", "two", "three"]);
}

fn host_with_order() -> common::TestHost {
    host(&format!(
        "{}{}{}",
        scripted("three", 30, "verdict = \"allow\""),
        scripted("one", 10, "verdict = \"allow\""),
        scripted("two", 20, "verdict = \"allow\""),
    ))
}

#[test]
fn the_highest_risk_is_kept_and_attributed() {
    let host = host(&format!(
        "{}{}{}",
        scripted("writer", 1, "verdict = \"allow\"\nrisk = \"file-write\""),
        scripted("sheller", 2, "verdict = \"allow\"\nrisk = \"shell\""),
        scripted("calm", 3, "verdict = \"allow\"\nrisk = \"low\""),
    ));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    assert_eq!(decision.risk.category, "shell");
    assert_eq!(decision.risk.level, RiskLevel::Critical);
    assert_eq!(decision.risk.by.as_deref(), Some("sheller"));
    assert_eq!(decision.risk.signals, ["scripted:shell"]);
}

#[test]
fn each_result_carries_the_component_digest_and_a_time() {
    let host = host(&scripted("a", 1, "verdict = \"allow\""));
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    let result = &decision.policies[0];
    assert_eq!(result.sha256.len(), 64);
    assert_eq!(result.sha256, host.plugins().get("a").unwrap().sha256);
    assert!(decision.duration_us >= result.duration_us);
}

#[test]
fn no_policies_means_allow() {
    let host = host("");
    let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.policies.is_empty());
}

#[test]
fn a_warm_instance_decides_each_call_on_that_call_not_the_one_before() {
    // The call crosses into a policy once per evaluation (`gate.begin`) and
    // stays in the instance's memory for its phases: every evaluation on a
    // reused instance must begin again, or it would decide on the last call.
    let host = host(&scripted(
        "picky",
        1,
        "verdict = \"allow\"\nreason = \"not this one\"\n\
         deny_if_arguments_contain = \"deny-me\"\nreport_instance = true",
    ));
    let decide = |arguments: serde_json::Value| {
        let decision = host.evaluate(&call("Bash", arguments)).unwrap();
        let notes: Vec<_> = decision.notes.into_iter().map(|n| n.text).collect();
        (decision.verdict, notes)
    };
    let denied = decide(json!({"command": "echo deny-me"}));
    let allowed = decide(json!({"command": "echo fine"}));
    let denied_again = decide(json!({"command": "echo deny-me too"}));
    assert_eq!(
        denied,
        (Verdict::Deny, vec!["instance-calls:1".to_string()])
    );
    assert_eq!(
        allowed,
        (Verdict::Allow, vec!["instance-calls:2".to_string()]),
        "the same warm instance, deciding on the new call"
    );
    assert_eq!(
        denied_again,
        (Verdict::Deny, vec!["instance-calls:3".to_string()])
    );
}

#[test]
fn warm_instances_are_reused_unless_the_operator_says_otherwise() {
    let notes = |host: &common::TestHost| {
        host.evaluate(&call("Read", json!({})))
            .unwrap()
            .notes
            .into_iter()
            .map(|n| n.text)
            .collect::<Vec<_>>()
    };
    let reused = host(&scripted(
        "counter",
        1,
        "verdict = \"allow\"\nreport_instance = true",
    ));
    assert_eq!(notes(&reused), ["instance-calls:1"]);
    assert_eq!(
        notes(&reused),
        ["instance-calls:2"],
        "the same warm instance"
    );

    let fresh = host(&format!(
        "{}[plugins.counter.limits]\nreuse_instances = false\n",
        scripted("counter", 1, "verdict = \"allow\"\nreport_instance = true")
    ));
    assert_eq!(notes(&fresh), ["instance-calls:1"]);
    assert_eq!(
        notes(&fresh),
        ["instance-calls:1"],
        "a fresh instance every time"
    );
}
