//! Claude Code's HTTP hooks into the daemon: `POST /v1/hooks/claude-code`
//! answers exactly as the command hook would, names its config the same
//! way, and `toolgate hook install` writes them (with `onFailure: "block"`)
//! when the config serves HTTP.

use crate::common;

use common::hooks::{Setup, bypassed_write as write_call, decision, event};
use serde_json::{Value, json};
use std::process::Command;

const WRITE_ALWAYS: &str = "[plugins.lease-gate.config.actions.Write]\neffects = [\"write-local\"]\napproval = \"always\"\n";

fn with_http(extra: &str) -> (Setup, u16) {
    let port = common::free_port();
    let setup = Setup::new(&format!("{extra}[daemon]\nhttp = \"127.0.0.1:{port}\"\n"));
    (setup, port)
}

/// POST one event as Claude Code does; the status and the parsed body.
fn post(port: u16, query: &str, event: &Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(format!(
            "http://127.0.0.1:{port}/v1/hooks/claude-code{query}"
        ))
        .header("content-type", "application/json")
        .send(event.to_string())
        .unwrap();
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&body).unwrap_or(json!(body)))
}

fn config_query(setup: &Setup) -> String {
    let config = std::fs::canonicalize(setup.dir.path().join("toolgate.toml")).unwrap();
    format!("?config={}", config.display())
}

#[test]
fn an_http_hook_is_answered_as_the_command_hook_would() {
    let (setup, port) = with_http(WRITE_ALWAYS);
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[]));
    let (status, answer) = post(port, &config_query(&setup), &write_call());
    assert_eq!(status, 200);
    let (verdict, reason) = decision(&answer);
    assert_eq!(verdict, "ask", "{answer}");
    assert!(reason.contains("Allow `Write`?"), "{reason}");

    let mut prompt = event("UserPromptSubmit", "s1", "", json!({}), "");
    prompt["prompt"] = json!("next");
    assert_eq!(post(port, &config_query(&setup), &prompt), (200, json!({})));

    // Not JSON: the runtime's deny, with why, still 200.
    let (status, answer) = post(port, &config_query(&setup), &json!("not an event"));
    assert_eq!(status, 200);
    assert_eq!(decision(&answer).0, "deny", "{answer}");
}

#[test]
fn an_http_hook_naming_another_config_is_refused() {
    let (setup, port) = with_http(WRITE_ALWAYS);
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[]));
    // A file the caller may not read says nothing of itself: it is not
    // read at all (its digest would be a file oracle).
    let other = setup.dir.path().join("other.toml");
    std::fs::write(&other, "").unwrap();
    let empty_sha256 = "e3b0c44298fc";
    for query in [
        String::new(),
        format!("?config={}", other.display()),
        "?config=/nonexistent/toolgate.toml".to_string(),
    ] {
        let (status, answer) = post(port, &query, &write_call());
        assert_eq!(status, 200);
        let (verdict, reason) = decision(&answer);
        assert_eq!(verdict, "deny", "{query}: {answer}");
        assert!(reason.contains("the toolgate daemon serves"), "{reason}");
        assert!(!reason.contains(empty_sha256), "{reason}");
    }
}

#[test]
fn install_writes_http_hooks_when_the_config_serves_http() {
    let (setup, port) = with_http("");
    let out = setup.run(&["hook", "install"], "");
    assert!(out.status.success(), "{out:?}");
    let settings: Value = serde_json::from_slice(&out.stdout).unwrap();
    let handler = |event: &str| settings["hooks"][event][0]["hooks"][0].clone();
    let config = std::fs::canonicalize(setup.dir.path().join("toolgate.toml")).unwrap();
    for event in ["PreToolUse", "PostToolUse", "UserPromptSubmit"] {
        let handler = handler(event);
        assert_eq!(handler["type"], "http", "{event}: {handler}");
        assert_eq!(
            handler["url"],
            format!(
                "http://127.0.0.1:{port}/v1/hooks/claude-code?config={}",
                config.display()
            )
        );
        assert_eq!(handler["onFailure"], "block");
    }
    // SessionStart starts the daemon, so it stays a command.
    assert_eq!(handler("SessionStart")["type"], "command");

    let command = setup.run(&["hook", "install", "--transport", "command"], "");
    let settings: Value = serde_json::from_slice(&command.stdout).unwrap();
    assert_eq!(
        settings["hooks"]["PreToolUse"][0]["hooks"][0]["type"],
        "command"
    );

    let plain = Setup::new("");
    let refused = plain.run(&["hook", "install", "--transport", "http"], "");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("[daemon] http"),
        "{refused:?}"
    );
}

/// A daemon of its own user serves several OS users and decides only over
/// its socket (where the kernel names the caller), so installing for it
/// writes command hooks, and HTTP ones are refused with why.
#[test]
fn install_for_a_daemon_of_its_own_user_writes_command_hooks() {
    let (setup, _port) = with_http("");
    let config = setup.dir.path().join("toolgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[daemon]\n", "[daemon]\nuser = \"root\"\n"),
    )
    .unwrap();
    let out = setup.run(&["hook", "install"], "");
    assert!(out.status.success(), "{out:?}");
    let settings: Value = serde_json::from_slice(&out.stdout).unwrap();
    for event in ["PreToolUse", "PostToolUse", "UserPromptSubmit"] {
        let handler = &settings["hooks"][event][0]["hooks"][0];
        assert_eq!(handler["type"], "command", "{event}: {handler}");
    }
    let refused = setup.run(&["hook", "install", "--transport", "http"], "");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("HTTP cannot tell users apart"),
        "{refused:?}"
    );
}

/// POST `event` to `runtime`'s endpoint; the answer's text.
fn post_to(port: u16, runtime: &str, query: &str, event: &Value) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .post(format!("http://127.0.0.1:{port}/v1/hooks/{runtime}{query}"))
        .send(event.to_string())
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.body_mut().read_to_string().unwrap()
}

/// A deciding event whose tool input is not an object is malformed, on
/// every runtime: refused, naming the field, never decided as if the
/// input were empty (an allow, before).
#[test]
fn a_tool_input_that_is_not_an_object_is_refused_on_every_runtime() {
    let (setup, port) = with_http("");
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[]));
    let query = config_query(&setup);
    let events = |input: Value| {
        [
            (
                "claude-code",
                "tool_input",
                json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": input}),
            ),
            (
                "codex",
                "tool_input",
                json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": input}),
            ),
            (
                "gemini-cli",
                "tool_input",
                json!({"session_id": "s", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": input}),
            ),
            (
                "cursor",
                "tool_input",
                json!({"conversation_id": "s", "hook_event_name": "beforeMCPExecution", "tool_name": "run", "server": "shell", "tool_input": input}),
            ),
            (
                "copilot",
                "toolArgs",
                json!({"sessionId": "s", "toolName": "bash", "toolArgs": input}),
            ),
            (
                "opencode",
                "args",
                json!({"session_id": "s", "hook_event_name": "tool.execute.before", "tool": "bash", "args": input}),
            ),
        ]
    };
    // Any other field of the wrong type too, named.
    let mut typed = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}});
    for (field, wrong) in [
        ("session_id", json!(5)),
        ("cwd", json!(["/"])),
        ("permission_mode", json!(true)),
    ] {
        typed[field] = wrong;
        let answer = post_to(port, "claude-code", &query, &typed);
        assert!(answer.contains("deny"), "{field}: {answer}");
        assert!(
            answer.contains(&format!("`{field}` is malformed")),
            "{answer}"
        );
        typed[field] = json!("x");
    }
    for input in [
        json!("rm -rf /"),
        json!(["rm", "-rf", "/"]),
        json!(7),
        json!(null),
    ] {
        for (runtime, field, event) in events(input.clone()) {
            let answer = post_to(port, runtime, &query, &event);
            assert!(
                answer.contains("deny") || answer.contains("block"),
                "{runtime}, {field} = {input}: {answer}"
            );
            assert!(answer.contains(field), "{runtime}: names {field}: {answer}");
        }
    }
}

/// The config a hook's URL names is read only as a regular file of
/// bounded size, off the daemon's async threads: the served path swapped
/// for a FIFO, a link to `/dev/zero` or a huge file is refused with why,
/// and the daemon keeps answering meanwhile (a FIFO wedged it, `/dev/zero`
/// grew it by a gigabyte in seconds).
#[test]
fn a_config_that_is_not_a_small_regular_file_is_refused_unread() {
    let (setup, port) = with_http("");
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[]));
    let query = config_query(&setup);
    let config = setup.dir.path().join("toolgate.toml");
    std::fs::rename(&config, setup.dir.path().join("kept.toml")).unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(20)))
        .build()
        .into();
    let swaps: [(&str, &dyn Fn()); 3] = [
        ("not a regular file", &|| {
            let made = Command::new("mkfifo").arg(&config).status().unwrap();
            assert!(made.success());
        }),
        ("not a regular file", &|| {
            std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
        }),
        ("larger than", &|| {
            let file = std::fs::File::create(&config).unwrap();
            file.set_len(700 * 1024 * 1024).unwrap();
        }),
    ];
    for (why, swap) in swaps {
        let _ = std::fs::remove_file(&config);
        swap();
        let mut response = agent
            .post(format!(
                "http://127.0.0.1:{port}/v1/hooks/claude-code{query}"
            ))
            .send(write_call().to_string())
            .expect("answered, not wedged");
        let answer = response.body_mut().read_to_string().unwrap();
        assert_eq!(decision(&serde_json::from_str(&answer).unwrap()).0, "deny");
        assert!(answer.contains(why), "{why}: {answer}");
        let health = agent
            .get(format!("http://127.0.0.1:{port}/health"))
            .call()
            .expect("the daemon still answers");
        assert_eq!(health.status().as_u16(), 200);
    }
}
