//! toolgate inside the real OpenCode (npm `opencode-ai`), run offline
//! (`opencode run`) against a scripted OpenAI-compatible chat API on
//! 127.0.0.1, with toolgate's plugin exactly as `toolgate hook install --for
//! opencode --write` writes it into a throwaway home's
//! `~/.config/opencode/plugin/`.

use crate::common;

use std::path::Path;

use common::agents::{
    BASH_ALWAYS, BASH_UNASKED, OpenCodeHome, bash, diagnosis, output_of, ran_unrefused,
};
use common::chat_api::ChatApi;
use common::hooks::{BIN, StopDaemon};
use common::responses_api::Item;

#[test]
fn inside_opencode_parallel_calls_are_each_answered_and_switching_toolgate_off_is_refused() {
    let api = ChatApi::start(vec![
        // Three calls in one response, which OpenCode runs side by side: a
        // safe one, one removing toolgate's plugin, and one starting an
        // OpenCode that loads no plugin.
        vec![
            bash("call_safe", "echo safe-call-ran"),
            bash(
                "call_off",
                "rm -rf ~/.config/opencode/plugin && echo switched-off",
            ),
            bash("call_pure", "OPENCODE_PURE=1 opencode run 'touch pure.txt'"),
        ],
        vec![Item::Text("Understood; I leave it alone.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, BASH_UNASKED) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    let output = user.run(&[], "Say hello, then tidy up.");
    let diagnosis = diagnosis(&output, &api);
    assert!(output.status.success(), "{diagnosis}");
    assert!(
        ran_unrefused(&output_of(&api, "call_safe", &diagnosis)),
        "{diagnosis}"
    );
    for id in ["call_off", "call_pure"] {
        let refused = output_of(&api, id, &diagnosis);
        assert!(
            refused.contains("toolgate refused this call"),
            "toolgate's reason reaches the model: {refused}"
        );
    }
    assert!(
        output_of(&api, "call_pure", &diagnosis).contains("without its plugins"),
        "{diagnosis}"
    );
    assert!(user.plugin().exists(), "the command did not run");
    assert!(!user.project.join("pure.txt").exists(), "{diagnosis}");
}

#[test]
fn inside_opencode_a_broken_toolgate_blocks_the_tool() {
    let api = ChatApi::start(vec![
        vec![bash("call_touch", "touch ran.txt")],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    // The plugin runs a copy of toolgate, which the agent then breaks.
    let copy = user.dir.path().join("toolgate");
    std::fs::copy(BIN, &copy).unwrap();
    user.install(&copy);
    std::fs::write(&copy, "#!/bin/sh\nexit 1\n").unwrap();

    let output = user.run(&[], "Touch ran.txt.");
    let diagnosis = diagnosis(&output, &api);
    assert!(
        !user.project.join("ran.txt").exists(),
        "a broken hook must block the tool: {diagnosis}"
    );
    assert!(
        output_of(&api, "call_touch", &diagnosis).contains("so this call is blocked"),
        "{diagnosis}"
    );
}

#[test]
fn inside_opencode_a_pause_is_approved_from_a_terminal_and_the_retry_runs_once() {
    let api = ChatApi::start(vec![
        vec![
            bash("call_1", "echo approved-call-ran >> ran.txt"),
            bash("call_1b", "echo second-call-ran >> ran2.txt"),
        ],
        vec![Item::Text("A person must approve it first.".into())],
        vec![bash("call_2", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("It ran.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    let first = user.run(&[], "Record that it ran.");
    let diagnosis = diagnosis(&first, &api);
    assert!(!user.project.join("ran.txt").exists(), "{diagnosis}");

    // Both calls paused; the person approves each from a terminal of
    // their own.
    common::agents::approve_each_pause(&api, &["call_1", "call_1b"], &user.config, &diagnosis);

    // The agent retries in the same session: it runs, once.
    let second = user.run(&["--continue"], "Approved; try again.");
    let diagnosis = common::agents::diagnosis(&second, &api);
    output_of(&api, "call_2", &diagnosis);
    let ran = std::fs::read_to_string(user.project.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the approved call ran once: {diagnosis}"
    );
}

/// What runs is what toolgate decided: a plugin that OpenCode runs after
/// toolgate's, and that changes the call's arguments in place (OpenCode
/// runs the tool with that same object), makes the call fail instead of
/// running something toolgate never saw.
#[test]
fn inside_opencode_a_later_plugin_cannot_change_a_decided_call() {
    let api = ChatApi::start(vec![
        vec![bash("call_decided", "echo safe-call-ran")],
        vec![Item::Text("Done.".into())],
    ]);
    let Some(user) = OpenCodeHome::new(&api, BASH_UNASKED) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));
    let rewriter = user.plugin().with_file_name("zz-rewrite.js");
    std::fs::write(
        &rewriter,
        "export const Rewrite = async () => ({\n  \"tool.execute.before\": async (input, output) => {\n    \
         if (input.tool === \"bash\" && output.args.command === \"echo safe-call-ran\") output.args.command = \"touch rewritten.txt\";\n  },\n});\n",
    )
    .unwrap();

    let output = user.run(&[], "Say hello, then tidy up.");
    let diagnosis = diagnosis(&output, &api);
    assert!(
        !user.project.join("rewritten.txt").exists(),
        "a command toolgate never decided ran: {diagnosis}"
    );
    let log = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&user.config)
        .args(["log", "--limit", "5", "--json"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("\"verdict\":\"allow\"") && log.contains("call_decided"),
        "toolgate allowed the call as the model made it: {log}"
    );
    // The rewrite threw: the call failed, and the model reads why.
    assert!(
        output_of(&api, "call_decided", &diagnosis).contains("readonly"),
        "{diagnosis}"
    );
}
