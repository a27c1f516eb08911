//! The daemon as the one owner of a store: hooks start it on demand (once,
//! however many arrive together), every command goes through it, it stays up
//! under load and bad input, and what it acknowledged survives SIGKILL.

use crate::common;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use common::hooks::{BIN, KillOnDrop, Setup, event, parse_answer, permission, signal};
use serde_json::{Value, json};
use toolgate::ErrorKind;
use toolgate::daemon::{Client, DaemonRequest, HookRuntime};

#[test]
fn thirty_two_hooks_at_once_start_one_daemon_and_none_is_denied() {
    let setup = Setup::new("");
    let hooks: Vec<_> = (0..32)
        .map(|i| {
            let payload = event(
                "PreToolUse",
                "s-parallel",
                "Read",
                json!({"file_path": format!("/home/dev/project/f{i}.rs")}),
                &format!("toolu_{i}"),
            );
            setup.spawn(&["hook", "claude-code"], &payload.to_string())
        })
        .collect();
    for child in hooks {
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0));
        assert_eq!(
            parse_answer(&output.stdout),
            Some(json!({})),
            "a Read is allowed silently; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(setup.daemons(), 1, "exactly one daemon serves the store");
    let log = setup.run(&["log", "--json", "--limit", "100"], "");
    assert!(log.status.success());
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        32,
        "every call was decided by the daemon and logged"
    );
    assert!(
        setup.store().with_extension("redb.daemon.log").exists(),
        "the daemon logs to a file beside the store"
    );
}

#[test]
fn a_thousand_hook_events_from_eight_clients_have_no_errors() {
    let setup = Setup::new("");
    // SessionStart brings the daemon up (and compiles the policies).
    let started = event("SessionStart", "s0", "", json!({}), "");
    assert_eq!(setup.hook(&started), Some(json!({})));
    assert!(setup.daemon_pid().is_some());
    let socket = setup.socket();
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let client = Client::new(&socket);
                for i in 0..125 {
                    let (name, tool, input) = match i % 3 {
                        0 => ("PreToolUse", "Read", json!({"file_path": "/a"})),
                        1 => ("PostToolUse", "Read", json!({"file_path": "/a"})),
                        _ => ("PreToolUse", "Grep", json!({"pattern": "x"})),
                    };
                    let payload = event(name, &format!("s{c}"), tool, input, &format!("t{c}-{i}"));
                    let answer = client
                        .call(&DaemonRequest::Hook {
                            runtime: HookRuntime::ClaudeCode,
                            event: payload.to_string(),
                            on_error: Default::default(),
                            config: None,
                        })
                        .unwrap_or_else(|err| panic!("client {c} call {i}: {err}"));
                    assert_eq!(answer, json!("{}"), "an allow or observe is said as {{}}");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
}

#[test]
fn every_command_works_while_the_daemon_runs() {
    let setup = Setup::new("");
    let risky = event(
        "PreToolUse",
        "s-admin",
        "Bash",
        json!({"command": "npm publish"}),
        "toolu_risky",
    );
    assert_eq!(permission(&setup.hook(&risky)), "ask");
    assert!(setup.daemon_pid().is_some(), "the first hook started it");

    let ok = |args: &[&str]| {
        let out = setup.run(args, "");
        assert!(
            out.status.code() == Some(0),
            "toolgate {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let gates = ok(&["gates", "list"]);
    assert!(gates.contains("npm publish"), "{gates}");
    assert!(ok(&["log", "--json"]).contains("toolu_risky"));
    ok(&["events", "--limit", "5"]);
    ok(&["plugins", "list"]);
    let request = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/requests/bash-ls.json");
    ok(&["check", "--compact", request.to_str().unwrap()]);
    // Admin commands: a person, at a terminal of their own.
    let person = |args: &[&str]| {
        let out = setup.at_a_terminal(&setup.command_line(args), "");
        assert!(
            out.status.success(),
            "toolgate {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let leases = person(&[
        "command",
        "lease-gate",
        "lease-list",
        r#"{"thread": "s-admin"}"#,
    ]);
    assert!(leases.contains(r#""thread":"s-admin""#), "{leases}");
    person(&["plugins", "reload"]);
    assert_eq!(setup.daemons(), 1, "no command started a second owner");
}

#[test]
fn a_pause_answered_in_claude_codes_prompt_is_closed_by_post_tool_use() {
    let setup = Setup::new("");
    let input = json!({"command": "npm publish"});
    let pre = event("PreToolUse", "s-ask", "Bash", input.clone(), "toolu_ask");
    assert_eq!(permission(&setup.hook(&pre)), "ask");
    let pending = |setup: &Setup| {
        let out = setup.run(&["gates", "list"], "");
        String::from_utf8(out.stdout).unwrap().lines().count()
    };
    assert_eq!(pending(&setup), 1);

    // A PostToolUse for another call closes nothing.
    let other = event("PostToolUse", "s-ask", "Bash", input.clone(), "toolu_other");
    setup.hook(&other);
    assert_eq!(pending(&setup), 1);

    // The person said yes in Claude Code; the call ran.
    let post = event("PostToolUse", "s-ask", "Bash", input, "toolu_ask");
    assert_eq!(setup.hook(&post), Some(json!({})));
    assert_eq!(pending(&setup), 0, "the gate is closed, not left to expire");

    // Closing it approved nothing: the same call asks again.
    let again = event(
        "PreToolUse",
        "s-ask",
        "Bash",
        json!({"command": "npm publish"}),
        "toolu_again",
    );
    assert_eq!(permission(&setup.hook(&again)), "ask");
}

#[test]
fn a_new_turn_loads_no_policy() {
    // A plugin that cannot load: anything that loads policies fails.
    let setup = Setup::new("[plugins.broken]\npath = \"/nonexistent/broken.wasm\"\n");
    let prompt = json!({
        "session_id": "s-turns",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hello",
        "prompt_id": "p1",
    });
    for _ in 0..2 {
        assert_eq!(
            setup.hook(&prompt),
            Some(json!({})),
            "a new turn answers nothing"
        );
    }
    let store = toolgate::store::Store::open(&setup.store()).unwrap();
    assert_eq!(
        store.turns().turn("s-turns").unwrap(),
        2,
        "both turns counted"
    );
    drop(store);

    let pre = event("PreToolUse", "s-turns", "Read", json!({}), "t1");
    let answer = setup.hook(&pre);
    assert_eq!(
        permission(&answer),
        "deny",
        "tool events do need the policies"
    );
    let reason = answer.unwrap()["hookSpecificOutput"]["permissionDecisionReason"].to_string();
    assert!(reason.contains("broken"), "{reason}");
}

/// With `[log] durable_before_answer`, not even the log of an answered
/// call is lost.
#[test]
fn sigkill_mid_load_loses_nothing_acknowledged_and_the_next_hook_restarts_it() {
    let setup = Setup::new("[log]\ndurable_before_answer = true\n");
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let first = setup.daemon_pid().unwrap();
    let socket = setup.socket();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (socket, stop) = (socket.clone(), stop.clone());
            std::thread::spawn(move || {
                let client = Client::new(&socket).with_busy_wait(Default::default());
                let mut acknowledged = Vec::new();
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let id = format!("toolu_{c}_{i}");
                    let payload = event(
                        "PreToolUse",
                        "s-kill",
                        "Read",
                        json!({"file_path": "/x"}),
                        &id,
                    );
                    let request = DaemonRequest::Hook {
                        runtime: HookRuntime::ClaudeCode,
                        event: payload.to_string(),
                        on_error: Default::default(),
                        config: None,
                    };
                    match client.call(&request) {
                        Ok(_) => acknowledged.push(id),
                        Err(_) => break, // the daemon is gone
                    }
                }
                acknowledged
            })
        })
        .collect();
    common::eventually("some decisions to be acknowledged", || {
        let log = Client::new(&socket).call(&DaemonRequest::Log {
            filter: Default::default(),
            limit: 50,
        });
        log.is_ok_and(|rows| rows.as_array().is_some_and(|r| r.len() >= 40))
    });
    signal(first, "KILL");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acknowledged: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert!(acknowledged.len() >= 40);

    // The next hook finds the dead daemon's socket, starts a new one.
    let next = event(
        "PreToolUse",
        "s-kill",
        "Read",
        json!({"file_path": "/y"}),
        "after",
    );
    assert_eq!(setup.hook(&next), Some(json!({})));
    let second = setup.daemon_pid().unwrap();
    assert_ne!(first, second);

    let out = setup.run(&["log", "--json", "--limit", "100000"], "");
    let logged: std::collections::HashSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["entry"]["call_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !logged.contains(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
}

/// By default an answer waits for what it depends on, not for its log
/// entry: every lease use an acknowledged allow took is on disk, so a
/// daemon killed mid-load gives none back.
#[test]
fn sigkill_mid_load_gives_back_no_lease_use_it_acknowledged() {
    const USES: usize = 2_000;
    let setup = Setup::with_config(common::ECHO_LEASES);
    let echo = |n: String| {
        let mut request = toolgate::ToolRequest::new("echo", json!({"n": n}));
        request.thread_id = Some("t1".into());
        request.mode = toolgate::request::Mode::Autonomous;
        request
    };
    let grant = json!({"thread": "t1", "actions": ["echo"], "max_uses": USES});
    setup
        .in_process()
        .command("lease-gate", "lease-grant", &grant.to_string())
        .unwrap();
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let daemon = setup.daemon_pid().unwrap();
    let allowed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (socket, allowed) = (setup.socket(), allowed.clone());
            std::thread::spawn(move || {
                let client = Client::new(&socket).with_busy_wait(Default::default());
                for i in 0.. {
                    let request = DaemonRequest::Evaluate {
                        request: echo(format!("{c}-{i}")),
                    };
                    let Ok(answer) = client.call(&request) else {
                        return; // the daemon is gone
                    };
                    assert_eq!(answer["verdict"], "allow", "{answer}");
                    // Killed mid-load, by whichever client sees the count.
                    if allowed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == 300 {
                        signal(daemon, "KILL");
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let acknowledged = allowed.load(std::sync::atomic::Ordering::SeqCst);
    assert!((300..USES).contains(&acknowledged), "{acknowledged}");

    let host = setup.in_process();
    let left = (0..=USES)
        .take_while(|i| {
            host.evaluate(&echo(format!("after-{i}"))).unwrap().verdict == toolgate::Verdict::Allow
        })
        .count();
    assert!(
        acknowledged + left <= USES,
        "{acknowledged} uses acknowledged, yet {left} of {USES} are left after the kill"
    );
}

/// A client that keeps its connections, after the daemon restarts, asks
/// the new one instead of failing on a closed connection.
#[test]
fn a_kept_connection_is_replaced_after_the_daemon_restarts() {
    let setup = Setup::new("");
    let start = || setup.hook(&event("SessionStart", "s", "", json!({}), ""));
    assert_eq!(start(), Some(json!({})));
    let client = Client::new(setup.socket()).keeping_connections();
    let pid = || client.call(&DaemonRequest::Health).unwrap()["pid"].clone();
    let first = pid();
    for _ in 0..20 {
        assert_eq!(pid(), first);
    }
    signal(first.as_u64().unwrap() as u32, "TERM");
    common::eventually("the daemon to stop", || !setup.socket().exists());
    assert_eq!(start(), Some(json!({})));
    let second = pid();
    assert_ne!(second, first);
}

/// A client that never pauses between requests does not keep the daemon
/// from stopping.
#[test]
fn a_daemon_stops_on_sigterm_while_a_kept_connection_keeps_asking() {
    let setup = Setup::new("");
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let pid = setup.daemon_pid().unwrap();
    let client = Client::new(setup.socket()).keeping_connections();
    let asking = std::thread::spawn(move || while client.call(&DaemonRequest::Health).is_ok() {});
    std::thread::sleep(std::time::Duration::from_millis(200));
    signal(pid, "TERM");
    common::eventually("the daemon to exit", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z "))
    });
    asking.join().unwrap();
}

#[test]
fn without_a_daemon_that_can_start_the_hook_falls_back_as_told() {
    let setup = Setup::new("");
    // No daemon can listen on a socket path this long.
    let socket = setup.dir.path().join("x".repeat(120));
    let socket = socket.to_str().unwrap();
    let payload = event(
        "PreToolUse",
        "s-fb",
        "Write",
        json!({"file_path": "/tmp/a"}),
        "t",
    )
    .to_string();
    let failed = setup.run(
        &[
            "hook",
            "claude-code",
            "--connect",
            socket,
            "--fallback",
            "fail",
        ],
        &payload,
    );
    let answer = parse_answer(&failed.stdout);
    assert_eq!(permission(&answer), "deny");
    let reason = answer.unwrap()["hookSpecificOutput"]["permissionDecisionReason"].to_string();
    assert!(reason.contains("cannot start the daemon"), "{reason}");

    let local = setup.run(&["hook", "claude-code", "--connect", socket], &payload);
    assert_eq!(
        parse_answer(&local.stdout),
        Some(json!({})),
        "evaluated in-process: allowed"
    );
}

#[test]
fn an_in_process_fallback_waits_for_a_busy_store_instead_of_denying() {
    let setup = Setup::new("");
    let store = toolgate::store::Store::open(&setup.store()).unwrap();
    // While this process holds the store, a second open is a typed busy error.
    let busy = toolgate::store::Store::open(&setup.store()).unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Busy);
    assert!(matches!(busy, toolgate::Error::StoreBusy { .. }));
    let waited =
        toolgate::store::Store::open_waiting(&setup.store(), std::time::Duration::from_millis(30))
            .unwrap_err();
    assert!(matches!(waited, toolgate::Error::StoreBusy { waited_ms, .. } if waited_ms >= 30));

    // A hook answering in-process waits until the holder lets go.
    let payload = event(
        "PreToolUse",
        "s-wait",
        "Read",
        json!({"file_path": "/a"}),
        "t",
    )
    .to_string();
    let child = setup.spawn(&["hook", "claude-code", "--no-daemon"], &payload);
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(store);
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        parse_answer(&output.stdout),
        Some(json!({})),
        "allowed, not denied as busy"
    );
}

#[test]
fn past_max_in_flight_the_daemon_answers_busy() {
    let hostile = format!(
        "[daemon]\nmax_in_flight = 1\n[plugins.hostile]\npath = {:?}\npriority = 1\n[plugins.hostile.config]\nattack = \"loop\"\n[plugins.hostile.limits]\ndeadline_ms = 3000\n",
        common::guest("hostile-policy").display().to_string()
    );
    let setup = Setup::new(&hostile);
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let socket = setup.socket();
    let slow = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let request = toolgate::ToolRequest::new("attack", json!({}));
            Client::new(&socket).call(&DaemonRequest::Evaluate { request })
        })
    };
    let client = Client::new(&socket).with_busy_wait(Default::default());
    common::eventually("the slow call to be in flight", || {
        let metrics = client.call(&DaemonRequest::Metrics).unwrap();
        metrics
            .as_str()
            .unwrap()
            .contains("toolgate_requests_in_flight 1")
    });
    let request = toolgate::ToolRequest::new("Read", json!({}));
    let refused = client
        .call(&DaemonRequest::Evaluate { request })
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Busy, "{refused}");
    assert!(refused.to_string().contains("max_in_flight"), "{refused}");
    // Health is not a policy run: it is answered meanwhile.
    assert!(client.call(&DaemonRequest::Health).is_ok());
    let decided = slow.join().unwrap().unwrap();
    assert_eq!(decided["policies"][0]["name"], "hostile");
    assert!(
        !decided["policies"][0]["failure"].is_null(),
        "the looping policy hit its deadline: {decided}"
    );
}

/// `… SOCKET REQUEST`: one request line over a Unix socket; its answer.
const ASK_SOCKET: &str = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(sys.argv[2].encode() + b'\\n')\nprint(s.makefile().readline(), end='')";

/// One OS user's slow calls cannot take every in-flight slot (system mode's
/// fair share): another user's call is decided, not answered `busy`.
#[test]
fn one_users_slow_calls_leave_a_slot_for_another_user() {
    use std::os::unix::process::CommandExt as _;
    assert_eq!(
        toolgate_wire::peer::own_uid(),
        0,
        "this test asks as two other OS users: run the suite as root (CI does)"
    );
    let hostile = format!(
        "[daemon]\nmax_in_flight = 4\nsocket_mode = 0o666\n[plugins.hostile]\npath = {:?}\npriority = 1\n[plugins.hostile.config]\nattack = \"loop\"\n[plugins.hostile.limits]\ndeadline_ms = 3000\n",
        common::guest("hostile-policy").display().to_string()
    );
    let setup = Setup::new(&hostile);
    let open = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(setup.dir.path(), open).unwrap();
    let _daemon = KillOnDrop(setup.serve(&[]));
    let socket = setup.socket();
    let ask_as = |uid: u32, tool: &str| {
        let request = json!({"op": "evaluate", "request": {"tool": tool, "session_id": "s"}});
        Command::new("python3")
            .args(["-c", ASK_SOCKET])
            .arg(&socket)
            .arg(request.to_string())
            .uid(uid)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs")
    };
    // The first user asks four slow calls at once: as many as there are
    // slots. Each either runs or is answered `busy`.
    let mut flood: Vec<_> = (0..4).map(|_| ask_as(60_001, "attack")).collect();
    let client = Client::new(&socket);
    common::eventually_showing("the first user's calls to run or be refused", || {
        let metrics = client.call(&DaemonRequest::Metrics).unwrap();
        let metrics = metrics.as_str().unwrap();
        let running: usize = metrics
            .lines()
            .find_map(|l| l.strip_prefix("toolgate_requests_in_flight "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut refused = 0;
        for child in &mut flood {
            refused += usize::from(matches!(child.try_wait(), Ok(Some(_))));
        }
        (
            running + refused == 4,
            format!("{running} running, {refused} refused"),
        )
    });
    let other = ask_as(60_002, "Read").wait_with_output().unwrap();
    let answer: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(answer["ok"], true, "the other user's call: {answer}");
    assert_eq!(
        answer["result"]["policies"][0]["name"], "hostile",
        "{answer}"
    );
    let refused: Vec<Value> = flood
        .into_iter()
        .map(|c| serde_json::from_slice(&c.wait_with_output().unwrap().stdout).unwrap())
        .filter(|a: &Value| a["ok"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].to_string().contains("kept for other users"),
        "{refused:?}"
    );
}

/// A connection that sends part of a request line and no more holds none
/// of the daemon's threads while it waits: hundreds of them (on a
/// system-mode socket the agent's own user may open them) and every other
/// client is still answered.
#[test]
fn connections_that_send_half_a_request_starve_no_one() {
    let setup = Setup::new("");
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let socket = setup.socket();
    let held: Vec<std::os::unix::net::UnixStream> = (0..200)
        .map(|_| {
            let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            stream.write_all(b"{").unwrap();
            stream
        })
        .collect();
    // Let the daemon take every one of them up.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let client = Client::new(&socket);
    assert!(client.call(&DaemonRequest::Health).is_ok());
    let request = toolgate::ToolRequest::new("Read", json!({"file_path": "src/lib.rs"}));
    let decided = client.call(&DaemonRequest::Evaluate { request }).unwrap();
    assert_eq!(decided["verdict"], "allow", "{decided}");
    // A line finished late is still answered.
    let mut late = &held[0];
    late.write_all(b"\"op\":\"health\"}\n").unwrap();
    let mut answer = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(late), &mut answer).unwrap();
    assert!(answer.contains("\"ok\""), "{answer}");
}

/// One OS user holds at most `[daemon] max_connections_per_user` socket
/// connections: the next is refused with the reason (not left hanging),
/// and closing one makes room again.
#[test]
fn one_user_holds_at_most_its_share_of_connections() {
    let setup = Setup::new("[daemon]\nmax_connections_per_user = 4\n");
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let socket = setup.socket();
    // Four connections kept open, each answered once: the daemon has taken
    // each up (and counted it) before the fifth comes.
    let mut held: Vec<_> = (0..4)
        .map(|_| {
            let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            stream.write_all(b"{\"op\":\"health\"}\n").unwrap();
            let mut answer = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(&stream), &mut answer)
                .unwrap();
            assert!(answer.contains("\"ok\":true"), "{answer}");
            stream
        })
        .collect();
    common::eventually_showing("the fifth connection to be refused", || {
        let mut fifth = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        // A refused connection may be closed before the request is sent.
        let _ = fifth.write_all(b"{\"op\":\"health\"}\n");
        let mut answer = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(&fifth), &mut answer);
        let log = std::fs::read_to_string(setup.dir.path().join("state/toolgate.redb.daemon.log"))
            .unwrap_or_default();
        (
            answer.contains("max_connections_per_user"),
            format!("{answer}\ndaemon log:\n{log}"),
        )
    });
    held.pop();
    common::eventually("a connection to be answered again", || {
        Client::new(&socket).call(&DaemonRequest::Health).is_ok()
    });
    // The health check's own connection may still be counted for a moment
    // after it closes, so the metrics call waits for room the same way.
    common::eventually_showing("the refusal to be counted", || {
        match Client::new(&socket).call(&DaemonRequest::Metrics) {
            Ok(metrics) => {
                let text = metrics.as_str().unwrap_or_default().to_owned();
                let counted = text.lines().any(|line| {
                    line.strip_prefix("toolgate_connections_refused_total ")
                        .is_some_and(|n| n.trim() != "0")
                });
                (counted, text)
            }
            Err(error) => (false, error.to_string()),
        }
    });
}

#[test]
fn running_out_of_file_descriptors_does_not_stop_the_daemon() {
    let setup = Setup::new("");
    let socket = setup.socket();
    // A daemon limited to 64 descriptors.
    let mut daemon = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(BIN)
        .arg("--config")
        .arg(setup.dir.path().join("toolgate.toml"))
        .arg("--store")
        .arg(setup.store())
        .args(["serve", "--socket"])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::eventually("the daemon to come up", || Client::new(&socket).is_up());
    // Hold more connections than it has descriptors for.
    let held: Vec<_> = (0..100)
        .filter_map(|_| std::os::unix::net::UnixStream::connect(&socket).ok())
        .collect();
    assert!(!held.is_empty());
    std::thread::sleep(std::time::Duration::from_millis(200));
    drop(held);
    common::eventually("the daemon to answer again", || {
        Client::new(&socket).is_up()
    });
    assert_eq!(daemon.try_wait().unwrap(), None, "still running");
    signal(daemon.id(), "TERM");
    assert!(daemon.wait().unwrap().success());
}

#[test]
fn a_daemon_whose_socket_file_is_removed_stops() {
    let setup = Setup::new("");
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    let pid = setup.daemon_pid().unwrap();
    std::fs::remove_file(setup.socket()).unwrap();
    common::eventually("the orphaned daemon to exit", || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    // The store is free again: the next hook starts a fresh daemon.
    assert_eq!(
        setup.hook(&event("SessionStart", "s", "", json!({}), "")),
        Some(json!({}))
    );
    assert_ne!(setup.daemon_pid().unwrap(), pid);
}

/// One raw HTTP/1.1 exchange with the daemon's loopback port.
fn http(port: u16, request: &[u8]) -> String {
    use std::io::Read as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(request).unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

#[test]
fn the_http_endpoint_bounds_and_types_what_it_accepts() {
    let setup = Setup::new("");
    let port = common::free_port();
    let socket = setup.socket();
    let mut daemon = setup
        .command()
        .args(["serve", "--http", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::eventually("the daemon to come up", || Client::new(&socket).is_up());

    let health = http(
        port,
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // A chunked body is read as one request.
    let body = br#"{"op":"turn","session":"s"}"#;
    let mut chunked = b"POST /v1/rpc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    chunked.extend(format!("{:x}\r\n", 10).as_bytes());
    chunked.extend(&body[..10]);
    chunked.extend(format!("\r\n{:x}\r\n", body.len() - 10).as_bytes());
    chunked.extend(&body[10..]);
    chunked.extend(b"\r\n0\r\n\r\n");
    let answer = http(port, &chunked);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#"{"ok":true,"result":0}"#), "{answer}");
    // An unknown op: 400 with a machine-readable kind.
    let bad = br#"{"op":"format_disk"}"#;
    let request = format!(
        "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bad.len()
    );
    let answer = http(port, &[request.as_bytes(), bad].concat());
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#""kind":"invalid-request""#), "{answer}");
    // A body past the limit is refused before it is read.
    let huge = "POST /v1/rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\nConnection: close\r\n\r\n{";
    let answer = http(port, huge.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let missing = http(
        port,
        b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    // Still serving.
    assert!(Client::new(&socket).is_up());
    signal(daemon.id(), "TERM");
    assert!(daemon.wait().unwrap().success());
}

/// The system clock stepped back (an admin's `date -s`, a bad NTP source,
/// a VM restored from a snapshot) extends no lease: a lease of 2 s granted
/// before the clock went back 2 h has expired 3 s later. The step is made
/// for the daemon alone, by an `LD_PRELOAD` shim over `clock_gettime`
/// that moves the wall clock by the seconds in a file.
#[test]
fn stepping_the_clock_back_extends_no_lease() {
    let setup = Setup::with_config(common::ECHO_LEASES);
    let shim = clock_shim(setup.dir.path());
    let offset = setup.dir.path().join("clock-offset");
    std::fs::write(&offset, "0").unwrap();
    let grant = json!({"thread": "t1", "actions": ["echo"], "expires_in_ms": 2000});
    setup
        .in_process()
        .command("lease-gate", "lease-grant", &grant.to_string())
        .unwrap();
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("CLOCK_SHIM_OFFSET_FILE", offset.to_str().unwrap()),
    ]));
    let echo = |n: u32| {
        let mut request = toolgate::ToolRequest::new("echo", json!({ "n": n }));
        request.thread_id = Some("t1".into());
        request.mode = toolgate::request::Mode::Autonomous;
        let answer = Client::new(setup.socket())
            .call(&DaemonRequest::Evaluate { request })
            .unwrap();
        answer["verdict"].as_str().unwrap().to_string()
    };
    assert_eq!(echo(1), "allow", "the lease holds");
    std::fs::write(&offset, "-7200").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        echo(2),
        "deny",
        "the lease expired, whatever the clock says"
    );
}

/// The same across a restart: a daemon started after the clock was
/// stepped back 2 h starts from the last moment toolgate recorded (plus the
/// time since, on the same boot), so a 2 s lease granted before has expired
/// 3 s later. Before, the new daemon read the stepped clock and allowed.
#[test]
fn a_daemon_started_after_the_clock_went_back_extends_no_lease() {
    let setup = Setup::with_config(common::ECHO_LEASES);
    let shim = clock_shim(setup.dir.path());
    let offset = setup.dir.path().join("clock-offset");
    let grant = json!({"thread": "t1", "actions": ["echo"], "expires_in_ms": 2000});
    setup
        .in_process()
        .command("lease-gate", "lease-grant", &grant.to_string())
        .unwrap();
    std::fs::write(&offset, "-7200").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let _daemon = common::hooks::KillOnDrop(setup.serve(&[
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("CLOCK_SHIM_OFFSET_FILE", offset.to_str().unwrap()),
    ]));
    let mut request = toolgate::ToolRequest::new("echo", json!({}));
    request.thread_id = Some("t1".into());
    request.mode = toolgate::request::Mode::Autonomous;
    let answer = Client::new(setup.socket())
        .call(&DaemonRequest::Evaluate { request })
        .unwrap();
    assert_eq!(answer["verdict"], "deny", "the lease expired: {answer}");
}

/// A shared object that shifts `CLOCK_REALTIME` by the seconds in the file
/// `$CLOCK_SHIM_OFFSET_FILE`.
fn clock_shim(dir: &Path) -> std::path::PathBuf {
    build_shim(
        dir,
        "clock_shim",
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long offset(void) {
    const char *path = getenv("CLOCK_SHIM_OFFSET_FILE");
    FILE *file = path ? fopen(path, "r") : NULL;
    long seconds = 0;
    if (file) {
        if (fscanf(file, "%ld", &seconds) != 1) seconds = 0;
        fclose(file);
    }
    return seconds;
}
int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(id, ts);
    if (result == 0 && id == CLOCK_REALTIME) ts->tv_sec += offset();
    return result;
}
"#,
    )
}

/// The C `source` built into the shared object `dir/NAME.so` with the
/// system's C compiler, for `LD_PRELOAD`.
fn build_shim(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source).unwrap();
    let shim = dir.join(format!("{name}.so"));
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&file)
        .arg("-ldl")
        .output()
        .expect("a C compiler (`cc`; Debian: apt-get install gcc) builds the shim");
    assert!(built.status.success(), "{built:?}");
    shim
}

/// A failed fsync (EIO; ENOSPC on a full disk) never ends in an allow: the
/// call whose lease use could not be made durable is answered with an
/// error naming durability (the hook's fail-closed answer); the daemon
/// stays up, refusing (redb refuses every operation after an I/O error
/// until the file is opened again), and once the disk works again it
/// starts afresh by itself and allows. The failure is made for the daemon alone, by an `LD_PRELOAD`
/// shim over `fsync`/`fdatasync` that fails while a file exists.
#[test]
fn a_failed_fsync_is_never_answered_allow_and_the_daemon_recovers() {
    let setup = Setup::with_config(common::ECHO_LEASES);
    let grant = json!({"thread": "t1", "actions": ["echo"], "max_uses": 100});
    setup
        .in_process()
        .command("lease-gate", "lease-grant", &grant.to_string())
        .unwrap();
    let shim = fsync_shim(setup.dir.path());
    let failing = setup.dir.path().join("fsync-fails");
    let env = [
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("FSYNC_SHIM_FAIL_FILE", failing.to_str().unwrap()),
    ];
    let echo = |n: u32| {
        let mut request = toolgate::ToolRequest::new("echo", json!({ "n": n }));
        request.thread_id = Some("t1".into());
        request.mode = toolgate::request::Mode::Autonomous;
        Client::new(setup.socket()).call(&DaemonRequest::Evaluate { request })
    };
    let daemon = common::hooks::KillOnDrop(setup.serve(&env));
    assert_eq!(echo(1).unwrap()["verdict"], "allow");
    std::fs::write(&failing, "").unwrap();
    let answer = echo(2);
    let said = format!("{answer:?}");
    assert!(
        answer.is_err() && said.contains("durable"),
        "never allow on a failed fsync: {said}"
    );
    // The daemon stays up, refusing, while fsync fails.
    let again = format!("{:?}", echo(3));
    assert!(
        again.contains("Remote"),
        "still up, still refusing: {again}"
    );
    std::fs::remove_file(&failing).unwrap();
    // Then it opens the store again by itself (the same process, started
    // afresh), with no one restarting it.
    common::eventually("the daemon to allow again by itself", || {
        echo(4).is_ok_and(|answer| answer["verdict"] == "allow")
    });
    let health = Client::new(setup.socket())
        .call(&DaemonRequest::Health)
        .unwrap();
    assert_eq!(health["pid"], daemon.0.id(), "{health}");
}

/// A shared object whose `fsync` and `fdatasync` fail with EIO while the
/// file `$FSYNC_SHIM_FAIL_FILE` exists.
pub(crate) fn fsync_shim(dir: &Path) -> std::path::PathBuf {
    build_shim(
        dir,
        "fsync_shim",
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
static int failing(void) {
    const char *path = getenv("FSYNC_SHIM_FAIL_FILE");
    return path && access(path, F_OK) == 0;
}
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (failing()) { errno = EIO; return -1; }
    return real(fd);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (failing()) { errno = EIO; return -1; }
    return real(fd);
}
"#,
    )
}

/// An upgrade: `toolgate serve --replace` takes the store over from the
/// daemon serving it (one a hook started, or the build before), which
/// stops; plain `serve` leaves a running daemon alone and says how to take
/// over. Before, `serve` could only refuse (and, under load, lost the
/// store to a daemon a hook started meanwhile, exiting 1).
#[test]
fn serve_with_replace_takes_over_from_the_running_daemon() {
    let setup = Setup::new("");
    let mut old = setup.serve(&[]);
    let refused = setup.command().arg("serve").output().unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("pass --replace"), "{said}");
    assert!(Client::new(setup.socket()).is_up(), "left alone");

    let new = common::hooks::KillOnDrop(
        setup
            .command()
            .args(["serve", "--replace"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let new_pid = new.0.id() as u64;
    common::eventually("the new daemon to serve", || {
        Client::new(setup.socket())
            .call(&DaemonRequest::Health)
            .is_ok_and(|health| health["pid"] == new_pid)
    });
    let stopped = old.wait().unwrap();
    assert!(
        stopped.success(),
        "the old daemon stopped cleanly: {stopped}"
    );
}
