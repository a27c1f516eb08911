//! Pending gates: calls paused for a person's approval or a credential.
//!
//! A gate lives in the store under (user, thread) and is resolved by
//! [`Store::take_gate`], which checks, in one write transaction: the gate
//! exists, has not expired, the request id matches, and the resolving channel
//! is the one the gate was raised from (or a trusted one). A failed check
//! leaves the gate in place; redb serialises write transactions, so of two
//! concurrent takes exactly one succeeds. Gates survive restarts because they
//! are in the file.
//!
//! A successful resolution is remembered against the call's fingerprint
//! (user, thread, tool, arguments) so that when the runtime submits the same
//! call again the policies see the resolution and do not pause a second time.

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::store::{GATES, Store};

/// (user, thread, call fingerprint) → resolutions so far (JSON).
pub(crate) const RESOLUTIONS: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("gate_resolutions");

/// Identifies a gate: one pending gate per (user, thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateKey {
    /// The person the agent acts for.
    pub user_id: String,
    /// The thread that is paused.
    pub thread_id: String,
}

/// Why a call is paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PauseKind {
    /// A person must approve the call.
    Approval {
        /// What is being approved.
        description: String,
        /// Whether "allow always" may be offered.
        allow_always: bool,
    },
    /// A person must supply a credential.
    Authentication {
        /// The credential's name.
        credential: String,
        /// How to obtain it.
        instructions: String,
        /// Where to obtain it.
        url: Option<String>,
    },
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
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// After this (ms since the epoch) the gate never resolves.
    pub expires_at_ms: u64,
}

impl PendingGate {
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
    /// The store failed.
    #[error("store error: {0}")]
    Storage(String),
}

/// A fresh, unguessable request id (128 random bits, hex).
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    hex::encode(bytes)
}

/// The fingerprint that ties a resubmitted call to earlier resolutions:
/// the tool, where it comes from (an approval of `mcp:a/x` is not one of
/// `mcp:b/x`) and the exact arguments.
pub fn call_fingerprint(tool: &str, origin: &str, arguments: &str) -> String {
    let mut hash = Sha256::new();
    for part in [tool, origin, arguments] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hex::encode(hash.finalize())
}

impl Store {
    /// Store a gate, replacing any earlier gate of the same (user, thread).
    pub fn insert_gate(&self, gate: &PendingGate) -> Result<()> {
        let bytes = serde_json::to_vec(gate).expect("gates always serialise");
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(GATES).map_err(|e| self.error(e))?;
            table
                .insert(
                    (gate.user_id.as_str(), gate.thread_id.as_str()),
                    bytes.as_slice(),
                )
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The pending gate for `key`, unless there is none or it has expired.
    pub fn peek_gate(&self, key: &GateKey, now_ms: u64) -> Result<Option<PendingGate>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(GATES).map_err(|e| self.error(e))?;
        let gate = table
            .get((key.user_id.as_str(), key.thread_id.as_str()))
            .map_err(|e| self.error(e))?
            .and_then(|v| serde_json::from_slice::<PendingGate>(v.value()).ok());
        Ok(gate.filter(|g| !g.is_expired(now_ms)))
    }

    /// Every unexpired gate, optionally only one user's.
    pub fn list_gates(&self, user_id: Option<&str>, now_ms: u64) -> Result<Vec<PendingGate>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(GATES).map_err(|e| self.error(e))?;
        let mut gates = Vec::new();
        for entry in table.iter().map_err(|e| self.error(e))? {
            let (_, value) = entry.map_err(|e| self.error(e))?;
            if let Ok(gate) = serde_json::from_slice::<PendingGate>(value.value())
                && !gate.is_expired(now_ms)
                && user_id.is_none_or(|u| u == gate.user_id)
            {
                gates.push(gate);
            }
        }
        Ok(gates)
    }

    /// Take the gate at `key` if every check passes; otherwise leave it.
    /// An expired gate is removed and reported as [`GateError::Expired`].
    pub fn take_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        trusted_channels: &[String],
        now_ms: u64,
    ) -> Result<PendingGate, GateError> {
        let storage = |e: redb::Error| GateError::Storage(e.to_string());
        let txn = self.db().begin_write().map_err(|e| storage(e.into()))?;
        let outcome = {
            let mut table = txn.open_table(GATES).map_err(|e| storage(e.into()))?;
            let slot = (key.user_id.as_str(), key.thread_id.as_str());
            let gate = table
                .get(slot)
                .map_err(|e| storage(e.into()))?
                .map(|v| serde_json::from_slice::<PendingGate>(v.value()));
            match gate {
                None => Err(GateError::NotFound {
                    user_id: key.user_id.clone(),
                    thread_id: key.thread_id.clone(),
                }),
                Some(Err(err)) => Err(GateError::Storage(format!("unreadable gate: {err}"))),
                Some(Ok(gate)) if gate.is_expired(now_ms) => {
                    table.remove(slot).map_err(|e| storage(e.into()))?;
                    Err(GateError::Expired)
                }
                Some(Ok(gate)) if gate.request_id != request_id => {
                    return Err(GateError::RequestIdMismatch);
                }
                Some(Ok(gate))
                    if gate.source_channel != channel
                        && !trusted_channels.iter().any(|t| t == channel) =>
                {
                    return Err(GateError::ChannelMismatch {
                        expected: gate.source_channel,
                        actual: channel.to_string(),
                    });
                }
                Some(Ok(gate)) => {
                    table.remove(slot).map_err(|e| storage(e.into()))?;
                    Ok(gate)
                }
            }
        };
        txn.commit().map_err(|e| storage(e.into()))?;
        outcome
    }

    /// Remember a resolution for the resubmitted call, for `ttl`.
    pub fn record_resolution(
        &self,
        gate: &PendingGate,
        resolution: GateResolution,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let slot = (
            gate.user_id.as_str(),
            gate.thread_id.as_str(),
            gate.fingerprint.as_str(),
        );
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(RESOLUTIONS).map_err(|e| self.error(e))?;
            let mut recorded: Vec<RecordedResolution> = table
                .get(slot)
                .map_err(|e| self.error(e))?
                .and_then(|v| serde_json::from_slice(v.value()).ok())
                .unwrap_or_default();
            recorded.push(RecordedResolution {
                policy: gate.policy.clone(),
                resolution,
                request_id: gate.request_id.clone(),
                expires_at_ms: crate::now_ms().saturating_add(ttl.as_millis() as u64),
            });
            let bytes = serde_json::to_vec(&recorded).expect("resolutions always serialise");
            table
                .insert(slot, bytes.as_slice())
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Unexpired resolutions recorded for this call so far, oldest first.
    pub fn resolutions_for(
        &self,
        user_id: &str,
        thread_id: &str,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<Vec<RecordedResolution>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(RESOLUTIONS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.error(e)),
        };
        let recorded: Vec<RecordedResolution> = table
            .get((user_id, thread_id, fingerprint))
            .map_err(|e| self.error(e))?
            .and_then(|v| serde_json::from_slice(v.value()).ok())
            .unwrap_or_default();
        Ok(recorded
            .into_iter()
            .filter(|r| now_ms < r.expires_at_ms)
            .collect())
    }

    /// Forget the resolutions of a call once it has been finally decided.
    pub fn clear_resolutions(
        &self,
        user_id: &str,
        thread_id: &str,
        fingerprint: &str,
    ) -> Result<()> {
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(RESOLUTIONS).map_err(|e| self.error(e))?;
            table
                .remove((user_id, thread_id, fingerprint))
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }
}
