//! Policy authoring: the bundled fixture files pass through the real host,
//! the runner's failure output is useful, `plugins inspect` tells what a file
//! is, and a scaffolded policy builds and passes its own fixture.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn toolgate(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("XDG_CACHE_HOME", common::cache_dir())
        .current_dir(ROOT)
        .output()
        .unwrap()
}

#[test]
fn every_bundled_policy_passes_its_fixture_file() {
    for policy in [
        "context-cost",
        "shadow-sentinel",
        "lease-gate",
        "rules",
        "safeguards",
    ] {
        let fixtures = format!("guest-plugins/{policy}/fixtures.toml");
        let output = toolgate(&["test", &format!("bundled:{policy}"), &fixtures]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{policy}:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.lines().last().unwrap().ends_with(", 0 failed"),
            "{stdout}"
        );
        assert!(!stdout.contains("FAIL"), "{stdout}");
    }
}

#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = dir.path().join("wrong.json");
    std::fs::write(
        &fixtures,
        r#"{"config": {"max_tokens": 400000}, "case": [
            {"name": "right", "request": {"tool": "Write", "is_subagent": true, "context_tokens": 622200},
             "expect": {"verdict": "deny"}},
            {"name": "deliberately wrong", "request": {"tool": "Write", "is_subagent": true, "context_tokens": 622200},
             "expect": {"verdict": "allow", "reason": "no such text"}}
        ]}"#,
    )
    .unwrap();
    let output = toolgate(&["test", "bundled:context-cost", fixtures.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("PASS right"), "{stdout}");
    assert!(stdout.contains("FAIL deliberately wrong"), "{stdout}");
    assert!(
        stdout.contains("verdict: expected Allow, got Deny"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reason: expected it to contain \"no such text\", got \"Context ceiling"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("1 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn inspect_describes_bundled_policies_and_refuses_other_files() {
    // Each exports the gate and exactly the optional phases it implements.
    for (policy, phases) in [
        ("context-cost", &["budget"][..]),
        (
            "shadow-sentinel",
            &["risk", "budget", "verdict", "observe", "output"][..],
        ),
        ("lease-gate", &["observe", "visibility"][..]),
    ] {
        let output = toolgate(&["plugins", "inspect", "--json", &format!("bundled:{policy}")]);
        assert!(output.status.success());
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["loadable"], true);
        assert_eq!(report["policy"]["name"], policy);
        assert_eq!(report["wit"], "toolgate:policy@0.4.0");
        assert_eq!(report["sha256"].as_str().unwrap().len(), 64);
        let mut exports: Vec<&str> = report["exports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        exports.sort_unstable();
        let mut expected: Vec<String> = ["gate"]
            .iter()
            .chain(phases)
            .map(|p| format!("toolgate:policy/{p}@0.4.0"))
            .collect();
        expected.sort_unstable();
        assert_eq!(exports, expected, "{policy}");
        let described = &report["policy"];
        assert_eq!(
            described["classifies"],
            phases.contains(&"risk"),
            "{policy}"
        );
        assert_eq!(
            described["accounts"],
            phases.contains(&"budget"),
            "{policy}"
        );
        assert_eq!(
            described["parses_verdicts"],
            phases.contains(&"verdict"),
            "{policy}"
        );
        assert_eq!(
            described["observes"],
            phases.contains(&"observe"),
            "{policy}"
        );
        assert!(report["imports"].as_array().unwrap().iter().all(|i| {
            let i = i.as_str().unwrap();
            i.starts_with("toolgate:policy/") || i.starts_with("wasi:")
        }));
    }
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "not wasm").unwrap();
    let output = toolgate(&["plugins", "inspect", text.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("loadable  no: not a WebAssembly component"),
        "{stdout}"
    );
}

#[test]
fn a_scaffolded_policy_builds_and_passes_its_own_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("my-guard");
    // Every optional phase: each is implemented and exported.
    let created = toolgate(&[
        "new",
        "policy",
        "my-guard",
        "--phases",
        "classify,account,parse,observe,check-output,filter-tools",
        "--dir",
        crate_dir.to_str().unwrap(),
    ]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );

    // A shared target dir keeps the dependencies' build across runs.
    let target = Path::new(ROOT).join("target/scaffold");
    let built = common::without_test_env(&mut Command::new(env!("CARGO")))
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let wasm = target.join("wasm32-wasip2/release/my_guard.wasm");
    let fixtures = crate_dir.join("fixtures.toml");
    let tested = toolgate(&["test", wasm.to_str().unwrap(), fixtures.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&tested.stdout);
    assert!(tested.status.success(), "{stdout}");
    assert!(
        stdout.trim_end().ends_with("3 passed, 0 failed"),
        "{stdout}"
    );

    let refused = toolgate(&[
        "new",
        "policy",
        "my-guard",
        "--dir",
        crate_dir.to_str().unwrap(),
    ]);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "an existing crate is never overwritten"
    );
    let bad = toolgate(&["new", "policy", "Bad Name"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a usable name"));
}
