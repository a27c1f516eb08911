//! The hostile-policy suite: a policy built from source misbehaves on
//! purpose. For each attack the host stays up, the failure is classified by
//! type, the fail mode is applied, the log names the policy and the cause,
//! the other policy's result is unaffected, and the next call to the hostile
//! policy works (each evaluation gets a fresh store).

mod common;

use common::logs::Captured;
use common::{call, guest, host, scripted};
use serde_json::json;
use toolgate::decision::PolicyVerdict;
use toolgate::{Decision, Error, PluginProblem, Verdict};

/// A host with the hostile policy (priority 1) running `attack`, and a
/// well-behaved bystander (priority 2).
fn hostile(attack: &str, fail_mode: &str, limits: &str) -> common::TestHost {
    let deadline = if limits.contains("deadline_ms") {
        ""
    } else {
        "deadline_ms = 200"
    };
    host(&format!(
        "[plugins.hostile]\npath = {:?}\npriority = 1\nfail_mode = \"{fail_mode}\"\n[plugins.hostile.config]\nattack = \"{attack}\"\n[plugins.hostile.limits]\n{deadline}\n{limits}\n{}",
        guest("hostile-policy").display().to_string(),
        scripted(
            "bystander",
            2,
            "verdict = \"allow\"\nnotes = [\"bystander ok\"]"
        )
    ))
}

/// Run the attack; check everything the suite promises; return the decision.
fn attack_fails_open(attack: &str, limits: &str, cause: &str) -> Decision {
    let host = hostile(attack, "open", limits);
    let (logs, _guard) = Captured::start();
    let started = std::time::Instant::now();
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    eprintln!("{attack}: decided in {:?}", started.elapsed());

    let result = &decision.policies[0];
    assert_eq!(result.name, "hostile");
    let failure = result
        .failure
        .as_deref()
        .unwrap_or_else(|| panic!("{attack}: no failure in {result:?}"));
    assert!(
        failure.contains(cause),
        "{attack}: failure {failure:?} lacks {cause:?}"
    );
    assert_eq!(result.verdict, PolicyVerdict::Skip, "fail-open skips");
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(
        decision
            .notes
            .iter()
            .any(|n| n.policy == "hostile" && n.text.contains("fail-open"))
    );
    assert!(
        logs.has(&["WARN", "hostile", cause, "fail-open"]),
        "{attack}: the log must name the policy and the cause: {:?}",
        logs.lines()
    );
    let bystander = &decision.policies[1];
    assert_eq!(
        (bystander.verdict, bystander.notes.as_slice()),
        (PolicyVerdict::Allow, &["bystander ok".to_string()][..])
    );

    let next = host.evaluate(&call("Read", json!({}))).unwrap();
    assert_eq!(
        next.policies[0].verdict,
        PolicyVerdict::Allow,
        "{attack}: the next call works"
    );
    assert_eq!(next.policies[0].notes, ["behaving"]);
    decision
}

#[test]
fn an_infinite_loop_hits_the_deadline() {
    attack_fails_open("loop", "", "deadline");
}

#[test]
fn an_infinite_loop_after_the_host_sat_idle_still_hits_the_deadline() {
    // Deadlines are counted in epoch ticks, and the ticker sleeps when no
    // guest runs (~100 ms of quiet): the next call must wake it, or a
    // spinning policy would hold the decision for ever.
    let host = std::sync::Arc::new(hostile("loop", "open", ""));
    host.evaluate(&call("Read", json!({}))).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (done, decided) = std::sync::mpsc::channel();
    let spinning = std::sync::Arc::clone(&host);
    std::thread::spawn(move || {
        let _ = done.send(spinning.evaluate(&call("attack", json!({}))).unwrap());
    });
    let decision = decided
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the spinning policy was never interrupted: the epoch did not advance");
    let failure = decision.policies[0].failure.as_deref().unwrap_or_default();
    assert!(failure.contains("deadline"), "{failure:?}");
}

#[test]
fn a_memory_bomb_hits_the_memory_cap() {
    attack_fails_open("memory-bomb", "memory_mib = 32", "memory limit");
}

#[test]
fn unbounded_recursion_overflows_the_stack() {
    attack_fails_open("recursion", "", "stack");
    // With its frames in linear memory it runs off the shadow stack instead.
    attack_fails_open("deep-frames", "", "out of bounds memory access");
}

#[test]
fn a_panic_is_a_trap() {
    attack_fails_open("panic", "", "trapped");
}

#[test]
fn a_100_mb_reason_is_refused() {
    // Within the default 64 MiB it cannot even be built...
    attack_fails_open("huge-reason", "", "memory limit");
    // ...and with room to build it, the output cap refuses it.
    attack_fails_open(
        "huge-reason",
        "memory_mib = 512\ndeadline_ms = 10000",
        "over its 16384-byte limit",
    );
}

#[test]
fn a_malformed_answer_is_refused() {
    attack_fails_open("malformed", "", "failed");
}

#[test]
fn fail_closed_denies_naming_the_policy_and_the_cause() {
    let host = hostile("loop", "closed", "");
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert_eq!(decision.decided_by.as_deref(), Some("hostile"));
    let reason = decision.reason.unwrap();
    assert!(
        reason.contains("`hostile`")
            && reason.contains("deadline")
            && reason.contains("fail-closed"),
        "{reason}"
    );
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );
}

/// An attack on ambient authority: the policy must get an error, never data.
fn gets_an_error(attack: &str) {
    let host = hostile(attack, "open", "");
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let result = &decision.policies[0];
    assert_eq!(result.verdict, PolicyVerdict::Allow, "{attack}: {result:?}");
    assert!(
        result.notes.iter().any(|n| n.contains(": error")),
        "{attack}: {:?}",
        result.notes
    );
    eprintln!("{attack}: {:?}", result.notes);
}

#[test]
fn no_files() {
    gets_an_error("read-file");
    gets_an_error("list-dir");
    gets_an_error("list-cwd");
}

#[test]
fn no_environment_or_arguments() {
    gets_an_error("env");
}

#[test]
fn no_sockets_or_name_lookup() {
    gets_an_error("socket");
    gets_an_error("dns");
}

#[test]
fn no_stdin() {
    gets_an_error("stdin");
}

#[test]
fn no_other_policys_namespace() {
    let host = host(&format!(
        "{}[plugins.hostile]\npath = {:?}\npriority = 2\n[plugins.hostile.config]\nattack = \"other-namespace\"\n",
        scripted("scripted", 1, "verdict = \"allow\""),
        guest("hostile-policy").display().to_string(),
    ));
    // The scripted policy stores a key `decided` in its own namespace first.
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(host.command("scripted", "decided", "{}").unwrap(), "1");
    let result = &decision.policies[1];
    assert_eq!(result.verdict, PolicyVerdict::Allow, "{result:?}");
}

#[test]
fn a_state_write_past_the_quota_is_refused() {
    let host = hostile("state-quota", "open", "state_max_bytes = 1000");
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let note = &decision.policies[0].notes[0];
    assert!(
        note.contains("Err(") && note.contains("QuotaExceeded"),
        "{note}"
    );
}

#[test]
fn an_output_flood_is_bounded_and_harmless() {
    let host = hostile("flood-output", "open", "deadline_ms = 10000");
    let (logs, _guard) = Captured::start();
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(
        decision.policies[0].verdict,
        PolicyVerdict::Allow,
        "{:?}",
        decision.policies[0]
    );
    assert_eq!(decision.policies[0].notes, ["flooded"]);
    assert!(
        logs.has(&["WARN", "hostile", "dropped", "over its log limit"]),
        "{:?}",
        logs.lines().len()
    );
    let forwarded: usize = logs
        .lines()
        .iter()
        .filter(|l| l.contains("policy output"))
        .map(String::len)
        .sum();
    assert!(
        forwarded < 64 * 1024,
        "only the bounded part reaches the log: {forwarded} bytes"
    );
}

#[test]
fn an_import_the_host_does_not_provide_is_refused_at_load() {
    let err = common::try_host(&format!(
        "[plugins.sneaky]\npath = {:?}\npriority = 1\n",
        guest("bad-import-policy").display().to_string()
    ))
    .unwrap_err();
    assert!(
        matches!(&err, Error::Plugin { problem: PluginProblem::UnknownImport(name), .. } if name == "evil:net/raw-socket@1.0.0"),
        "{err:?}"
    );
    assert!(err.to_string().contains("sneaky"), "{err}");
}
