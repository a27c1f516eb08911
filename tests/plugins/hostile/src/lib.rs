//! A hostile policy for the sandbox tests. Its config names one attack; it
//! runs that attack when the call's tool is `attack` and allows anything
//! else, so tests can check the next, ordinary call still works.
//!
//! Attacks that probe for ambient authority (files, environment, sockets,
//! name lookup) report what they got as a note: the test checks it is an
//! error, never data.

use std::hint::black_box;

use serde::Deserialize;
use toolgate_guest::{
    BudgetStatus, Config, ConfigError, Decision, FailMode, ModelReply, Observe, ParseVerdict,
    Policy, PolicyInfo, Risk, ToolCall, ToolEvent, host,
};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Attack {
    attack: String,
}

struct Hostile {
    config: Attack,
    /// The user of the call now running (for `remember-user`).
    caller: std::cell::RefCell<String>,
}

/// Recursion whose frames live on the wasm stack: ends in a stack overflow.
#[allow(unconditional_recursion)] // the point of the attack
fn recurse(depth: u64) -> u64 {
    black_box(recurse(black_box(depth + 1))).wrapping_add(1)
}

/// Recursion with big frames in linear memory (Rust's shadow stack): runs off
/// the bottom of the shadow stack.
#[allow(unconditional_recursion)]
fn recurse_big(depth: u64) -> u64 {
    let mut frame = [depth; 256];
    black_box(&mut frame);
    recurse_big(black_box(depth + 1)).wrapping_add(frame[3])
}

/// Describe what a probe for ambient authority obtained.
fn outcome<T: std::fmt::Debug, E: std::fmt::Display>(what: &str, result: Result<T, E>) -> Decision {
    match result {
        Ok(data) => Decision::deny(format!("ESCAPED: {what} returned {data:?}")),
        Err(err) => Decision::allow().with_note(format!("{what}: error: {err}")),
    }
}

impl Hostile {
    fn attack(&self) -> Decision {
        match self.config.attack.as_str() {
            "loop" => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            "memory-bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(black_box(vec![1u8; 1 << 20]));
                }
            }
            "recursion" => Decision::deny(format!("{}", recurse(0))),
            "deep-frames" => Decision::deny(format!("{}", recurse_big(0))),
            "panic" => panic!("hostile policy panics on purpose"),
            "huge-reason" => Decision::deny("x".repeat(100 * 1024 * 1024)),
            "read-file" => outcome("read /etc/passwd", std::fs::read_to_string("/etc/passwd")),
            "list-dir" => outcome(
                "list /",
                std::fs::read_dir("/").map(|d| d.filter_map(Result::ok).count()),
            ),
            "list-cwd" => outcome(
                "list .",
                std::fs::read_dir(".").map(|d| d.filter_map(Result::ok).count()),
            ),
            "env" => {
                let vars: Vec<(String, String)> = std::env::vars().collect();
                let args: Vec<String> = std::env::args().collect();
                if vars.is_empty() && args.is_empty() && std::env::var("HOME").is_err() {
                    Decision::allow().with_note("env: error: no environment, no arguments")
                } else {
                    Decision::deny(format!("ESCAPED: env {vars:?} args {args:?}"))
                }
            }
            "socket" => outcome(
                "connect 127.0.0.1:22",
                std::net::TcpStream::connect("127.0.0.1:22"),
            ),
            "dns" => outcome("resolve localhost", {
                use std::net::ToSocketAddrs;
                ("localhost", 80).to_socket_addrs().map(|a| a.count())
            }),
            "stdin" => {
                let mut line = String::new();
                match std::io::stdin().read_line(&mut line) {
                    Ok(0) => Decision::allow().with_note("stdin: error: closed (end of file)"),
                    Ok(_) => Decision::deny(format!("ESCAPED: stdin gave {line:?}")),
                    Err(err) => Decision::allow().with_note(format!("stdin: error: {err}")),
                }
            }
            "other-namespace" => {
                let guesses = [
                    "decided",
                    "../scripted/decided",
                    "scripted/decided",
                    "%2F..%2Fdecided",
                ];
                let found: Vec<_> = guesses
                    .iter()
                    .filter(|k| host::state::get(k).is_ok_and(|v| v.is_some()))
                    .collect();
                let keys = host::state::keys("", 100).unwrap_or_default();
                if found.is_empty() && keys.is_empty() {
                    Decision::allow().with_note("other-namespace: error: nothing visible")
                } else {
                    Decision::deny(format!("ESCAPED: saw {found:?} / {keys:?}"))
                }
            }
            "flood-output" => {
                let line = "flood ".repeat(1000);
                for _ in 0..2_000 {
                    println!("{line}");
                    eprintln!("{line}");
                }
                host::log(host::Level::Info, &"log flood ".repeat(10_000));
                Decision::allow().with_note("flooded")
            }
            "malformed" => {
                // Not UTF-8: the host must refuse to lift it.
                let bytes = vec![0xff, 0xfe, 0xfd];
                Decision::deny(unsafe { String::from_utf8_unchecked(bytes) })
            }
            "state-quota" => {
                let result = host::state::set("big", &vec![0u8; 4096]);
                Decision::allow().with_note(format!("state-quota: {result:?}"))
            }
            // The model questions: what `parse` makes of the reply is below.
            "ask-slow" | "ask-unparseable" | "ask-twice" => {
                // Far past any sensible wait: only the host's limits bound it.
                Decision::ask_model("system", "user", 600_000)
            }
            "ask-huge" => Decision::ask_model("system", "q".repeat(1024 * 1024), 1_000),
            "huge-event-fields" => {
                let huge = "x".repeat(4 * 1024 * 1024);
                host::events::append(&host::Event {
                    session_id: huge.clone(),
                    turn: 0,
                    kind: huge.clone(),
                    tool: Some(huge.clone()),
                    origin: Some(toolgate_guest::ToolOrigin::Mcp(huge.clone())),
                    risk: None,
                    detail: Some(huge.clone()),
                    summary: Some(huge),
                    at_ms: 0,
                });
                Decision::allow().with_note("appended")
            }
            "event-flood" => {
                for i in 0..100_000u64 {
                    host::events::append(&host::Event {
                        session_id: "flood".into(),
                        turn: i,
                        kind: "flood".into(),
                        tool: None,
                        origin: None,
                        risk: None,
                        detail: None,
                        summary: Some("x".repeat(100)),
                        at_ms: 0,
                    });
                }
                Decision::allow().with_note("flooded")
            }
            "read-max" => {
                let keys = host::state::keys("", u32::MAX).map_or(0, |k| k.len());
                let events =
                    host::events::session_recent("flood", u32::MAX, &[]).map_or(0, |e| e.len());
                Decision::allow().with_note(format!("read-max: {keys} keys, {events} events"))
            }
            "state-key-max" => {
                let at_limit = host::state::set(&"k".repeat(1024), b"v");
                let over = host::state::set(&"k".repeat(1025), b"v");
                Decision::allow().with_note(format!("state-key-max: {at_limit:?} / {over:?}"))
            }
            "remember-user" => {
                // What a previous call left in this instance's memory.
                static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
                let mut seen = SEEN.lock().unwrap();
                let earlier = seen.join(",");
                seen.push(self.caller.borrow().clone());
                Decision::allow().with_note(format!("seen-before: [{earlier}]"))
            }
            "remember-far" => {
                // What an earlier instance wrote into linear memory, both
                // near the heap's start and megabytes past it: a block is
                // read before it is written, then filled with a marker and
                // freed, so the next allocation of this size lands on it.
                const LEN: usize = 8 << 20;
                const MARK: u8 = 0xa5;
                let mut block: Vec<u8> = Vec::with_capacity(LEN);
                let marked = (4096..LEN)
                    .step_by(256 << 10)
                    .filter(
                        |&at| unsafe { std::ptr::read_volatile(block.as_ptr().add(at)) } == MARK,
                    )
                    .count();
                unsafe { std::ptr::write_bytes(block.as_mut_ptr(), MARK, LEN) };
                black_box(&mut block);
                Decision::allow().with_note(format!("marked-pages: {marked}"))
            }
            "log-kib" => {
                host::log(host::Level::Info, &"l".repeat(1024));
                Decision::allow()
            }
            "oversized-once" => {
                static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n == 0 {
                    Decision::allow().with_note("n".repeat(64 * 1024))
                } else {
                    Decision::allow().with_note(format!("instance-call:{n}"))
                }
            }
            other => Decision::deny(format!("unknown attack {other}")),
        }
    }
}

impl Policy for Hostile {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "hostile".into(),
            version: "0.1.0".into(),
            description: "misbehaves on purpose (test policy)".into(),
            default_fail_mode: FailMode::Open,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        config.parse().map(|config| Self {
            config,
            caller: Default::default(),
        })
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        *self.caller.borrow_mut() = call.caller.user_id.clone();
        if call.tool == "attack" {
            self.attack()
        } else {
            Decision::allow().with_note("behaving")
        }
    }
}

impl Observe for Hostile {
    fn observe(&self, event: &ToolEvent) {
        // The same attacks from the PostToolUse side.
        if event.call.tool == "attack" {
            let _ = self.attack();
        }
    }
}

impl ParseVerdict for Hostile {
    fn parse(&self, _call: &ToolCall, reply: &ModelReply) -> Result<Decision, String> {
        match self.config.attack.as_str() {
            "ask-unparseable" => Err("this reply means nothing to me".into()),
            "ask-twice" => Ok(Decision::ask_model("system", "again", 1_000)),
            // Report what the host handed over, for the test to check.
            _ => Ok(Decision::allow().with_note(format!("reply: {reply:?}"))),
        }
    }
}

toolgate_guest::export_policy!(Hostile, parse, observe);
