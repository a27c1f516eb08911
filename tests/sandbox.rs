//! The hostile-policy suite: a policy built from source misbehaves on
//! purpose. For each attack the host stays up, the failure is classified by
//! type, the fail mode is applied, the log names the policy and the cause,
//! the other policy's result is unaffected, and the next call to the hostile
//! policy works (each evaluation gets a fresh store).

use crate::common;

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
    // ...and with room to build it, it is refused before it is copied out
    // (the host-call fuel: one copy is at most 4 MiB)...
    attack_fails_open(
        "huge-reason",
        "memory_mib = 512\ndeadline_ms = 10000",
        "too much data is being copied",
    );
    // ...while a note under that but over the output limit is refused by
    // the output cap.
    attack_fails_open("oversized-once", "", "over its 16384-byte limit");
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

// What a policy hands back is bounded on every path, not only in a
// successful decision: error strings, risks, budget texts, list answers.

/// The most any one text a policy returns may take in toolgate's answer.
const TEXT_CAP: usize = 2048;

/// The failure recorded for the hostile policy, checked to be bounded, and
/// the whole decision as the daemon would answer it too.
fn bounded_failure(decision: &Decision, index: usize) -> String {
    let failure = decision.policies[index]
        .failure
        .clone()
        .unwrap_or_else(|| panic!("no failure: {:?}", decision.policies[index]));
    assert!(
        failure.len() <= TEXT_CAP,
        "{} bytes of failure",
        failure.len()
    );
    let answer = serde_json::to_string(decision).unwrap();
    assert!(answer.len() < 16 * 1024, "{} bytes of answer", answer.len());
    failure
}

/// The host's decision log holds `entries` rows, none of them large.
fn log_stays_small(host: &common::TestHost, entries: usize) {
    let rows = || host.decision_log(&Default::default(), 100).unwrap();
    common::eventually("the decisions are logged", || rows().len() >= entries);
    let largest = rows()
        .iter()
        .map(|(_, row)| serde_json::to_string(row).unwrap().len())
        .max()
        .unwrap_or(0);
    assert!(largest < 32 * 1024, "a {largest}-byte log row");
    let file = std::fs::metadata(host.dir.path().join("toolgate.redb")).unwrap();
    eprintln!(
        "largest log row {largest} bytes, store {} bytes",
        file.len()
    );
    assert!(file.len() < 16 << 20, "a {}-byte store", file.len());
}

#[test]
fn a_huge_error_from_parse_is_refused_and_the_decision_stays_small() {
    let host = hostile(
        "huge-parse-error",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000",
    );
    for _ in 0..3 {
        let decision = host.evaluate(&call("attack", json!({}))).unwrap();
        let failure = bounded_failure(&decision, 0);
        assert!(failure.contains("too much data"), "{failure}");
        assert_eq!(
            decision.policies[1].verdict,
            PolicyVerdict::Allow,
            "the bystander decides"
        );
    }
    log_stays_small(&host, 3);
}

#[test]
fn a_long_error_is_cut_to_its_cap_with_a_marker() {
    // Past the cap on an error, under what one copy may be.
    let host = hostile(
        "ask-unparseable-long",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000",
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let failure = bounded_failure(&decision, 0);
    assert!(
        failure.contains("could not parse the model's reply: eeee")
            && failure.contains("bytes cut"),
        "{failure}"
    );
}

#[test]
fn a_huge_error_from_open_on_the_decision_path_is_refused() {
    // Every evaluation opens a fresh instance, so `open` runs on the path.
    let host = hostile(
        "huge-open-error",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000\nreuse_instances = false\nspare_instances = 0",
    );
    let armed = host.evaluate(&call("arm", json!({}))).unwrap();
    assert_eq!(armed.policies[0].notes, ["armed: Ok(())"]);
    for _ in 0..3 {
        let decision = host.evaluate(&call("attack", json!({}))).unwrap();
        bounded_failure(&decision, 0);
        assert_eq!(decision.policies[1].verdict, PolicyVerdict::Allow);
    }
    log_stays_small(&host, 4);
}

#[test]
fn a_shadow_plugins_huge_error_is_refused_too() {
    let host = host(&format!(
        "[plugins.hostile]\npath = {:?}\npriority = 1\nmode = \"shadow\"\n[plugins.hostile.config]\nattack = \"huge-parse-error\"\n[plugins.hostile.limits]\nmemory_mib = 512\ndeadline_ms = 10000\n{}",
        guest("hostile-policy").display().to_string(),
        scripted("bystander", 2, "verdict = \"allow\"")
    ));
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    let shadow = &decision.shadows[0];
    let failure = shadow.failure.as_deref().expect("the shadow failed");
    assert!(failure.len() <= TEXT_CAP, "{} bytes", failure.len());
    assert!(serde_json::to_string(&decision).unwrap().len() < 16 * 1024);
    log_stays_small(&host, 1);
}

#[test]
fn a_risk_reaches_the_answer_and_the_other_policies_bounded() {
    // Past what one copy may be: refused, the policy fails, the call goes on.
    let host = hostile("huge-risk", "open", "memory_mib = 512\ndeadline_ms = 10000");
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    bounded_failure(&decision, 0);
    assert_eq!(decision.policies[1].verdict, PolicyVerdict::Allow);

    // Under it: kept, cut to the caps on a category and on signals.
    let host = hostile("big-risk", "open", "memory_mib = 512\ndeadline_ms = 10000");
    for _ in 0..20 {
        let decision = host.evaluate(&call("attack", json!({}))).unwrap();
        let risk = &decision.risk;
        assert_eq!(risk.by.as_deref(), Some("hostile"));
        assert!(
            risk.category.len() <= 64,
            "{} bytes of category",
            risk.category.len()
        );
        assert!(risk.signals.len() <= 32, "{} signals", risk.signals.len());
        assert!(risk.signals.iter().all(|s| s.len() <= 256));
        assert!(
            serde_json::to_string(&decision).unwrap().len() < 16 * 1024,
            "the answer stays small"
        );
        // The neighbour decided with the bounded risk, within its limits.
        assert_eq!(decision.policies[1].verdict, PolicyVerdict::Allow);
        assert_eq!(decision.policies[1].failure, None);
    }
}

#[test]
fn a_budget_text_is_bounded() {
    let host = hostile(
        "huge-budget",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000",
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    bounded_failure(&decision, 0);

    let host = hostile(
        "big-budget",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000",
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let answer = serde_json::to_string(&decision).unwrap();
    assert!(answer.len() < 16 * 1024, "{} bytes of answer", answer.len());
    assert!(
        answer.contains("bytes cut"),
        "cut with a marker: {answer:.2000}"
    );
}

#[test]
fn get_many_answers_at_most_its_cap() {
    let host = hostile("get-many-cap", "open", "");
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(
        decision.policies[0].notes,
        ["get-many-cap: Ok(1000) / Err(StateError::TooLarge)"]
    );
    // A million and a half keys are refused before they are copied.
    let host = hostile(
        "get-many-flood",
        "open",
        "memory_mib = 512\ndeadline_ms = 10000",
    );
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    let failure = bounded_failure(&decision, 0);
    assert!(failure.contains("too much data"), "{failure}");
}

#[test]
fn describe_reads_no_config() {
    let host = hostile("anything", "open", "");
    let status = host
        .plugin_statuses()
        .into_iter()
        .find(|p| p.name == "hostile")
        .unwrap();
    assert!(
        status
            .policy
            .description
            .ends_with("describe saw 0 config entries"),
        "{}",
        status.policy.description
    );
}

#[test]
fn ids_that_could_meet_in_a_key_are_refused() {
    // `alice` in session `x\0y` and `alice\0x` in session `y` once shared a
    // warm instance (its key joined the two with a NUL).
    let host = hostile("remember-user", "open", "");
    for (user, session) in [("alice", "x\0y"), ("alice\0x", "y"), ("bob", "s\u{7}")] {
        let mut request = call("attack", json!({}));
        request.user_id = user.into();
        request.session_id = session.into();
        let err = host.evaluate(&request).unwrap_err();
        assert!(
            err.to_string().contains("control character"),
            "{user:?}/{session:?}: {err}"
        );
    }
    let mut long = call("attack", json!({}));
    long.session_id = "s".repeat(10_000);
    assert!(
        host.evaluate(&long)
            .unwrap_err()
            .to_string()
            .contains("at most")
    );
}

/// With every instance slot of the process taken (here the one slot, kept
/// by session `a`'s warm instance), a policy that cannot start fails as
/// such, naming the config key to raise, and its fail mode applies; with
/// the slots sized from the policies (the default) the same calls run.
#[test]
fn running_out_of_instance_slots_names_the_key_to_raise() {
    let policy = format!(
        "{}[plugins.only.limits]\nspare_instances = 0\n",
        scripted("only", 1, "verdict = \"allow\"")
            .replace("priority = 1\n", "priority = 1\nfail_mode = \"closed\"\n")
    );
    let in_session = |host: &common::TestHost, session: &str| {
        let mut request = call("Read", json!({"file_path": "src/lib.rs"}));
        request.session_id = session.into();
        host.evaluate(&request).unwrap()
    };
    let starved = host(&format!("instance_slots = 1\n{policy}"));
    // The instance the load opened may still be on its way out.
    common::eventually("session a to get the slot", || {
        in_session(&starved, "a").verdict == Verdict::Allow
    });
    let refused = in_session(&starved, "b");
    assert_eq!(refused.verdict, Verdict::Deny, "{refused:?}");
    let reason = refused.reason.unwrap_or_default();
    assert!(
        reason.contains("`only`")
            && reason.contains("no free instance slot")
            && reason.contains("raise `instance_slots`"),
        "{reason}"
    );

    let sized = host(&policy);
    for session in ["a", "b", "c"] {
        assert_eq!(in_session(&sized, session).verdict, Verdict::Allow);
    }
}
