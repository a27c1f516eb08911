//! The store: per-policy state namespaces and event streams, pending gates
//! and resolutions, the decision log and turn counters — behind one narrow
//! interface (the traits below), so the pipeline, the capabilities and the
//! daemon never name a storage engine. `embedded` (redb, one file) is the
//! default.

mod embedded;
pub mod hygiene;
#[cfg(feature = "postgres")]
mod postgres;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::audit::{AuditRecord, AuditSettings, Chain, Purpose, SignedHead, Stored};
use crate::config::LogConfig;
use crate::decision_log::{LogEntry, LogFilter, PendingLogEntry};
use crate::error::Result;
use crate::gates::{GateError, GateKey, GateResolution, PendingGate, RecordedResolution};
use embedded::RedbStore;
pub use embedded::compact;
pub use embedded::{DURABLE_WITHIN, EVENT_QUEUE_CAPACITY};
use hygiene::{Retention, StoreStats, SweepReport};

/// The longest key or value a policy may store.
pub const MAX_STATE_ENTRY: usize = 1024 * 1024;
/// The longest state key a policy may use, bytes.
pub const MAX_STATE_KEY: usize = 1024;

/// One event in a policy's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// The policy whose stream this is.
    pub policy: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The turn within the session.
    pub turn: u64,
    /// e.g. `tool_call`, `probe_result`.
    pub kind: String,
    /// The tool, for tool events.
    pub tool: Option<String>,
    /// Where the tool came from (an MCP tool keeps its server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::request::Origin>,
    /// The call's risk, when the policy recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<crate::decision::RiskReport>,
    /// e.g. a probe verdict.
    pub detail: Option<String>,
    /// A short summary.
    pub summary: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// Why a pending gate was not taken: the contract said no (a
/// [`GateError`] the caller can act on; the gate stays, unless it expired)
/// or the store failed (its error, with the engine's or the OS's cause).
#[derive(Debug, thiserror::Error)]
pub enum TakeGateError {
    /// Not found, expired, or not this call's or this channel's to take.
    #[error(transparent)]
    Refused(#[from] GateError),
    /// The store could not be read or written.
    #[error(transparent)]
    Storage(#[from] crate::Error),
}

impl From<TakeGateError> for crate::Error {
    fn from(err: TakeGateError) -> Self {
        match err {
            TakeGateError::Refused(refusal) => crate::Error::Gate(refusal),
            TakeGateError::Storage(err) => err,
        }
    }
}

/// Why a state write was refused.
#[derive(Debug, thiserror::Error)]
pub enum StateWriteError {
    /// The namespace would grow past its cap.
    #[error("the namespace would exceed its {0}-byte cap")]
    QuotaExceeded(u64),
    /// Key or value over [`MAX_STATE_ENTRY`].
    #[error("key or value larger than {MAX_STATE_ENTRY} bytes")]
    TooLarge,
    /// The store failed: its error, naming the store and keeping the
    /// engine's or the OS's cause.
    #[error(transparent)]
    Storage(#[from] crate::Error),
}

/// Reads of one policy's namespace from one snapshot: what a policy's
/// reads within one call into it see (see `capabilities::state`).
pub trait StateSnapshot: Send {
    /// The values of `keys`, in order.
    fn get_many(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>>;
    /// Keys starting with `prefix`, in order, at most `limit`.
    fn keys(&self, prefix: &str, limit: usize) -> Result<Vec<String>>;
}

/// Policy state: per-policy key-value namespaces with quotas and a bounded
/// atomic counter.
pub trait StateStore {
    /// Read a value from `policy`'s namespace.
    fn state_get(&self, policy: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let mut values = self.state_get_many(policy, std::slice::from_ref(&key))?;
        Ok(values.pop().flatten())
    }
    /// Read several values from `policy`'s namespace in one snapshot.
    fn state_get_many(&self, policy: &str, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>>;
    /// A snapshot of `policy`'s namespace for several reads. A backend
    /// without cheap snapshots may read the live data each time (no older
    /// than a snapshot would be).
    fn state_snapshot(&self, policy: &str) -> Result<Box<dyn StateSnapshot>>;
    /// A number that changes whenever `policy`'s namespace may have
    /// changed, so what was read of it at one version may be kept and
    /// reused while the version holds: read the version first, then the
    /// data. `None` where writers elsewhere (other hosts on a shared
    /// database) may change it unseen: nothing read may be kept.
    fn state_version(&self, _policy: &str) -> Option<u64> {
        None
    }
    /// Keys in `policy`'s namespace starting with `prefix`, at most `limit`.
    fn state_keys(&self, policy: &str, prefix: &str, limit: usize) -> Result<Vec<String>>;
    /// Write (`Some`) or delete (`None`) a value in `policy`'s namespace,
    /// keeping the namespace under `quota` bytes.
    fn state_put(
        &self,
        policy: &str,
        key: &str,
        value: Option<&[u8]>,
        quota: u64,
    ) -> Result<(), StateWriteError>;
    /// Atomically increment the counter at `key` (8 bytes, little-endian) if
    /// it is below `limit`: two concurrent callers, in this process or
    /// another host, can never both take the last unit.
    fn state_try_increment(
        &self,
        policy: &str,
        key: &str,
        limit: u64,
        quota: u64,
    ) -> Result<Option<u64>, StateWriteError>;
    /// Bytes used by `policy`'s namespace, as of the last write.
    fn state_usage(&self, policy: &str) -> Result<u64>;
}

/// The per-policy event streams.
pub trait EventStore {
    /// Record an event. Never blocks a decision: a backend may queue it and
    /// drop it (counted, see [`Maintenance::dropped_events`]) when full.
    fn append_event(&self, event: StoredEvent);
    /// The newest `limit` events of `session` in `policy`'s stream, oldest
    /// first, leaving out kinds in `exclude_kinds`.
    fn session_recent(
        &self,
        policy: &str,
        session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>>;
    /// The newest `limit` events for `tool` from sessions other than
    /// `exclude_session`, oldest first, of the same tenant only (see
    /// [`crate::tenant::of_session`]): one OS user's calls never reach the
    /// judgment of another's. Sessions are left out while scanning, before
    /// the limit applies.
    fn tool_history(
        &self,
        policy: &str,
        tool: &str,
        exclude_session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>>;
    /// The newest `limit` events across all policies, oldest first.
    fn recent_events(&self, limit: usize) -> Result<Vec<(u64, StoredEvent)>>;
}

/// Pending gates and the resolutions people made on them.
pub trait GateStore {
    /// Store a gate under its (user, thread, request id), replacing one of
    /// the same request id. A thread holds any number of pending gates:
    /// every call a model was told to have approved can be.
    fn insert_gate(&self, gate: &PendingGate) -> Result<()>;
    /// Store a new pause as [`GateStore::insert_gate`] does, unless a
    /// pending gate of its (user, thread) asks the same
    /// ([`PendingGate::asks_the_same_as`]): that one then keeps its request
    /// id and expiry (the prompt a person was shown stays the one to
    /// answer, and retries cannot keep it alive) and takes the newest
    /// call's id. One step, so two copies of a call paused at once get one
    /// gate and one request id; the thread's expired gates go, and past
    /// [`MAX_GATES_PER_THREAD`] its oldest. Returns the gate stored.
    fn raise_gate(&self, gate: &PendingGate, now_ms: u64) -> Result<PendingGate>;
    /// The unexpired pending gates of the thread `key`, oldest first.
    fn thread_gates(&self, key: &GateKey, now_ms: u64) -> Result<Vec<PendingGate>>;
    /// Every unexpired gate, optionally only one user's.
    fn list_gates(&self, user_id: Option<&str>, now_ms: u64) -> Result<Vec<PendingGate>>;
    /// Take the gate `request_id` of the thread `key` if every check
    /// passes; otherwise leave it. Exactly one caller can take a gate,
    /// whichever host it talks to. An expired gate is removed and reported
    /// as [`GateError::Expired`].
    fn take_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        trusted_channels: &[String],
        now_ms: u64,
    ) -> Result<PendingGate, TakeGateError>;
    /// Remember a resolution, made over channel `by`, for the resubmitted
    /// call, for `ttl`.
    fn record_resolution(
        &self,
        gate: &PendingGate,
        resolution: GateResolution,
        ttl: std::time::Duration,
        by: &str,
    ) -> Result<()>;
    /// Whether any resolution may be stored: false lets a decision skip
    /// both the lookup and the call's fingerprint (hashing its arguments).
    /// It must never be false while a resolution is stored.
    fn may_hold_resolutions(&self) -> bool {
        true
    }
    /// Unexpired resolutions recorded for this call so far, oldest first.
    fn resolutions_for(
        &self,
        user_id: &str,
        thread_id: &str,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<Vec<RecordedResolution>>;
    /// Forget the resolutions of a call once it has been finally decided.
    fn clear_resolutions(&self, user_id: &str, thread_id: &str, fingerprint: &str) -> Result<()>;
}

/// The decision log.
pub trait DecisionLog {
    /// Queue a decision for the log (never blocks); the writer completes
    /// it (see [`PendingLogEntry`]).
    fn log_decision(&self, entry: PendingLogEntry);
    /// The newest `limit` entries matching `filter`, oldest first.
    fn decision_log(&self, filter: &LogFilter, limit: usize) -> Result<Vec<(u64, LogEntry)>>;
}

/// The audit trail: this host's hash chain (see [`crate::audit`]).
pub trait AuditTrail {
    /// Chain these settings from now on (none: write no chain).
    fn set_audit(&self, settings: Option<AuditSettings>);
    /// Queue `record` for the chain; it is committed with the decision log
    /// (durable within 100 ms, or when [`Maintenance::persist`] returns).
    fn audit(&self, record: AuditRecord);
    /// Up to `limit` links of this host's chain after link `after` (none:
    /// from the first kept), oldest first, and the chain's signed head.
    fn audit_links(&self, after: Option<u64>, limit: usize) -> Result<AuditPage>;
}

/// A page of the audit chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    /// Links as stored (each a JSON text), by number.
    pub links: Vec<(u64, String)>,
    /// The chain's signed head, if it has one.
    pub head: Option<SignedHead>,
}

/// Turn counters, for runtimes that do not number turns.
pub trait TurnStore {
    /// Start the next turn of `session` and return its number (from 1).
    fn next_turn(&self, session: &str) -> Result<u64>;
    /// The current turn of `session` (0 before its first).
    fn turn(&self, session: &str) -> Result<u64>;
}

/// Where agents' hooks came from (see `toolgate::daemon::peer`).
pub trait TerminalStore {
    /// Remember that an agent's hook came from these keys.
    fn record_agent_terminals(&self, keys: &[String]) -> Result<()>;
    /// Whether an agent's hook ever came from any of these keys.
    fn is_agent_terminal(&self, keys: &[String]) -> Result<bool>;
}

/// Settings, durability and housekeeping.
pub trait Maintenance {
    /// Set the decision log's contents and retention.
    fn set_log_config(&self, config: LogConfig);
    /// Set how long events, gates, resolutions and turn counters are kept.
    fn set_retention(&self, retention: Retention);
    /// Sweep now what is past its retention.
    fn sweep(&self) -> Result<SweepReport>;
    /// The decision log's settings.
    fn log_config(&self) -> LogConfig;
    /// The local path that names this store
    /// ([`StoreLocation::local_name`](crate::locations::StoreLocation::local_name)):
    /// the redb file, or for a database the path standing for it on this
    /// machine. The daemon's socket and the self-protection guard are
    /// placed by it.
    fn path(&self) -> &Path;
    /// Events (and log entries) dropped because a queue was full.
    fn dropped_events(&self) -> u64;
    /// Wait until everything written or queued so far is committed and
    /// durable.
    fn persist(&self);
    /// Wait until what an answer depends on is durable: policy state (a
    /// consumed lease use, a budget), turns, gates and resolutions, and the
    /// answer's own log entry when `[log] durable_before_answer` says so.
    /// Events and log entries otherwise follow within 100 ms. A backend
    /// whose state writes are durable when they return only has the log
    /// to wait for.
    fn settle(&self) {
        if self.log_config().durable_before_answer {
            self.persist();
        }
    }
    /// Why the last attempt to make commits durable failed (an fsync's
    /// EIO, a full disk), while it has not succeeded since: an answer that
    /// depends on them must not be given. A backend whose writes are
    /// durable when they return reports failures as errors of the write.
    fn durability_failure(&self) -> Option<String> {
        None
    }
    /// Drain queues and stop background work; called on drop too.
    fn shutdown(&self);
    /// Sizes per table and per policy.
    fn stats(&self) -> Result<StoreStats>;
    /// Tell the other hosts sharing this store that the config or a plugin
    /// changed, so they reload too, and which digest each registry plugin
    /// now runs (plugin name → `oci://…@sha256:…`), so theirs follow the
    /// same one. A store only one process can open has no one to tell.
    fn announce_reload(&self, _pins: &FleetPins) {}
    /// The announcement of another host's reload since the last call, if
    /// there was one.
    fn reload_requested(&self) -> Option<FleetPins> {
        None
    }
}

/// What a fleet reload announces: for each plugin from a registry, the
/// digest-pinned reference the announcing host loaded.
pub type FleetPins = std::collections::BTreeMap<String, String>;

/// One stored item, whatever backend holds it: what `toolgate store copy`
/// moves from one backend to another.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A key of a policy's state namespace.
    State {
        /// The policy.
        policy: String,
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// An event of a policy's stream.
    Event(StoredEvent),
    /// A pending gate.
    Gate(PendingGate),
    /// The resolutions recorded for one call.
    Resolutions {
        /// The user.
        user_id: String,
        /// The thread.
        thread_id: String,
        /// The call's fingerprint.
        fingerprint: String,
        /// Oldest first.
        recorded: Vec<RecordedResolution>,
    },
    /// A decision-log entry.
    Decision(LogEntry),
    /// A session's turn counter.
    Turn {
        /// The session.
        session: String,
        /// Its current turn.
        turn: u64,
        /// When it last moved (ms).
        seen_at_ms: u64,
    },
    /// A key an agent's hook came from.
    AgentTerminal {
        /// The key (`sid:N`, `tty:N`).
        key: String,
        /// When a hook last came from it (ms).
        seen_at_ms: u64,
    },
}

/// What an export going on past damage could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The table.
    pub table: String,
    /// Which of its rows: a key, or `every row after KEY`.
    pub what: String,
    /// Why, with its causes.
    pub why: String,
}

/// Moving a whole store between backends.
pub trait Transfer: StateStore + EventStore + GateStore + DecisionLog + Maintenance {
    /// Hand every record to `each`: state, gates, resolutions, turns and
    /// terminals, then events and decisions oldest first.
    fn export(&self, each: &mut dyn FnMut(Record) -> Result<()>) -> Result<()>;

    /// [`Transfer::export`] going on past damage: a record that does not
    /// parse, or the rest of a table that cannot be read, goes to `lost`,
    /// and the export goes on (`toolgate store check` and `salvage`). A
    /// backend whose database checks its own rows exports as usual.
    fn export_salvaging(
        &self,
        each: &mut dyn FnMut(Record) -> Result<()>,
        lost: &mut dyn FnMut(Lost),
    ) -> Result<()> {
        let _ = lost;
        self.export(each)
    }

    /// Write a record the other traits cannot write as it was: resolutions
    /// (with their own expiry), turns and terminals (with their times).
    fn import_as_is(&self, record: Record) -> Result<()>;

    /// Write one record as the source held it (no quota applies: the
    /// source already enforced it). Events and decisions may be queued:
    /// call [`Maintenance::persist`] before relying on them.
    fn import(&self, record: Record) -> Result<()> {
        match record {
            Record::State { policy, key, value } => self
                .state_put(&policy, &key, Some(&value), u64::MAX)
                .map_err(|err| {
                    crate::Error::store_caused(self.path(), format!("state {policy}/{key}"), err)
                }),
            Record::Event(event) => {
                self.append_event(event);
                Ok(())
            }
            Record::Gate(gate) => self.insert_gate(&gate),
            Record::Decision(entry) => {
                self.log_decision(entry.into());
                Ok(())
            }
            other => self.import_as_is(other),
        }
    }
}

/// Everything the pipeline, the capabilities and the daemon need from a
/// store. A backend implements the parts; this is their sum.
pub trait Backend:
    StateStore
    + EventStore
    + GateStore
    + DecisionLog
    + AuditTrail
    + TurnStore
    + TerminalStore
    + Maintenance
    + Transfer
    + Send
    + Sync
    + std::fmt::Debug
{
}

impl<T> Backend for T where
    T: StateStore
        + EventStore
        + GateStore
        + DecisionLog
        + AuditTrail
        + TurnStore
        + TerminalStore
        + Maintenance
        + Transfer
        + Send
        + Sync
        + std::fmt::Debug
{
}

/// What a backend and its writer thread read on every batch: the decision
/// log's settings and the retention, replaced on reload.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    log: std::sync::Arc<std::sync::RwLock<LogConfig>>,
    retention: std::sync::Arc<std::sync::RwLock<Retention>>,
    pub(crate) audit: std::sync::Arc<AuditQueue>,
}

/// The audit chain's settings and the records waiting for the writer,
/// shared by a backend and its writer thread.
#[derive(Debug, Default)]
pub(crate) struct AuditQueue {
    settings: std::sync::RwLock<Option<AuditSettings>>,
    waiting: std::sync::Mutex<Vec<AuditRecord>>,
}

impl AuditQueue {
    pub(crate) fn set(&self, settings: Option<AuditSettings>) {
        if settings.is_none() {
            // Nothing will chain them (and a writer would wake for them).
            self.take();
        }
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
    }

    pub(crate) fn settings(&self) -> Option<AuditSettings> {
        self.settings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn push(&self, record: AuditRecord) {
        if self.settings().is_some() {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(record);
        }
    }

    pub(crate) fn has_waiting(&self) -> bool {
        !self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    fn take(&self) -> Vec<AuditRecord> {
        std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Records a failed commit did not store, ahead of those queued since.
    fn put_back(&self, mut records: Vec<AuditRecord>) {
        if records.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        records.append(&mut waiting);
        *waiting = records;
    }
}

/// The writer's end of the audit chain: resumed from the store when first
/// needed, and again after a commit that failed (the chain in memory ran
/// ahead of it).
#[derive(Debug, Default)]
pub(crate) struct AuditWriter {
    chain: Option<Chain>,
    /// The records of the last pass, until its commit succeeds.
    in_flight: Vec<AuditRecord>,
}

/// What a writer commits to the chain in one pass.
pub(crate) struct AuditPass {
    pub settings: AuditSettings,
    /// The links to store, in order.
    pub links: Vec<Stored>,
    /// The chain's head after them, signed.
    pub head: SignedHead,
}

impl AuditWriter {
    /// The links for `decisions` (decided at, log bytes) and the records
    /// waiting in `queue`, and the signed head after them; none when no
    /// chain is kept. `newest` reads the newest stored link and the signed
    /// head, to resume from. A backend runs this before its write transaction, so hashing
    /// and signing do not hold up the decisions that wait for that lock.
    pub(crate) fn pass<E>(
        &mut self,
        queue: &AuditQueue,
        decisions: &[(u64, Vec<u8>)],
        newest: impl FnOnce() -> std::result::Result<(Option<Stored>, Option<SignedHead>), E>,
    ) -> std::result::Result<Option<AuditPass>, E> {
        let Some(settings) = queue.settings() else {
            return Ok(None);
        };
        let records = queue.take();
        if decisions.is_empty() && records.is_empty() {
            return Ok(None);
        }
        // Until the commit succeeds (see `failed`).
        self.in_flight = records;
        let chain = match &mut self.chain {
            Some(chain) => chain,
            empty => {
                let (newest, head) = newest()?;
                let newest = newest.as_ref().map(|(seq, bytes)| (*seq, bytes.as_slice()));
                empty.insert(Chain::resume(newest, head.as_ref(), &settings.key))
            }
        };
        // In the order they happened (a decision first at the same ms):
        // both lists are each in order already.
        let mut records = self.in_flight.iter().peekable();
        let mut links = Vec::with_capacity(decisions.len() + records.len());
        for (at_ms, body) in decisions {
            while let Some(record) = records.next_if(|r| r.at_ms < *at_ms) {
                links.extend(chain.append(record, &settings));
            }
            let kind = crate::audit::AuditKind::Decision;
            links.extend(chain.append_body(*at_ms, kind, body, &settings));
        }
        for record in records {
            links.extend(chain.append(record, &settings));
        }
        let (seq, hash) = chain.head().expect("links were appended");
        let head = settings.key.sign(Purpose::Head, seq, hash);
        Ok(Some(AuditPass {
            settings,
            links,
            head,
        }))
    }

    /// The prune link for `removed` links gone from the front (`kept` is
    /// the first kept link's number and `prev`; none: all went), appended
    /// to `pass` with the head re-signed.
    pub(crate) fn prune(
        &mut self,
        pass: &mut AuditPass,
        kept: Option<(u64, &str)>,
        removed: u64,
    ) -> Option<Stored> {
        let chain = self.chain.as_mut()?;
        let link = chain.prune(kept, removed, &pass.settings.key);
        let (seq, hash) = chain.head()?;
        pass.head = pass.settings.key.sign(Purpose::Head, seq, hash);
        Some(link)
    }

    /// The last pass's commit succeeded.
    pub(crate) fn committed(&mut self) {
        self.in_flight.clear();
    }

    /// The last pass's commit failed: its records go back to `queue` (the
    /// next pass chains them again), and the chain's end is read from the
    /// store again (the chain in memory ran ahead of it).
    pub(crate) fn failed(&mut self, queue: &AuditQueue) {
        queue.put_back(std::mem::take(&mut self.in_flight));
        self.chain = None;
    }

    /// Read the chain's end from the store on the next pass: another
    /// process may have appended since.
    #[cfg(feature = "postgres")]
    pub(crate) fn forget_end(&mut self) {
        self.chain = None;
    }
}

impl Settings {
    pub(crate) fn log(&self) -> LogConfig {
        *self.log.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_log(&self, config: LogConfig) {
        *self.log.write().unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_retention(&self, retention: Retention) {
        *self.retention.write().unwrap_or_else(|p| p.into_inner()) = retention;
    }
}

/// Decision-log entries waiting for a backend's writer thread. Logging a
/// decision only pushes here and, as a rule, does not wake the writer: a
/// wake-up per decision cost the deciding thread a futex syscall and the
/// writer a commit per entry (profiled: a third of the process's CPU at full
/// load). The writer takes the entries on its next pass — its tick, other
/// writes, or a flush, so [`Maintenance::persist`] still covers them.
///
/// Entries may carry arguments still to hash (see [`PendingLogEntry`]).
/// Those bytes are bounded: past [`LogBuffer::DRAIN_AT`] the writer is
/// asked to drain now, and past [`LogBuffer::MAX_UNHASHED`] a decision
/// hashes its own arguments, so large arguments cannot pile up in memory.
///
/// So are the entries: at half of [`EVENT_QUEUE_CAPACITY`] the writer is
/// asked to drain now, and at all of it a decision waits for room (the
/// writer's pace is the decisions' pace), so no entry is dropped while the
/// writer lives.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    waiting: std::sync::Mutex<Waiting>,
    /// Signalled when the writer takes the entries.
    room: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct Waiting {
    entries: Vec<PendingLogEntry>,
    /// Bytes of arguments in `entries` still to hash.
    unhashed: usize,
    /// Whether the writer has been asked to drain and has not yet.
    drain_asked: bool,
}

impl LogBuffer {
    /// Unhashed argument bytes at which the writer is asked to drain now.
    pub(crate) const DRAIN_AT: usize = 1 << 20;
    /// Unhashed argument bytes past which a decision hashes its own.
    pub(crate) const MAX_UNHASHED: usize = 8 << 20;

    /// How long a decision waits for room before its entry is dropped
    /// (counted in `dropped`, and warned of): only a writer that is stuck
    /// or gone takes that long.
    const WAIT_FOR_ROOM: std::time::Duration = std::time::Duration::from_secs(2);

    /// Queue an entry, waiting while [`EVENT_QUEUE_CAPACITY`] entries are
    /// already waiting; `wake` is called when the writer should drain
    /// before its next tick.
    pub(crate) fn queue(
        &self,
        mut entry: PendingLogEntry,
        dropped: &std::sync::atomic::AtomicU64,
        wake: impl FnOnce(),
    ) {
        let over = |w: &Waiting| w.unhashed + entry.unhashed_len() > Self::MAX_UNHASHED;
        if entry.unhashed_len() > 0 && over(&self.lock()) {
            entry.hash_now(); // outside the lock: the writer is not held up
        }
        let mut waiting = self.lock();
        if waiting.entries.len() >= EVENT_QUEUE_CAPACITY {
            let full = |w: &mut Waiting| w.entries.len() >= EVENT_QUEUE_CAPACITY;
            let (still, timeout) = self
                .room
                .wait_timeout_while(waiting, Self::WAIT_FOR_ROOM, full)
                .unwrap_or_else(|p| p.into_inner());
            waiting = still;
            if timeout.timed_out() && full(&mut waiting) {
                drop(waiting);
                dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!("decision log entry dropped: the log queue is full");
                return;
            }
        }
        waiting.unhashed += entry.unhashed_len();
        waiting.entries.push(entry);
        let ask = (waiting.unhashed >= Self::DRAIN_AT
            || waiting.entries.len() >= EVENT_QUEUE_CAPACITY / 2)
            && !waiting.drain_asked;
        waiting.drain_asked |= ask;
        drop(waiting);
        if ask {
            wake();
        }
    }

    /// Everything waiting, oldest first, completed on the calling (writer)
    /// thread. `scratch` swaps with the buffer, so the buffer keeps the
    /// allocation the writer drained last time: the deciding thread does
    /// not grow one from nothing on every pass (that regrowth, page faults
    /// included, was ~5 % of a warm decision).
    pub(crate) fn take(&self, scratch: &mut Vec<PendingLogEntry>) -> Vec<LogEntry> {
        scratch.clear();
        {
            let mut waiting = self.lock();
            std::mem::swap(scratch, &mut waiting.entries);
            waiting.unhashed = 0;
            waiting.drain_asked = false;
        }
        self.room.notify_all();
        scratch.drain(..).map(PendingLogEntry::into_entry).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What an attempt to take a gate comes to. The checks are the contract,
/// not the engine's: every backend runs this one judgement inside the
/// transaction (or row lock) that makes the take exclusive.
pub(crate) enum Take {
    /// Every check passed: remove the gate and hand it over.
    Taken(Box<PendingGate>),
    /// It had expired: remove it and report [`GateError::Expired`].
    Expired,
    /// Leave it as it is.
    Refused(GateError),
}

/// Judge taking the gate stored at `key` (`None`: there is none) for
/// `request_id` from `channel`.
pub(crate) fn judge_take(
    stored: Option<PendingGate>,
    key: &GateKey,
    request_id: &str,
    channel: &str,
    trusted_channels: &[String],
    now_ms: u64,
) -> Take {
    match stored {
        None => Take::Refused(GateError::NotFound {
            user_id: key.user_id.clone(),
            thread_id: key.thread_id.clone(),
        }),
        Some(gate) if gate.is_expired(now_ms) => Take::Expired,
        Some(gate) if gate.request_id != request_id => Take::Refused(GateError::RequestIdMismatch),
        Some(gate)
            if gate.source_channel != channel && !trusted_channels.iter().any(|t| t == channel) =>
        {
            Take::Refused(GateError::ChannelMismatch {
                expected: gate.source_channel,
                actual: channel.to_string(),
            })
        }
        Some(gate) => Take::Taken(Box::new(gate)),
    }
}

/// The toolgate store: a [`Backend`] chosen when it is opened, reached one
/// role at a time (`store.gates().take_gate(…)`), so each caller names the
/// part of the store it uses and no handle is the backend itself.
#[derive(Debug)]
pub struct Store(Box<dyn Backend>);

/// A stored JSON value read back (a transfer's row), or an error naming
/// the table.
pub(crate) fn stored_json<T: serde::de::DeserializeOwned>(table: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|err| {
        crate::Error::store_caused(table, format!("an unreadable row in `{table}`"), err)
    })
}

/// One role of a shared store, for a holder that must reach nothing else:
/// a policy's capabilities get [`Store::state_role`] and
/// [`Store::event_role`], so no guest-facing code holds a handle that can
/// take a gate or read the decision log.
pub(crate) struct Role<R: ?Sized + 'static> {
    store: std::sync::Arc<Store>,
    view: for<'a> fn(&'a (dyn Backend + 'static)) -> &'a R,
}

impl<R: ?Sized> std::ops::Deref for Role<R> {
    type Target = R;

    fn deref(&self) -> &R {
        (self.view)(&*self.store.0)
    }
}

impl<R: ?Sized> std::fmt::Debug for Role<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Role").field(&self.store).finish()
    }
}

fn as_state<'a>(backend: &'a (dyn Backend + 'static)) -> &'a (dyn StateStore + 'static) {
    backend
}

fn as_events<'a>(backend: &'a (dyn Backend + 'static)) -> &'a (dyn EventStore + 'static) {
    backend
}

impl Store {
    /// The local path that names this store: the redb file, or for a
    /// database the path standing for it on this machine (what messages
    /// say, and where the daemon's socket goes).
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Policies' state namespaces.
    pub fn state(&self) -> &dyn StateStore {
        &*self.0
    }

    /// Policies' event streams.
    pub fn events(&self) -> &dyn EventStore {
        &*self.0
    }

    /// Pending gates and people's resolutions.
    pub fn gates(&self) -> &dyn GateStore {
        &*self.0
    }

    /// The decision log.
    pub fn log(&self) -> &dyn DecisionLog {
        &*self.0
    }

    /// This host's audit chain.
    pub fn audit_trail(&self) -> &dyn AuditTrail {
        &*self.0
    }

    /// Turn counters.
    pub fn turns(&self) -> &dyn TurnStore {
        &*self.0
    }

    /// Where agents' hooks came from.
    pub fn terminals(&self) -> &dyn TerminalStore {
        &*self.0
    }

    /// Settings, durability and housekeeping.
    pub fn maintenance(&self) -> &dyn Maintenance {
        &*self.0
    }

    /// Moving the whole store to another backend.
    pub fn transfer(&self) -> &dyn Transfer {
        &*self.0
    }

    /// The policy-state role of this store, and nothing else.
    pub(crate) fn state_role(self: &std::sync::Arc<Self>) -> Role<dyn StateStore> {
        Role {
            store: std::sync::Arc::clone(self),
            view: as_state,
        }
    }

    /// The event-stream role of this store, and nothing else.
    pub(crate) fn event_role(self: &std::sync::Arc<Self>) -> Role<dyn EventStore> {
        Role {
            store: std::sync::Arc::clone(self),
            view: as_events,
        }
    }

    /// Open (or create) the redb store at `path`, waiting up to `wait` while
    /// another process holds it (redb allows one owner at a time), then
    /// failing with [`Error::StoreBusy`](crate::Error::StoreBusy).
    pub fn open_waiting(path: &Path, wait: std::time::Duration) -> Result<Self> {
        RedbStore::open_waiting(path, wait).map(|s| Self(Box::new(s)))
    }

    /// Open (or create) the redb store at `path`, creating parent
    /// directories. Fails at once with
    /// [`Error::StoreBusy`](crate::Error::StoreBusy) if another process
    /// holds it.
    pub fn open(path: &Path) -> Result<Self> {
        RedbStore::open(path).map(|s| Self(Box::new(s)))
    }

    /// Open the store at `location`: connect to a database (`wait` bounding
    /// each round trip), or open a redb file (waiting up to `wait` while
    /// another process holds it).
    pub fn open_location(
        location: &crate::locations::StoreLocation,
        wait: std::time::Duration,
    ) -> Result<Self> {
        use crate::locations::StoreLocation;
        match location {
            StoreLocation::Database(url) => Self::connect(url, &location.local_name(), wait),
            StoreLocation::File(path) => Self::open_waiting(path, wait),
        }
    }

    /// Connect to the PostgreSQL database at `url` (a `postgres://` URL;
    /// what it leaves out comes from the `PG*` variables), creating or
    /// migrating toolgate's schema. `path` is the store's local name: where
    /// the daemon's socket goes and what messages say. Connecting, and
    /// each round trip a decision waits on, fails after `deadline`.
    #[cfg(feature = "postgres")]
    pub fn connect(url: &str, path: &Path, deadline: std::time::Duration) -> Result<Self> {
        postgres::PostgresStore::connect(url, path, deadline).map(|s| Self(Box::new(s)))
    }

    /// Connect to a PostgreSQL database: not in this build.
    #[cfg(not(feature = "postgres"))]
    pub fn connect(_url: &str, path: &Path, _deadline: std::time::Duration) -> Result<Self> {
        Err(crate::Error::store(
            path,
            "this build has no PostgreSQL client; build toolgate-engine with its `postgres` \
             feature (the `toolgate` binaries and the Python and Node packages have it), or keep \
             the store in a redb file",
        ))
    }
}

/// What [`GateStore::raise_gate`] stores for `new` in a thread whose
/// pending gates are `pending`, and the request ids of those that go: the
/// one asking the same keeps its id and expiry, expired ones go, and past
/// [`MAX_GATES_PER_THREAD`] the oldest.
pub(crate) fn raised(
    pending: Vec<PendingGate>,
    new: &PendingGate,
    now_ms: u64,
) -> (PendingGate, Vec<String>) {
    let (mut live, expired): (Vec<_>, Vec<_>) =
        pending.into_iter().partition(|p| !p.is_expired(now_ms));
    let mut gone: Vec<String> = expired.into_iter().map(|g| g.request_id).collect();
    if let Some(same) = live.iter().find(|p| p.asks_the_same_as(new)) {
        let stored = PendingGate {
            request_id: same.request_id.clone(),
            created_at_ms: same.created_at_ms,
            expires_at_ms: same.expires_at_ms,
            ..new.clone()
        };
        return (stored, gone);
    }
    live.sort_by_key(|g| g.created_at_ms);
    let over = (live.len() + 1).saturating_sub(MAX_GATES_PER_THREAD);
    gone.extend(live.into_iter().take(over).map(|g| g.request_id));
    (new.clone(), gone)
}

/// The most calls one thread may have waiting for a person at once: past
/// it the oldest pause ends unanswered (an agent pausing call after call
/// cannot grow the store without bound).
pub const MAX_GATES_PER_THREAD: usize = 32;

/// The error for a stored record that does not parse: what it was, and
/// the fix. A record is never skipped as if it were not there.
pub(crate) fn unreadable_record(
    store: impl Into<std::path::PathBuf>,
    what: String,
    err: serde_json::Error,
) -> crate::Error {
    crate::Error::store_caused(
        store,
        format!(
            "{what} is unreadable, so the store may be damaged; nothing was changed. Stop the \
             daemon, then `toolgate store check` names every record it cannot read and \
             `toolgate store salvage NEW.redb` copies every other one into a new store to put in \
             its place; or restore it from a copy"
        ),
        err,
    )
}

/// [`unreadable_record`] for the pending gate of `user`'s `thread`.
pub(crate) fn parse_gate(
    store: impl Into<std::path::PathBuf>,
    user: &str,
    thread: &str,
    body: &[u8],
) -> crate::Result<crate::gates::PendingGate> {
    serde_json::from_slice(body).map_err(|err| {
        unreadable_record(
            store,
            format!("the pending gate of user `{user}`, thread `{thread}`"),
            err,
        )
    })
}

/// [`unreadable_record`] for a person's answers in `user`'s `thread`.
pub(crate) fn parse_resolutions<T: serde::de::DeserializeOwned>(
    store: impl Into<std::path::PathBuf>,
    user: &str,
    thread: &str,
    body: &[u8],
) -> crate::Result<T> {
    serde_json::from_slice(body).map_err(|err| {
        unreadable_record(
            store,
            format!("a person's answers for user `{user}`, thread `{thread}`"),
            err,
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use sha2::{Digest, Sha256};

    use super::*;
    use crate::decision_log::ArgumentsView;
    use crate::{Decision, ToolRequest};

    /// Whether `T` dereferences to anything: an inherent constant exists
    /// only where the bound holds, and the trait's default answers
    /// otherwise (the `impls` crate's trick).
    struct Derefs<T: ?Sized>(std::marker::PhantomData<T>);
    trait DoesNot {
        const DEREFS: bool = false;
    }
    impl<T: ?Sized> DoesNot for Derefs<T> {}
    impl<T: ?Sized + std::ops::Deref> Derefs<T> {
        #[allow(dead_code)]
        const DEREFS: bool = true;
    }

    // The store is reached through its roles only: a `Deref` to the
    // backend would hand every holder of a `Store` all nine traits at once,
    // unnamed. Checked when the tests compile (the first line shows the
    // probe sees a `Deref` where there is one).
    const _: () = assert!(Derefs::<std::sync::Arc<Store>>::DEREFS);
    const _: () = assert!(!Derefs::<Store>::DEREFS);

    /// An unhashed log entry whose arguments are `bytes` long when compact.
    fn entry(n: usize, bytes: usize) -> (PendingLogEntry, String) {
        let request = ToolRequest::new(
            "Write",
            serde_json::json!({"n": n, "content": "x".repeat(bytes)}),
        );
        let text = request.arguments_text();
        let digest = hex::encode(Sha256::digest(text.json.as_bytes()));
        let decision = Decision::refused_by_host(&request, "test".into());
        let entry = PendingLogEntry::new(&request, text, &decision, ArgumentsView::Digest);
        (entry, digest)
    }

    #[test]
    fn a_full_log_queue_makes_the_decision_wait_for_the_writer_not_drop_its_entry() {
        let buffer = LogBuffer::default();
        let dropped = AtomicU64::new(0);
        let wakes = AtomicU64::new(0);
        let wake = || {
            wakes.fetch_add(1, Ordering::Relaxed);
        };
        for n in 0..EVENT_QUEUE_CAPACITY {
            buffer.queue(entry(n, 1).0, &dropped, wake);
        }
        assert_eq!(wakes.load(Ordering::Relaxed), 1, "asked to drain at half");
        let taken = std::thread::scope(|scope| {
            scope.spawn(|| buffer.queue(entry(0, 1).0, &dropped, || {}));
            std::thread::sleep(std::time::Duration::from_millis(50));
            buffer.take(&mut Vec::new()).len() // the writer's pass
        });
        assert_eq!(
            taken, EVENT_QUEUE_CAPACITY,
            "the late entry waited for the writer"
        );
        assert_eq!(buffer.lock().entries.len(), 1, "and then joined the queue");
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn large_arguments_waiting_for_the_writer_stay_bounded_and_are_all_digested() {
        let buffer = LogBuffer::default();
        let dropped = AtomicU64::new(0);
        let wakes = AtomicU64::new(0);
        let mut digests = Vec::new();
        // 24 MiB of arguments while the writer never comes.
        for n in 0..24 {
            let (entry, digest) = entry(n, 1 << 20);
            buffer.queue(entry, &dropped, || {
                wakes.fetch_add(1, Ordering::Relaxed);
            });
            digests.push(digest);
            let unhashed = buffer.lock().unhashed;
            assert!(
                unhashed <= LogBuffer::MAX_UNHASHED,
                "{unhashed} bytes of arguments wait unhashed after {} entries",
                n + 1
            );
        }
        // Asked once, not once per entry, while the writer has not drained.
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
        let logged = buffer.take(&mut Vec::new());
        let logged: Vec<_> = logged
            .iter()
            .map(|e| e.arguments["sha256"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(logged, digests, "hashed then or now, every digest is right");
        // Drained: the next large entry may wait, and asks again.
        let (entry, _) = entry(24, LogBuffer::DRAIN_AT);
        let bytes = entry.unhashed_len();
        buffer.queue(entry, &dropped, || {
            wakes.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(buffer.lock().unhashed, bytes);
        assert_eq!(wakes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_store_error_keeps_the_os_error_as_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "not a directory").unwrap();
        let err = Store::open(&file.join("below").join("store.redb")).unwrap_err();
        let cause = std::error::Error::source(&err).expect("the OS error is kept");
        let io = cause
            .downcast_ref::<std::io::Error>()
            .expect("as the io::Error it was");
        assert_eq!(io.kind(), std::io::ErrorKind::NotADirectory);
        // Display is toolgate's words; the report and the wire add the cause.
        assert!(
            err.to_string().ends_with("cannot create its directory"),
            "{err}"
        );
        let said = err.wire_message();
        assert!(said.starts_with(&err.to_string()), "{said}");
        assert!(said.ends_with(&io.to_string()), "{said}");
    }
}
