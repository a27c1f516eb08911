//! The Gemini CLI hook adapter end to end through the binary and the
//! store's daemon, with payloads shaped as Gemini CLI's hook reference
//! documents them.

use crate::common;

use common::hooks::Setup;
use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest};

fn event(name: &str, tool: &str, input: Value) -> Value {
    json!({
        "session_id": "gemini-session-1",
        "transcript_path": "/nonexistent/transcript.json",
        "cwd": "/home/dev/project",
        "hook_event_name": name,
        "timestamp": "2026-11-30T10:00:00Z",
        "tool_name": tool,
        "tool_input": input,
    })
}

/// Run `toolgate hook gemini-cli` (extra flags first) on `stdin`: its JSON answer.
fn hook(setup: &Setup, extra: &[&str], stdin: &str) -> Value {
    setup.hook_json("gemini-cli", extra, stdin)
}

#[test]
fn before_tool_answers_as_gemini_cli_reads_them() {
    let setup = Setup::new("");
    // Allowed: an empty object.
    let read = event(
        "BeforeTool",
        "read_file",
        json!({"absolute_path": "/home/dev/project/a.rs"}),
    );
    assert_eq!(hook(&setup, &[], &read.to_string()), json!({}));
    // Paused (publishing; Gemini CLI cannot ask): denied, saying how a
    // person approves.
    let rm = event(
        "BeforeTool",
        "run_shell_command",
        json!({"command": "npm publish"}),
    );
    let answer = hook(&setup, &[], &rm.to_string());
    assert_eq!(answer["decision"], "deny");
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("toolgate (safeguards asks): "),
        "who asks: {reason}"
    );
    assert!(
        reason.contains("toolgate gates resolve --request-id"),
        "{reason}"
    );
    // Self-protection holds for Gemini CLI's tool names too.
    let config = setup.dir.path().join("toolgate.toml");
    let edit = event(
        "BeforeTool",
        "replace",
        json!({"file_path": config.display().to_string(), "old_string": "a", "new_string": "b"}),
    );
    let answer = hook(&setup, &[], &edit.to_string());
    assert_eq!(answer["decision"], "deny");
    assert!(answer["reason"].as_str().unwrap().contains("control plane"));
    // An unknown tool still gets an answer per contract.
    let unknown = event("BeforeTool", "save_memory", json!({"fact": "x"}));
    assert!(hook(&setup, &[], &unknown.to_string()).is_object());
}

#[test]
fn malformed_input_is_never_a_silent_allow() {
    let setup = Setup::new("");
    let answer = hook(&setup, &[], "{\"session_id\": ");
    assert_eq!(answer["decision"], "deny");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("toolgate failed")
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
    let mut mcp = event(
        "BeforeTool",
        "mcp_github_create_issue",
        json!({"title": "x"}),
    );
    mcp["mcp_context"] =
        json!({"server_name": "github", "tool_name": "create_issue", "command": "npx"});
    hook(&setup, &[], &mcp.to_string());
    let log = setup.run(&["log", "--json"], "");
    let entry: Value = serde_json::from_str(
        String::from_utf8(log.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(entry["entry"]["tool"], "create_issue");
    assert_eq!(entry["entry"]["call"]["origin"], json!({"mcp": "github"}));

    let mut after = event("AfterTool", "read_file", json!({"absolute_path": "/a"}));
    after["tool_response"] = json!({"llmContent": "contents", "returnDisplay": "contents"});
    assert_eq!(hook(&setup, &[], &after.to_string()), json!({}));
    let events = setup.run(&["events", "--limit", "5"], "");
    assert!(
        String::from_utf8_lossy(&events.stdout).contains("\"tool\":\"Read\""),
        "{events:?}"
    );

    let prompt =
        json!({"session_id": "gemini-session-1", "hook_event_name": "BeforeAgent", "prompt": "hi"});
    for _ in 0..2 {
        assert_eq!(hook(&setup, &[], &prompt.to_string()), json!({}));
    }
    let turn = Client::new(setup.socket())
        .call(&DaemonRequest::Turn {
            session: "gemini-session-1".into(),
        })
        .unwrap();
    assert_eq!(turn, 2);
}

#[test]
fn install_writes_gemini_cli_settings_with_a_backup() {
    let setup = Setup::new("");
    let settings = setup.dir.path().join(".gemini/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"theme": "dark"}"#).unwrap();
    let out = setup.run(
        &[
            "hook",
            "install",
            "--for",
            "gemini-cli",
            "--write",
            settings.to_str().unwrap(),
        ],
        "",
    );
    assert!(out.status.success(), "{out:?}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(written["theme"], "dark");
    for event in ["SessionStart", "BeforeTool", "AfterTool", "BeforeAgent"] {
        let command = written["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert!(command.contains("hook gemini-cli"), "{event}: {command}");
    }
    assert!(
        setup.dir.path().join(".gemini/settings.json.bak").exists(),
        "the old file is kept"
    );
}
