//! The Cursor hook adapter end to end through the binary and the store's
//! daemon, with payloads shaped as Cursor's agent-hook reference documents
//! them (common fields `conversation_id`, `generation_id`,
//! `workspace_roots`, `hook_event_name`, plus each event's own).

use crate::common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::hooks::Setup;
use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest};

const CONVERSATION: &str = "cursor-conversation-1";

fn event(name: &str, fields: Value) -> Value {
    let mut event = json!({
        "conversation_id": CONVERSATION,
        "generation_id": "gen-1",
        "hook_event_name": name,
        "workspace_roots": ["/home/dev/project"],
        "cursor_version": "2.0.77",
        "model": "some-model",
    });
    let object = event.as_object_mut().unwrap();
    object.extend(fields.as_object().unwrap().clone());
    event
}

/// Run `toolgate hook cursor` (extra flags first) on `stdin`: its JSON answer.
fn hook(setup: &Setup, extra: &[&str], stdin: &str) -> Value {
    setup.hook_json("cursor", extra, stdin)
}

fn shell(name: &str, command: &str) -> Value {
    event(
        name,
        json!({"command": command, "cwd": "/home/dev/project"}),
    )
}

#[test]
fn before_events_answer_as_cursor_reads_them() {
    let setup = Setup::new("");
    // Allowed: no permission of our own, so Cursor's own rules still apply.
    let read = event(
        "beforeReadFile",
        json!({"file_path": "/home/dev/project/src/main.rs", "content": "fn main() {}"}),
    );
    assert_eq!(hook(&setup, &[], &read.to_string()), json!({}));

    // Paused (publishing a package): Cursor asks the person, with
    // toolgate's reason.
    let rm = shell("beforeShellExecution", "npm publish");
    let answer = hook(&setup, &[], &rm.to_string());
    assert_eq!(answer["permission"], "ask", "{answer}");
    assert!(
        answer["user_message"]
            .as_str()
            .unwrap()
            .starts_with("toolgate (safeguards asks): "),
        "{answer}"
    );

    // Self-protection holds for Cursor's events too.
    let config = setup.dir.path().join("toolgate.toml");
    let sed = shell(
        "beforeShellExecution",
        &format!("sed -i s/a/b/ {}", config.display()),
    );
    let answer = hook(&setup, &[], &sed.to_string());
    assert_eq!(answer["permission"], "deny", "{answer}");
    assert!(
        answer["agent_message"]
            .as_str()
            .unwrap()
            .contains("control plane")
    );

    // An unknown tool through preToolUse still gets an answer per contract.
    let unknown = event(
        "preToolUse",
        json!({"tool_name": "Todo", "tool_input": {"items": []}}),
    );
    assert!(hook(&setup, &[], &unknown.to_string()).is_object());
}

#[test]
fn a_read_cannot_ask_so_a_pause_denies_and_says_how_to_approve() {
    let asker = common::scripted(
        "asker",
        1,
        "verdict = \"pause\"\nreason = \"check it first\"",
    );
    let setup = Setup::new(&asker);
    let read = event(
        "beforeReadFile",
        json!({"file_path": "/home/dev/project/README.md"}),
    );
    let answer = hook(&setup, &[], &read.to_string());
    assert_eq!(answer["permission"], "deny", "{answer}");
    let message = answer["user_message"].as_str().unwrap();
    assert!(message.contains("check it first"), "{message}");
    assert!(
        message.contains("toolgate gates resolve --request-id"),
        "{message}"
    );
}

#[test]
fn a_pause_answered_in_cursors_prompt_is_closed_when_the_command_runs() {
    let setup = Setup::new("");
    let rm = shell("beforeShellExecution", "npm publish");
    assert_eq!(hook(&setup, &[], &rm.to_string())["permission"], "ask");
    assert_eq!(setup.pending_gates().len(), 1);
    // The person said yes in Cursor; the command ran.
    let mut ran = shell("afterShellExecution", "npm publish");
    ran["output"] = json!("");
    ran["duration"] = json!(12);
    assert_eq!(hook(&setup, &[], &ran.to_string()), json!({}));
    assert_eq!(setup.pending_gates().len(), 0);
}

#[test]
fn malformed_input_is_never_a_silent_allow() {
    let setup = Setup::new("");
    let answer = hook(&setup, &[], "{\"conversation_id\": ");
    assert_eq!(answer["permission"], "deny");
    assert!(
        answer["user_message"]
            .as_str()
            .unwrap()
            .contains("toolgate failed")
    );
    // A shell event without its command is malformed too.
    let missing = event("beforeShellExecution", json!({"cwd": "/"}));
    let answer = hook(&setup, &[], &missing.to_string());
    assert_eq!(answer["permission"], "deny");
    assert!(
        answer["user_message"]
            .as_str()
            .unwrap()
            .contains("without command")
    );
    // Only when the operator says so.
    assert_eq!(
        hook(&setup, &["--on-error", "allow"], "not json"),
        json!({})
    );
}

#[test]
fn mcp_tools_keep_their_server_and_outcomes_and_turns_are_recorded() {
    let setup = Setup::new("[log]\narguments = \"full\"\n");
    let last_logged = || -> Value {
        let log = setup.run(&["log", "--json"], "");
        let text = String::from_utf8(log.stdout).unwrap();
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    };
    // The server from the command that runs it; arguments as a JSON string.
    let mcp = event(
        "beforeMCPExecution",
        json!({
            "tool_name": "create_issue",
            "tool_input": "{\"title\": \"x\"}",
            "command": "npx -y @modelcontextprotocol/server-github",
        }),
    );
    hook(&setup, &[], &mcp.to_string());
    let entry = last_logged();
    assert_eq!(entry["entry"]["tool"], "create_issue");
    assert_eq!(
        entry["entry"]["call"]["origin"],
        json!({"mcp": "server-github"})
    );
    assert_eq!(entry["entry"]["arguments"], json!({"title": "x"}));
    // The `MCP:SERVER:TOOL` form of preToolUse.
    let generic = event(
        "preToolUse",
        json!({"tool_name": "MCP:linear:create_ticket", "tool_input": {"title": "y"}}),
    );
    hook(&setup, &[], &generic.to_string());
    assert_eq!(
        last_logged()["entry"]["call"]["origin"],
        json!({"mcp": "linear"})
    );

    let mut edited = event(
        "afterFileEdit",
        json!({"file_path": "/home/dev/project/a.rs"}),
    );
    edited["edits"] = json!([{"old_string": "a", "new_string": "b"}]);
    assert_eq!(hook(&setup, &[], &edited.to_string()), json!({}));
    let events = setup.run(&["events", "--limit", "5"], "");
    assert!(
        String::from_utf8_lossy(&events.stdout).contains("\"tool\":\"Edit\""),
        "{events:?}"
    );

    let prompt = event(
        "beforeSubmitPrompt",
        json!({"prompt": "hi", "attachments": []}),
    );
    for _ in 0..2 {
        assert_eq!(
            hook(&setup, &[], &prompt.to_string()),
            json!({"continue": true})
        );
    }
    let turn = Client::new(setup.socket())
        .call(&DaemonRequest::Turn {
            session: CONVERSATION.into(),
        })
        .unwrap();
    assert_eq!(turn, 2);
}

#[test]
fn install_writes_cursor_hooks_with_a_backup() {
    let setup = Setup::new("");
    let hooks = setup.dir.path().join(".cursor/hooks.json");
    std::fs::create_dir_all(hooks.parent().unwrap()).unwrap();
    let theirs =
        json!({"version": 1, "hooks": {"afterFileEdit": [{"command": "prettier --write"}]}});
    std::fs::write(&hooks, theirs.to_string()).unwrap();
    let out = setup.run(
        &[
            "hook",
            "install",
            "--for",
            "cursor",
            "--write",
            hooks.to_str().unwrap(),
        ],
        "",
    );
    assert!(out.status.success(), "{out:?}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&hooks).unwrap()).unwrap();
    assert_eq!(written["version"], 1);
    for event in [
        "beforeSubmitPrompt",
        "beforeShellExecution",
        "beforeMCPExecution",
        "beforeReadFile",
        "afterShellExecution",
        "afterMCPExecution",
        "afterFileEdit",
    ] {
        let ours = written["hooks"][event]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["command"].as_str().unwrap().contains("hook cursor"))
            .unwrap_or_else(|| panic!("no toolgate hook for {event}: {written}"));
        assert_eq!(ours["failClosed"], true, "{event}");
    }
    assert_eq!(
        written["hooks"]["afterFileEdit"][0]["command"], "prettier --write",
        "their hooks are kept"
    );
    assert!(
        setup.dir.path().join(".cursor/hooks.json.bak").exists(),
        "the old file is kept"
    );

    // The installed command is the thin client for Cursor, and runs as
    // Cursor runs it: first through the full command (which starts the
    // daemon), then through the daemon.
    let command = written["hooks"]["beforeSubmitPrompt"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|entry| entry["command"].as_str().filter(|c| c.contains("toolgate")))
        .unwrap();
    assert!(command.contains("--runtime cursor"), "{command}");
    let prompt = event("beforeSubmitPrompt", json!({"prompt": "hi"}));
    for _ in 0..2 {
        let mut shell = Command::new("/bin/sh")
            .args(["-c", command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        shell
            .stdin
            .take()
            .unwrap()
            .write_all(prompt.to_string().as_bytes())
            .unwrap();
        let ran = shell.wait_with_output().unwrap();
        let answer: Value = serde_json::from_slice(&ran.stdout).unwrap();
        assert_eq!(answer, json!({"continue": true}), "{ran:?}");
    }
}

#[test]
fn the_thin_client_fails_closed_in_cursors_terms() {
    // No daemon, and a full command that cannot run.
    let mut thin = Command::new(env!("CARGO_BIN_EXE_toolgate-hook"))
        .args([
            "--socket",
            "/nonexistent/toolgate.sock",
            "--runtime",
            "cursor",
            "--",
            "/nonexistent/toolgate",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let shell = shell("beforeShellExecution", "rm -rf /");
    thin.stdin
        .take()
        .unwrap()
        .write_all(shell.to_string().as_bytes())
        .unwrap();
    let ran = thin.wait_with_output().unwrap();
    assert!(ran.status.success());
    let answer: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(answer["permission"], "deny", "{answer}");
    assert!(
        answer["user_message"]
            .as_str()
            .unwrap()
            .contains("cannot run /nonexistent/toolgate"),
        "{answer}"
    );
}
