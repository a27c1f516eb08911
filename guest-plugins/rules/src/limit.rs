//! Call limits: a rule with `limit = { calls = N, per = … }` lets the first
//! N matching calls through and fires from the next one on.
//!
//! The counters live in the policy's state and are taken with the host's
//! atomic `try-increment`, so two concurrent calls can never both take the
//! last one, in this process or another host on the same store. Windows:
//! - `per = "turn"`: per session and turn (a new turn starts afresh);
//! - `per = "session"`: per session;
//! - `per = "10m"` (`s`, `m`, `h`, `d`): per user across their sessions, in
//!   windows aligned to the clock. A burst at a window's edge can see up to
//!   2N calls in N's time; use `turn` or `session` for a hard cap.

use serde::Deserialize;
use toolgate_guest::{ToolCall, state_key};

/// A limit as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    calls: u64,
    per: String,
}

/// Which calls share one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Turn,
    Session,
    /// A clock-aligned window of this many seconds, per user.
    Every(u64),
}

/// A compiled limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub calls: u64,
    pub window: Window,
}

/// Where one counter lives: its key, and the prefix its rule's older
/// counters for the same session or user share (swept when a new one
/// starts).
pub struct Counter {
    pub key: String,
    pub siblings: Option<String>,
}

impl Limit {
    pub fn compile(spec: LimitSpec) -> Result<Self, String> {
        if spec.calls == 0 {
            return Err(
                "`calls = 0` would fire on every call: drop `limit` to make the rule fire always"
                    .into(),
            );
        }
        let window = match spec.per.as_str() {
            "turn" => Window::Turn,
            "session" => Window::Session,
            other => Window::Every(seconds(other).ok_or_else(|| {
                format!(
                    "`per = \"{other}\"` is not a window: use \"turn\", \"session\" or a duration such as \"30s\", \"10m\", \"1h\", \"1d\""
                )
            })?),
        };
        Ok(Self {
            calls: spec.calls,
            window,
        })
    }

    /// The counter `call` draws from under `rule`, at `now_ms`.
    pub fn counter(&self, rule: &str, call: &ToolCall, now_ms: u64) -> Counter {
        let caller = &call.caller;
        let (scope, bucket) = match self.window {
            Window::Turn => (
                state_key(&[rule, "turn", &caller.session_id]),
                Some(caller.turn),
            ),
            Window::Session => (state_key(&[rule, "session", &caller.session_id]), None),
            Window::Every(secs) => (
                state_key(&[rule, &format!("every-{secs}s"), &caller.user_id]),
                Some(now_ms / 1000 / secs),
            ),
        };
        match bucket {
            Some(bucket) => Counter {
                key: format!("limit/{scope}/{bucket}"),
                siblings: Some(format!("limit/{scope}/")),
            },
            None => Counter {
                key: format!("limit/{scope}"),
                siblings: None,
            },
        }
    }

    /// How the limit reads in a reason: "20 calls per turn".
    pub fn describe(&self) -> String {
        let calls = match self.calls {
            1 => "1 call".to_string(),
            n => format!("{n} calls"),
        };
        match self.window {
            Window::Turn => format!("{calls} per turn"),
            Window::Session => format!("{calls} per session"),
            Window::Every(secs) => format!("{calls} per {}", human(secs)),
        }
    }
}

/// `30s`, `10m`, `1h`, `1d` in seconds; none for anything else (or zero).
fn seconds(text: &str) -> Option<u64> {
    let unit = text.chars().last()?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return None,
    };
    let number = &text[..text.len() - 1];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number
        .parse::<u64>()
        .ok()?
        .checked_mul(scale)
        .filter(|s| *s > 0)
}

fn human(secs: u64) -> String {
    for (unit, scale) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs.is_multiple_of(scale) {
            return format!("{}{unit}", secs / scale);
        }
    }
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(calls: u64, per: &str) -> Result<Limit, String> {
        Limit::compile(LimitSpec {
            calls,
            per: per.into(),
        })
    }

    #[test]
    fn windows_parse_and_read_back() {
        assert_eq!(limit(20, "turn").unwrap().describe(), "20 calls per turn");
        assert_eq!(
            limit(1, "session").unwrap().describe(),
            "1 call per session"
        );
        assert_eq!(limit(5, "90m").unwrap().window, Window::Every(5_400));
        assert_eq!(limit(5, "90m").unwrap().describe(), "5 calls per 90m");
        assert_eq!(limit(5, "1d").unwrap().describe(), "5 calls per 1d");
        for bad in [
            "",
            "h",
            "10",
            "10x",
            "-1m",
            "0s",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(
                limit(1, bad).unwrap_err().contains("is not a window"),
                "{bad}"
            );
        }
        assert!(limit(0, "turn").unwrap_err().contains("calls = 0"));
    }
}
