//! toolgate inside the real Gemini CLI (from npm), run offline against a
//! scripted Gemini API on 127.0.0.1 (`GOOGLE_GEMINI_BASE_URL`), with the
//! hooks exactly as `toolgate hook install --for gemini-cli --write` writes
//! them into a throwaway HOME.
//!
//! `.ci/run` installs Gemini CLI into `target/real-clients`; run alone, this
//! test installs it there itself, and fails, naming the command, when npm
//! cannot (see `common::missing` for skipping on purpose).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::gemini_api::{GeminiApi, Part};
use common::hooks::StopDaemon;
use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest, socket_for_store};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
/// The Gemini CLI release these facts were measured on.
const GEMINI_CLI: (&str, &str) = ("@google/gemini-cli", ".bin/gemini");

/// The `functionResponse` parts of a request's last message, by name.
fn function_responses(request: &Value) -> Vec<(String, Value)> {
    let last = request["contents"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|part| {
            let response = part.get("functionResponse")?;
            Some((
                response["name"].as_str()?.to_string(),
                response["response"].clone(),
            ))
        })
        .collect()
}

#[test]
fn inside_gemini_cli_a_read_runs_and_a_risky_shell_command_gets_toolgates_reason() {
    let Some(modules) = common::npm::node_modules(&[GEMINI_CLI]) else {
        return;
    };
    let gemini = modules.join(GEMINI_CLI.1);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::create_dir_all(project.join("build")).unwrap();
    std::fs::write(project.join("a.txt"), "alpha contents\n").unwrap();
    // Offline: an API key, no folder-trust prompt, no updates or telemetry.
    let settings = home.join(".gemini/settings.json");
    let offline = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
    });
    std::fs::write(&settings, offline.to_string()).unwrap();
    let config = dir.path().join("toolgate.toml");
    let body = format!(
        "store = \"state/toolgate.redb\"\n{}",
        toolgate::config::DEFAULT_CONFIG
    );
    std::fs::write(&config, common::config_text(&body)).unwrap();
    let store = dir.path().join("state/toolgate.redb");
    let _stop = StopDaemon(store.clone());

    // One command installs the hooks, next to the settings already there.
    let installed = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["hook", "install", "--for", "gemini-cli", "--write"])
        .arg(&settings)
        .output()
        .unwrap();
    assert!(installed.status.success(), "{installed:?}");

    let file = project.join("a.txt").display().to_string();
    let api = GeminiApi::start(vec![
        vec![Part::Call("read_file".into(), json!({"file_path": file}))],
        vec![Part::Call(
            "run_shell_command".into(),
            json!({"command": "echo 'export EDITOR=vim' >> ~/.bashrc", "description": "Set the editor"}),
        )],
        vec![Part::Text("Understood; I will not remove it.".into())],
    ]);

    let child = Command::new(&gemini)
        .args(["-p", "Read a.txt, then set my editor.", "--yolo"])
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GEMINI_API_KEY", "offline-test-key")
        .env("GOOGLE_GEMINI_BASE_URL", &api.base_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = common::wait_bounded(child, Duration::from_secs(240));
    let diagnosis = format!(
        "status {:?}\nrequests: {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        api.seen(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{diagnosis}");

    let turns = api.turns();
    assert!(turns.len() >= 3, "three model turns: {diagnosis}");
    // The read ran: its contents reached the model.
    let after_read = function_responses(&turns[1]);
    let (_, read) = after_read
        .iter()
        .find(|(name, _)| name == "read_file")
        .unwrap_or_else(|| panic!("no read_file result: {after_read:?}"));
    assert!(read.to_string().contains("alpha contents"), "{read}");
    // The shell command was stopped, with toolgate's reason as the error.
    let after_shell = function_responses(&turns[2]);
    let (_, shell) = after_shell
        .iter()
        .find(|(name, _)| name == "run_shell_command")
        .unwrap_or_else(|| panic!("no run_shell_command result: {after_shell:?}"));
    let error = shell["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("toolgate (safeguards asks): ") && error.contains("~/.bashrc"),
        "toolgate's reason reaches the model: {shell}"
    );
    assert!(!home.join(".bashrc").exists(), "the command did not run");

    // The daemon decided both calls, as Bash and Read, on Gemini CLI's
    // channel, and recorded the read's outcome.
    let client = Client::new(socket_for_store(&store));
    let log = client
        .call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 100,
        })
        .expect("the hook started the daemon");
    let decided: Vec<(String, String)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["entry"]["tool"].as_str().unwrap().to_string(),
                row["entry"]["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        decided.contains(&("Read".into(), "allow".into())),
        "{decided:?}"
    );
    assert!(
        decided.contains(&("Bash".into(), "pause".into())),
        "{decided:?}"
    );
    let events = client
        .call(&DaemonRequest::Events { limit: 50 })
        .unwrap()
        .to_string();
    assert!(events.contains("\"tool\":\"Read\""), "{events}");
}
