//! Pending gates: calls paused for a person's approval or a credential.
//!
//! This module holds the data; `store/gates.rs` keeps it. A gate lives in
//! the store under (user, thread, request id), any number per thread (each
//! paused call a model was told of can be approved), and is resolved by
//! `Store::take_gate`, which checks, in one write transaction: the gate
//! exists, has not expired, and the resolving channel is the one the gate
//! was raised from (or a trusted one). A failed check
//! leaves the gate in place; redb serialises write transactions, so of two
//! concurrent takes exactly one succeeds. Gates survive restarts because they
//! are in the file.
//!
//! A successful resolution is remembered against the call's fingerprint
//! (user, thread, tool, arguments) so that when the runtime submits the same
//! call again the policies see the resolution and do not pause a second time.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::decision::PauseKind;
use crate::decision::RiskReport;

/// The thread a gate pauses: with the request id, it names the gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateKey {
    /// The person the agent acts for.
    pub user_id: String,
    /// The thread that is paused.
    pub thread_id: String,
}

/// A paused call waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingGate {
    /// Unguessable id the resolver must present.
    pub request_id: String,
    /// The policy that paused the call.
    pub policy: String,
    /// Whose agent it is.
    pub user_id: String,
    /// The paused thread.
    pub thread_id: String,
    /// The session the call came from.
    pub session_id: String,
    /// The channel the call came from; only it (or a trusted channel) may
    /// resolve the gate.
    pub source_channel: String,
    /// The tool that was called.
    pub tool: String,
    /// The runtime's id for the call.
    pub call_id: String,
    /// The call's arguments (JSON), with likely secrets redacted and the
    /// size capped: this is what a person (and `gates list`) sees.
    pub arguments: String,
    /// Ties the resubmitted call to this gate's resolution: a hash of the
    /// tool, its origin and its exact (unredacted) arguments.
    #[serde(default)]
    pub fingerprint: String,
    /// What the person is asked for.
    pub pause: PauseKind,
    /// How risky the call was judged (gates stored before this field have
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<RiskReport>,
    /// The transcript the runtime named for the call, if any: where a
    /// decline in the runtime's own prompt shows (the runtime tells hooks
    /// nothing of it), so the gate can end then rather than at its TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_path: Option<std::path::PathBuf>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// After this (ms since the epoch) the gate never resolves.
    pub expires_at_ms: u64,
    /// The sha256 of the pausing policy's component: a person's answer
    /// holds for that build of the policy only (gates stored before this
    /// field have none, and hold for any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_sha256: String,
    /// When policies rewrote the call before it paused, the sha256 of the
    /// arguments as it would run (hex): the approval holds for exactly
    /// those, so a resubmitted call rewritten otherwise is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_sha256: Option<String>,
    /// The working directory the runtime reported for the call: where a
    /// person's "always" holds (see `toolgate_engine::standing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<std::path::PathBuf>,
    /// What the call does, as a standing approval matches it (the digest
    /// of its tool, origin and arguments less what only describes it);
    /// none where "always" cannot be offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always_digest: Option<String>,
}

impl PendingGate {
    /// Whether `other` pauses the very call this gate does, for the same
    /// reason: the same session, channel and call (its fingerprint, and the
    /// arguments it would run with), the same build of the same policy,
    /// asking the same.
    pub fn asks_the_same_as(&self, other: &PendingGate) -> bool {
        self.session_id == other.session_id
            && self.source_channel == other.source_channel
            && self.fingerprint == other.fingerprint
            && self.policy == other.policy
            && self.policy_sha256 == other.policy_sha256
            && self.rewritten_sha256 == other.rewritten_sha256
            && self.pause == other.pause
    }

    /// The gate's key.
    pub fn key(&self) -> GateKey {
        GateKey {
            user_id: self.user_id.clone(),
            thread_id: self.thread_id.clone(),
        }
    }

    /// Whether the gate has expired at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms
    }
}

/// What a person decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GateResolution {
    /// Approve the call; `always` asks the policy to remember it.
    Approve {
        /// Remember the approval for this action.
        #[serde(default)]
        always: bool,
    },
    /// The named credential is now available.
    Authenticated {
        /// The credential supplied.
        credential: String,
    },
    /// Refuse the call.
    Deny,
}

impl GateResolution {
    /// Its name as a person's answer (`approve`, `approve-always`,
    /// `credential`, `deny`): what the inbox posts and its history shows.
    pub fn answer_name(&self) -> &'static str {
        match self {
            Self::Approve { always: true } => "approve-always",
            Self::Approve { always: false } => "approve",
            Self::Authenticated { .. } => "credential",
            Self::Deny => "deny",
        }
    }

    /// The resolution a person's answer `name` makes of `pause`, if it is
    /// one (`approve-always` only where the policy offers it, `credential`
    /// only for a credential pause, naming its credential).
    pub fn from_answer(name: &str, pause: &PauseKind) -> Option<Self> {
        match (name, pause) {
            ("approve", _) => Some(Self::Approve { always: false }),
            (
                "approve-always",
                PauseKind::Approval {
                    allow_always: true, ..
                },
            ) => Some(Self::Approve { always: true }),
            ("deny", _) => Some(Self::Deny),
            ("credential", PauseKind::Authentication { credential, .. }) => {
                Some(Self::Authenticated {
                    credential: credential.clone(),
                })
            }
            _ => None,
        }
    }
}

/// A resolution remembered for the resubmitted call. Only the policy that
/// paused sees it, only until it expires, and only once: the next decision
/// of the same call consumes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedResolution {
    /// The policy that had paused the call.
    pub policy: String,
    /// What the person decided.
    pub resolution: GateResolution,
    /// The gate it resolved.
    #[serde(default)]
    pub request_id: String,
    /// After this (ms since the epoch) it counts for nothing. Rows written
    /// before resolutions expired read as 0: expired.
    #[serde(default)]
    pub expires_at_ms: u64,
    /// The channel that resolved it (`terminal`, `web`, …), for the reason
    /// a refused retry gives.
    #[serde(default)]
    pub by: String,
    /// When it was resolved (ms since the epoch).
    #[serde(default)]
    pub at_ms: u64,
    /// The gate's [`PendingGate::policy_sha256`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_sha256: String,
    /// The gate's [`PendingGate::rewritten_sha256`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_sha256: Option<String>,
}

impl RecordedResolution {
    /// A person's `resolution` of `gate` over channel `by` at `now_ms`,
    /// counting for `ttl`.
    pub fn of(
        gate: &PendingGate,
        resolution: GateResolution,
        ttl: std::time::Duration,
        by: &str,
        now_ms: u64,
    ) -> Self {
        Self {
            policy: gate.policy.clone(),
            resolution,
            request_id: gate.request_id.clone(),
            expires_at_ms: now_ms.saturating_add(ttl.as_millis() as u64),
            by: by.to_string(),
            at_ms: now_ms,
            policy_sha256: gate.policy_sha256.clone(),
            rewritten_sha256: gate.rewritten_sha256.clone(),
        }
    }

    /// Whether it is for `policy` as built now (a resolution recorded
    /// before builds were bound holds for any build).
    pub fn is_for(&self, policy: &str, sha256: &str) -> bool {
        self.policy == policy && (self.policy_sha256.is_empty() || self.policy_sha256 == sha256)
    }
}

/// A fresh, unguessable request id (128 random bits, hex).
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    hex::encode(bytes)
}

/// The fingerprint that ties a resubmitted call to earlier resolutions:
/// the tool, where it comes from (an approval of `mcp:a/x` is not one of
/// `mcp:b/x`) and the exact arguments, by their sha256
/// ([`crate::request::ArgumentsText`]), so large arguments are hashed once.
pub fn call_fingerprint(tool: &str, origin: &str, arguments_sha256: &[u8; 32]) -> String {
    let mut hash = Sha256::new();
    for part in [tool, origin] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.update(arguments_sha256);
    hex::encode(hash.finalize())
}

/// Why a gate could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// No gate is pending for that user and thread.
    #[error("no pending gate for user `{user_id}` on thread `{thread_id}`")]
    NotFound {
        /// The user.
        user_id: String,
        /// The thread.
        thread_id: String,
    },
    /// The gate expired; the agent must make the call again.
    #[error("the pending gate has expired; the agent must make the call again")]
    Expired,
    /// The request id does not match; the gate stays pending.
    #[error("request id does not match the pending gate; it stays pending")]
    RequestIdMismatch,
    /// The channel is neither the gate's nor trusted; the gate stays pending.
    #[error(
        "channel `{actual}` cannot resolve a gate raised from `{expected}` (only that channel or a trusted one can); it stays pending"
    )]
    ChannelMismatch {
        /// The gate's source channel.
        expected: String,
        /// The channel that tried.
        actual: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ToolRequest;

    #[test]
    fn a_fingerprint_tells_tool_origin_and_arguments_apart() {
        let fingerprint = |tool: &str, origin: &str, arguments: serde_json::Value| {
            let text = ToolRequest::new(tool, arguments).arguments_text();
            call_fingerprint(tool, origin, text.sha256())
        };
        let base = fingerprint("x", "mcp:a", serde_json::json!({"q": 1}));
        assert_eq!(base, fingerprint("x", "mcp:a", serde_json::json!({"q": 1})));
        assert_ne!(base, fingerprint("x", "mcp:b", serde_json::json!({"q": 1})));
        assert_ne!(base, fingerprint("y", "mcp:a", serde_json::json!({"q": 1})));
        assert_ne!(base, fingerprint("x", "mcp:a", serde_json::json!({"q": 2})));
        // Lengths keep the parts apart: `xm` + `cp:a` is not `x` + `mcp:a`.
        assert_ne!(base, fingerprint("xm", "cp:a", serde_json::json!({"q": 1})));
    }

    #[test]
    fn a_persons_answer_names_its_resolution_and_back() {
        let approval = PauseKind::Approval {
            description: "ok?".into(),
            allow_always: true,
        };
        let credential = PauseKind::Authentication {
            credential: "gh".into(),
            instructions: "log in".into(),
            url: None,
        };
        for (resolution, pause) in [
            (GateResolution::Approve { always: false }, &approval),
            (GateResolution::Approve { always: true }, &approval),
            (GateResolution::Deny, &credential),
            (
                GateResolution::Authenticated {
                    credential: "gh".into(),
                },
                &credential,
            ),
        ] {
            let name = resolution.answer_name();
            assert_eq!(GateResolution::from_answer(name, pause), Some(resolution));
        }
        // Only what the pause offers.
        assert_eq!(GateResolution::from_answer("credential", &approval), None);
        let no_always = PauseKind::Approval {
            description: "ok?".into(),
            allow_always: false,
        };
        assert_eq!(
            GateResolution::from_answer("approve-always", &no_always),
            None
        );
        assert_eq!(GateResolution::from_answer("yes", &approval), None);
    }
}
