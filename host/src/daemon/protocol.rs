//! The daemon's wire protocol, shared by the Unix socket (one JSON request
//! per line, one JSON answer per line) and HTTP `POST /v1/rpc` (one of each
//! per request).
//!
//! An answer is `{"ok": true, "result": ...}` or
//! `{"ok": false, "kind": "busy", "error": "..."}`: `kind` is an
//! [`ErrorKind`] a client acts on, `error` a message for a person.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::claude_code::OnError;
use crate::decision::Outcome;
use crate::decision_log::LogFilter;
use crate::error::{Error, ErrorKind, Result};
use crate::gates::GateResolution;
use crate::request::ToolRequest;

/// The longest request accepted, on either transport.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// One request to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum DaemonRequest {
    /// One agent-runtime hook event, exactly as the runtime sent it; the
    /// result is the text the hook prints (or null for nothing). One round
    /// trip per event.
    Hook {
        /// The runtime's adapter: `claude-code`.
        runtime: HookRuntime,
        /// The raw event (the hook's stdin).
        event: String,
        /// What to answer if toolgate fails on this event.
        #[serde(default)]
        on_error: OnError,
    },
    /// Decide on a call.
    Evaluate {
        /// The call.
        request: ToolRequest,
    },
    /// Report a call's outcome.
    Observe {
        /// The call.
        request: ToolRequest,
        /// What happened.
        outcome: Outcome,
        /// A short summary of the result.
        #[serde(default)]
        summary: String,
    },
    /// Start a session's next turn.
    NextTurn {
        /// The session.
        session: String,
    },
    /// A session's current turn.
    Turn {
        /// The session.
        session: String,
    },
    /// Resolve a pending gate.
    Resolve {
        /// The gate's user.
        user: String,
        /// The gate's thread.
        thread: String,
        /// The request id from the pause.
        request_id: String,
        /// The resolving channel: `terminal` for a person at a terminal
        /// (checked from the connection), or a channel adapter's name.
        channel: String,
        /// A channel adapter's token (see `[approvals] tokens`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        /// What the person decided.
        resolution: GateResolution,
    },
    /// Pending gates.
    Gates {
        /// Only this user's.
        #[serde(default)]
        user: Option<String>,
    },
    /// A policy's admin command.
    Command {
        /// The plugin.
        plugin: String,
        /// The command.
        name: String,
        /// JSON arguments.
        #[serde(default)]
        args: Value,
    },
    /// The newest decision-log entries matching a filter, oldest first.
    Log {
        /// Which entries.
        #[serde(default)]
        filter: LogFilter,
        /// How many at most.
        limit: usize,
    },
    /// The newest events of the policies' streams, oldest first.
    Events {
        /// How many at most.
        limit: usize,
    },
    /// Sizes per table and per policy.
    StoreStats,
    /// Sweep what is past its retention now.
    Sweep,
    /// Reload the config and plugins.
    Reload,
    /// Loaded plugins and their status.
    Plugins,
    /// Liveness and a summary.
    Health,
    /// Prometheus metrics text.
    Metrics,
}

/// The agent runtimes whose hook events the daemon answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookRuntime {
    /// Claude Code's command hooks.
    ClaudeCode,
}

impl DaemonRequest {
    /// Whether answering it runs policies (and so counts against the
    /// daemon's in-flight limit).
    pub fn runs_policies(&self) -> bool {
        matches!(
            self,
            DaemonRequest::Hook { .. }
                | DaemonRequest::Evaluate { .. }
                | DaemonRequest::Observe { .. }
                | DaemonRequest::Command { .. }
                | DaemonRequest::Reload
        )
    }
}

/// One answer on the wire.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    result: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<ErrorKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Parse a request, as a typed error naming what is wrong.
pub fn decode_request(text: &str) -> Result<DaemonRequest> {
    serde_json::from_str(text).map_err(|err| Error::Request(format!("bad daemon request: {err}")))
}

/// The wire form of a handled request's result.
pub fn encode_answer(result: &Result<Value>) -> String {
    let answer = match result {
        Ok(value) => Answer {
            ok: true,
            result: value.clone(),
            kind: None,
            error: None,
        },
        Err(err) => Answer {
            ok: false,
            result: Value::Null,
            kind: Some(err.kind()),
            error: Some(err.to_string()),
        },
    };
    serde_json::to_string(&answer).expect("answers always serialise")
}

/// A wire answer back as a result; the daemon's errors become
/// [`Error::Remote`] (or [`Error::Busy`]) with their kind.
pub fn decode_answer(text: &str) -> Result<Value> {
    let answer: Answer = serde_json::from_str(text).map_err(|err| Error::Remote {
        kind: ErrorKind::Internal,
        message: format!("unreadable answer from the daemon: {err}"),
    })?;
    if answer.ok {
        return Ok(answer.result);
    }
    let message = answer.error.unwrap_or_else(|| "no reason given".into());
    Err(match answer.kind.unwrap_or(ErrorKind::Internal) {
        ErrorKind::Busy => Error::Busy(message),
        ErrorKind::InvalidRequest => Error::Request(message),
        ErrorKind::Unauthorized => Error::Unauthorized(message),
        kind => Error::Remote { kind, message },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_kind_across_the_wire() {
        let busy = encode_answer(&Err(Error::Busy("8 requests in flight".into())));
        assert!(matches!(decode_answer(&busy), Err(Error::Busy(m)) if m.contains("8 requests")));
        let missing = encode_answer(&Err(Error::Gate(crate::gates::GateError::NotFound {
            user_id: "u".into(),
            thread_id: "t".into(),
        })));
        let err = decode_answer(&missing).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.to_string().contains("no pending gate"), "{err}");
        let ok = encode_answer(&Ok(serde_json::json!({"a": 1})));
        assert_eq!(decode_answer(&ok).unwrap(), serde_json::json!({"a": 1}));
    }

    #[test]
    fn unknown_ops_and_fields_are_invalid_requests() {
        for text in [
            r#"{"op":"format_disk"}"#,
            r#"{"op":"gates","usr":"typo"}"#,
            "not json",
        ] {
            assert_eq!(
                decode_request(text).unwrap_err().kind(),
                ErrorKind::InvalidRequest
            );
        }
        assert!(matches!(
            decode_request(r#"{"op":"hook","runtime":"claude-code","event":"{}"}"#),
            Ok(DaemonRequest::Hook {
                on_error: OnError::Deny,
                ..
            })
        ));
    }
}
