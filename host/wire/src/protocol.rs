//! The daemon's wire protocol, shared by the Unix socket (one JSON request
//! per line, one JSON answer per line) and HTTP `POST /v1/rpc` (one of each
//! per request).
//!
//! An answer is `{"ok": true, "result": ...}` or
//! `{"ok": false, "kind": "busy", "error": "..."}`: `kind` is an
//! [`ErrorKind`] a client acts on, `error` a message for a person.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decision::Outcome;
use crate::decision_log::LogFilter;
use crate::gates::GateResolution;
use crate::request::ToolRequest;

/// What to answer when toolgate itself fails on a hook event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Deny the call, saying toolgate failed and how to diagnose it.
    #[default]
    Deny,
    /// Ask the person.
    Ask,
    /// Let the runtime's normal permission flow decide.
    Allow,
}

/// Which config a caller means: a file (its canonical path and the sha256
/// of its bytes) or the bundled default. A hook names it, so a daemon that
/// serves another config refuses instead of answering with its own (a
/// daemon started without `--config` must not answer a hook installed with
/// a stricter one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ConfigIdentity {
    /// The config built into the binary.
    Bundled,
    /// A config file.
    File {
        /// Its canonical path.
        path: String,
        /// The sha256 of its bytes, as hex.
        sha256: String,
    },
}

impl ConfigIdentity {
    /// The identity of the config file at `path`, whose bytes are `text`.
    pub fn of_file(path: &std::path::Path, text: &[u8]) -> Self {
        use sha2::Digest as _;
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Self::File {
            path: path.display().to_string(),
            sha256: hex::encode(sha2::Sha256::digest(text)),
        }
    }

    /// The identity of the config file at `path`, read now: only a regular
    /// file of at most [`MAX_CONFIG_BYTES`], opened without blocking (a
    /// FIFO or a device named here is refused unread, never waited on).
    pub fn read(path: &std::path::Path) -> std::io::Result<Self> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let refused = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(refused("not a regular file".into()));
        }
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(refused(format!(
                "larger than {MAX_CONFIG_BYTES} bytes, so not a config"
            )));
        }
        let mut text = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut text)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(refused(format!(
                "grew past {MAX_CONFIG_BYTES} bytes while read"
            )));
        }
        Ok(Self::of_file(path, &text))
    }

    /// For a person: the file and the start of its digest.
    pub fn describe(&self) -> String {
        match self {
            Self::Bundled => "the bundled default config".into(),
            Self::File { path, sha256 } => {
                format!("{path} (sha256 {})", sha256.get(..12).unwrap_or(sha256))
            }
        }
    }
}

/// The largest config file read for its identity.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

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
        /// The config the hook was installed with; a daemon serving another
        /// one answers with a refusal. Absent: not checked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config: Option<ConfigIdentity>,
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
    /// What the model may read of a call's output (the `output` phase):
    /// answered with an [`crate::output::OutputCheck`].
    CheckOutput {
        /// The call that ran, as it ran.
        request: ToolRequest,
        /// What happened.
        outcome: Outcome,
        /// Its output, as the model would read it.
        output: String,
        /// Once checked, record the outcome with this summary, as
        /// [`DaemonRequest::Observe`] would: one round trip for both.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observe: Option<String>,
    },
    /// Which of `tools` may be offered in `caller`'s session (the
    /// `visibility` phase): answered with `{"visible": [bool], "filtered":
    /// bool}`, `filtered` false when no policy filters tools at all.
    VisibleTools {
        /// A request naming the session, thread and user.
        caller: ToolRequest,
        /// The tools, in order.
        tools: Vec<crate::output::ToolDescriptor>,
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
    /// Every flow label: what sessions took in and which files hold it
    /// (`toolgate flows list`). The operator's to read.
    Flows,
    /// Remove flow labels: a person's act, authorized as a resolution from
    /// a terminal is (`toolgate flows clear`); never an agent's.
    ClearFlows {
        /// Which labels.
        what: FlowsClear,
    },
    /// The newest decision-log entries matching a filter, oldest first.
    Log {
        /// Which entries.
        #[serde(default)]
        filter: LogFilter,
        /// How many at most.
        limit: usize,
    },
    /// Links of this host's audit chain after `after` (none: from the
    /// first kept), oldest first, with the chain's signed head: what
    /// `toolgate audit verify` checks and `audit export` writes.
    Audit {
        /// The last link already read.
        #[serde(default)]
        after: Option<u64>,
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
    /// A one-time code that signs a person in to the approvals inbox
    /// (only for a person at a terminal of their own); the answer holds the
    /// inbox's URL and the code.
    WebLogin,
    /// Prometheus metrics text.
    Metrics,
}

/// The one list of agent runtimes. Each line is a runtime: its
/// [`HookRuntime`] variant, its name on the command line and the wire, and
/// its module in the runtimes crate (`host/runtimes/src/MODULE.rs`, whose
/// type named as the variant is its adapter and whose `INFO` is what
/// toolgate knows of it). Adding a runtime is that file (with its `mod`
/// line there) and one line here; nothing else names its variant.
///
/// Hands the list to `$callback` (a `macro_rules!` macro taking the lines
/// as written): `hook_runtimes!` here makes the enum, the runtimes crate its
/// one `match` and its list, so no two of them can drift.
#[macro_export]
macro_rules! for_each_runtime {
    ($callback:ident) => {
        $callback! {
            /// Claude Code's command hooks (the default of a hook command
            /// that names none).
            #[default]
            ClaudeCode = "claude-code" in claude_code,
            /// Gemini CLI's command hooks.
            GeminiCli = "gemini-cli" in gemini_cli,
            /// Cursor's agent hooks.
            Cursor = "cursor" in cursor,
            /// OpenAI Codex CLI's hooks.
            Codex = "codex" in codex,
            /// GitHub Copilot CLI's hooks.
            Copilot = "copilot" in copilot,
            /// OpenCode, through toolgate's plugin.
            OpenCode = "opencode" in opencode,
        }
    };
}

/// Declares [`HookRuntime`], its [`HookRuntime::ALL`] and its names from
/// [`for_each_runtime!`]'s list.
macro_rules! hook_runtimes {
    ($($(#[$attr:meta])* $variant:ident = $name:literal in $module:ident,)+) => {
        /// The agent runtimes whose hook events the daemon answers. Each has
        /// its adapter in the runtimes crate (one file per runtime).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub enum HookRuntime {
            $($(#[$attr])* #[serde(rename = $name)] $variant,)+
        }

        impl HookRuntime {
            /// Every runtime, for parsing and listing.
            pub const ALL: [HookRuntime; [$($name),+].len()] = [$(Self::$variant),+];

            /// Its name on the command line and the wire.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }
    };
}

for_each_runtime!(hook_runtimes);

impl HookRuntime {
    /// The runtime of that name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|runtime| runtime.name() == name)
    }
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
                | DaemonRequest::CheckOutput { .. }
                | DaemonRequest::VisibleTools { .. }
                | DaemonRequest::Command { .. }
                | DaemonRequest::Reload
        )
    }
}

/// A machine-readable class of [`Error`], carried on the daemon's wire so a
/// client can act on the cause without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The config is invalid.
    Config,
    /// A plugin could not be loaded.
    Plugin,
    /// The store failed.
    Store,
    /// Try again shortly: the store or the daemon is busy.
    Busy,
    /// The request was malformed.
    InvalidRequest,
    /// What was asked for does not exist (a gate, a plugin, a command).
    NotFound,
    /// The caller may not do this.
    Unauthorized,
    /// A pending gate refused the resolution (expired, wrong id, ...).
    Gate,
    /// A policy failed while running an admin command.
    PolicyFailure,
    /// The daemon could not be reached.
    Unreachable,
    /// Anything else.
    Internal,
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

/// The wire form of a result: a value, or an error's kind and message.
pub fn encode(result: Result<Value, (ErrorKind, String)>) -> String {
    let answer = match result {
        Ok(result) => Answer {
            ok: true,
            result,
            kind: None,
            error: None,
        },
        Err((kind, message)) => Answer {
            ok: false,
            result: Value::Null,
            kind: Some(kind),
            error: Some(message),
        },
    };
    serde_json::to_string(&answer).expect("answers always serialise")
}

/// A wire answer back: the value, or the daemon's error kind and message.
pub fn decode(text: &str) -> Result<Value, (ErrorKind, String)> {
    let answer: Answer = serde_json::from_str(text).map_err(|err| {
        (
            ErrorKind::Internal,
            format!("unreadable answer from the daemon: {err}"),
        )
    })?;
    if answer.ok {
        return Ok(answer.result);
    }
    Err((
        answer.kind.unwrap_or(ErrorKind::Internal),
        answer.error.unwrap_or_else(|| "no reason given".into()),
    ))
}

/// Parse a request, or say what is wrong with it.
pub fn decode_request(text: &str) -> Result<DaemonRequest, String> {
    serde_json::from_str(text).map_err(|err| format!("bad daemon request: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `fuzz/` (mcp_message): without correctly rounded float
    /// parsing, a number in a call's arguments came out of the daemon's
    /// protocol one unit in the last place away from what the gateway sent,
    /// so the policies decided on other arguments than the server got.
    #[test]
    fn a_call_crosses_the_protocol_unchanged_numbers_included() {
        // A number too long for an f64, as the fuzzer wrote it.
        let text = format!(
            r#"{{"id": 1522222222222{}14347467612885206812}}"#,
            "0".repeat(77)
        );
        let arguments: serde_json::Value = serde_json::from_str(&text).unwrap();
        let request = DaemonRequest::Evaluate {
            request: ToolRequest::new("write", arguments),
        };
        let line = serde_json::to_string(&request).unwrap();
        match decode_request(&line).unwrap() {
            DaemonRequest::Evaluate { request: again } => {
                let DaemonRequest::Evaluate { request } = request else {
                    unreachable!()
                };
                assert_eq!(again, request, "{line}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Which flow labels a person clears.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowsClear {
    /// Every label of one session (its id as `toolgate flows list` shows
    /// it).
    Session(String),
    /// Every label of one file, as one owner's calls see it.
    File {
        /// `local`, or a tenant's `uid:N`.
        owner: String,
        /// The file's absolute path (resolved, as the list shows it).
        path: String,
    },
    /// Every label.
    All,
}
