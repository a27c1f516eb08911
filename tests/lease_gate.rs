//! lease-gate through the wasm boundary and the host's pause machinery: the
//! seed's lease, planner, gate and resume cases.

use crate::common;

use common::{call, host, scripted};
use serde_json::{Value, json};
use toolgate::gates::{GateKey, GateResolution, PauseKind};
use toolgate::request::{Mode, Origin};
use toolgate::{Decision, ToolRequest, Verdict};

const POLICY: &str = "lease-gate";

/// A host with lease-gate, `table` appended to its config table.
/// An embedder's host that authenticates its own `web` channel (so `web`
/// may resolve any channel's gate, as the seed's trusted channel).
fn gate_host(table: &str) -> common::TestHost {
    host(&format!(
        "trusted_channels = [\"web\"]\n[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n[plugins.lease-gate.config]\n{table}\n"
    ))
}

/// The catalogue used by the seed's tests.
const SEED_ACTIONS: &str = r#"
[plugins.lease-gate.config.actions.echo]
effects = ["read-local"]
[plugins.lease-gate.config.actions.http]
effects = ["write-external"]
approval = "always"
[plugins.lease-gate.config.actions.tool_install]
effects = ["write-external"]
approval = "always"
credential = { name = "notion", instructions = "Authenticate your Notion workspace", url = "https://www.notion.so/my-integrations" }
[plugins.lease-gate.config.actions.api_get]
effects = ["read-external"]
credential = { name = "test_api_key", instructions = "Provide your API key" }
[plugins.lease-gate.config.actions.approval_test]
effects = ["write-external"]
approval = "unless-auto-approved"
[plugins.lease-gate.config.actions.routine_create]
effects = ["write-local"]
"#;

fn on_thread(tool: &str, args: Value, thread: &str, kind: &str, mode: Mode) -> ToolRequest {
    let mut request = call(tool, args);
    request.user_id = "test-user".into();
    request.session_id = thread.into();
    request.thread_id = Some(thread.into());
    request.thread_kind = kind.into();
    request.mode = mode;
    request.channel = "telegram".into();
    request
}

fn foreground(tool: &str, args: Value) -> ToolRequest {
    on_thread(tool, args, "t1", "foreground", Mode::Interactive)
}

fn command(host: &toolgate::Service, name: &str, args: Value) -> Value {
    let answer = host.command(POLICY, name, &args.to_string()).unwrap();
    serde_json::from_str(&answer).unwrap()
}

fn resolve(
    host: &toolgate::Service,
    decision: &Decision,
    channel: &str,
    resolution: GateResolution,
) -> toolgate::Result<()> {
    let pause = decision.pause.as_ref().expect("a pause");
    let key = GateKey {
        user_id: pause.user_id.clone(),
        thread_id: pause.thread_id.clone(),
    };
    host.resolve_gate(&key, &pause.request_id, channel, resolution)
        .map(|_| ())
}

#[test]
fn a_fresh_foreground_thread_reads_and_runs_commands_freely_and_is_asked_before_mcp_tools() {
    let host = gate_host("");
    assert_eq!(
        host.evaluate(&foreground("Read", json!({"file_path": "a"})))
            .unwrap()
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        host.evaluate(&foreground("Write", json!({"file_path": "a"})))
            .unwrap()
            .verdict,
        Verdict::Allow
    );
    // A shell command is judged by what it does (the safeguards policy),
    // not asked about for being one.
    assert_eq!(
        host.evaluate(&foreground("Bash", json!({"command": "make"})))
            .unwrap()
            .verdict,
        Verdict::Allow
    );
    let mut mcp = foreground("create_issue", json!({}));
    mcp.origin = Origin::Mcp("github".into());
    let paused = host.evaluate(&mcp).unwrap();
    assert_eq!(paused.verdict, Verdict::Pause, "MCP tools need approval");
    assert!(
        paused.reason.unwrap().contains("create_issue"),
        "the person sees what they approve"
    );
    let mut auto = on_thread(
        "create_issue",
        json!({}),
        "t1",
        "foreground",
        Mode::InteractiveAutoApprove,
    );
    auto.origin = Origin::Mcp("github".into());
    assert_eq!(host.evaluate(&auto).unwrap().verdict, Verdict::Allow);
}

#[test]
fn an_operator_can_have_every_shell_command_asked_about() {
    let host = gate_host(
        "[plugins.lease-gate.config.actions.Bash]\neffects = [\"execute\"]\napproval = \"unless-auto-approved\"\n",
    );
    let bash = host
        .evaluate(&foreground("Bash", json!({"command": "make"})))
        .unwrap();
    assert_eq!(bash.verdict, Verdict::Pause);
    assert!(bash.reason.unwrap().contains("make"));
}

#[test]
fn research_threads_get_no_privileged_actions() {
    let host = gate_host(SEED_ACTIONS);
    let research = |tool: &str| {
        on_thread(
            tool,
            json!({}),
            "r1",
            "research",
            Mode::InteractiveAutoApprove,
        )
    };
    assert_eq!(
        host.evaluate(&research("echo")).unwrap().verdict,
        Verdict::Allow
    );
    let denied = host.evaluate(&research("http")).unwrap();
    assert_eq!(denied.verdict, Verdict::Deny);
    assert!(
        denied
            .reason
            .unwrap()
            .contains("No valid lease grants `http`")
    );
    let plan = command(&host, "plan", json!({"thread_kind": "research"}));
    let grants = plan["grants"]["specific"].as_array().unwrap();
    assert!(grants.contains(&json!("echo")));
    assert!(!grants.contains(&json!("http")) && !grants.contains(&json!("Bash")));
}

#[test]
fn mission_threads_get_no_denylisted_administrative_actions() {
    let host = gate_host(SEED_ACTIONS);
    let mission = |tool: &str| {
        on_thread(
            tool,
            json!({}),
            "m1",
            "mission",
            Mode::InteractiveAutoApprove,
        )
    };
    assert_eq!(
        host.evaluate(&mission("echo")).unwrap().verdict,
        Verdict::Allow
    );
    assert_eq!(
        host.evaluate(&mission("routine_create")).unwrap().verdict,
        Verdict::Deny
    );
    let plan = command(&host, "plan", json!({"thread_kind": "mission"}));
    assert_eq!(plan["tiers"]["routine_create"], "administrative");
}

#[test]
fn without_a_lease_the_gate_denies_and_a_grant_lets_it_through() {
    let host = gate_host(&format!("auto_plan = false\n{SEED_ACTIONS}"));
    let echo = on_thread("echo", json!({}), "t9", "foreground", Mode::Autonomous);
    let denied = host.evaluate(&echo).unwrap();
    assert_eq!(denied.verdict, Verdict::Deny);
    assert_eq!(denied.decided_by.as_deref(), Some(POLICY));
    let lease = command(
        &host,
        "lease-grant",
        json!({"thread": "t9", "actions": ["echo"]}),
    );
    assert_eq!(lease["thread"], "t9");
    assert_eq!(host.evaluate(&echo).unwrap().verdict, Verdict::Allow);
    let leases = command(&host, "lease-list", json!({"thread": "t9"}));
    assert_eq!(leases.as_array().unwrap().len(), 1);
}

#[test]
fn revoked_expired_and_used_up_leases_deny() {
    let host = gate_host(&format!("auto_plan = false\n{SEED_ACTIONS}"));
    let echo = |thread: &str| on_thread("echo", json!({}), thread, "foreground", Mode::Autonomous);

    let lease = command(&host, "lease-grant", json!({"thread": "a", "actions": "*"}));
    assert_eq!(host.evaluate(&echo("a")).unwrap().verdict, Verdict::Allow);
    command(
        &host,
        "lease-revoke",
        json!({"thread": "a", "lease": lease["id"], "reason": "done"}),
    );
    assert_eq!(host.evaluate(&echo("a")).unwrap().verdict, Verdict::Deny);

    command(
        &host,
        "lease-grant",
        json!({"thread": "b", "actions": ["echo"], "max_uses": 1}),
    );
    assert_eq!(host.evaluate(&echo("b")).unwrap().verdict, Verdict::Allow);
    assert_eq!(
        host.evaluate(&echo("b")).unwrap().verdict,
        Verdict::Deny,
        "one use only"
    );

    command(
        &host,
        "lease-grant",
        json!({"thread": "c", "actions": ["echo"], "expires_in_ms": 30}),
    );
    std::thread::sleep(std::time::Duration::from_millis(80));
    assert_eq!(
        host.evaluate(&echo("c")).unwrap().verdict,
        Verdict::Deny,
        "expired"
    );

    for bad in [0, -5] {
        let err = host
            .command(
                POLICY,
                "lease-grant",
                &json!({"thread": "d", "actions": ["echo"], "expires_in_ms": bad}).to_string(),
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("positive"), "{err}");
    }
}

/// A runtime resends a call it got no answer to (a hook's read timeout, a
/// dropped connection) with the same call id: the call is one call. Asked
/// twice, or by several connections at once, it takes one use and gets
/// one answer; the same id with other arguments is another call.
#[test]
fn the_same_call_asked_again_takes_one_use() {
    let host = std::sync::Arc::new(gate_host(&format!("auto_plan = false\n{SEED_ACTIONS}")));
    command(
        &host,
        "lease-grant",
        json!({"thread": "t1", "actions": ["echo"], "max_uses": 2}),
    );
    let echo = |id: &str, n: u32| {
        let mut request = on_thread(
            "echo",
            json!({"n": n}),
            "t1",
            "foreground",
            Mode::Autonomous,
        );
        request.call_id = Some(id.into());
        request
    };
    let first = host.evaluate(&echo("toolu_a", 1)).unwrap();
    assert_eq!(first.verdict, Verdict::Allow);
    let again = host.evaluate(&echo("toolu_a", 1)).unwrap();
    assert_eq!(
        (again.verdict, &again.call_id),
        (Verdict::Allow, &first.call_id)
    );
    // Eight connections at once with one call: still one use.
    let copies: Vec<_> = (0..8)
        .map(|_| {
            let host = host.clone();
            std::thread::spawn(move || host.evaluate(&echo("toolu_b", 2)).unwrap().verdict)
        })
        .collect();
    for copy in copies {
        assert_eq!(copy.join().unwrap(), Verdict::Allow);
    }
    // Two uses taken, by two calls: a third call, or an old id with new
    // arguments, finds the lease used up.
    assert_eq!(
        host.evaluate(&echo("toolu_c", 3)).unwrap().verdict,
        Verdict::Deny
    );
    assert_eq!(
        host.evaluate(&echo("toolu_a", 4)).unwrap().verdict,
        Verdict::Deny
    );
}

#[test]
fn child_leases_are_the_intersection_with_the_parent() {
    let host = gate_host("auto_plan = false");
    command(
        &host,
        "lease-grant",
        json!({"thread": "parent", "actions": ["read", "write", "delete"]}),
    );
    let children = command(
        &host,
        "lease-derive",
        json!({"parent": "parent", "child": "child", "actions": ["write", "delete", "admin"]}),
    );
    assert_eq!(children.as_array().unwrap().len(), 1);
    assert_eq!(
        children[0]["actions"],
        json!({"specific": ["delete", "write"]})
    );
    assert_eq!(children[0]["parent"], "L1");
}

#[test]
fn a_wildcard_parent_gives_exactly_the_requested_subset() {
    let host = gate_host("auto_plan = false");
    command(
        &host,
        "lease-grant",
        json!({"thread": "parent", "actions": "*"}),
    );
    let children = command(
        &host,
        "lease-derive",
        json!({"parent": "parent", "child": "child", "actions": ["read", "write"]}),
    );
    assert_eq!(
        children[0]["actions"],
        json!({"specific": ["read", "write"]})
    );
}

#[test]
fn a_revoked_parent_yields_no_child_leases() {
    let host = gate_host("auto_plan = false");
    let lease = command(
        &host,
        "lease-grant",
        json!({"thread": "parent", "actions": ["read"]}),
    );
    command(
        &host,
        "lease-revoke",
        json!({"thread": "parent", "lease": lease["id"], "reason": "simulating expiry"}),
    );
    let children = command(
        &host,
        "lease-derive",
        json!({"parent": "parent", "child": "child"}),
    );
    assert_eq!(children, json!([]));
}

#[test]
fn an_approval_pause_waits_then_resumes_exactly_once() {
    let host = gate_host(SEED_ACTIONS);
    let request = foreground("http", json!({"url": "https://example.com"}));
    let first = host.evaluate(&request).unwrap();
    assert_eq!(first.verdict, Verdict::Pause);
    let pause = first.pause.clone().unwrap();
    assert!(matches!(pause.kind, PauseKind::Approval { .. }));
    assert_eq!(host.gates(None).unwrap().len(), 1, "the thread is waiting");

    assert!(
        resolve(
            &host,
            &first,
            "slack",
            GateResolution::Approve { always: false }
        )
        .is_err()
    );
    resolve(
        &host,
        &first,
        "telegram",
        GateResolution::Approve { always: false },
    )
    .unwrap();
    let second = host.evaluate(&request).unwrap();
    assert_eq!(second.verdict, Verdict::Allow, "{second:?}");
    assert!(second.pause.is_none() && host.gates(None).unwrap().is_empty());
}

#[test]
fn an_authentication_pause_carries_the_credential_and_resumes_without_a_second_pause() {
    let host = gate_host(SEED_ACTIONS);
    let request = foreground("api_get", json!({"url": "https://example.com/private"}));
    let first = host.evaluate(&request).unwrap();
    let PauseKind::Authentication {
        credential,
        instructions,
        ..
    } = &first.pause.as_ref().unwrap().kind
    else {
        panic!("expected an authentication pause: {first:?}");
    };
    assert_eq!(credential, "test_api_key");
    assert_eq!(instructions, "Provide your API key");
    resolve(
        &host,
        &first,
        "telegram",
        GateResolution::Authenticated {
            credential: "test_api_key".into(),
        },
    )
    .unwrap();
    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
    // The credential is on file for this user now.
    let other = foreground("api_get", json!({"url": "https://example.com/other"}));
    assert_eq!(host.evaluate(&other).unwrap().verdict, Verdict::Allow);
}

#[test]
fn an_install_chains_approval_then_authentication_then_runs() {
    let host = gate_host(SEED_ACTIONS);
    let request = foreground("tool_install", json!({"name": "notion"}));
    let first = host.evaluate(&request).unwrap();
    assert!(matches!(
        first.pause.as_ref().unwrap().kind,
        PauseKind::Approval {
            allow_always: false,
            ..
        }
    ));
    resolve(
        &host,
        &first,
        "telegram",
        GateResolution::Approve { always: false },
    )
    .unwrap();

    let second = host.evaluate(&request).unwrap();
    let PauseKind::Authentication {
        credential, url, ..
    } = &second.pause.as_ref().unwrap().kind
    else {
        panic!("expected authentication next: {second:?}");
    };
    assert_eq!(credential, "notion");
    assert_eq!(
        url.as_deref(),
        Some("https://www.notion.so/my-integrations")
    );
    resolve(
        &host,
        &second,
        "web",
        GateResolution::Authenticated {
            credential: "notion".into(),
        },
    )
    .unwrap();

    let third = host.evaluate(&request).unwrap();
    assert_eq!(
        third.verdict,
        Verdict::Allow,
        "three attempts, one pause each: {third:?}"
    );
}

#[test]
fn allow_always_remembers_the_action_for_that_user_and_thread() {
    let host = gate_host(SEED_ACTIONS);
    let first = host
        .evaluate(&foreground("approval_test", json!({"value": "hello"})))
        .unwrap();
    assert!(matches!(
        first.pause.as_ref().unwrap().kind,
        PauseKind::Approval {
            allow_always: true,
            ..
        }
    ));
    resolve(
        &host,
        &first,
        "telegram",
        GateResolution::Approve { always: true },
    )
    .unwrap();
    assert_eq!(
        host.evaluate(&foreground("approval_test", json!({"value": "hello"})))
            .unwrap()
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        host.evaluate(&foreground("approval_test", json!({"value": "other"})))
            .unwrap()
            .verdict,
        Verdict::Allow,
        "remembered for this action on this thread"
    );
    let elsewhere = on_thread(
        "approval_test",
        json!({"value": "x"}),
        "t2",
        "foreground",
        Mode::Interactive,
    );
    assert_eq!(
        host.evaluate(&elsewhere).unwrap().verdict,
        Verdict::Pause,
        "but only on that thread"
    );
}

#[test]
fn auto_approve_mode_skips_standard_approvals_but_not_always_ones() {
    let host = gate_host(SEED_ACTIONS);
    let auto = |tool: &str| {
        on_thread(
            tool,
            json!({}),
            "t1",
            "foreground",
            Mode::InteractiveAutoApprove,
        )
    };
    assert_eq!(
        host.evaluate(&auto("echo")).unwrap().verdict,
        Verdict::Allow
    );
    assert_eq!(
        host.evaluate(&auto("approval_test")).unwrap().verdict,
        Verdict::Allow
    );
    assert_eq!(
        host.evaluate(&auto("http")).unwrap().verdict,
        Verdict::Pause,
        "always means always"
    );
}

#[test]
fn autonomous_mode_denies_what_needs_a_person() {
    let host = gate_host(SEED_ACTIONS);
    let auto = |tool: &str| on_thread(tool, json!({}), "t1", "foreground", Mode::Autonomous);
    assert_eq!(
        host.evaluate(&auto("echo")).unwrap().verdict,
        Verdict::Allow
    );
    for tool in ["http", "approval_test", "api_get"] {
        let decision = host.evaluate(&auto(tool)).unwrap();
        assert_eq!(decision.verdict, Verdict::Deny, "{tool}");
        assert!(decision.pause.is_none());
    }
}

#[test]
fn in_the_pipeline_the_first_deny_wins() {
    let host = host(&format!(
        "{}[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n[plugins.lease-gate.config]\nauto_plan = false\n",
        scripted("allower", 10, "verdict = \"allow\"")
    ));
    let decision = host.evaluate(&foreground("Read", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decided_by.as_deref(), Some(POLICY));
}

#[test]
fn lease_gate_is_fail_closed_by_default() {
    let host = gate_host("");
    let plugin = host.plugins().get(POLICY).cloned().unwrap();
    assert_eq!(plugin.fail_mode, toolgate::config::FailMode::Closed);
    assert_eq!(
        plugin.description.default_fail_mode,
        toolgate::config::FailMode::Closed
    );

    // A sandbox it cannot even start in is refused at load, naming the cause.
    let err = common::try_host(
        "[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 1\n[plugins.lease-gate.limits]\nmemory_mib = 1\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("lease-gate") && err.contains("memory limit"),
        "{err}"
    );
}

#[test]
fn a_use_is_not_spent_on_a_call_a_later_policy_denies() {
    let host = host(&format!(
        "[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n[plugins.lease-gate.config]\nauto_plan = false\n{SEED_ACTIONS}\n{}",
        common::scripted(
            "later",
            30,
            "reason = \"not this one\"\ndeny_if_arguments_contain = \"deny-me\""
        )
    ));
    let echo = |text: &str| {
        on_thread(
            "echo",
            json!({"text": text}),
            "t1",
            "foreground",
            Mode::Interactive,
        )
    };
    command(
        &host,
        "lease-grant",
        json!({"thread": "t1", "actions": ["echo"], "max_uses": 1}),
    );

    let denied = host.evaluate(&echo("deny-me")).unwrap();
    assert_eq!(denied.verdict, Verdict::Deny);
    assert_eq!(denied.decided_by.as_deref(), Some("later"));
    // The lease allowed that call, but it never ran: its one use is left.
    assert_eq!(
        host.evaluate(&echo("first real use")).unwrap().verdict,
        Verdict::Allow
    );
    let spent = host.evaluate(&echo("second")).unwrap();
    assert_eq!(spent.verdict, Verdict::Deny, "now it is used up");
    assert_eq!(spent.decided_by.as_deref(), Some("lease-gate"));
}
