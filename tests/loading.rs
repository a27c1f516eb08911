//! Loading refuses what it cannot safely run, with a message that names the
//! plugin, the problem and the fix.

use crate::common;

use common::{guest, scripted, try_host};
use toolgate::{Error, PluginProblem};

fn plugin_entry(name: &str, path: &std::path::Path, extra: &str) -> String {
    format!(
        "[plugins.{name}]\npath = {:?}\npriority = 1\n{extra}\n",
        path.display().to_string()
    )
}

fn load_error(body: &str) -> Error {
    try_host(body).expect_err("the plugin must be refused")
}

#[test]
fn another_major_wit_version_is_refused_naming_both_versions() {
    let err = load_error(&plugin_entry("future", &guest("wrong-major-policy"), ""));
    assert!(
        matches!(&err, Error::Plugin { problem: PluginProblem::IncompatibleVersion { found, .. }, .. } if found == "1.0.0"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("future"), "{message}");
    assert!(message.contains("toolgate:policy@1.0.0"), "{message}");
    assert!(message.contains("toolgate:policy@0.4.0"), "{message}");
}

#[test]
fn a_contract_0_1_component_is_refused_pointing_to_the_migration_notes() {
    // 0.x minors are incompatible (semver); 0.1's configure-then-decide gate
    // and stub phases have no faithful adapter (see wit/CHANGELOG.md).
    let err = load_error(&plugin_entry("old", &guest("old-contract-policy"), ""));
    assert!(
        matches!(&err, Error::Plugin { problem: PluginProblem::IncompatibleVersion { found, .. }, .. } if found == "0.1.0"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("toolgate:policy@0.1.0"), "{message}");
    assert!(message.contains("toolgate:policy@0.4.0"), "{message}");
    assert!(message.contains("wit/CHANGELOG.md"), "{message}");
}

#[test]
fn a_policy_exporting_only_the_gate_loads_and_only_decides() {
    // flip exports `gate` alone: no risk, budget, verdict or observe.
    let host = try_host(&plugin_entry("flip", &guest("flip-allow-policy"), "")).unwrap();
    let status = host.plugin_statuses().into_iter().next().unwrap();
    let described = &status.policy;
    assert!(
        !described.classifies
            && !described.accounts
            && !described.parses_verdicts
            && !described.observes,
        "{described:?}"
    );
    let request = common::call("Bash", serde_json::json!({"command": "ls"}));
    let decision = host.evaluate(&request).unwrap();
    let result = &decision.policies[0];
    assert_eq!(result.verdict, toolgate::decision::PolicyVerdict::Allow);
    assert_eq!(result.failure, None);
    assert_eq!(result.risk, None, "never asked to classify");
    assert_eq!(result.budget, None, "never asked to account");
    assert_eq!(decision.risk, toolgate::decision::RiskReport::default());
    // Nothing to observe with: reporting an outcome is not an error.
    host.observe(&request, toolgate::Outcome::Succeeded, "ran")
        .unwrap();
    let status = host.plugin_statuses().into_iter().next().unwrap();
    assert_eq!(status.instances_created, 1, "observe did not start one");
}

#[test]
fn a_component_without_the_gate_is_refused_naming_the_export() {
    let err = load_error(&plugin_entry("gateless", &guest("no-gate-policy"), ""));
    assert!(
        matches!(
            &err,
            Error::Plugin {
                problem: PluginProblem::MissingExport(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("toolgate:policy/gate@0.4.0"),
        "{err}"
    );
}

#[test]
fn files_that_are_not_components_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "this is not wasm").unwrap();
    let err = load_error(&plugin_entry("text", &text, ""));
    assert!(err.to_string().contains("not WebAssembly at all"), "{err}");

    let core = dir.path().join("core.wasm");
    // The smallest core module: magic and version 1, no sections.
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let err = load_error(&plugin_entry("core", &core, ""));
    let message = err.to_string();
    assert!(message.contains("core WebAssembly module"), "{message}");
    assert!(message.contains("wasm32-wasip2"), "{message}");
}

#[test]
fn a_missing_file_is_named() {
    let err = load_error(&plugin_entry(
        "ghost",
        std::path::Path::new("/no/such/policy.wasm"),
        "",
    ));
    let message = err.to_string();
    assert!(message.contains("ghost"), "{message}");
    assert!(message.contains("/no/such/policy.wasm"), "{message}");
}

#[test]
fn an_unknown_bundled_name_lists_what_is_bundled() {
    let err = load_error("[plugins.x]\npath = \"bundled:nope\"\npriority = 1\n");
    let message = err.to_string();
    assert!(
        message.contains("no bundled policy named `nope`"),
        "{message}"
    );
    assert!(message.contains("context-cost"), "{message}");
}

#[test]
fn a_pinned_digest_must_match() {
    let path = guest("scripted-policy");
    let wrong = "0".repeat(64);
    let err = load_error(&plugin_entry(
        "pinned",
        &path,
        &format!("sha256 = \"{wrong}\""),
    ));
    assert!(
        matches!(
            &err,
            Error::Plugin {
                problem: PluginProblem::DigestMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );

    let bytes = std::fs::read(&path).unwrap();
    let right = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    let host = try_host(&plugin_entry(
        "pinned",
        &path,
        &format!("sha256 = \"{right}\""),
    ))
    .expect("the right pin loads");
    assert_eq!(host.plugins().get("pinned").unwrap().sha256, right);
}

#[test]
fn a_policy_rejecting_its_config_is_refused_with_its_message() {
    let err = load_error(&scripted("picky", 1, "verdict = \"perhaps\""));
    let message = err.to_string();
    assert!(message.contains("plugins.picky.config"), "{message}");
    assert!(message.contains("perhaps"), "{message}");

    let err = load_error(&scripted("typo", 1, "verdikt = \"allow\""));
    assert!(err.to_string().contains("verdikt"), "{err}");
}

#[test]
fn a_disabled_entry_is_not_loaded() {
    let host = try_host(&format!(
        "{}enabled = false\n",
        plugin_entry("off", std::path::Path::new("/no/such.wasm"), "")
    ))
    .expect("a disabled entry is never read");
    assert!(host.plugins().is_empty());
}

#[test]
fn a_corrupt_cache_entry_is_recompiled_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let body = format!(
        "cache_dir = {:?}\n{}",
        cache.display().to_string(),
        scripted("a", 1, "verdict = \"deny\"\nreason = \"cached\"")
    );
    let start = |body: &str| {
        let config = toolgate::Config::parse(body, "cache test", dir.path().to_path_buf()).unwrap();
        toolgate::Service::open(config, Some(dir.path().join("s.redb").into())).unwrap()
    };
    drop(start(&body));
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "one cache entry per component");
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entries[0], &bytes).unwrap();

    let host = start(&body);
    let decision = host
        .evaluate(&common::call("Bash", serde_json::json!({})))
        .unwrap();
    assert_eq!(decision.reason.as_deref(), Some("cached"));
    let repaired = std::fs::read(&entries[0]).unwrap();
    assert_ne!(repaired, bytes, "the corrupt entry was replaced");
}
