//! Policies in Python and TypeScript, built from source with the real
//! toolchains (componentize-py; jco with its QuickJS backend), loaded in the
//! host, and held to one behaviour table (tests/polyglot/README.md): allow,
//! deny with a reason, a pause a person approves, a note, state across
//! calls and sessions, an event query, a model question and its parsed
//! reply, a risk report, a rewrite, an output check and a tool filter, and
//! the failures the host classifies by type (a trap, a deadline, the memory
//! limit) under each fail mode.

use crate::common;

use std::path::{Path, PathBuf};

use common::model_server::{ModelServer, Reply};
use common::polyglot::{self, Language};
use common::{TestHost, approve, call, host};
use serde_json::json;
use toolgate::decision::{Outcome, PolicyVerdict};
use toolgate::{Decision, ToolRequest, Verdict};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The behaviour-table policy in `language`, built once per run.
fn behaviour(language: Language) -> Option<PathBuf> {
    let source = Path::new(ROOT).join("tests/polyglot").join(language.flag());
    polyglot::build(
        language,
        &format!("behaviour-{}", language.flag()),
        &source,
        &["classify", "parse", "check-output", "filter-tools"],
    )
}

/// A host with the behaviour policy as `behaviour` (its `fail_mode`, and
/// `limits` and `extra` tables as given).
fn host_with(wasm: &Path, fail_mode: &str, limits: &str, extra: &str) -> TestHost {
    host(&format!(
        "{extra}\n[plugins.behaviour]\npath = {:?}\npriority = 1\nfail_mode = \"{fail_mode}\"\n\
         [plugins.behaviour.config]\ngreeting = \"hello\"\n[plugins.behaviour.limits]\n{limits}\n",
        wasm.display().to_string()
    ))
}

fn in_session(tool: &str, arguments: serde_json::Value, session: &str) -> ToolRequest {
    ToolRequest {
        session_id: session.into(),
        ..call(tool, arguments)
    }
}

fn notes(decision: &Decision) -> Vec<&str> {
    decision.notes.iter().map(|n| n.text.as_str()).collect()
}

/// The policy's own failure, after checking its verdict came from `fail_mode`.
fn failure(decision: &Decision, verdict: PolicyVerdict) -> String {
    let result = &decision.policies[0];
    assert_eq!(result.verdict, verdict, "{decision:?}");
    result
        .failure
        .clone()
        .unwrap_or_else(|| panic!("no failure recorded: {decision:?}"))
}

fn allows_denies_abstains_and_notes(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );

    let denied = host
        .evaluate(&call("Bash", json!({"command": "rm -rf build"})))
        .unwrap();
    assert_eq!(denied.verdict, Verdict::Deny);
    let reason = denied.reason.unwrap_or_default();
    assert!(
        reason.contains("rm -rf") && reason.contains(language.flag()),
        "{reason}"
    );
    assert_eq!(denied.decided_by.as_deref(), Some("behaviour"));

    let abstained = host
        .evaluate(&call("Bash", json!({"command": "ls"})))
        .unwrap();
    assert_eq!(abstained.policies[0].verdict, PolicyVerdict::Skip);

    let noted = host.evaluate(&call("Note", json!({}))).unwrap();
    assert_eq!(noted.verdict, Verdict::Allow);
    // The greeting comes from the policy's config table.
    assert_eq!(notes(&noted), [format!("hello by {}", language.flag())]);
}

fn a_pause_is_approved_by_a_person(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    let deploy = call("Deploy", json!({"target": "production"}));
    let paused = host.evaluate(&deploy).unwrap();
    assert_eq!(paused.verdict, Verdict::Pause, "{paused:?}");
    assert!(
        paused
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("deploy to production")),
        "{paused:?}"
    );
    approve(&host, &paused);
    let resumed = host.evaluate(&deploy).unwrap();
    assert_eq!(resumed.verdict, Verdict::Allow, "{resumed:?}");
}

fn state_lasts_across_calls_and_sessions(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    let count = |session: &str| {
        let decision = host
            .evaluate(&in_session("Count", json!({}), session))
            .unwrap();
        notes(&decision).join(" ")
    };
    assert_eq!(count("s1"), "user 1 session 1");
    assert_eq!(count("s1"), "user 2 session 2");
    // Another session of the same user: a fresh instance, the same state.
    assert_eq!(count("s2"), "user 3 session 1");

    // And after the host restarts over the same store.
    let TestHost { host, dir: kept } = host;
    drop(host);
    let store = kept.path().join("toolgate.redb");
    let (config, _dir) = common::config(&format!(
        "[plugins.behaviour]\npath = {:?}\npriority = 1\n",
        wasm.display().to_string()
    ));
    let reopened = toolgate::Service::open(config, Some(store.into())).unwrap();
    let decision = reopened
        .evaluate(&in_session("Count", json!({}), "s3"))
        .unwrap();
    assert_eq!(notes(&decision), ["user 4", "session 1"]);
}

fn events_are_appended_and_queried(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    for text in ["first", "second"] {
        host.evaluate(&in_session("Remember", json!({"text": text}), "s1"))
            .unwrap();
    }
    host.evaluate(&in_session("Remember", json!({"text": "elsewhere"}), "s2"))
        .unwrap();
    // Appends are queued for the store's writer (they never block a
    // decision): the query sees them once written.
    common::eventually_showing("both remembered texts in the history", || {
        let history = host
            .evaluate(&in_session("History", json!({}), "s1"))
            .unwrap();
        let shown = notes(&history).join(" ");
        (shown == "history: first, second", shown)
    });
}

/// Past the host's copy limit (4 MiB) the host would trap the policy
/// rather than answer `too-large`; the helper layers answer first.
fn past_the_copy_limit_the_helpers_answer_too_large(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "memory_mib = 256", "");
    let decision = host
        .evaluate(&in_session("Stash", json!({}), "s1"))
        .unwrap();
    assert_eq!(notes(&decision), ["stash: too-large"]);
    host.persist();
    let events = host.recent_events(10).unwrap();
    let (_, event) = events.last().expect("the event was kept, cut");
    assert_eq!(event.summary.as_ref().map(String::len), Some(1024));
}

fn a_model_question_is_answered_and_parsed(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let model = ModelServer::start(Reply::Content("DENY it deletes the backups".into()));
    let probe = format!("[probe]\nendpoint = {:?}\n", model.url);
    let host = host_with(&wasm, "closed", "", &probe);
    let decision = host
        .evaluate(&call(
            "Ask",
            json!({"question": "may I prune the backups?"}),
        ))
        .unwrap();
    assert_eq!(decision.verdict, Verdict::Deny, "{decision:?}");
    assert_eq!(decision.reason.as_deref(), Some("it deletes the backups"));
    assert_eq!(model.user_prompts(), ["may I prune the backups?"]);

    let model = ModelServer::start(Reply::Content("ALLOW".into()));
    let probe = format!("[probe]\nendpoint = {:?}\n", model.url);
    let host = host_with(&wasm, "closed", "", &probe);
    let decision = host.evaluate(&call("Ask", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    assert_eq!(
        notes(&decision),
        [format!("the model allowed it ({})", language.flag())]
    );

    // No model configured: the reply says so, and the policy decides.
    let host = host_with(&wasm, "closed", "", "");
    let decision = host.evaluate(&call("Ask", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert!(
        decision
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not-configured")),
        "{decision:?}"
    );
}

fn a_risk_report_is_composed(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    let decision = host.evaluate(&call("Risky", json!({}))).unwrap();
    assert_eq!(decision.risk.category, "behaviour-test", "{decision:?}");
    assert_eq!(
        serde_json::to_value(&decision.risk).unwrap()["level"],
        "high"
    );
}

fn failures_follow_the_fail_mode(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    // A trap (an unhandled exception) fails closed: a deny naming the policy.
    let closed = host_with(&wasm, "closed", "", "");
    let trapped = closed.evaluate(&call("Trap", json!({}))).unwrap();
    assert_eq!(trapped.verdict, Verdict::Deny);
    assert!(
        failure(&trapped, PolicyVerdict::Deny).contains("trapped"),
        "{trapped:?}"
    );
    assert!(trapped.reason.unwrap_or_default().contains("behaviour"));
    // ... and the next call gets a working instance.
    assert_eq!(
        closed.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );

    // Failing open, the same trap is an abstention with a note.
    let open = host_with(&wasm, "open", "", "");
    let trapped = open.evaluate(&call("Trap", json!({}))).unwrap();
    assert_eq!(trapped.verdict, Verdict::Allow);
    assert!(failure(&trapped, PolicyVerdict::Skip).contains("trapped"));
    assert!(notes(&trapped).iter().any(|n| n.contains("fail-open")));
}

fn a_deadline_is_a_failure(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "deadline_ms = 300", "");
    let spun = host.evaluate(&call("Spin", json!({}))).unwrap();
    assert_eq!(spun.verdict, Verdict::Deny);
    let failure = failure(&spun, PolicyVerdict::Deny);
    assert!(failure.contains("deadline"), "{failure}");
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );
}

fn the_memory_limit_is_a_failure(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "open", "memory_mib = 96\ndeadline_ms = 10000", "");
    let hogged = host.evaluate(&call("Hog", json!({}))).unwrap();
    let failure = failure(&hogged, PolicyVerdict::Skip);
    assert!(failure.contains("memory limit"), "{failure}");
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );
}

fn rewrites_outputs_and_visibility(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let host = host_with(&wasm, "closed", "", "");
    // An allow that rewrites: the call runs with the arguments it gives.
    let rewritten = host
        .evaluate(&call("Write", json!({"path": "/etc/hosts", "text": "x"})))
        .unwrap();
    assert_eq!(rewritten.verdict, Verdict::Allow, "{rewritten:?}");
    assert_eq!(
        rewritten.arguments,
        Some(json!({"path": "/sandbox/etc/hosts", "text": "x"}))
    );
    let unchanged = host
        .evaluate(&call("Write", json!({"path": "/sandbox/a"})))
        .unwrap();
    assert_eq!(unchanged.arguments, None, "{unchanged:?}");

    // The output phase: a redaction's spans are UTF-8 byte offsets, so the
    // helper must count "é" as two bytes to cut the right word.
    let read = call("Read", json!({"file_path": "notes"}));
    let checked = host
        .check_output(&read, Outcome::Succeeded, "café: hunter2, thé: hunter2")
        .unwrap();
    assert_eq!(
        checked.text(""),
        "café: [redacted], thé: [redacted]",
        "{checked:?}"
    );
    let summary = host
        .check_output(&call("Summarise", json!({})), Outcome::Succeeded, "abcd")
        .unwrap();
    assert_eq!(
        summary.text(""),
        format!("4 characters, summarised by {}", language.flag())
    );
    let withheld = host
        .check_output(&read, Outcome::Succeeded, "WITHHOLD this")
        .unwrap();
    assert!(withheld.withheld, "{withheld:?}");
    assert!(
        withheld
            .text("")
            .contains(&format!("withheld by {}", language.flag())),
        "{withheld:?}"
    );
    let plain = host
        .check_output(&read, Outcome::Succeeded, "nothing secret")
        .unwrap();
    assert_eq!(plain.output, None, "{plain:?}");

    // The visibility phase: one answer per tool.
    let tools = common::mcp_tools(&["echo", "internal-debug", "add"]);
    assert_eq!(
        host.visible_tools(&call("tools/list", json!({})), &tools)
            .unwrap(),
        [true, false, true]
    );
}

fn a_config_error_names_the_key_and_its_line(language: Language) {
    let Some(wasm) = behaviour(language) else {
        return;
    };
    let body = format!(
        "[plugins.behaviour]\npath = {:?}\npriority = 1\n[plugins.behaviour.config]\ngreting = \"hi\"\n",
        wasm.display().to_string()
    );
    let err = common::try_host(&body).unwrap_err().to_string();
    let line = common::config_text(&body)
        .lines()
        .position(|l| l.starts_with("greting"))
        .unwrap()
        + 1;
    for part in [
        "plugin `behaviour`",
        &format!("line {line}"),
        "greting",
        "unknown key; this policy reads greeting",
    ] {
        assert!(err.contains(part), "{part:?} in: {err}");
    }
}

/// The behaviour table, once per language.
macro_rules! behaviour_table {
    ($module:ident, $language:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn allows_denies_abstains_and_notes() {
                super::allows_denies_abstains_and_notes($language);
            }
            #[test]
            fn a_pause_is_approved_by_a_person() {
                super::a_pause_is_approved_by_a_person($language);
            }
            #[test]
            fn state_lasts_across_calls_and_sessions() {
                super::state_lasts_across_calls_and_sessions($language);
            }
            #[test]
            fn events_are_appended_and_queried() {
                super::events_are_appended_and_queried($language);
            }
            #[test]
            fn past_the_copy_limit_the_helpers_answer_too_large() {
                super::past_the_copy_limit_the_helpers_answer_too_large($language);
            }
            #[test]
            fn a_model_question_is_answered_and_parsed() {
                super::a_model_question_is_answered_and_parsed($language);
            }
            #[test]
            fn a_risk_report_is_composed() {
                super::a_risk_report_is_composed($language);
            }
            #[test]
            fn failures_follow_the_fail_mode() {
                super::failures_follow_the_fail_mode($language);
            }
            #[test]
            fn a_deadline_is_a_failure() {
                super::a_deadline_is_a_failure($language);
            }
            #[test]
            fn the_memory_limit_is_a_failure() {
                super::the_memory_limit_is_a_failure($language);
            }
            #[test]
            fn rewrites_outputs_and_visibility() {
                super::rewrites_outputs_and_visibility($language);
            }
            #[test]
            fn a_config_error_names_the_key_and_its_line() {
                super::a_config_error_names_the_key_and_its_line($language);
            }
            #[test]
            fn the_context_budget_port_passes_the_rust_policys_fixtures() {
                let Some(wasm) = super::context_budget($language) else {
                    return;
                };
                super::passes_the_context_budget_fixtures(&wasm.display().to_string());
            }
            #[test]
            fn the_context_budget_port_reads_the_transcript() {
                let Some(wasm) = super::context_budget($language) else {
                    return;
                };
                super::reads_the_transcript(&wasm.display().to_string());
            }
        }
    };
}

behaviour_table!(python, Language::Python);
behaviour_table!(typescript, Language::TypeScript);

/// context-cost's warn/stop, ported to `language` (examples/policies/context-budget).
fn context_budget(language: Language) -> Option<PathBuf> {
    let source = Path::new(ROOT)
        .join("examples/policies/context-budget")
        .join(language.flag());
    polyglot::build(language, "context-budget", &source, &["account"])
}

/// Every case of the fixture file the Rust policy and its ports share passes.
fn passes_the_context_budget_fixtures(policy: &str) {
    let file = Path::new(ROOT).join("examples/policies/context-budget/fixtures.toml");
    let fixtures = toolgate::fixtures::parse(&file).unwrap();
    let outcomes = toolgate::fixtures::run(policy, &fixtures, Some(common::cache_dir())).unwrap();
    assert_eq!(outcomes.len(), fixtures.cases.len());
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| format!("{}: {:?}", o.name, o.differences))
        .collect();
    assert!(failed.is_empty(), "{policy}: {failed:#?}");
}

/// With no context size reported, the size is read from the transcript's tail.
fn reads_the_transcript(policy: &str) {
    let host = host(&format!(
        "[plugins.budget]\npath = {policy:?}\npriority = 1\n"
    ));
    let request = ToolRequest {
        is_subagent: true,
        transcript_path: Some(Path::new(ROOT).join("examples/transcripts/subagent-268k.jsonl")),
        ..call("Read", json!({}))
    };
    let decision = host.evaluate(&request).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    let note = notes(&decision).join(" ");
    assert!(note.contains("warn threshold"), "{decision:?}");
    assert!(decision.policies[0].transcript_bytes > 0, "{decision:?}");
}

#[test]
fn the_bundled_context_cost_passes_the_fixtures_its_ports_pass() {
    passes_the_context_budget_fixtures("bundled:context-cost");
    reads_the_transcript("bundled:context-cost");
}

/// Run `command` in `dir`; its stdout, after checking it succeeded.
fn run_in(dir: &Path, command: &mut std::process::Command) -> String {
    let out = command.current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `PATH` with the `toolgate` under test first, as an author who installed it has.
fn path_with_toolgate() -> std::ffi::OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_toolgate")).parent().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)))
        .unwrap()
}

/// A new author's first steps, in a directory outside the repository: the
/// project `toolgate new policy` makes, installed and built with the
/// commands its README gives, passes its own fixtures.
#[test]
fn a_new_python_policy_builds_and_passes_its_fixtures_outside_the_repository() {
    // The pinned toolchain is installed (the install below finds it in
    // pip's cache); a machine without it fails here, naming the command.
    if polyglot::toolchain(Language::Python).is_none() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("my-guard");
    polyglot::scaffold(
        Language::Python,
        "my-guard",
        &[
            "classify",
            "account",
            "parse",
            "observe",
            "check-output",
            "filter-tools",
        ],
        &dir,
    );
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let commands: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands.len(), 4, "{readme}");
    for command in commands {
        run_in(
            &dir,
            std::process::Command::new("sh")
                .args(["-c", command])
                .env("PATH", path_with_toolgate()),
        );
    }
    // The project's directory names the component it built.
    let tested = run_in(
        &dir,
        std::process::Command::new(env!("CARGO_BIN_EXE_toolgate")).args([
            "test",
            ".",
            "fixtures.toml",
        ]),
    );
    assert!(
        tested.trim_end().ends_with("3 passed, 0 failed"),
        "{tested}"
    );
}

#[test]
fn a_new_typescript_policy_builds_and_passes_its_fixtures_outside_the_repository() {
    if polyglot::toolchain(Language::TypeScript).is_none() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("my-guard");
    polyglot::scaffold(
        Language::TypeScript,
        "my-guard",
        &[
            "classify",
            "account",
            "parse",
            "observe",
            "check-output",
            "filter-tools",
        ],
        &dir,
    );
    let path = path_with_toolgate();
    let npm = |args: &[&str]| {
        run_in(
            &dir,
            std::process::Command::new("npm")
                .args(args)
                .env("PATH", &path),
        )
    };
    npm(&["ci", "--no-audit", "--no-fund", "--prefer-offline"]);
    npm(&["run", "build"]);
    let tested = npm(&["test"]);
    assert!(
        tested.trim_end().ends_with("3 passed, 0 failed"),
        "{tested}"
    );
}

/// A world that exports a phase the policy does not implement fails the
/// build, naming what is missing, rather than trapping on every call.
#[test]
fn exporting_a_phase_the_policy_lacks_fails_the_build() {
    for (language, entry, method) in [
        (Language::Python, "app.py", "def classify"),
        (Language::TypeScript, "policy.ts", "classify(_settings"),
    ] {
        let Some(toolchain) = polyglot::toolchain(language) else {
            continue;
        };
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("lacking");
        polyglot::scaffold(language, "lacking", &["classify"], &dir);
        let source = std::fs::read_to_string(dir.join(entry)).unwrap();
        let renamed = source.replace(method, &method.replace("classify", "unused"));
        assert_ne!(source, renamed, "{entry} has {method}");
        std::fs::write(dir.join(entry), renamed).unwrap();
        let built = std::panic::catch_unwind(|| {
            polyglot::build_project(language, &toolchain, "lacking", &dir)
        });
        let message = built
            .expect_err("the build must fail")
            .downcast::<String>()
            .map(|m| *m)
            .unwrap_or_default();
        assert!(
            message.contains("classify"),
            "{language:?}: the failure names the missing phase: {message}"
        );
    }
}
