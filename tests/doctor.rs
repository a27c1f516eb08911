//! `toolgate doctor` tells a person whether their install protects them:
//! which hooks are there and whether they fail closed, the mode and what
//! it protects, whether the daemon serves the hooks' config; exit 1, with
//! the fix, when protection is missing.

use crate::common;

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

/// `hook install` into `home`'s Claude Code settings; what it said on
/// stderr.
fn install(setup: &Setup, home: &Path, extra: &[&str]) -> String {
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
    String::from_utf8_lossy(&out.stderr).into_owned()
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

/// A Claude Code mod or plugin runs inside Claude Code and can answer a
/// tool call without any hook: in user mode nothing stops one installed
/// already, so doctor names each and points at system mode.
#[test]
fn mods_and_plugins_that_can_override_the_hook_are_listed_in_user_mode() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    install(&setup, home.path(), &[]);
    let claude = home.path().join(".claude");
    std::fs::create_dir_all(claude.join("dev-mods/s-1/helper")).unwrap();
    std::fs::create_dir_all(claude.join("plugins")).unwrap();
    std::fs::write(
        claude.join("plugins/installed_plugins.json"),
        r#"{"version": 2, "plugins": {"formatter@market": [{"scope": "user"}]}}"#,
    )
    .unwrap();
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("NOT fail-closed"), "{text}");
    for named in [
        "dev-mods/s-1",
        "formatter@market",
        "answer a tool call",
        "system mode",
    ] {
        assert!(text.contains(named), "{named}: {text}");
    }
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

/// Installing the hooks for another config while a daemon serves the
/// store with the old one says so (every call would be refused as a
/// mismatch), and `--restart-daemon` switches in one command: the old
/// daemon stops, and the next hook starts one with the new config.
#[test]
fn installing_for_another_config_says_so_and_restarts_the_daemon_when_asked() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    let daemon = setup.serve_bundled();
    let install_with = |extra: &[&str]| install(&setup, home.path(), extra);
    let said = install_with(&[]);
    assert!(
        said.contains("serves the bundled default config") && said.contains("--restart-daemon"),
        "{said}"
    );
    assert!(
        setup.daemon_pid().is_some(),
        "still running: nothing was stopped"
    );
    let said = install_with(&["--restart-daemon"]);
    assert!(said.contains("stopped the daemon"), "{said}");
    assert!(setup.daemon_pid().is_none(), "{said}");
    drop(daemon);
    let (out, text) = doctor(home.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "the next hook starts the right one: {text}"
    );
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

/// `toolgate hook install --for RUNTIME` as printed (the settings, or
/// OpenCode's plugin), written where the runtime reads it under `home`.
fn install_printed(setup: &Setup, home: &Path, runtime: &str, under_home: &str) {
    let out = setup
        .command()
        .args(["hook", "install", "--for", runtime])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = home.join(under_home);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, out.stdout).unwrap();
}

#[test]
fn codex_copilot_and_opencode_installs_are_checked_like_the_others() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    let installs = [
        ("codex", ".codex/hooks.json"),
        ("copilot", ".copilot/hooks/toolgate.json"),
        ("opencode", ".config/opencode/plugin/toolgate.js"),
    ];
    for (runtime, under_home) in installs {
        install_printed(&setup, home.path(), runtime, under_home);
    }
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("user mode, fail-closed"), "{text}");
    for (runtime, under_home) in installs {
        let line = format!("{runtime} ({}", home.path().join(under_home).display());
        assert!(text.contains(&line), "{runtime} is checked: {text}");
    }

    // Copilot's deciding hook gone, and OpenCode's plugin running a bare
    // command (fails open): each named, with its fix.
    let copilot = home.path().join(".copilot/hooks/toolgate.json");
    let mut hooks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&copilot).unwrap()).unwrap();
    hooks["hooks"].as_object_mut().unwrap().remove("preToolUse");
    std::fs::write(&copilot, hooks.to_string()).unwrap();
    let plugin = home.path().join(".config/opencode/plugin/toolgate.js");
    let bare = format!(
        "const COMMAND = {};",
        serde_json::json!(format!("{BIN} hook opencode"))
    );
    let source = std::fs::read_to_string(&plugin).unwrap();
    let source: String = source
        .lines()
        .map(|line| {
            if line.starts_with("const COMMAND = ") {
                bare.as_str()
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&plugin, source).unwrap();
    let (out, text) = doctor(home.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("no preToolUse hook, so no call is decided"),
        "{text}"
    );
    assert!(
        text.contains("opencode tool.execute.before: the command fails open"),
        "{text}"
    );
    // The fix keeps the config the hooks name.
    let config = setup.dir.path().join("toolgate.toml");
    assert!(
        text.contains(&format!(
            "fix: toolgate --config {} hook install --for copilot --write",
            config.display()
        )),
        "{text}"
    );
}

/// `doctor` for `home`, run in the project `dir` (whose `.claude/`
/// settings Claude Code merges too).
fn doctor_in(home: &Path, dir: &Path) -> (Output, String) {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let out = Command::new(BIN)
        .arg("doctor")
        .current_dir(dir)
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

/// What Claude Code would really run: `disableAllHooks` at any level the
/// user or the project writes turns the hooks off, and a `PreToolUse`
/// matcher narrowed from `*` leaves the other tools unjudged. Each is
/// named, not "fail-closed"; the fix printed keeps the person's config
/// and, run verbatim, makes doctor content again.
#[test]
fn doctor_names_what_switches_the_hooks_off_and_its_fix_works_verbatim() {
    let setup = Setup::new("");
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    install(&setup, home.path(), &[]);
    let settings_file = home.path().join(".claude/settings.json");
    let installed = std::fs::read_to_string(&settings_file).unwrap();
    let (out, text) = doctor_in(home.path(), project.path());
    assert_eq!(out.status.code(), Some(0), "{text}");

    // disableAllHooks, in the user's settings, then in the project's own.
    let mut settings: serde_json::Value = serde_json::from_str(&installed).unwrap();
    settings["disableAllHooks"] = serde_json::json!(true);
    std::fs::write(&settings_file, settings.to_string()).unwrap();
    let (out, text) = doctor_in(home.path(), project.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "!!  claude-code: {} sets disableAllHooks: true",
            settings_file.display()
        )),
        "{text}"
    );
    assert!(text.contains("NOT fail-closed"), "{text}");
    std::fs::write(&settings_file, &installed).unwrap();
    let local = project.path().join(".claude/settings.local.json");
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    std::fs::write(&local, r#"{"disableAllHooks": true}"#).unwrap();
    let (out, text) = doctor_in(home.path(), project.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&local.display().to_string()), "{text}");
    std::fs::remove_file(&local).unwrap();

    // PreToolUse only for Read: named, with a fix that keeps the config.
    let narrowed = installed.replace("\"matcher\": \"*\"", "\"matcher\": \"Read\"");
    assert_ne!(narrowed, installed, "the install has a `*` matcher");
    std::fs::write(&settings_file, &narrowed).unwrap();
    let (out, text) = doctor_in(home.path(), project.path());
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("hook runs only for tools matching `Read`"),
        "{text}"
    );
    let fix = text
        .lines()
        .skip_while(|l| !l.contains("runs only for tools matching"))
        .find_map(|l| l.trim().strip_prefix("fix: "))
        .unwrap_or_else(|| panic!("no fix: {text}"))
        .to_string();
    let config = setup.dir.path().join("toolgate.toml");
    assert!(
        fix.contains(&format!("--config {}", config.display())),
        "{fix}"
    );
    let bin_dir = Path::new(BIN).parent().unwrap();
    let ran = Command::new("sh")
        .args(["-c", &fix])
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(ran.status.success(), "{fix}: {ran:?}");
    let (out, text) = doctor_in(home.path(), project.path());
    assert_eq!(out.status.code(), Some(0), "after `{fix}`: {text}");
}
