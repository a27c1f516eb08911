//! The Claude Code hook adapter end to end through the binary, with payloads
//! shaped as Claude Code sends them, and the daemon under concurrent clients.

use crate::common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .arg("--store")
        .arg(dir.join("cc.redb"))
        .args(args)
        .env("XDG_CACHE_HOME", common::cache_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn event(name: &str, tool: &str, input: Value) -> Value {
    json!({
        "session_id": "b7e4c0de-0000-4000-8000-000000000001",
        "transcript_path": "/nonexistent/transcript.jsonl",
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": name,
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": "toolu_01ABC",
        "some_future_field": {"ignored": true}
    })
}

/// Run the hook on `payload`; return its stdout parsed (None when silent).
fn hook(dir: &Path, payload: &Value) -> Option<Value> {
    let output = run(dir, &["hook", "claude-code"], &payload.to_string());
    assert_eq!(output.status.code(), Some(0), "the hook always exits 0");
    let stdout = String::from_utf8(output.stdout).unwrap();
    (!stdout.trim().is_empty()).then(|| serde_json::from_str(stdout.trim()).unwrap())
}

fn decision_of(answer: &Value) -> (&str, &str) {
    let out = &answer["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    (
        out["permissionDecision"].as_str().unwrap_or(""),
        out["permissionDecisionReason"].as_str().unwrap_or(""),
    )
}

#[test]
fn a_bash_npm_publish_is_put_to_the_person() {
    let dir = tempfile::tempdir().unwrap();
    let answer = hook(
        dir.path(),
        &event(
            "PreToolUse",
            "Bash",
            json!({"command": "npm publish", "description": "release"}),
        ),
    )
    .unwrap();
    let (decision, reason) = decision_of(&answer);
    assert_eq!(decision, "ask");
    assert!(reason.contains("npm publish"), "{reason}");
    // Who asks and how else to answer, also where the person sees it
    // whatever Claude Code's own prompt shows.
    assert!(
        reason.starts_with("toolgate (safeguards asks): "),
        "{reason}"
    );
    assert!(
        reason.contains("toolgate gates resolve --request-id"),
        "{reason}"
    );
    assert_eq!(answer["systemMessage"], reason, "{answer}");
}

/// The `tool_result` line Claude Code 2.1.332 writes to its transcript for
/// call `id` when the person answers No (or Esc) in its own prompt, or,
/// under `-p`, when a hook asks (`content` is then the hook's reason).
fn rejected_line(id: &str, content: &str) -> String {
    json!({
        "type": "user",
        "message": {"role": "user", "content": [{
            "type": "tool_result", "content": content, "is_error": true, "tool_use_id": id,
        }]},
        "toolUseResult": "User rejected tool use",
        "toolDenialKind": "user-rejected",
        "toolDenialBeforeRun": true,
    })
    .to_string()
}

fn pending_gates(dir: &Path) -> Vec<Value> {
    let listed = run(dir, &["gates", "list"], "");
    assert!(listed.status.success(), "{listed:?}");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a_call_declined_in_claude_codes_prompt_ends_its_gate_at_the_next_event() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("session.jsonl");
    std::fs::write(&transcript, "{\"type\":\"summary\"}\n").unwrap();
    let with_transcript = |mut payload: Value| {
        payload["transcript_path"] = json!(transcript);
        payload
    };
    let risky = with_transcript(event(
        "PreToolUse",
        "Bash",
        json!({"command": "npm publish", "description": "release"}),
    ));
    let asked = hook(dir.path(), &risky).unwrap();
    let (decision, reason) = decision_of(&asked);
    assert_eq!(decision, "ask");
    let gates = pending_gates(dir.path());
    assert_eq!(gates.len(), 1);
    let request_id = gates[0]["request_id"].as_str().unwrap().to_string();
    let mut next = with_transcript(event("PreToolUse", "Read", json!({"file_path": "/tmp/a"})));
    next["tool_use_id"] = json!("toolu_02");

    // Under `-p` the "ask" is recorded as a rejection carrying toolgate's
    // own reason: no decline, the person may still answer from a terminal.
    let mut lines = format!("{}\n", rejected_line("toolu_01ABC", reason));
    std::fs::write(&transcript, &lines).unwrap();
    hook(dir.path(), &next);
    assert_eq!(pending_gates(dir.path()).len(), 1, "still pending");
    assert!(reason.contains(&request_id));

    // A rejection of another call ends nothing.
    lines.push_str(&rejected_line(
        "toolu_other",
        "The user doesn't want to proceed",
    ));
    lines.push('\n');
    std::fs::write(&transcript, &lines).unwrap();
    hook(dir.path(), &next);
    assert_eq!(pending_gates(dir.path()).len(), 1, "still pending");

    // The person's No in the prompt ends the gate at the session's next
    // event, with nothing recorded: the same call asks again.
    lines.push_str(&rejected_line(
        "toolu_01ABC",
        "The user doesn't want to proceed",
    ));
    lines.push('\n');
    std::fs::write(&transcript, &lines).unwrap();
    hook(dir.path(), &next);
    assert_eq!(
        pending_gates(dir.path()),
        Vec::<Value>::new(),
        "declined: gone"
    );
    let mut again = risky.clone();
    again["tool_use_id"] = json!("toolu_03");
    let answer = hook(dir.path(), &again).unwrap();
    assert_eq!(decision_of(&answer).0, "ask", "asked anew: {answer}");
}

#[test]
fn write_and_edit_fall_through_silently() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        hook(
            dir.path(),
            &event(
                "PreToolUse",
                "Write",
                json!({"file_path": "/tmp/a", "content": "x"})
            )
        ),
        Some(json!({})),
        "no decision is said as {{}}"
    );
    assert_eq!(
        hook(
            dir.path(),
            &event(
                "PreToolUse",
                "Edit",
                json!({"file_path": "/tmp/a", "old_string": "x", "new_string": "y"})
            )
        ),
        Some(json!({})),
        "no decision is said as {{}}"
    );
}

#[test]
fn an_mcp_call_is_recognised_by_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let answer = hook(
        dir.path(),
        &event(
            "PreToolUse",
            "mcp__github__create_issue",
            json!({"title": "t"}),
        ),
    )
    .unwrap();
    let (decision, reason) = decision_of(&answer);
    assert_eq!(decision, "ask");
    assert!(reason.contains("mcp:github/create_issue"), "{reason}");
    let log = run(dir.path(), &["log", "--json"], "");
    let entry: Value = serde_json::from_str(
        String::from_utf8(log.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(entry["entry"]["tool"], "create_issue");
    assert_eq!(
        entry["entry"]["arguments"]["sha256"]
            .as_str()
            .unwrap()
            .len(),
        64,
        "arguments are digested by default"
    );
}

#[test]
fn a_transcript_past_the_warn_threshold_adds_context_without_deciding() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("agent.jsonl");
    let usage = json!({"type": "assistant", "message": {"role": "assistant", "usage": {
        "input_tokens": 12, "cache_creation_input_tokens": 988, "cache_read_input_tokens": 267000, "output_tokens": 5
    }}});
    std::fs::write(&transcript, format!("{usage}\n")).unwrap();
    let mut payload = event("PreToolUse", "Read", json!({"file_path": "/tmp/a"}));
    payload["transcript_path"] = json!(transcript);
    payload["agent_id"] = json!("subagent-1");
    let answer = hook(dir.path(), &payload).unwrap();
    let out = &answer["hookSpecificOutput"];
    assert!(
        out.get("permissionDecision").is_none(),
        "notes never decide: {answer}"
    );
    assert!(
        out["additionalContext"]
            .as_str()
            .unwrap()
            .contains("268000"),
        "{answer}"
    );
}

#[test]
fn malformed_stdin_is_denied_with_a_diagnosis() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(dir.path(), &["hook", "claude-code"], "{\"session_id\": ");
    assert_eq!(output.status.code(), Some(0));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    let (decision, reason) = decision_of(&answer);
    assert_eq!(decision, "deny");
    assert!(
        reason.contains("toolgate failed") && reason.contains("TOOLGATE_LOG=debug"),
        "{reason}"
    );
    // The daemon the hook started logs the failure to its file.
    let log = std::fs::read_to_string(dir.path().join("cc.redb.daemon.log")).unwrap();
    assert!(log.contains("hook failed"), "{log}");

    let output = run(
        dir.path(),
        &["hook", "claude-code", "--on-error", "ask"],
        "not json",
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(decision_of(&answer).0, "ask");
}

#[test]
fn a_post_tool_use_shows_in_the_sentinel_stream_at_the_current_turn() {
    let dir = tempfile::tempdir().unwrap();
    let prompt = json!({"session_id": "b7e4c0de-0000-4000-8000-000000000001", "hook_event_name": "UserPromptSubmit", "prompt": "list files"});
    assert_eq!(hook(dir.path(), &prompt), Some(json!({})));
    assert_eq!(hook(dir.path(), &prompt), Some(json!({})));
    let mut post = event("PostToolUse", "Bash", json!({"command": "ls"}));
    post["tool_response"] =
        json!({"stdout": "Cargo.toml\nsrc", "stderr": "", "interrupted": false});
    assert_eq!(hook(dir.path(), &post), Some(json!({})));
    let events = run(dir.path(), &["events", "--limit", "5"], "");
    let last: Value = serde_json::from_str(
        String::from_utf8(events.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["event"]["kind"], "tool_call");
    assert_eq!(last["event"]["tool"], "Bash");
    assert_eq!(last["event"]["turn"], 2, "two prompts: turn 2");
    assert!(
        last["event"]["summary"]
            .as_str()
            .unwrap()
            .contains("Cargo.toml")
    );
}

#[test]
fn a_forged_prompt_event_does_not_move_the_real_calls_into_a_new_turn() {
    // The agent can run the hook itself with any event. Claude Code names
    // each prompt (`prompt_id`) on every event that follows it, so the real
    // calls stay in their prompt's turn, and per-turn budgets hold.
    let dir = tempfile::tempdir().unwrap();
    let session = "b7e4c0de-0000-4000-8000-000000000001";
    let prompt = |id: Option<&str>| {
        let mut event =
            json!({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": "go"});
        if let Some(id) = id {
            event["prompt_id"] = json!(id);
        }
        event
    };
    let ran = |prompt_id: &str| {
        let mut post = event("PostToolUse", "Bash", json!({"command": "ls"}));
        post["prompt_id"] = json!(prompt_id);
        post["tool_response"] = json!({"stdout": "ok"});
        assert_eq!(hook(dir.path(), &post), Some(json!({})));
        let events = run(dir.path(), &["events", "--limit", "1"], "");
        let last: Value =
            serde_json::from_str(String::from_utf8(events.stdout).unwrap().trim()).unwrap();
        last["event"]["turn"].as_u64().unwrap()
    };
    assert_eq!(hook(dir.path(), &prompt(Some("p-real"))), Some(json!({})));
    assert_eq!(ran("p-real"), 1);
    // Forged: a prompt with an id of the agent's, and one with none.
    for forged in [prompt(Some("p-forged")), prompt(None)] {
        assert_eq!(hook(dir.path(), &forged), Some(json!({})));
    }
    assert_eq!(ran("p-real"), 1, "the real prompt's calls stay in its turn");
    // The person's next prompt is the next turn after everything counted.
    assert_eq!(hook(dir.path(), &prompt(Some("p-next"))), Some(json!({})));
    assert_eq!(ran("p-next"), 4);
}

#[test]
fn install_prints_and_merges_settings() {
    // A directory name a naive installer would break the shell command on.
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().join("it's here");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.as_path();
    let printed = run(dir, &["hook", "install"], "");
    let snippet: Value = serde_json::from_slice(&printed.stdout).unwrap();
    for event in [
        "SessionStart",
        "PreToolUse",
        "PreSkillShellCommand",
        "PostToolUse",
        "UserPromptSubmit",
    ] {
        let command = snippet["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert!(command.contains("hook claude-code"), "{command}");
        assert!(
            command.contains("toolgate-hook' --socket")
                || command.contains("toolgate-hook --socket"),
            "the thin client: {command}"
        );
    }
    // The installed command runs as Claude Code runs it: `/bin/sh -c`.
    let command = snippet["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    let mut shell = Command::new("/bin/sh")
        .args(["-c", command])
        .env("XDG_CACHE_HOME", common::cache_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(
            event("PreToolUse", "Read", json!({"file_path": "/a"}))
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    let ran = shell.wait_with_output().unwrap();
    assert!(ran.status.success() && ran.stdout == b"{}\n", "{ran:?}");
    let stop = Client::new(toolgate::daemon::socket_for_store(dir.join("cc.redb")));
    let pid = stop.call(&DaemonRequest::Health).unwrap()["pid"].to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let settings = dir.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "mine"}]}]}}"#).unwrap();
    for _ in 0..2 {
        let out = run(
            dir,
            &["hook", "install", "--write", settings.to_str().unwrap()],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(merged["model"], "opus", "other settings are kept");
    let pre = merged["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!(
        pre.len(),
        2,
        "the user's hook is kept and ours appears once: {pre:?}"
    );
}

/// A daemon process on a socket in `dir`; killed if the test fails.
struct DaemonProcess(Child);

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

/// Start `toolgate [global...] serve --socket DIR/NAME [serve...]` and wait
/// until it answers.
fn start_daemon(
    dir: &Path,
    global: &[&str],
    serve: &[&str],
) -> (DaemonProcess, std::path::PathBuf) {
    let socket = dir.join("toolgate.sock");
    let child = Command::new(BIN)
        .args(global)
        .arg("--store")
        .arg(dir.join("daemon.redb"))
        .args(["serve", "--socket"])
        .arg(&socket)
        .args(serve)
        .env("XDG_CACHE_HOME", common::cache_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = DaemonProcess(child);
    common::eventually("the daemon to come up", || Client::new(&socket).is_up());
    (daemon, socket)
}

use common::free_port;

fn http_get(port: u16, path: &str) -> String {
    use std::io::Read as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn the_daemon_serves_8_concurrent_clients_and_drains_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let (mut daemon, socket) = start_daemon(dir.path(), &[], &["--http", &http]);

    let clients: Vec<_> = (0..8)
        .map(|c| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let client = Client::new(&socket);
                for i in 0..25 {
                    let mut request = toolgate::ToolRequest::new(
                        "Bash",
                        json!({"command": format!("echo {c}-{i}")}),
                    );
                    request.session_id = format!("client-{c}");
                    request.mode = toolgate::request::Mode::InteractiveAutoApprove;
                    let decision = client.call(&DaemonRequest::Evaluate { request }).unwrap();
                    assert_eq!(decision["verdict"], "allow", "{decision}");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }

    // The hook forwards to the daemon.
    let hooked = Command::new(BIN)
        .args(["hook", "claude-code", "--connect"])
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut hooked_child = hooked;
    hooked_child
        .stdin
        .take()
        .unwrap()
        .write_all(
            event("PreToolUse", "Bash", json!({"command": "npm publish"}))
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    let output = hooked_child.wait_with_output().unwrap();
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(decision_of(&answer).0, "ask");

    assert!(http_get(port, "/health").contains("\"status\":\"ok\""));
    let metrics = http_get(port, "/metrics");
    assert!(
        metrics.contains("toolgate_decisions_total{verdict=\"allow\"} 200"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_decision_seconds_count 201"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("toolgate_policy_verdicts_total{policy=\"safeguards\",verdict=\"pause\"} 1"),
        "{metrics}"
    );

    // SIGTERM: stop, drain, exit 0, socket gone.
    let pid = daemon.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = daemon.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists());

    let store = toolgate::store::Store::open(&dir.path().join("daemon.redb")).unwrap();
    let probes = store.events().recent_events(1000).unwrap();
    // The sentinel asks the host about the first shell call of each
    // session (each its own instance); told no model is configured, it
    // asks no more for a minute: 8 + the hook's 1.
    assert_eq!(
        probes.len(),
        9,
        "every probe result was written before exit"
    );
    let log = store.log().decision_log(&Default::default(), 1000).unwrap();
    assert_eq!(log.len(), 201, "every decision was logged");
}

#[test]
fn retention_deletes_old_log_rows() {
    let host = common::host("[log]\nmax_entries = 5\narguments = \"redacted\"\n");
    for i in 0..12 {
        host.evaluate(&common::call(
            "Bash",
            json!({"command": format!("echo {i}")}),
        ))
        .unwrap();
    }
    host.persist();
    let log = host.decision_log(&Default::default(), 100).unwrap();
    assert_eq!(log.len(), 5);
    assert_eq!(
        log[0].1.arguments,
        json!({"command": "<6 chars>"}),
        "redacted keeps only the shape"
    );
    assert_eq!(log.first().unwrap().0, 7, "the oldest rows went first");

    let aged = common::host("[log]\nmax_age_secs = 1\n");
    aged.evaluate(&common::call("Read", json!({}))).unwrap();
    aged.persist();
    std::thread::sleep(Duration::from_millis(1100));
    aged.evaluate(&common::call("Grep", json!({}))).unwrap();
    aged.persist();
    let log = aged.decision_log(&Default::default(), 100).unwrap();
    assert_eq!(
        log.iter().map(|(_, e)| e.tool.as_str()).collect::<Vec<_>>(),
        ["Grep"]
    );
}

#[test]
fn a_policy_dropped_into_the_daemons_plugin_dir_is_served_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let config = dir.path().join("toolgate.toml");
    std::fs::write(&config, "plugin_dir = \"plugins\"\n").unwrap();
    let (mut daemon, socket) = start_daemon(
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &["--watch-ms", "20"],
    );
    let client = Client::new(&socket);
    let list = |dir: &Path| {
        let out = run(
            dir,
            &[
                "plugins",
                "list",
                "--json",
                "--socket",
                socket.to_str().unwrap(),
            ],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(list(dir.path()), json!([]));

    // Drop a policy in (renamed into place, as a deploy would).
    let tmp = plugins.join("guard.tmp");
    std::fs::copy(common::guest("scripted-policy"), &tmp).unwrap();
    std::fs::rename(&tmp, plugins.join("guard.wasm")).unwrap();
    common::eventually("the daemon to pick it up", || {
        !list(dir.path()).as_array().unwrap().is_empty()
    });
    let listed = list(dir.path());
    assert_eq!(listed[0]["name"], "guard");
    assert_eq!(listed[0]["priority"], 100);
    assert_eq!(listed[0]["problem"], Value::Null);

    // An explicit reload (by a person, at a terminal of their own) and
    // SIGHUP both reload, and are counted.
    let line = shlex::try_join([
        BIN,
        "plugins",
        "reload",
        "--socket",
        socket.to_str().unwrap(),
    ])
    .unwrap();
    let reloaded = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&reloaded.stdout);
    assert!(reloaded.status.success(), "{shown}");
    let report: Value = serde_json::from_str(&shown[shown.find('{').unwrap()..]).unwrap();
    assert_eq!(report["kept"], json!(["guard"]));
    // The watcher's reload (the drop) and the explicit one, at least.
    let reloads = || {
        let metrics = client.call(&DaemonRequest::Metrics).unwrap();
        let text = metrics.as_str().unwrap().to_string();
        let line = text
            .lines()
            .find(|line| line.starts_with("toolgate_reloads_total{result=\"ok\"}"))
            .unwrap_or_else(|| panic!("no reload count in the metrics:\n{text}"))
            .to_string();
        line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
    };
    let before = reloads();
    assert!(before >= 2, "reloads counted before SIGHUP: {before}");
    assert!(
        Command::new("kill")
            .args(["-HUP", &daemon.0.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    common::eventually("SIGHUP to reload", || reloads() == before + 1);
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.0.id().to_string()])
        .status();
    assert!(daemon.0.wait().unwrap().success());
}
