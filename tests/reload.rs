//! Hot reload: a new version is compiled, linked, described and configured
//! before it is swapped in; in-flight decisions finish on the version they
//! started with; a broken replacement leaves the old version serving.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{call, eventually, guest};
use serde_json::json;
use toolgate::{Config, Service, Verdict};

/// Replace `to` with `from` atomically (write beside it, then rename).
fn install(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

fn digest(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// A host built from a config file in a temp dir, serving `flip.wasm`.
fn flip_host(first: &str) -> (Arc<Service>, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("flip.wasm");
    install(&guest(first), &plugin);
    let config = dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        common::config_text("[plugins.flip]\npath = \"flip.wasm\"\npriority = 1\n"),
    )
    .unwrap();
    let host = Service::open(
        Config::load(&config).unwrap(),
        Some(dir.path().join("s.redb").into()),
    )
    .unwrap();
    (Arc::new(host), dir, plugin)
}

#[test]
fn twenty_swaps_under_load_never_error_and_never_mix_versions() {
    let (host, _dir, plugin) = flip_host("flip-allow-policy");
    let allow = digest(&guest("flip-allow-policy"));
    let deny = digest(&guest("flip-deny-policy"));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (host, stop) = (host.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut errors = 0;
                while !stop.load(Ordering::Relaxed) {
                    match host.evaluate(&call("Bash", json!({}))) {
                        Ok(d) => seen.push((d.policies[0].sha256.clone(), d.verdict)),
                        Err(_) => errors += 1,
                    }
                }
                (seen, errors)
            })
        })
        .collect();
    for swap in 0..20 {
        let next = if swap % 2 == 0 {
            "flip-deny-policy"
        } else {
            "flip-allow-policy"
        };
        install(&guest(next), &plugin);
        let report = host.reload().unwrap();
        assert_eq!(report.loaded, ["flip"], "swap {swap}: {report:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let mut decisions = Vec::new();
    for worker in workers {
        let (seen, errors) = worker.join().unwrap();
        assert_eq!(errors, 0, "no decision may error during a swap");
        decisions.extend(seen);
    }
    for (sha, verdict) in &decisions {
        let expected = if *sha == allow {
            Verdict::Allow
        } else if *sha == deny {
            Verdict::Deny
        } else {
            panic!("a decision from neither version: {sha}");
        };
        assert_eq!(
            *verdict, expected,
            "each decision is consistent with exactly one version"
        );
    }
    assert!(
        decisions.iter().any(|(s, _)| *s == allow) && decisions.iter().any(|(s, _)| *s == deny)
    );
    eprintln!("{} decisions across 20 swaps", decisions.len());
}

#[test]
fn a_broken_replacement_leaves_the_old_version_serving() {
    let (host, dir, plugin) = flip_host("flip-deny-policy");
    for (what, bad) in [
        ("not a component", None),
        ("wrong WIT", Some(guest("wrong-major-policy"))),
        ("no gate", Some(guest("no-gate-policy"))),
    ] {
        match bad {
            Some(path) => install(&path, &plugin),
            None => std::fs::write(&plugin, b"definitely not wasm").unwrap(),
        }
        let report = host.reload().unwrap();
        assert_eq!(report.failed.len(), 1, "{what}: {report:?}");
        assert_eq!(report.failed[0].0, "flip");
        assert!(
            host.plugin_problems().contains_key("flip"),
            "{what}: shown by `plugins list`"
        );
        let decision = host.evaluate(&call("Bash", json!({}))).unwrap();
        assert_eq!(
            decision.verdict,
            Verdict::Deny,
            "{what}: the old version still serves"
        );
    }

    // A config its policy rejects is refused the same way.
    install(&guest("flip-deny-policy"), &plugin);
    let config = dir.path().join("toolgate.toml");
    std::fs::write(
        &config,
        common::config_text(&format!(
            "[plugins.flip]\npath = \"flip.wasm\"\npriority = 1\n{}",
            common::scripted("picky", 2, "verdict = \"sometimes\"")
        )),
    )
    .unwrap();
    let report = host.reload().unwrap();
    assert_eq!(
        report
            .failed
            .iter()
            .map(|f| f.0.as_str())
            .collect::<Vec<_>>(),
        ["picky"]
    );
    assert!(report.failed[0].1.contains("sometimes"));
    assert!(host.plugins().get("picky").is_none());

    // A config file that does not parse changes nothing.
    std::fs::write(&config, "this is = = not toml").unwrap();
    assert!(host.reload().is_err());
    assert_eq!(
        host.evaluate(&call("Bash", json!({}))).unwrap().verdict,
        Verdict::Deny
    );
    assert!(host.plugin_problems().contains_key("picky"));
}

#[test]
fn an_unchanged_plugin_is_kept_not_rebuilt() {
    let (host, _dir, _plugin) = flip_host("flip-allow-policy");
    let before = host.plugins().get("flip").cloned().unwrap();
    let report = host.reload().unwrap();
    assert_eq!(report.kept, ["flip"]);
    assert!(Arc::ptr_eq(&before, host.plugins().get("flip").unwrap()));
}

#[test]
fn the_watcher_picks_up_a_new_file_and_a_new_plugin_in_plugin_dir() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install(&guest("flip-allow-policy"), &plugins.join("flip.wasm"));
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, common::config_text("plugin_dir = \"plugins\"\n")).unwrap();
    let host = Arc::new(
        Service::open(
            Config::load(&config).unwrap(),
            Some(dir.path().join("s.redb").into()),
        )
        .unwrap(),
    );
    let _watcher = host.watch(Duration::from_millis(25)).unwrap();
    assert_eq!(
        host.evaluate(&call("Bash", json!({}))).unwrap().verdict,
        Verdict::Allow
    );

    install(&guest("flip-deny-policy"), &plugins.join("flip.wasm"));
    eventually("the deny version serves", || {
        host.evaluate(&call("Bash", json!({}))).unwrap().verdict == Verdict::Deny
    });

    install(&guest("scripted-policy"), &plugins.join("extra.wasm"));
    eventually("the dropped-in plugin loads", || {
        host.plugins().get("extra").is_some()
    });
    assert_eq!(host.plugins().get("extra").unwrap().priority, 100);
}
