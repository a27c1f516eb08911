//! toolgate inside the real Claude Code CLI (from npm), run offline against
//! a scripted Messages API on 127.0.0.1, with the hooks exactly as
//! `toolgate hook install --write` writes them into a throwaway HOME.
//!
//! `.ci/run` installs Claude Code into `target/real-clients`; run alone,
//! this test installs it there itself, and is skipped (saying so) only when
//! npm cannot reach its registry.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::hooks::StopDaemon;
use common::messages_api::{Block, MessagesApi};
use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest, socket_for_store};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
/// The Claude Code release line these facts were measured on.
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1";

/// The installed `claude`, installing it if needed; `None` (with the reason
/// printed) only when npm cannot reach the registry.
fn claude_binary() -> Option<PathBuf> {
    let modules = common::npm::node_modules(&[(CLAUDE_CODE, ".bin/claude")])?;
    Some(modules.join(".bin/claude"))
}

/// The `tool_result` blocks of a request's messages, by `tool_use_id`.
fn tool_results(request: &Value) -> Vec<(String, bool, String)> {
    let mut results = Vec::new();
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let content = match &block["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                results.push((
                    block["tool_use_id"].as_str().unwrap_or("").to_string(),
                    block["is_error"] == json!(true),
                    content,
                ));
            }
        }
    }
    results
}

#[test]
fn inside_claude_code_parallel_reads_run_and_a_risky_bash_gets_toolgates_reason() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "alpha contents\n").unwrap();
    std::fs::write(project.join("b.txt"), "beta contents\n").unwrap();
    let config = dir.path().join("toolgate.toml");
    let body = format!(
        "store = \"state/toolgate.redb\"\n{}",
        toolgate::config::DEFAULT_CONFIG
    );
    std::fs::write(&config, common::config_text(&body)).unwrap();
    let store = dir.path().join("state/toolgate.redb");
    let _stop = StopDaemon(store.clone());

    // One command installs the hooks.
    let settings = home.join(".claude/settings.json");
    let installed = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["hook", "install", "--write"])
        .arg(&settings)
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");

    let read = |id: &str, file: &str| {
        Block::ToolUse(
            id.into(),
            "Read".into(),
            json!({"file_path": project.join(file).display().to_string()}),
        )
    };
    let api = MessagesApi::start(vec![
        vec![
            Block::Text("Reading both files.".into()),
            read("toolu_read_a", "a.txt"),
            read("toolu_read_b", "b.txt"),
        ],
        vec![Block::ToolUse(
            "toolu_rm".into(),
            "Bash".into(),
            json!({"command": "rm -rf build", "description": "Remove the build directory"}),
        )],
        vec![Block::Text("Understood; I will not remove it.".into())],
    ]);

    let child = Command::new(&claude)
        .args([
            "-p",
            "Read a.txt and b.txt, then clean the build directory.",
        ])
        .args([
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-hook-events",
        ])
        .args(["--setting-sources", "user", "--model", "claude-sonnet-4-5"])
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", &api.base_url)
        .env("ANTHROPIC_API_KEY", "offline-test-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_bounded(child, Duration::from_secs(240));
    let transcript = String::from_utf8_lossy(&output.stdout);
    let diagnosis = format!(
        "status {:?}\nrequests: {:?}\nstdout:\n{transcript}\nstderr:\n{}",
        output.status,
        api.seen(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{diagnosis}");

    let turns = api.turns();
    assert!(turns.len() >= 3, "three model turns: {diagnosis}");
    // Both parallel Reads ran and their contents reached the model.
    let after_reads = tool_results(&turns[1]);
    for (id, expected) in [("toolu_read_a", "alpha"), ("toolu_read_b", "beta")] {
        let (_, is_error, content) = after_reads
            .iter()
            .find(|(tool_use, ..)| tool_use == id)
            .unwrap_or_else(|| panic!("no result for {id}: {after_reads:?}"));
        assert!(!is_error && content.contains(expected), "{id}: {content}");
    }
    // The risky Bash was stopped, with toolgate's reason as the tool result.
    let after_bash = tool_results(&turns[2]);
    let (_, is_error, reason) = after_bash
        .iter()
        .find(|(id, ..)| id == "toolu_rm")
        .unwrap_or_else(|| panic!("no result for the Bash call: {after_bash:?}"));
    assert!(is_error, "{reason}");
    assert!(
        reason.contains("rm -rf build") && reason.contains("Allow `Bash`?"),
        "toolgate's reason reaches the model: {reason}"
    );

    // The first hook started the daemon, which decided every call and
    // recorded the Reads' outcomes.
    let client = Client::new(socket_for_store(&store));
    let health = client
        .call(&DaemonRequest::Health)
        .expect("the hook started the daemon");
    assert!(health["pid"].as_u64().is_some());
    let log = client
        .call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 100,
        })
        .unwrap();
    let decided: Vec<(String, String)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let entry = &row["entry"];
            (
                entry["tool"].as_str().unwrap().to_string(),
                entry["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decided
            .iter()
            .filter(|(tool, verdict)| tool == "Read" && verdict == "allow")
            .count(),
        2,
        "{decided:?}"
    );
    assert!(
        decided.contains(&("Bash".into(), "pause".into())),
        "{decided:?}"
    );
    let events = client.call(&DaemonRequest::Events { limit: 100 }).unwrap();
    let observed_reads = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["event"]["tool"] == "Read" && row["event"]["kind"] == "tool_call")
        .count();
    assert_eq!(
        observed_reads, 2,
        "PostToolUse recorded both Reads: {events}"
    );
}
