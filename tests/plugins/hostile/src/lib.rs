//! A hostile policy for the sandbox tests. Its config names one attack; it
//! runs that attack when the call's tool is `attack` and allows anything
//! else, so tests can check the next, ordinary call still works.
//!
//! Attacks that probe for ambient authority (files, environment, sockets,
//! name lookup) report what they got as a note: the test checks it is an
//! error, never data.

use std::hint::black_box;

use serde::Deserialize;
// The attacks call the host's imports directly, not the helper crate's
// wrappers, which check the host's caps before a call: these tests are of
// the host's own defences.
use toolgate_guest::bindings::toolgate::policy::{events as raw_events, state as raw_state};
use toolgate_guest::bindings::wasi::logging::logging::log as raw_log;
use toolgate_guest::{
    Account, BudgetStatus, Classify, Config, ConfigError, Decision, FailMode, ModelReply, Observe,
    ParseVerdict, Policy, PolicyInfo, Risk, RiskLevel, ToolCall, ToolEvent, host,
};

/// 100 MiB: far past anything a host should copy out of a policy.
const HUGE: usize = 100 << 20;

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
                    .filter(|k| raw_state::get(k).is_ok_and(|v| v.is_some()))
                    .collect();
                let keys = raw_state::list_keys("", 100).unwrap_or_default();
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
                raw_log(host::Level::Info, "", &"log flood ".repeat(10_000));
                Decision::allow().with_note("flooded")
            }
            "malformed" => {
                // Not UTF-8: the host must refuse to lift it.
                let bytes = vec![0xff, 0xfe, 0xfd];
                Decision::deny(unsafe { String::from_utf8_unchecked(bytes) })
            }
            "state-quota" => {
                let result = raw_state::set("big", &vec![0u8; 4096]);
                Decision::allow().with_note(format!("state-quota: {result:?}"))
            }
            // The model questions: what `parse` makes of the reply is below.
            "ask-slow" | "ask-unparseable" | "ask-twice" | "ask-unparseable-long" => {
                // Far past any sensible wait: only the host's limits bound it.
                Decision::ask_model("system", "user", 600_000)
            }
            "ask-huge" => Decision::ask_model("system", "q".repeat(1024 * 1024), 1_000),
            // `parse` answers with a huge error (below).
            "huge-parse-error" => Decision::ask_model("system", "user", 1_000),
            "huge-event-fields" => {
                raw_events::append(&huge_event(512 * 1024));
                Decision::allow().with_note("appended")
            }
            "event-flood" => {
                for i in 0..100_000u64 {
                    raw_events::append(&raw_events::Event {
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
                let keys = raw_state::list_keys("", u32::MAX).map_or(0, |k| k.len());
                let events =
                    raw_events::session_recent("flood", u32::MAX, &[]).map_or(0, |e| e.len());
                Decision::allow().with_note(format!("read-max: {keys} keys, {events} events"))
            }
            "get-many-flood" => {
                let keys: Vec<String> = (0..1_500_000).map(|i| format!("k{i}")).collect();
                let answer = raw_state::get_many(&keys).map(|values| values.len());
                Decision::allow().with_note(format!("get-many-flood: {answer:?}"))
            }
            "get-many-cap" => {
                let at_cap: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
                let mut over = at_cap.clone();
                over.push("one-more".into());
                let at_cap = raw_state::get_many(&at_cap).map(|values| values.len());
                let over = raw_state::get_many(&over).map(|values| values.len());
                Decision::allow().with_note(format!("get-many-cap: {at_cap:?} / {over:?}"))
            }
            "state-key-max" => {
                let at_limit = raw_state::set(&"k".repeat(1024), b"v");
                let over = raw_state::set(&"k".repeat(1025), b"v");
                Decision::allow().with_note(format!("state-key-max: {at_limit:?} / {over:?}"))
            }
            "state-key-nul" => {
                let set = raw_state::set("a\0b", b"v");
                let read = raw_state::get("a\0b");
                let counted = raw_state::try_increment("n\0", 5);
                let note = format!("state-key-nul: {set:?} / {read:?} / {counted:?}");
                Decision::allow().with_note(note)
            }
            "helpers-past-copy-limit" => {
                // Through the helper crate, what is past the host's copy
                // limit (4 MiB) is answered as host.wit promises, not
                // trapped on: `too-large`, a key no store holds read as
                // none, and an event cut as the host cuts it.
                let big = 5 << 20;
                let value = host::state::set("big", &vec![0u8; big]);
                let keys: Vec<String> = (0..1_500_000).map(|i| format!("k{i}")).collect();
                let many = host::state::get_many(&keys).map(|values| values.len());
                let counter = host::state::try_increment(&"k".repeat(big), 1);
                let read = host::state::get(&"k".repeat(big));
                let listed = host::state::keys(&"k".repeat(big), 10);
                host::events::append(&huge_event(big));
                Decision::allow().with_note(format!(
                    "helpers: {value:?} / {many:?} / {counter:?} / {read:?} / {listed:?}"
                ))
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
                raw_log(host::Level::Info, "", &"l".repeat(1024));
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
            // Attacks of the other phases (`open`, `classify`, `account`).
            "huge-open-error" | "huge-risk" | "big-risk" | "huge-budget" | "big-budget" => {
                Decision::allow().with_note("attacked in another phase")
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
            // What `describe` could read of the config: the contract says
            // it must not depend on it, so the host gives it none.
            description: format!(
                "misbehaves on purpose (test policy); describe saw {} config entries",
                toolgate_guest::bindings::wasi::config::store::get_all().map_or(0, |e| e.len())
            ),
            default_fail_mode: FailMode::Open,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        let config: Attack = config.parse()?;
        // Armed by an earlier call (`arm`): refuse to open on the decision
        // path, with an error far past any sensible size.
        if config.attack == "huge-open-error" && raw_state::get("armed").is_ok_and(|v| v.is_some())
        {
            return Err(ConfigError::whole("o".repeat(HUGE)));
        }
        Ok(Self {
            config,
            caller: Default::default(),
        })
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        *self.caller.borrow_mut() = call.caller.user_id.clone();
        if call.tool == "attack" {
            self.attack()
        } else if call.tool == "arm" {
            let armed = raw_state::set("armed", b"1");
            Decision::allow().with_note(format!("armed: {armed:?}"))
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

impl Classify for Hostile {
    fn classify(&self, call: &ToolCall) -> Risk {
        let (category, signals) = match (call.tool.as_str(), self.config.attack.as_str()) {
            // Past what one copy out of the sandbox may be.
            ("attack", "huge-risk") => ("c".repeat(16 << 20), 1_000_000),
            // Under it, but past every cap on what a risk may hold.
            ("attack", "big-risk") => ("c".repeat(512 << 10), 20_000),
            _ => {
                return Risk {
                    level: RiskLevel::None,
                    category: "unclassified".into(),
                    signals: Vec::new(),
                };
            }
        };
        Risk {
            level: RiskLevel::High,
            category,
            signals: (0..signals).map(|i| format!("signal-{i}")).collect(),
        }
    }
}

impl Account for Hostile {
    fn account(&self, call: &ToolCall, _risk: &Risk) -> BudgetStatus {
        match (call.tool.as_str(), self.config.attack.as_str()) {
            ("attack", "huge-budget") => BudgetStatus::Warning("b".repeat(HUGE)),
            ("attack", "big-budget") => BudgetStatus::Warning("b".repeat(512 << 10)),
            _ => BudgetStatus::Ok,
        }
    }
}

impl ParseVerdict for Hostile {
    fn parse(&self, _call: &ToolCall, reply: &ModelReply) -> Result<Decision, String> {
        match self.config.attack.as_str() {
            "huge-parse-error" => Err("e".repeat(HUGE)),
            "ask-unparseable-long" => Err("e".repeat(512 << 10)),
            "ask-unparseable" => Err("this reply means nothing to me".into()),
            "ask-twice" => Ok(Decision::ask_model("system", "again", 1_000)),
            // Report what the host handed over, for the test to check.
            _ => Ok(Decision::allow().with_note(format!("reply: {reply:?}"))),
        }
    }
}

/// An event whose every text field is `len` bytes.
fn huge_event(len: usize) -> raw_events::Event {
    let huge = "x".repeat(len);
    raw_events::Event {
        session_id: huge.clone(),
        turn: 0,
        kind: huge.clone(),
        tool: Some(huge.clone()),
        origin: Some(toolgate_guest::ToolOrigin::Mcp(huge.clone())),
        risk: None,
        detail: Some(huge.clone()),
        summary: Some(huge),
        at_ms: 0,
    }
}

toolgate_guest::export_policy!(Hostile, classify, account, parse, observe);
