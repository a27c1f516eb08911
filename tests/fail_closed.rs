//! No toolgate failure lets a tool run. The agent runtimes run the tool
//! when a hook exits 1, when its program is missing (127), and when it
//! exits 0 with nothing on stdout; each of those is what an agent gets by
//! breaking or replacing toolgate's files. These tests break them the way
//! an agent would and run the hook exactly as the runtime would: the shell
//! line `toolgate hook install` wrote, through `/bin/sh -c`.

use crate::common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::hooks::{BIN, Setup, bypassed_write as write_call, decision, event};
use serde_json::{Value, json};

const THIN: &str = env!("CARGO_BIN_EXE_toolgate-hook");

/// A call the bundled policies allow (the agent runs without prompts).
fn ls() -> Value {
    let mut call = event("PreToolUse", "s1", "Bash", json!({"command": "ls"}), "t1");
    call["permission_mode"] = json!("bypassPermissions");
    call
}

/// Both binaries linked into a directory of their own, so a test can take
/// them away or replace them without touching the build's.
struct Install {
    bin: tempfile::TempDir,
    setup: Setup,
}

impl Install {
    fn new(extra_config: &str) -> Self {
        let bin = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for (from, name) in [(BIN, "toolgate"), (THIN, "toolgate-hook")] {
            std::fs::hard_link(from, bin.path().join(name)).unwrap();
        }
        Self {
            bin,
            setup: Setup::new(extra_config),
        }
    }

    fn binary(&self, name: &str) -> PathBuf {
        self.bin.path().join(name)
    }

    /// What `toolgate hook install --for RUNTIME` prints, from this copy.
    fn settings(&self, runtime: &str) -> Value {
        let out = Command::new(self.binary("toolgate"))
            .arg("--config")
            .arg(self.setup.dir.path().join("toolgate.toml"))
            .arg("--store")
            .arg(self.setup.store())
            .args(["hook", "install", "--for", runtime])
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The installed shell line for `event` of `runtime`.
    fn line(&self, runtime: &str, event: &str) -> String {
        let settings = self.settings(runtime);
        let handler = match runtime {
            "cursor" => &settings["hooks"][event][0],
            _ => &settings["hooks"][event][0]["hooks"][0],
        };
        handler["command"].as_str().unwrap().to_string()
    }

    /// Replace `name` with a copy of `program` (or remove it: `None`).
    fn replace(&self, name: &str, program: Option<&Path>) {
        let path = self.binary(name);
        std::fs::remove_file(&path).unwrap();
        if let Some(program) = program {
            std::fs::copy(program, &path).unwrap();
        }
    }
}

/// Run a shell line as the runtimes do (`/bin/sh -c`), `stdin` written.
fn sh(line: &str, stdin: &Value) -> Output {
    common::output_with_stdin(
        Command::new("/bin/sh").arg("-c").arg(line),
        &stdin.to_string(),
    )
}

/// The runtimes' "block": exit 2 with toolgate's reason on stderr.
fn assert_blocked(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
    assert!(
        stderr.contains("toolgate: the hook failed or gave no answer"),
        "{what}: {stderr}"
    );
}

#[test]
fn the_installed_line_answers_an_ordinary_call() {
    let install = Install::new("");
    let out = sh(&install.line("claude-code", "PreToolUse"), &ls());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer, json!({}), "an allow is said, never silence");
}

#[test]
fn a_missing_hook_binary_blocks() {
    let install = Install::new("");
    let lines: Vec<(&str, String)> = [
        ("claude-code", "PreToolUse"),
        ("gemini-cli", "BeforeTool"),
        ("cursor", "beforeShellExecution"),
    ]
    .into_iter()
    .map(|(runtime, event)| (runtime, install.line(runtime, event)))
    .collect();
    install.replace("toolgate-hook", None);
    for (runtime, line) in lines {
        assert_blocked(&sh(&line, &ls()), runtime);
    }
}

#[test]
fn a_hook_binary_replaced_by_true_or_false_blocks() {
    for program in ["/bin/true", "/bin/false"] {
        let install = Install::new("");
        let line = install.line("claude-code", "PreToolUse");
        install.replace("toolgate-hook", Some(Path::new(program)));
        assert_blocked(&sh(&line, &ls()), program);
    }
}

#[test]
fn a_missing_full_command_behind_the_thin_client_blocks() {
    // No daemon runs, so the thin client hands the event to the full
    // command, which is gone.
    let install = Install::new("");
    let line = install.line("claude-code", "PreToolUse");
    install.replace("toolgate", None);
    let out = sh(&line, &ls());
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (verdict, reason) = decision(&answer);
    assert_eq!(verdict, "deny", "{answer}");
    assert!(reason.contains("cannot run"), "{reason}");
}

#[test]
fn a_config_that_cannot_load_answers_deny_in_every_runtime() {
    let setup = Setup::new("");
    let config = setup.dir.path().join("toolgate.toml");
    for (broken, expect) in [
        (Some("[plugins.lease-gate\n"), "TOML"),
        (None, "cannot read it"),
    ] {
        match broken {
            Some(text) => std::fs::write(&config, text).unwrap(),
            None => std::fs::remove_file(&config).unwrap(),
        }
        let out = setup.run(&["hook", "claude-code"], &ls().to_string());
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (verdict, reason) = decision(&answer);
        assert_eq!(verdict, "deny", "{answer}");
        assert!(reason.contains("config cannot be loaded"), "{reason}");
        assert!(reason.contains(expect), "{reason}");

        let gemini = setup.hook_json("gemini-cli", &[], &ls().to_string());
        assert_eq!(gemini["decision"], "deny", "{gemini}");
        let cursor = setup.hook_json("cursor", &[], &json!({"hook_event_name": "beforeShellExecution", "command": "ls", "conversation_id": "c"}).to_string());
        assert_eq!(cursor["permission"], "deny", "{cursor}");
    }
}

#[test]
fn claude_code_hooks_are_written_to_block_on_failure() {
    let install = Install::new("");
    let settings = install.settings("claude-code");
    for event in [
        "SessionStart",
        "PreToolUse",
        "PreSkillShellCommand",
        "PostToolUse",
        "UserPromptSubmit",
    ] {
        let handler = &settings["hooks"][event][0]["hooks"][0];
        assert_eq!(handler["onFailure"], "block", "{event}: {handler}");
    }
}

/// `Write` always needs a person, in bypassPermissions mode.
const WRITE_ALWAYS: &str = "[plugins.lease-gate.config.actions.Write]\neffects = [\"write-local\"]\napproval = \"always\"\n";

#[test]
fn a_daemon_serving_another_config_refuses_the_hook_instead_of_answering() {
    // The strict config pauses every Write; the daemon serves the bundled
    // default, which would let it run.
    let install = Install::new(WRITE_ALWAYS);
    let _daemon = install.setup.serve_bundled();
    for (how, out) in [
        (
            "full command",
            install
                .setup
                .run(&["hook", "claude-code"], &write_call().to_string()),
        ),
        (
            "installed line",
            sh(&install.line("claude-code", "PreToolUse"), &write_call()),
        ),
    ] {
        assert_eq!(out.status.code(), Some(0), "{how}: {out:?}");
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (verdict, reason) = decision(&answer);
        assert_eq!(
            verdict, "deny",
            "{how}: never the other config's allow: {answer}"
        );
        assert!(
            reason.contains("serves the bundled default config")
                && reason.contains("toolgate.toml"),
            "{how}: {reason}"
        );
    }
}

#[test]
fn a_command_naming_another_config_than_the_daemon_serves_is_refused() {
    let setup = Setup::new(WRITE_ALWAYS);
    let _daemon = setup.serve_bundled();
    let request = setup.dir.path().join("write.json");
    std::fs::write(
        &request,
        json!({"tool": "Write", "arguments": {"file_path": "/tmp/x", "content": "x"}}).to_string(),
    )
    .unwrap();
    let out = setup.run(&["check", request.to_str().unwrap()], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains("serves the bundled default config"),
        "{stderr}"
    );
}

#[test]
fn an_edited_config_is_read_again_before_the_hook_is_answered() {
    // The same file with new bytes is the config the person wants now.
    let install = Install::new("");
    let config = install.setup.dir.path().join("toolgate.toml");
    let allowed = install
        .setup
        .run(&["hook", "claude-code"], &write_call().to_string());
    assert_eq!(
        serde_json::from_slice::<Value>(&allowed.stdout).unwrap(),
        json!({})
    );
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(WRITE_ALWAYS);
    std::fs::write(&config, text).unwrap();
    let out = sh(&install.line("claude-code", "PreToolUse"), &write_call());
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision(&answer).0, "ask", "{answer}");
}

#[test]
fn a_substitute_at_the_socket_is_refused() {
    // Something other than the daemon listens at the socket and says yes to
    // everything. The hook expects the daemon's user (as in system mode,
    // where that user is not the agent's).
    let setup = Setup::new("");
    std::fs::create_dir_all(setup.store().parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(setup.socket()).unwrap();
    let substitute = std::thread::spawn(move || {
        use std::io::{BufRead as _, BufReader};
        if let Ok((stream, _)) = listener.accept() {
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            let _ = (&stream).write_all(b"{\"ok\":true,\"result\":\"{}\"}\n");
        }
    });
    let daemon_uid = (toolgate_wire::peer::own_uid() + 1).to_string();
    let out = common::output_with_stdin(
        Command::new(THIN)
            .arg("--socket")
            .arg(setup.socket())
            .args(["--daemon-uid", &daemon_uid, "--", "/bin/false"]),
        &ls().to_string(),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (verdict, reason) = decision(&answer);
    assert_eq!(verdict, "deny", "{answer}");
    assert!(reason.contains("not by toolgate's daemon"), "{reason}");
    // Unblock the substitute if the hook never connected.
    let _ = std::os::unix::net::UnixStream::connect(setup.socket());
    substitute.join().unwrap();
}

/// A full disk: while the store's file system has no space, a decision
/// that would change the store is refused, naming the store, never
/// allowed; nothing acknowledged is lost; and once space returns the
/// daemon decides again by itself, without a restart. The store lives on
/// a 4 MiB tmpfs mounted in a private mount namespace of the daemon's own
/// (so this runs as root), reached through `/proc/PID/root`.
#[test]
fn a_full_disk_refuses_and_the_daemon_recovers_when_space_returns() {
    let setup = Setup::with_config(common::ECHO_LEASES);
    // The lease is granted before the daemon starts, into the store it
    // then serves from the small file system.
    let grant = json!({"thread": "t1", "actions": ["echo"], "max_uses": 100000});
    setup
        .in_process()
        .command("lease-gate", "lease-grant", &grant.to_string())
        .unwrap();
    let mount = setup.dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let config = setup.dir.path().join("toolgate.toml");
    let script = format!(
        "mount -t tmpfs -o size=4m tmpfs {mount} && cp {store} {mount}/s.redb && \
         exec {BIN} --config {config} --store {mount}/s.redb serve",
        mount = mount.display(),
        store = setup.store().display(),
        config = config.display(),
    );
    let daemon = common::hooks::KillOnDrop(
        Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .spawn()
            .expect("unshare runs"),
    );
    let inside = PathBuf::from(format!("/proc/{}/root{}", daemon.0.id(), mount.display()));
    let socket = inside.join("s.redb.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let client = toolgate::daemon::Client::new(&socket);
    let call = |request: toolgate::daemon::DaemonRequest| client.call(&request);
    let echo = || {
        let mut request = toolgate::ToolRequest::new("echo", json!({}));
        request.thread_id = Some("t1".into());
        request.mode = toolgate::request::Mode::Autonomous;
        call(toolgate::daemon::DaemonRequest::Evaluate { request })
    };
    assert_eq!(echo().unwrap()["verdict"], "allow");

    // Fill the file system.
    let filler = inside.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    drop(file);
    // Full: every answer is a refusal naming the store, from the same
    // daemon, which stays up (before, it exited at the first one).
    for _ in 0..20 {
        let refused = echo().expect_err("no answer while the disk is full");
        let why = refused.to_string();
        assert!(
            why.contains("could not be made durable") || why.contains("store"),
            "{why}"
        );
        assert!(
            !matches!(refused, toolgate::daemon::ClientError::Unreachable { .. }),
            "the daemon stays up: {why}"
        );
    }
    let health = call(toolgate::daemon::DaemonRequest::Health).unwrap();
    assert_eq!(health["status"], "failing", "{health}");

    // Space returns: the daemon decides again by itself (a bound, as the
    // daemon probes the disk with backoff).
    std::fs::remove_file(&filler).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match echo() {
            Ok(answer) if answer["verdict"] == "allow" => break,
            answer => assert!(
                std::time::Instant::now() < deadline,
                "never recovered: {answer:?}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let health = call(toolgate::daemon::DaemonRequest::Health).unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(
        health["pid"],
        daemon.0.id(),
        "the same process, started afresh"
    );
}
