//! toolgate inside the real OpenAI Codex CLI (npm `@openai/codex`), run
//! offline (`codex exec`) against a scripted Responses API on 127.0.0.1,
//! with the hooks exactly as `toolgate hook install --for codex --write`
//! writes (and trusts) them in a throwaway `CODEX_HOME`.

use crate::common;

use std::path::Path;

use common::agents::{BASH_ALWAYS, CodexHome, diagnosis, ran_unrefused};
use common::hooks::{BIN, StopDaemon};
use common::responses_api::{Item, ResponsesApi};

#[test]
fn inside_codex_parallel_calls_are_each_answered_and_switching_toolgate_off_is_refused() {
    let api = ResponsesApi::start(vec![
        // Two calls in one response (Codex may run them side by side): a
        // safe one, and an agent switching toolgate off, refused whatever
        // Codex's mode.
        vec![
            Item::Shell("call_safe".into(), "echo safe-call-ran".into()),
            Item::Shell(
                "call_off".into(),
                "sed -i '/trusted_hash/d' ~/.codex/config.toml && echo switched-off".into(),
            ),
        ],
        vec![Item::Text("Understood; I leave it alone.".into())],
    ]);
    let Some(user) = CodexHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    let said = user.install(Path::new(BIN));
    assert!(said.contains("trusted 4 of toolgate's hooks"), "{said}");

    let output = user.run("Say hello, then clean the build directory.");
    let diagnosis = diagnosis(&output, &api);
    assert!(output.status.success(), "{diagnosis}");
    let outputs = api.tool_outputs();
    let of = |id: &str| {
        outputs
            .iter()
            .find(|(call, _)| call == id)
            .map(|(_, output)| output.clone())
            .unwrap_or_else(|| panic!("no output for {id}: {diagnosis}"))
    };
    assert!(ran_unrefused(&of("call_safe")), "{diagnosis}");
    let refused = of("call_off");
    assert!(
        refused.contains("blocked by PreToolUse hook") && refused.contains("toolgate"),
        "toolgate's reason reaches the model: {refused}"
    );
    let config = std::fs::read_to_string(user.home.join(".codex/config.toml")).unwrap();
    assert!(config.contains("trusted_hash"), "the command did not run");
}

#[test]
fn inside_codex_a_broken_toolgate_blocks_the_tool() {
    let api = ResponsesApi::start(vec![
        vec![Item::Shell("call_touch".into(), "touch ran.txt".into())],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = CodexHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    // The hooks run a copy of toolgate, which the agent then breaks.
    let copy = user.dir.path().join("toolgate");
    std::fs::copy(BIN, &copy).unwrap();
    user.install(&copy);
    std::fs::write(&copy, "#!/bin/sh\nexit 1\n").unwrap();

    let output = user.run("Touch ran.txt.");
    let diagnosis = diagnosis(&output, &api);
    assert!(
        !user.project.join("ran.txt").exists(),
        "a broken hook must block the tool: {diagnosis}"
    );
    // The broken prompt hook already ends the turn (exit 2 blocks a
    // prompt in Codex, silently in `exec`): the model is never asked.
    assert!(
        api.requests().is_empty(),
        "the turn ends before the model: {diagnosis}"
    );
}

#[test]
fn inside_codex_a_pause_is_approved_from_a_terminal_and_the_retry_runs_once() {
    let api = ResponsesApi::start(vec![
        vec![
            Item::Shell("call_1".into(), "echo approved-call-ran".into()),
            Item::Shell("call_1b".into(), "echo second-call-ran".into()),
        ],
        vec![Item::Text("A person must approve it first.".into())],
        vec![Item::Shell(
            "call_2".into(),
            "echo approved-call-ran".into(),
        )],
        vec![Item::Text("It ran.".into())],
    ]);
    let Some(user) = CodexHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    let first = user.run("Say hi with echo.");
    let diagnosis = diagnosis(&first, &api);
    let session = String::from_utf8_lossy(&first.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|event| event["thread_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no thread id: {diagnosis}"));

    // Both calls paused; the person approves each from a terminal of
    // their own.
    common::agents::approve_each_pause(&api, &["call_1", "call_1b"], &user.config, &diagnosis);

    // The agent retries in the same session: it runs, once.
    let second = user.exec(&["resume", &session, "Approved; try again."]);
    let diagnosis = common::agents::diagnosis(&second, &api);
    let outputs = api.tool_outputs();
    let (_, ran) = outputs
        .iter()
        .find(|(id, _)| id == "call_2")
        .unwrap_or_else(|| panic!("no output for the retry: {diagnosis}"));
    assert!(ran.contains("approved-call-ran"), "{diagnosis}");
}
