//! Signed plugins: with `require_signature`, a plugin loads only if a
//! trusted key signed exactly its bytes, and a reload to a badly signed
//! version keeps the old one serving.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{call, guest};
use serde_json::json;
use toolgate::{Config, Service, Verdict};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn toolgate(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// A key pair made by `toolgate plugins keygen`: (secret file, public key).
fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let prefix = dir.join(name);
    let out = toolgate(&["plugins", "keygen", "--out", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let public = String::from_utf8(out.stdout).unwrap().trim().to_string();
    (prefix.with_extension("key"), public)
}

fn sign(key: &Path, file: &Path) {
    let out = toolgate(&[
        "plugins",
        "sign",
        "--key",
        key.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// A host with the plugin at `file`, requiring a signature by `trusted`.
fn open(dir: &Path, file: &Path, trusted: &str) -> toolgate::Result<Service> {
    let text = common::config_text(&format!(
        "require_signatures = true\ntrusted_keys = [\"{trusted}\"]\n[plugins.signed]\npath = {:?}\n",
        file.display().to_string()
    ));
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, text).unwrap();
    Service::open(Config::load(&path)?, Some(dir.join("store.redb").into()))
}

fn refusal(result: toolgate::Result<Service>) -> String {
    result.expect_err("the plugin must be refused").to_string()
}

#[test]
fn only_a_trusted_signature_over_exactly_these_bytes_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "ops");
    let plugin = dir.path().join("allow.wasm");
    std::fs::copy(guest("flip-allow-policy"), &plugin).unwrap();

    // Missing signature.
    let missing = refusal(open(dir.path(), &plugin, &public));
    assert!(
        missing.contains("allow.wasm.sig does not exist"),
        "{missing}"
    );

    sign(&key, &plugin);
    let host = open(dir.path(), &plugin, &public).expect("a trusted signature loads");
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow
    );
    drop(host);

    // Another key is not trusted.
    let (_, stranger) = keygen(dir.path(), "stranger");
    let untrusted = refusal(open(dir.path(), &plugin, &stranger));
    assert!(
        untrusted.contains("not in trusted_keys") && untrusted.contains(&public),
        "{untrusted}"
    );

    // A truncated signature file.
    let sig = dir.path().join("allow.wasm.sig");
    let text = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, &text[..text.len() / 2]).unwrap();
    let truncated = refusal(open(dir.path(), &plugin, &public));
    assert!(truncated.contains("malformed"), "{truncated}");
    std::fs::write(&sig, &text).unwrap();

    // One flipped byte.
    let mut bytes = std::fs::read(&plugin).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&plugin, &bytes).unwrap();
    let flipped = refusal(open(dir.path(), &plugin, &public));
    assert!(flipped.contains("changed after signing"), "{flipped}");

    // `plugins inspect` says who signed and whether it holds.
    let out = toolgate(&["plugins", "inspect", plugin.to_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("signed by {public} (invalid")),
        "{shown}"
    );
}

#[test]
fn a_reload_to_a_badly_signed_version_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path(), "ops");
    let (stranger, _) = keygen(dir.path(), "stranger");
    let plugin = dir.path().join("policy.wasm");
    std::fs::copy(guest("flip-allow-policy"), &plugin).unwrap();
    sign(&key, &plugin);
    let host = open(dir.path(), &plugin, &public).unwrap();

    // The replacement denies everything, and is signed by an untrusted key.
    std::fs::copy(guest("flip-deny-policy"), &plugin).unwrap();
    sign(&stranger, &plugin);
    let report = host.reload().unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(
        report.failed[0].1.contains("not in trusted_keys"),
        "{report:?}"
    );
    assert_eq!(
        host.evaluate(&call("Read", json!({}))).unwrap().verdict,
        Verdict::Allow,
        "the old, trusted version keeps serving"
    );
}
