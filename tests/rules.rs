//! The bundled `rules` policy through the host: composed with the other
//! bundled policies, a person's approval of a rule's pause, and a refused
//! rule pointed at its line. Each rule kind and each limit window are in
//! its fixture file (`guest-plugins/rules/fixtures.toml`, run by
//! `authoring.rs`).

use crate::common;

use common::{call, config_text, host, try_host};
use serde_json::json;
use toolgate::decision::PolicyVerdict;
use toolgate::gates::{GateResolution, PauseKind};
use toolgate::{Decision, Service, Verdict};

const RULES: &str = r#"
[plugins.rules]
path = "bundled:rules"
priority = 1

[[plugins.rules.config.rule]]
name = "no-get-env"
tool = "mcp:everything/get-env"
action = "deny"
reason = "get-env prints the server's environment."

[[plugins.rules.config.rule]]
name = "deploys"
tool = "deploy"
action = "ask"
reason = "Deploy again this session?"
allow_always = true
limit = { calls = 1, per = "session" }
"#;

/// The rules ahead of lease-gate, as an operator adds them to the default.
fn with_lease_gate() -> String {
    format!(
        "{RULES}\n[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 5\n\
         [plugins.lease-gate.config.actions.deploy]\neffects = [\"write-external\"]\n"
    )
}

fn approve(host: &Service, paused: &Decision, always: bool) {
    common::answer(host, paused, GateResolution::Approve { always });
}

/// Why a host with `body` does not start.
fn refusal(body: &str) -> String {
    match try_host(body) {
        Ok(_) => panic!("the host started"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn a_rule_denies_before_any_other_policy_is_asked() {
    let host = host(&with_lease_gate());
    let mut env = call("get-env", json!({}));
    env.origin = toolgate::request::Origin::Mcp("everything".into());
    let decision = host.evaluate(&env).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny, "{decision:?}");
    assert_eq!(decision.decided_by.as_deref(), Some("rules"));
    assert!(
        decision
            .reason
            .as_deref()
            .unwrap()
            .contains("(rule `no-get-env`)")
    );
    assert_eq!(
        decision.policies.len(),
        1,
        "the first deny wins and lease-gate is not asked: {decision:?}"
    );
    // A call no rule is about is the other policies' to decide.
    let read = host
        .evaluate(&call("Read", json!({"file_path": "a"})))
        .unwrap();
    assert_eq!(read.verdict, Verdict::Allow, "{read:?}");
    assert_eq!(read.policies[0].verdict, PolicyVerdict::Skip);
}

#[test]
fn a_person_approves_a_rules_pause_once_and_always() {
    let host = host(&with_lease_gate());
    let deploy = call("deploy", json!({"env": "prod"}));
    // The first deploy of the session is within the limit.
    assert_eq!(host.evaluate(&deploy).unwrap().verdict, Verdict::Allow);

    let second = host.evaluate(&deploy).unwrap();
    assert_eq!(second.verdict, Verdict::Pause, "{second:?}");
    assert_eq!(second.decided_by.as_deref(), Some("rules"));
    let pause = second.pause.as_ref().unwrap();
    assert!(
        matches!(
            &pause.kind,
            PauseKind::Approval {
                allow_always: true,
                ..
            }
        ),
        "the rule offers always: {pause:?}"
    );
    approve(&host, &second, true);
    let resumed = host.evaluate(&deploy).unwrap();
    assert_eq!(resumed.verdict, Verdict::Allow, "{resumed:?}");

    // "Always" holds for the rest of the session, with no new pause...
    let third = host.evaluate(&deploy).unwrap();
    assert_eq!(third.verdict, Verdict::Allow, "{third:?}");
    assert!(host.gates(None).unwrap().is_empty());
    // ...and only for it.
    let mut elsewhere = deploy.clone();
    elsewhere.session_id = "another".into();
    elsewhere.thread_id = Some("another".into());
    assert_eq!(host.evaluate(&elsewhere).unwrap().verdict, Verdict::Allow);
    assert_eq!(host.evaluate(&elsewhere).unwrap().verdict, Verdict::Pause);
}

#[test]
fn a_malformed_rule_is_refused_at_load_naming_the_rule_and_its_line() {
    let body = format!(
        "{RULES}\n[[plugins.rules.config.rule]]\nname = \"push\"\ntool = \"Bash\"\n\
         args.command = {{ regex = '^git push(' }}\naction = \"ask\"\nreason = \"push?\"\n"
    );
    let err = refusal(&body);
    let line = config_text(&body)
        .lines()
        .position(|l| l.starts_with("args.command"))
        .unwrap()
        + 1;
    for part in [
        "plugin `rules`",
        &format!("(plugins.rules.config, line {line})"),
        "`rule[2].args.command`",
        "rule `push`: not a valid regex",
    ] {
        assert!(err.contains(part), "{part:?} in: {err}");
    }
    let unknown = refusal(&RULES.replace("action = \"deny\"", "action = \"dny\""));
    assert!(
        unknown
            .to_string()
            .contains("rule `no-get-env`: unknown variant `dny`"),
        "{unknown}"
    );
}

/// Cedar policies beside the TOML rules, written in the config.
const CEDAR: &str = r#"
[plugins.rules]
path = "bundled:rules"
priority = 1

[[plugins.rules.config.rule]]
name = "status-is-fine"
tool = "Bash"
args.command = "git status*"
action = "allow"

[plugins.rules.config]
cedar = '''
@id("no-force-push")
@reason("Force-pushing rewrites shared history: push normally.")
forbid(principal, action == Action::"Bash", resource)
when { context.arguments has command && context.arguments.command like "*--force*" };

@id("deploys-need-a-person")
@ask("Deploy to production?")
permit(principal, action in Action::"mcp:deploy", resource);

@id("fetches-per-turn")
@reason("Two fetches a turn: work with what you have.")
forbid(principal, action == Action::"WebFetch", resource)
when { context.calls.turn > 2 };
'''
"#;

#[test]
fn cedar_policies_deny_ask_and_count_through_the_sandbox() {
    let host = host(CEDAR);
    let forced = host
        .evaluate(&call("Bash", json!({"command": "git push --force"})))
        .unwrap();
    assert_eq!(forced.verdict, Verdict::Deny);
    assert_eq!(
        forced.reason.as_deref(),
        Some("Force-pushing rewrites shared history: push normally.")
    );
    // A Cedar forbid holds over a TOML rule's allow; otherwise the TOML
    // rule decides; nothing satisfied abstains.
    let forced_status = host
        .evaluate(&call("Bash", json!({"command": "git status --force"})))
        .unwrap();
    assert_eq!(forced_status.policies[0].verdict, PolicyVerdict::Deny);
    let status = host
        .evaluate(&call("Bash", json!({"command": "git status --short"})))
        .unwrap();
    assert_eq!(status.policies[0].verdict, PolicyVerdict::Allow);
    let ls = host
        .evaluate(&call("Bash", json!({"command": "ls"})))
        .unwrap();
    assert_eq!(ls.policies[0].verdict, PolicyVerdict::Skip);

    let mut deploy = call("run", json!({"env": "prod"}));
    deploy.origin = toolgate::request::Origin::Mcp("deploy".into());
    let paused = host.evaluate(&deploy).unwrap();
    assert_eq!(paused.verdict, Verdict::Pause);
    assert_eq!(paused.reason.as_deref(), Some("Deploy to production?"));
    approve(&host, &paused, false);
    assert_eq!(host.evaluate(&deploy).unwrap().verdict, Verdict::Allow);

    // Counted in the policy's state: the third fetch of a turn is refused,
    // and a new turn starts afresh.
    let mut fetch = call("WebFetch", json!({"url": "https://example.com"}));
    let mut verdicts = Vec::new();
    for turn in [1, 1, 1, 2] {
        fetch.turn = turn;
        verdicts.push(host.evaluate(&fetch).unwrap().verdict);
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Allow,
            Verdict::Allow,
            Verdict::Deny,
            Verdict::Allow
        ]
    );
}

#[test]
fn a_cedar_parse_error_is_refused_at_load_with_cedars_message_and_the_line() {
    let broken = CEDAR.replace(
        "when { context.calls.turn > 2 };",
        "when { context.calls.turn > };",
    );
    let err = refusal(&broken);
    let line = config_text(&broken)
        .lines()
        .position(|l| l.starts_with("cedar = "))
        .unwrap()
        + 1;
    for part in [
        "plugin `rules`",
        &format!("line {line}"),
        "`cedar`",
        "Cedar refused the policies: ",
        "line 13, column",
    ] {
        assert!(err.contains(part), "{part:?} in: {err}");
    }
}
