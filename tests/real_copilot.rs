//! toolgate inside the real GitHub Copilot CLI (npm `@github/copilot`), run
//! offline (`copilot -p`, `COPILOT_OFFLINE`, a bring-your-own-key provider
//! on 127.0.0.1 speaking the Responses API), with the hooks exactly as
//! `toolgate hook install --for copilot --write` writes them into a
//! throwaway home's `~/.copilot/hooks/`.

use crate::common;

use std::path::Path;

use common::agents::{
    BASH_ALWAYS, BASH_UNASKED, CopilotHome, bash, diagnosis, output_of, ran_unrefused,
};
use common::hooks::{BIN, StopDaemon, pending_gates};
use common::responses_api::{Item, ResponsesApi};
use common::tmux::{Tmux, resolve_at_the_person_terminal};
use serde_json::Value;

#[test]
fn inside_copilot_parallel_calls_are_each_answered_and_switching_toolgate_off_is_refused() {
    let api = ResponsesApi::start(vec![
        // Two calls in one response, which Copilot runs side by side: a
        // safe one, and an agent switching toolgate off.
        vec![
            bash("call_safe", "echo safe-call-ran"),
            bash("call_off", "rm -rf ~/.copilot/hooks && echo switched-off"),
        ],
        vec![Item::Text("Understood; I leave it alone.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, BASH_UNASKED) else {
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
    let refused = output_of(&api, "call_off", &diagnosis);
    assert!(
        refused.contains("Denied by preToolUse hook") && refused.contains("toolgate"),
        "toolgate's reason reaches the model: {refused}"
    );
    assert!(user.hooks_file().exists(), "the command did not run");
}

#[test]
fn inside_copilot_a_broken_toolgate_blocks_the_tool() {
    let api = ResponsesApi::start(vec![
        vec![bash("call_touch", "touch ran.txt")],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, "") else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    // The hooks run a copy of toolgate, which the agent then breaks.
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
        output_of(&api, "call_touch", &diagnosis).contains("Denied by preToolUse hook"),
        "{diagnosis}"
    );
}

#[test]
fn inside_copilot_a_pause_is_approved_from_a_terminal_and_the_retry_runs_once() {
    let api = ResponsesApi::start(vec![
        vec![
            bash("call_1", "echo approved-call-ran >> ran.txt"),
            bash("call_1b", "echo second-call-ran >> ran2.txt"),
        ],
        vec![Item::Text("A person must approve it first.".into())],
        vec![bash("call_2", "echo approved-call-ran >> ran.txt")],
        vec![Item::Text("It ran.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));

    // `-p` cannot ask: Copilot denies the `ask` with toolgate's reason.
    let first = user.run(&[], "Record that it ran.");
    let diagnosis = diagnosis(&first, &api);
    assert!(!user.project.join("ran.txt").exists(), "{diagnosis}");
    // Its closing summary names the session: `copilot --resume=ID`.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&first.stdout),
        String::from_utf8_lossy(&first.stderr)
    );
    let session = said
        .split("--resume=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session to resume: {diagnosis}"))
        .to_string();

    // Both calls paused; the person approves each from a terminal of
    // their own.
    common::agents::approve_each_pause(&api, &["call_1", "call_1b"], &user.config, &diagnosis);

    // The agent retries in the same session: it runs, once.
    let resume = format!("--resume={session}");
    let second = user.run(&[&resume], "Approved; try again.");
    let diagnosis = common::agents::diagnosis(&second, &api);
    assert!(
        output_of(&api, "call_2", &diagnosis).contains("exit code 0"),
        "{diagnosis}"
    );
    let ran = std::fs::read_to_string(user.project.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "the approved call ran once: {diagnosis}"
    );
}

/// Copilot's window, and the person's own terminal beside it.
const COPILOT_WINDOW: &str = "copilot";
const PERSON: &str = "person";

/// The screen while Copilot's prompt asks about a call toolgate paused.
const ASKING: &str = "Hook permission request";

/// What Copilot's input box holds: the lines between the last two rules
/// of its screen.
fn input_box(screen: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    let rules: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim_start().starts_with("──"))
        .collect();
    match rules[..] {
        [.., above, below] => lines[above + 1..below].join("\n"),
        _ => String::new(),
    }
}

#[test]
fn in_the_copilot_tui_a_persons_answer_ends_the_pause_wherever_it_is_given() {
    let api = ResponsesApi::start(vec![
        vec![bash("call_a", "echo a >> a.txt")],
        vec![Item::Text("Wrote a.txt.".into())],
        vec![bash("call_b", "echo b >> b.txt")],
        vec![Item::Text("Left b.txt alone.".into())],
        vec![bash("call_c", "echo c >> c.txt")],
        vec![Item::Text("Waiting for your approval.".into())],
        vec![bash("call_c2", "echo c >> c.txt")],
        vec![Item::Text("Wrote c.txt.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, BASH_ALWAYS) else {
        return;
    };
    let _stop = StopDaemon(user.store.clone());
    user.install(Path::new(BIN));
    let env = user.env();
    let program = [
        user.copilot.display().to_string(),
        "--no-auto-update".into(),
    ];
    let Some(tmux) = Tmux::start(
        user.dir.path(),
        COPILOT_WINDOW,
        &user.project,
        &env,
        &program,
    ) else {
        return;
    };
    tmux.open(PERSON, &user.project, &env, &["sh".to_string()]);
    // A first run asks whether to trust the folder: yes, for this session.
    tmux.wait_for(COPILOT_WINDOW, "Do you trust the files in this folder?");
    tmux.press(COPILOT_WINDOW, &["Enter"]);
    tmux.wait_for(COPILOT_WINDOW, "Manual Approval");
    let prompt = |text: &str| {
        tmux.type_text(COPILOT_WINDOW, text);
        tmux.wait_until(COPILOT_WINDOW, "the prompt is typed", |s| {
            input_box(s).contains(text)
        });
        // Copilot may still be settling from the last answer and drop an
        // Enter (seen under load): press it until the prompt leaves the
        // input box, as a person would.
        for _ in 0..5 {
            tmux.press(COPILOT_WINDOW, &["Enter"]);
            let sent = (0..20).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(250));
                !input_box(&tmux.screen(COPILOT_WINDOW)).contains(text)
            });
            if sent {
                return;
            }
        }
        panic!("Copilot kept {text:?} in its input box");
    };
    let answer = |key: &str| {
        // After a beat, as a person answers (pacing, not a timing check).
        std::thread::sleep(std::time::Duration::from_secs(1));
        tmux.press(COPILOT_WINDOW, &[key]);
        tmux.wait_until(COPILOT_WINDOW, "Copilot's prompt closes", |s| {
            !s.contains(ASKING)
        });
    };
    let gates = || pending_gates(&user.config);

    // 1. Approve in Copilot's prompt. It says that toolgate asks, which
    //    policy, and why; the command runs; the gate ends.
    prompt("Write a.txt");
    let screen = tmux.wait_for(COPILOT_WINDOW, ASKING);
    assert!(
        screen.contains("toolgate (lease-gate asks)") && screen.contains("Allow `Bash`?"),
        "the prompt shows who asks and why:\n{screen}"
    );
    assert_eq!(gates().len(), 1, "one pause while Copilot asks");
    tmux.keep(COPILOT_WINDOW, "copilot-asks");
    answer("1");
    tmux.wait_for(COPILOT_WINDOW, "Wrote a.txt.");
    assert!(user.project.join("a.txt").exists());
    assert_eq!(gates(), Vec::<Value>::new(), "approved: the gate ended");

    // 2. Decline in Copilot's prompt: nothing runs, and the gate leaves
    //    `gates list` at once, not at its TTL.
    prompt("Write b.txt");
    tmux.wait_for(COPILOT_WINDOW, ASKING);
    assert_eq!(gates().len(), 1);
    answer("Escape");
    tmux.wait_for(COPILOT_WINDOW, "Left b.txt alone.");
    common::eventually_showing("the declined gate leaves the list", || {
        let gates = gates();
        (gates.is_empty(), format!("{gates:?}"))
    });
    assert!(!user.project.join("b.txt").exists());

    // 3. Approve from the person's own terminal while Copilot asks;
    //    dismiss Copilot's prompt, ask for a retry: it runs, and nobody is
    //    asked twice (toolgate answers `allow` for the person who approved).
    prompt("Write c.txt");
    tmux.wait_for(COPILOT_WINDOW, ASKING);
    resolve_at_the_person_terminal(&tmux, PERSON, &user.config, "approve", "Bash");
    answer("Escape");
    tmux.wait_for(COPILOT_WINDOW, "Waiting for your approval.");
    prompt("I approved it in my terminal; try again");
    tmux.wait_for(COPILOT_WINDOW, "Wrote c.txt.");
    let written = std::fs::read_to_string(user.project.join("c.txt")).unwrap_or_default();
    assert_eq!(written, "c\n", "the approved call ran once");
    assert_eq!(gates(), Vec::<Value>::new());
}

#[test]
fn inside_copilot_a_daemon_that_never_answers_is_a_deny_before_copilots_timeout() {
    let api = ResponsesApi::start(vec![
        vec![bash("call_touch", "touch ran.txt")],
        vec![Item::Text("It was blocked.".into())],
    ]);
    let Some(user) = CopilotHome::new(&api, "") else {
        return;
    };
    user.install(Path::new(BIN));
    // What a daemon stopped with SIGSTOP looks like to its clients: the
    // socket, served as this user, takes connections and never answers.
    let socket = toolgate::daemon::socket_for_store(&user.store);
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let hung = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hung.accept() {
            held.push(stream);
        }
    });

    let output = user.run(&[], "Touch ran.txt.");
    let diagnosis = diagnosis(&output, &api);
    assert!(
        !user.project.join("ran.txt").exists(),
        "Copilot ran the tool after its hook's timeout: {diagnosis}"
    );
    let refused = output_of(&api, "call_touch", &diagnosis);
    assert!(refused.contains("no answer within"), "{diagnosis}");
}
