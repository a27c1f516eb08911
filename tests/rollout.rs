//! Safe rollout: a shadow plugin runs beside the live ones and never
//! decides; a staged rollout enables a plugin for some sessions or users.

use crate::common;

use common::{call, guest, host, scripted};
use serde_json::json;
use toolgate::config::Rollout;
use toolgate::decision::PolicyVerdict;
use toolgate::{ToolRequest, Verdict};

fn plugin(name: &str, package: &str, extra: &str) -> String {
    format!(
        "[plugins.{name}]\npath = {:?}\n{extra}\n",
        guest(package).display().to_string()
    )
}

#[test]
fn a_shadow_that_denies_everything_changes_no_decision_and_is_recorded() {
    let common::TestHost { host, dir } = host(&format!(
        "[log]\narguments = \"full\"\n{}{}",
        plugin("live", "flip-allow-policy", ""),
        plugin("candidate", "flip-deny-policy", "mode = \"shadow\"")
    ));
    for i in 0..5 {
        let decision = host
            .evaluate(&call("Bash", json!({"command": format!("ls {i}")})))
            .unwrap();
        assert_eq!(decision.verdict, Verdict::Allow, "the shadow never decides");
        assert_eq!(decision.policies.len(), 1, "only the live plugin decided");
        assert_eq!(decision.shadows[0].name, "candidate");
        assert_eq!(decision.shadows[0].verdict, PolicyVerdict::Deny);

        let metrics = toolgate::metrics::Metrics::default();
        metrics.record(&decision);
        let text = metrics.render(0, 0);
        assert!(
            text.contains(r#"toolgate_shadow_verdicts_total{policy="candidate",live="allow",shadow="deny",agreement="disagree"} 1"#),
            "{text}"
        );
    }
    host.persist();
    let log = host.decision_log(&Default::default(), 10).unwrap();
    assert_eq!(log.len(), 5);
    assert!(
        log.iter()
            .all(|(_, e)| e.shadows.len() == 1 && e.shadows[0].verdict == PolicyVerdict::Deny)
    );

    // The operator's summary, from the same store.
    let store = dir.path().join("toolgate.redb");
    drop(host);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--store")
        .arg(&store)
        .args(["shadow", "report", "--json"])
        .env("XDG_CACHE_HOME", common::cache_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["candidate"]["disagree"], 5);
    assert_eq!(report["candidate"]["by_kind"]["allow→deny"], 5);
}

#[test]
fn a_failing_or_pausing_shadow_affects_nothing() {
    let host = host(&format!(
        "{}{}{}",
        plugin("live", "flip-allow-policy", ""),
        plugin(
            "looping",
            "hostile-policy",
            "mode = \"shadow\"\n[plugins.looping.config]\nattack = \"loop\"\n[plugins.looping.limits]\ndeadline_ms = 200"
        ),
        scripted("asker", 3, "verdict = \"pause\"\nreason = \"ok?\"")
            .replace("priority = 3", "priority = 3\nmode = \"shadow\"")
    ));
    let decision = host.evaluate(&call("attack", json!({}))).unwrap();
    assert_eq!(decision.verdict, Verdict::Allow);
    let looping = decision
        .shadows
        .iter()
        .find(|s| s.name == "looping")
        .unwrap();
    assert!(
        looping
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("deadline")),
        "{looping:?}"
    );
    let asker = decision.shadows.iter().find(|s| s.name == "asker").unwrap();
    assert_eq!(asker.verdict, PolicyVerdict::Pause);
    assert!(
        host.gates(None).unwrap().is_empty(),
        "a shadow's pause leaves no gate"
    );
}

#[test]
fn a_percent_rollout_takes_the_same_sessions_every_time() {
    let rollout = Rollout {
        percent: Some(10),
        ..Rollout::default()
    };
    let chosen = |plugin: &str| -> Vec<usize> {
        (0..1000)
            .filter(|i| {
                let mut request = ToolRequest::new("Read", json!({}));
                request.session_id = format!("session-{i}");
                toolgate::plugins::in_rollout(&rollout, plugin, &request)
            })
            .collect()
    };
    let first = chosen("candidate");
    assert!((70..=130).contains(&first.len()), "{} of 1000", first.len());
    assert_eq!(chosen("candidate"), first, "deterministic");
    assert_ne!(
        chosen("another"),
        first,
        "each plugin draws its own sessions"
    );
}

#[test]
fn a_rollout_to_listed_users_applies_only_to_them() {
    let host = host(&plugin(
        "strict",
        "flip-deny-policy",
        "rollout = { users = [\"alice\"] }",
    ));
    let as_user = |user: &str| {
        let mut request = call("Read", json!({}));
        request.user_id = user.into();
        host.evaluate(&request).unwrap().verdict
    };
    assert_eq!(as_user("alice"), Verdict::Deny);
    assert_eq!(as_user("bob"), Verdict::Allow, "not yet rolled out to bob");
}

/// A config with the bundled lease-gate (calls logged in full) and `extra`
/// lease-gate catalogue entries, written to `dir/NAME.toml`.
fn lease_config(dir: &std::path::Path, name: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = common::config_text(&format!(
        "[log]\narguments = \"full\"\n[plugins.lease-gate]\npath = \"bundled:lease-gate\"\n[plugins.lease-gate.config]\nauto_plan = true\n{extra}"
    ));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_replay_against_a_stricter_config_reports_exactly_the_calls_it_would_deny() {
    let dir = tempfile::tempdir().unwrap();
    let live = lease_config(dir.path(), "live", "");
    let strict = lease_config(
        dir.path(),
        "strict",
        "[plugins.lease-gate.config.actions.Grep]\neffects = [\"read-local\"]\napproval = \"always\"\n",
    );
    let store = dir.path().join("store.redb");
    // A recorded day of an autonomous agent's calls.
    let mut greps = Vec::new();
    {
        let host = toolgate::Service::open(
            toolgate::Config::load(&live).unwrap(),
            Some(store.clone().into()),
        )
        .unwrap();
        for i in 0..30 {
            let tool = ["Read", "Grep", "Glob"][i % 3];
            let mut request = call(tool, json!({"path": format!("src/{i}.rs")}));
            request.session_id = format!("day-{}", i % 4);
            request.mode = toolgate::request::Mode::Autonomous;
            request.call_id = Some(format!("call-{i}"));
            assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
            if tool == "Grep" {
                greps.push(format!("call-{i}"));
            }
        }
        host.persist();
    }
    let replay = |candidate: Option<&std::path::Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .arg("--config")
            .arg(&live)
            .arg("--store")
            .arg(&store)
            .arg("replay")
            .arg("--json");
        if let Some(candidate) = candidate {
            command.arg("--candidate-config").arg(candidate);
        }
        let out = command.output().unwrap();
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
        (out.status.code(), report)
    };

    let (status, report) = replay(Some(&strict));
    assert_eq!(status, Some(3), "something would change: {report}");
    assert_eq!(report["replayed"], 30);
    assert_eq!(report["changes"]["allow→deny"], 10, "{report}");
    let changed: Vec<String> = report["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(changed, greps, "exactly the Grep calls");

    let (status, report) = replay(None);
    assert_eq!(status, Some(0), "the same plugins change nothing: {report}");
    assert_eq!(report["changed"], json!([]));
}

/// A shadow's rewrite is kept as a digest, never returned: a shadow never
/// decides, so what it would have run only needs to be recognisable (a
/// shadow used to add its whole rewrite to every answer).
#[test]
fn a_shadows_rewrite_is_recorded_as_a_digest_only() {
    let shadow = scripted(
        "candidate",
        1,
        "verdict = \"allow\"\nset = { pinned = true }",
    )
    .replace(
        "[plugins.candidate.config]",
        "mode = \"shadow\"\n[plugins.candidate.config]",
    );
    let host = host(&format!(
        "{}{shadow}",
        scripted("live", 2, "verdict = \"allow\"")
    ));
    let decision = host
        .evaluate(&call("deploy", json!({"target": "prod"})))
        .unwrap();
    assert_eq!(
        decision.arguments, None,
        "the shadow rewrote nothing that runs"
    );
    let recorded = &decision.shadows[0];
    assert_eq!(recorded.rewrite, None, "{recorded:?}");
    let digest = recorded.rewrite_sha256.as_deref().unwrap_or_default();
    assert_eq!(digest.len(), 64, "{recorded:?}");
}
