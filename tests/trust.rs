//! The trust boundary: the agent toolgate guards is the adversary. It runs
//! shell commands as the same user as the person, reads what that user can
//! read and talks to every local socket; it must not resolve its own pause,
//! administer toolgate, or change what guards it. A person at a terminal of
//! their own, or a channel adapter with its token, still can.

use crate::common;

use common::hooks::{Setup, event, permission};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use toolgate::ErrorKind;
use toolgate::daemon::{Client, DaemonRequest};
use toolgate::gates::GateResolution;

/// The issue's scenario: `Write` always needs a person; the agent runs in
/// bypassPermissions mode.
const WRITE_ALWAYS: &str = "[plugins.lease-gate.config.actions.Write]\neffects = [\"write-local\"]\napproval = \"always\"\n";

const SESSION: &str = "s-agent";

fn bypass(name: &str, tool: &str, input: Value, id: &str) -> Value {
    let mut payload = event(name, SESSION, tool, input, id);
    payload["permission_mode"] = json!("bypassPermissions");
    payload
}

fn reason(answer: &Option<Value>) -> String {
    answer.as_ref().unwrap()["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The agent's `Write` is paused; its request id.
fn paused_write(setup: &Setup) -> (Value, String) {
    paused_write_as(setup, "toolu_write")
}

/// [`paused_write`] as the call `id`: the agent's next attempt at the same
/// write is another call, with an id of its own.
fn paused_write_as(setup: &Setup, id: &str) -> (Value, String) {
    let write = bypass(
        "PreToolUse",
        "Write",
        json!({"file_path": "/home/dev/project/notes.md", "content": "hi"}),
        id,
    );
    assert_eq!(
        permission(&setup.hook(&write)),
        "ask",
        "Write always needs a person"
    );
    (write, the_request_id(setup))
}

fn the_request_id(setup: &Setup) -> String {
    let listed = setup.run(&["gates", "list"], "");
    let gates: Vec<Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(gates.len(), 1, "{gates:?}");
    gates[0]["request_id"].as_str().unwrap().to_string()
}

/// `gates resolve` as a channel adapter presenting the token in `token`,
/// from a process without a terminal.
fn as_channel(
    setup: &Setup,
    request_id: &str,
    channel: &str,
    token: &std::path::Path,
) -> std::process::Output {
    setup.without_a_terminal(&[
        "gates",
        "resolve",
        "--request-id",
        request_id,
        "--decision",
        "approve",
        "--channel",
        channel,
        "--token-file",
        token.to_str().unwrap(),
    ])
}

#[test]
fn the_agent_cannot_resolve_its_own_pause_in_any_form() {
    let setup = Setup::new(WRITE_ALWAYS);
    let (write, request_id) = paused_write(&setup);
    let config = setup.dir.path().join("toolgate.toml");
    let resolve_web = format!(
        "toolgate gates resolve --user local --thread {SESSION} --request-id {request_id} --channel web --decision approve"
    );

    // Through the agent's own tools: each call is refused before it runs.
    let attempts = [
        ("Bash", json!({"command": resolve_web.clone()})),
        ("Bash", json!({"command": format!("sh -c '{resolve_web}'")})),
        (
            "Bash",
            json!({"command": "toolgate command lease-gate lease-grant '{\"thread\": \"s-agent\", \"actions\": [\"Write\"]}'"}),
        ),
        (
            "Bash",
            json!({"command": format!(
                "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.sendall(b'{{}}')\"",
                setup.socket().display()
            )}),
        ),
        (
            "Bash",
            json!({"command": format!("sed -i 's/always/never/' {}", config.display())}),
        ),
        (
            "Write",
            json!({"file_path": config.display().to_string(), "content": "trusted_channels = [\"claude-code\"]"}),
        ),
        (
            "Edit",
            json!({"file_path": "~/.claude/settings.json", "old_string": "toolgate", "new_string": "true"}),
        ),
        (
            "Bash",
            json!({"command": format!("rm {}", setup.store().display())}),
        ),
    ];
    for (i, (tool, input)) in attempts.into_iter().enumerate() {
        let answer = setup.hook(&bypass(
            "PreToolUse",
            tool,
            input.clone(),
            &format!("toolu_attack_{i}"),
        ));
        assert_eq!(permission(&answer), "deny", "{tool} {input}");
        assert!(
            reason(&answer).contains("control plane"),
            "{}",
            reason(&answer)
        );
    }

    // Had the commands run anyway, the daemon refuses them itself.
    // The CLI, from a process without a terminal (an agent's tool):
    let cli = setup.without_a_terminal(&[
        "gates",
        "resolve",
        "--request-id",
        &request_id,
        "--decision",
        "approve",
        "--yes",
    ]);
    assert_eq!(cli.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("no terminal"),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    // ... naming a channel it has no token for:
    let token = setup.dir.path().join("guess.token");
    std::fs::write(&token, "guess").unwrap();
    let cli = as_channel(&setup, &request_id, "web", &token);
    assert!(String::from_utf8_lossy(&cli.stderr).contains("may not resolve pauses"));
    // ... an admin command:
    let grant = setup.without_a_terminal(&[
        "command",
        "lease-gate",
        "lease-grant",
        r#"{"thread": "s-agent", "actions": ["Write"]}"#,
    ]);
    assert_eq!(grant.status.code(), Some(1));
    // Said once, naming the command that was refused.
    let said = String::from_utf8_lossy(&grant.stderr);
    assert!(
        said.contains("run `toolgate command lease-gate lease-grant` yourself")
            && !said.contains("not allowed: not allowed"),
        "{said}"
    );
    // Raw JSON on the socket, from this process (which sent the agent's
    // hooks, so its session is the agent's):
    let client = Client::new(setup.socket());
    for channel in ["terminal", "web", "claude-code"] {
        let refused = client
            .call(&DaemonRequest::Resolve {
                user: "local".into(),
                thread: SESSION.into(),
                request_id: request_id.clone(),
                channel: channel.into(),
                token: None,
                resolution: GateResolution::Approve { always: true },
            })
            .unwrap_err();
        assert_eq!(
            refused.kind(),
            ErrorKind::Unauthorized,
            "{channel}: {refused}"
        );
    }
    let refused = client
        .call(&DaemonRequest::Command {
            plugin: "lease-gate".into(),
            name: "lease-grant".into(),
            args: json!({"thread": SESSION, "actions": ["Write"]}),
        })
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unauthorized);

    // The paused Write still needs a person.
    assert_eq!(
        the_request_id(&setup),
        request_id,
        "the gate is still pending"
    );
    let retry = setup.hook(&write);
    assert_eq!(permission(&retry), "ask");
}

#[test]
fn the_agents_own_terminal_cannot_approve_either() {
    let setup = Setup::new(WRITE_ALWAYS);
    let (_, request_id) = paused_write(&setup);
    // A terminal session that an agent's hook came from (the agent allocated
    // it, or shares the person's): its approvals are refused.
    let pre = std::env::temp_dir().join(format!("toolgate-pre-{}.json", std::process::id()));
    std::fs::write(
        &pre,
        bypass("PreToolUse", "Read", json!({"file_path": "/a"}), "toolu_r").to_string(),
    )
    .unwrap();
    let script = format!(
        "{} < {}; {}",
        setup.command_line(&["hook", "claude-code"]),
        pre.display(),
        setup.command_line(&[
            "gates",
            "resolve",
            "--request-id",
            &request_id,
            "--decision",
            "approve"
        ])
    );
    let out = setup.at_a_terminal(&script, "yes\n");
    let _ = std::fs::remove_file(&pre);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("terminal session is an agent's"), "{shown}");
    assert_eq!(the_request_id(&setup), request_id, "still pending");
}

#[test]
fn a_person_at_their_own_terminal_approves_and_the_call_runs() {
    let setup = Setup::new(WRITE_ALWAYS);
    let (write, request_id) = paused_write(&setup);
    // Typing anything but yes resolves nothing.
    let line = resolve_line(&setup, &request_id, "approve");
    let declined = setup.at_a_terminal(&line, "no\n");
    assert!(!declined.status.success());
    assert_eq!(the_request_id(&setup), request_id);

    let approved = setup.at_a_terminal(&line, "yes\n");
    let shown = String::from_utf8_lossy(&approved.stdout);
    assert!(approved.status.success(), "{shown}");
    assert!(
        shown.contains("notes.md"),
        "the person sees the call: {shown}"
    );
    // The agent retries; the approval lets it run once, and Claude Code
    // is told not to ask the person again. The same call resent (a hook's
    // retry) gets the same answer without taking the approval again; the
    // agent's next call of the same write is asked about anew.
    assert_eq!(permission(&setup.hook(&write)), "allow");
    assert_eq!(permission(&setup.hook(&write)), "allow", "the same call");
    assert_eq!(
        permission(&setup.hook(&with_call_id(&write, "toolu_write_2"))),
        "ask",
        "consumed once"
    );
}

/// `event` as the runtime's call `id`.
fn with_call_id(event: &Value, id: &str) -> Value {
    let mut event = event.clone();
    event["tool_use_id"] = json!(id);
    event
}

/// `toolgate gates resolve` of `request_id` with `decision`, as a shell line.
fn resolve_line(setup: &Setup, request_id: &str, decision: &str) -> String {
    setup.command_line(&[
        "gates",
        "resolve",
        "--request-id",
        request_id,
        "--decision",
        decision,
    ])
}

/// The person refuses the paused `Write` from a terminal of their own.
fn refused_write(setup: &Setup) -> Value {
    let (write, request_id) = paused_write(setup);
    let line = resolve_line(setup, &request_id, "deny");
    let refused = setup.at_a_terminal(&line, "yes\n");
    assert!(
        refused.status.success(),
        "{}",
        String::from_utf8_lossy(&refused.stdout)
    );
    write
}

#[test]
fn a_persons_no_is_an_answer_the_retry_is_refused_with_it_and_no_new_pause() {
    let setup = Setup::new(WRITE_ALWAYS);
    let write = refused_write(&setup);
    for retry in 0..2 {
        let answer = setup.hook(&write);
        assert_eq!(permission(&answer), "deny", "retry {retry}: {answer:?}");
        let why = reason(&answer);
        assert!(
            why.contains("A person refused this call")
                && why.contains("lease-gate had asked")
                && why.contains("over `terminal`"),
            "{why}"
        );
        assert!(setup.pending_gates().is_empty(), "no new pause");
    }
    // A different call asks anew.
    let mut other = write.clone();
    other["tool_input"]["content"] = json!("something else");
    assert_eq!(permission(&setup.hook(&other)), "ask");
}

#[test]
fn with_refusal_scope_once_only_the_next_retry_is_refused() {
    let setup = Setup::new(WRITE_ALWAYS);
    let config = setup.dir.path().join("toolgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let once = text.replacen(
        "[approvals]\n",
        "[approvals]\nrefusal_scope = \"once\"\n",
        1,
    );
    assert_ne!(once, text);
    std::fs::write(&config, once).unwrap();
    let write = refused_write(&setup);
    assert_eq!(permission(&setup.hook(&write)), "deny");
    assert_eq!(
        permission(&setup.hook(&write)),
        "deny",
        "the same call resent"
    );
    let next = with_call_id(&write, "toolu_write_2");
    assert_eq!(permission(&setup.hook(&next)), "ask", "used up");
}

/// The `web` channel's token, as its adapter holds it.
const WEB_TOKEN: &str = "adapter-secret-7f3a";

/// A setup whose `web` channel may resolve pauses with [`WEB_TOKEN`] (its
/// digest in the config), and the file the adapter reads the token from.
fn with_web_channel() -> (Setup, std::path::PathBuf) {
    let digest = hex::encode(Sha256::digest(WEB_TOKEN.as_bytes()));
    let setup = Setup::new(&format!(
        "{WRITE_ALWAYS}[approvals.tokens]\nweb = \"{digest}\"\n"
    ));
    let token_file = setup.dir.path().join("web.token");
    std::fs::write(&token_file, format!("{WEB_TOKEN}\n")).unwrap();
    (setup, token_file)
}

/// A resolution is answered only once it is on disk: with the daemon's
/// fsync failing, a channel's approval is refused with an error naming the
/// store, never reported done (a person told "approved" whose answer a
/// crash then loses would not know to answer again).
#[test]
fn a_resolution_that_could_not_be_made_durable_is_not_reported_done() {
    let (setup, token_file) = with_web_channel();
    let shim = crate::daemon::fsync_shim(setup.dir.path());
    let failing = setup.dir.path().join("fsync-fails");
    let env = [
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("FSYNC_SHIM_FAIL_FILE", failing.to_str().unwrap()),
    ];
    let _daemon = common::hooks::KillOnDrop(setup.serve(&env));
    let (_, request_id) = paused_write(&setup);
    std::fs::write(&failing, "").unwrap();
    let out = as_channel(&setup, &request_id, "web", &token_file);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("toolgate.redb"),
        "a resolution is done only once on disk: exit {:?}: {said}",
        out.status.code()
    );
}

#[test]
fn a_channel_adapter_with_its_token_resolves_over_the_socket_and_http() {
    let (setup, token_file) = with_web_channel();
    let token = WEB_TOKEN;
    let (write, request_id) = paused_write(&setup);
    // The adapter needs no terminal, only its token.
    let out = as_channel(&setup, &request_id, "web", &token_file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        permission(&setup.hook(&write)),
        "allow",
        "approved: it runs"
    );

    // Over HTTP: the token works; no token, or the terminal channel, does not.
    let (_, request_id) = paused_write_as(&setup, "toolu_write_2");
    let port = common::free_port();
    let pid = setup.daemon_pid().unwrap();
    common::hooks::signal(pid, "TERM");
    common::eventually("the daemon to stop", || !setup.socket().exists());
    let mut daemon = setup
        .command()
        .args(["serve", "--http", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::eventually("the daemon to come up", || {
        Client::new(setup.socket()).is_up()
    });
    let post = |body: Value| {
        use std::io::{Read as _, Write as _};
        let body = body.to_string();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(stream, "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let resolve = |channel: &str, token: Option<&str>| {
        let mut body = json!({"op": "resolve", "user": "local", "thread": SESSION, "request_id": request_id, "channel": channel, "resolution": {"decision": "approve"}});
        if let Some(token) = token {
            body["token"] = json!(token);
        }
        post(body)
    };
    for (channel, token) in [("terminal", None), ("web", None), ("web", Some("wrong"))] {
        let answer = resolve(channel, token);
        assert!(answer.starts_with("HTTP/1.1 403"), "{channel}: {answer}");
        assert!(answer.contains("\"kind\":\"unauthorized\""), "{answer}");
    }
    let answer = resolve("web", Some(token));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    common::hooks::signal(daemon.id(), "TERM");
    assert!(daemon.wait().unwrap().success());
}

#[test]
fn secrets_in_a_paused_call_show_nowhere() {
    // Every shell command pauses, its arguments shown to the person.
    let setup = Setup::new(&format!(
        "{}[log]\narguments = \"full\"\n",
        common::agents::BASH_ALWAYS
    ));
    let secrets = [
        "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3",
        "AKIAIOSFODNN7EXAMPLE",
        "hunter2hunter2",
    ];
    let command = format!(
        "make deploy && curl -H 'Authorization: token {}' -H 'x-api-key: {}' https://example.com && AWS_ACCESS_KEY_ID={} mysql password={} db",
        secrets[0], secrets[1], secrets[2], secrets[3]
    );
    let answer = setup.hook(&event(
        "PreToolUse",
        "s-secret",
        "Bash",
        json!({"command": command}),
        "toolu_s",
    ));
    assert_eq!(permission(&answer), "ask");
    let approval_text = reason(&answer);
    let gates = String::from_utf8(setup.run(&["gates", "list"], "").stdout).unwrap();
    let log = String::from_utf8(setup.run(&["log", "--json"], "").stdout).unwrap();
    assert!(
        gates.contains("[REDACTED]") && log.contains("[REDACTED]"),
        "{gates}\n{log}"
    );
    for secret in secrets {
        for (place, text) in [
            ("approval text", &approval_text),
            ("gates list", &gates),
            ("decision log", &log),
        ] {
            assert!(
                !text.contains(secret),
                "{secret} shows in the {place}: {text}"
            );
        }
    }
}

#[test]
fn the_socket_and_store_are_guarded_whatever_program_names_them() {
    // Not only the toolgate binary: the store's socket or the store itself,
    // named anywhere in a command, is refused.
    let setup = Setup::new("");
    let socket = setup.socket().display().to_string();
    for command in [
        format!("socat - UNIX-CONNECT:{socket}"),
        format!("nc -U {socket}"),
        format!("cp /tmp/x {}", setup.store().display()),
    ] {
        let answer = setup.hook(&event(
            "PreToolUse",
            "s-guard",
            "Bash",
            json!({"command": command}),
            "t",
        ));
        assert_eq!(permission(&answer), "deny", "{command}");
    }
    let ok = setup.hook(&event(
        "PreToolUse",
        "s-guard",
        "Bash",
        json!({"command": "ls -la"}),
        "t2",
    ));
    assert_ne!(
        permission(&ok),
        "deny",
        "ordinary work is left to the policies"
    );
}
