//! The context-cost policy through the wasm boundary: the seed's thresholds
//! and evidence rows, transcript reading from a real file, the persistence
//! escape past the ceiling, and the texts the agent reads.

use crate::common;

use std::io::Write as _;

use common::{call, host};
use serde_json::json;
use toolgate::decision::BudgetReport;
use toolgate::{Decision, ToolRequest, Verdict};

const OVERRUNS: [u64; 3] = [413_300, 418_500, 622_200];
const MIDLIFE: [u64; 2] = [255_500, 269_900];

fn cost_host(table: &str) -> common::TestHost {
    host(&format!(
        "[plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 30\n[plugins.context-cost.config]\n{table}\n"
    ))
}

fn subagent(tool: &str, arguments: serde_json::Value, tokens: u64) -> ToolRequest {
    let mut request = call(tool, arguments);
    request.is_subagent = true;
    request.context_tokens = Some(tokens);
    request
}

fn read_at(host: &toolgate::Service, tokens: u64) -> Decision {
    host.evaluate(&subagent("Read", json!({"file_path": "x"}), tokens))
        .unwrap()
}

fn budget(decision: &Decision) -> &BudgetReport {
    decision.policies[0]
        .budget
        .as_ref()
        .expect("context-cost accounts")
}

#[test]
fn the_shipped_default_warns_on_every_evidence_row_but_never_denies() {
    let host = cost_host("");
    for tokens in OVERRUNS.into_iter().chain(MIDLIFE).chain([u64::MAX]) {
        let decision = read_at(&host, tokens);
        assert_eq!(decision.verdict, Verdict::Allow, "{tokens}");
        assert!(
            matches!(budget(&decision), BudgetReport::Warning(_)),
            "{tokens}"
        );
        assert_eq!(decision.notes.len(), 1, "{tokens}");
        assert!(decision.notes[0].text.contains(&tokens.to_string()));
        assert!(
            !decision.notes[0].text.contains("DENIED"),
            "no stop is configured"
        );
    }
    let quiet = read_at(&host, 136_000);
    assert_eq!(quiet.verdict, Verdict::Allow);
    assert!(quiet.notes.is_empty(), "ok is silent");
}

#[test]
fn an_opted_in_stop_denies_overruns_and_warns_midlife() {
    let host = cost_host("max_tokens = 400000");
    for tokens in OVERRUNS {
        let decision = read_at(&host, tokens);
        assert_eq!(decision.verdict, Verdict::Deny, "{tokens}");
        assert_eq!(decision.decided_by.as_deref(), Some("context-cost"));
        let reason = decision.reason.unwrap();
        assert!(
            reason.contains(&tokens.to_string()) && reason.contains("400000"),
            "{reason}"
        );
    }
    for tokens in MIDLIFE {
        let decision = read_at(&host, tokens);
        assert_eq!(decision.verdict, Verdict::Allow, "{tokens}");
        assert!(
            decision.notes[0].text.contains("DENIED"),
            "a configured stop is announced"
        );
    }
}

#[test]
fn thresholds_are_inclusive_at_the_boundary() {
    let host = cost_host("max_tokens = 400000");
    assert!(matches!(budget(&read_at(&host, 249_999)), BudgetReport::Ok));
    assert!(matches!(
        budget(&read_at(&host, 250_000)),
        BudgetReport::Warning(_)
    ));
    assert!(matches!(
        budget(&read_at(&host, 399_999)),
        BudgetReport::Warning(_)
    ));
    assert!(matches!(
        budget(&read_at(&host, 400_000)),
        BudgetReport::Exceeded(_)
    ));
}

#[test]
fn disabled_zero_misordered_and_partial_configs() {
    let disabled = cost_host("enabled = false\nmax_tokens = 400000");
    assert_eq!(read_at(&disabled, u64::MAX).verdict, Verdict::Allow);
    assert!(read_at(&disabled, u64::MAX).notes.is_empty());

    let unlimited = cost_host("warn_tokens = 0\nmax_tokens = 0");
    assert!(matches!(
        budget(&read_at(&unlimited, u64::MAX)),
        BudgetReport::Ok
    ));

    let stop_only = cost_host("warn_tokens = 0\nmax_tokens = 400000");
    assert!(matches!(
        budget(&read_at(&stop_only, 300_000)),
        BudgetReport::Ok
    ));
    assert_eq!(read_at(&stop_only, 400_000).verdict, Verdict::Deny);

    let misordered = cost_host("warn_tokens = 900000\nmax_tokens = 100000");
    assert_eq!(read_at(&misordered, 150_000).verdict, Verdict::Deny);

    let raised = cost_host("warn_tokens = 700000\nmax_tokens = 900000");
    for tokens in OVERRUNS {
        assert!(
            matches!(budget(&read_at(&raised, tokens)), BudgetReport::Ok),
            "{tokens}"
        );
    }

    let partial = cost_host("max_tokens = 123456");
    assert!(matches!(
        budget(&read_at(&partial, 123_456)),
        BudgetReport::Exceeded(_)
    ));
    assert!(
        matches!(budget(&read_at(&partial, 100_000)), BudgetReport::Ok),
        "warn stays 250000"
    );
}

#[test]
fn a_bad_config_key_is_refused_at_load() {
    let err = common::try_host(
        "[plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 1\n[plugins.context-cost.config]\nmax_token = 5\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("max_token"), "{err}");
    assert!(err.contains("plugins.context-cost.config"), "{err}");
}

#[test]
fn only_subagents_are_governed_unless_configured_otherwise() {
    let host = cost_host("max_tokens = 400000");
    let mut request = subagent("Read", json!({}), 622_200);
    request.is_subagent = false;
    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);

    let everyone = cost_host("max_tokens = 400000\nsubagents_only = false");
    assert_eq!(everyone.evaluate(&request).unwrap().verdict, Verdict::Deny);
}

fn assistant_line(input: u64, created: u64, read: u64) -> String {
    json!({
        "type": "assistant",
        "message": {"role": "assistant", "usage": {
            "input_tokens": input,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
            "output_tokens": 873
        }}
    })
    .to_string()
}

fn with_transcript(text: &str) -> (ToolRequest, tempfile::NamedTempFile) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let mut request = call("Read", json!({"file_path": "x"}));
    request.is_subagent = true;
    request.transcript_path = Some(file.path().to_path_buf());
    (request, file)
}

#[test]
fn the_newest_usage_in_the_transcript_is_measured() {
    let host = cost_host("max_tokens = 400000");
    let (request, _file) = with_transcript(&format!(
        "{}\n{}\n",
        assistant_line(8, 776, 70_756),
        assistant_line(12, 1_000, 410_000)
    ));
    let decision = host.evaluate(&request).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny);
    assert!(decision.reason.unwrap().contains("411012"));
}

#[test]
fn a_bare_usage_falls_back_to_an_older_complete_one() {
    let host = cost_host("");
    let bare = json!({"message": {"usage": {"output_tokens": 5}}}).to_string();
    let (request, _file) =
        with_transcript(&format!("{}\n{bare}\n", assistant_line(8, 776, 267_216)));
    let decision = host.evaluate(&request).unwrap();
    assert!(
        decision.notes[0].text.contains("268000"),
        "{:?}",
        decision.notes
    );

    let (request, _file) = with_transcript(&format!("{bare}\n"));
    let decision = host.evaluate(&request).unwrap();
    assert!(
        matches!(budget(&decision), BudgetReport::Ok),
        "nothing measurable fails open"
    );
}

#[test]
fn a_missing_transcript_fails_open() {
    let host = cost_host("max_tokens = 400000");
    let mut request = call("Read", json!({}));
    request.is_subagent = true;
    request.transcript_path = Some("/no/such/transcript.jsonl".into());
    let decision = host.evaluate(&request).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(matches!(budget(&decision), BudgetReport::Ok));
}

#[test]
fn only_the_tail_of_a_large_transcript_is_read() {
    let host = cost_host("transcript_tail_bytes = 65536");
    let filler = json!({"type": "user", "message": {"role": "user", "content": "x".repeat(1000)}})
        .to_string();
    let mut text = String::new();
    text.push_str(&assistant_line(1, 1, 999_999));
    text.push('\n');
    while text.len() < 8 * 1024 * 1024 {
        text.push_str(&filler);
        text.push('\n');
    }
    text.push_str(&assistant_line(12, 1_000, 267_000));
    text.push('\n');
    let (request, _file) = with_transcript(&text);
    let decision = host.evaluate(&request).unwrap();
    assert!(
        decision.notes[0].text.contains("268012"),
        "{:?}",
        decision.notes
    );
    let read = decision.policies[0].transcript_bytes;
    assert!(
        read > 0 && read <= 65_536,
        "read {read} bytes of an {}-byte file",
        text.len()
    );
}

#[test]
fn past_the_ceiling_only_saving_and_reporting_run() {
    let host = cost_host("max_tokens = 400000");
    let bash = |command: &str| subagent("Bash", json!({"command": command}), 622_200);
    for command in [
        "git add -A && git commit -m 'save progress' && git push",
        "git status --short",
        "git diff --stat",
    ] {
        let decision = host.evaluate(&bash(command)).unwrap();
        assert_eq!(decision.verdict, Verdict::Allow, "{command}");
        assert!(decision.notes[0].text.contains("Context ceiling reached"));
    }
    let send = subagent(
        "SendMessage",
        json!({"to": "pm", "message": "done"}),
        622_200,
    );
    assert_eq!(host.evaluate(&send).unwrap().verdict, Verdict::Allow);
    for command in [
        "git commit -m 'use std::process::Command'",
        "git -c diff.external=x diff",
        "git push --receive-pack=x",
        "git add . && rm -rf /",
        "git commit -m \"fix $ISSUE\"",
        "cargo test",
    ] {
        assert_eq!(
            host.evaluate(&bash(command)).unwrap().verdict,
            Verdict::Deny,
            "{command}"
        );
    }
    for tool in ["Write", "Edit", "Read", "Grep"] {
        let decision = host.evaluate(&subagent(tool, json!({}), 622_200)).unwrap();
        assert_eq!(decision.verdict, Verdict::Deny, "{tool}");
        let reason = decision.reason.unwrap();
        for needle in [
            "SendMessage",
            "git commit",
            "single quotes",
            "::",
            "plugins.context-cost.config.max_tokens",
        ] {
            assert!(reason.contains(needle), "{needle} missing from {reason}");
        }
    }
}
