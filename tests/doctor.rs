//! `toolgate doctor` tells a person whether their install protects them:
//! which hooks are there and whether they fail closed, the mode and what
//! it protects, whether the daemon serves the hooks' config; exit 1, with
//! the fix, when protection is missing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::hooks::{BIN, KillOnDrop, Setup};

/// `toolgate doctor` for a person whose home is `home`.
fn doctor(home: &Path) -> (Output, String) {
    let out = Command::new(BIN)
        .arg("doctor")
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

fn install(setup: &Setup, home: &Path, extra: &[&str]) {
    let settings = home.join(".claude/settings.json");
    let mut args = vec!["hook", "install", "--write", settings.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = setup
        .command()
        .args(&args)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn nothing_installed_is_reported_with_the_install_command() {
    let home = tempfile::tempdir().unwrap();
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("no toolgate hooks"), "{text}");
    assert!(text.contains("fix: toolgate hook install"), "{text}");
    assert!(text.contains("NOT fail-closed"), "{text}");
}

#[test]
fn a_fresh_install_is_user_mode_and_fail_closed() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    install(&setup, home.path(), &[]);
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("user mode, fail-closed"), "{text}");
    assert!(text.contains("PreToolUse"), "{text}");
    assert!(
        text.contains("System mode puts them out of the agent's reach"),
        "{text}"
    );
}

#[test]
fn an_install_that_fails_open_is_named_with_its_fix() {
    let home = tempfile::tempdir().unwrap();
    let settings = home.path().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    // As toolgate wrote it before fail-closed hooks: a bare command.
    let line = format!("{BIN} hook claude-code");
    let old = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": line}]}]}});
    std::fs::write(&settings, old.to_string()).unwrap();
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("fails open if its program is missing"),
        "{text}"
    );
    assert!(text.contains("no \"onFailure\": \"block\""), "{text}");
    assert!(
        text.contains("fix: toolgate hook install --for claude-code --write"),
        "{text}"
    );
}

#[test]
fn a_daemon_serving_another_config_is_named_with_its_fix() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    install(&setup, home.path(), &[]);
    let _daemon = setup.serve_bundled();
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("serves the bundled default config, but the hooks name"),
        "{text}"
    );
    assert!(text.contains("fix: stop it (`kill"), "{text}");
}

#[test]
fn http_hooks_with_no_daemon_are_named_as_blocking() {
    let port = common::free_port();
    let setup = Setup::new(&format!("[daemon]\nhttp = \"127.0.0.1:{port}\"\n"));
    let home = tempfile::tempdir().unwrap();
    install(&setup, home.path(), &[]);
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("nothing answers at http://127.0.0.1"),
        "{text}"
    );
    let _daemon = KillOnDrop(setup.serve(&[]));
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("the daemon (pid"), "{text}");
}
