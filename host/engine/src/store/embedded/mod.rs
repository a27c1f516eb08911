//! The embedded redb backend: one file, one owning process.
//!
//! redb is blocking; callers run on plain threads (or `spawn_blocking`).
//! Event appends go through a bounded queue, decision-log entries through a
//! buffer (see `LogBuffer`), to one writer thread that commits in batches, so
//! recording never blocks a decision; dropping the store drains both first,
//! so nothing queued is lost on a clean shutdown. Policy state and turn
//! counters commit without an fsync and the writer makes them durable within
//! [`DURABLE_WITHIN`], or at once when an answer depends on them
//! ([`Maintenance::settle`]); gates, resolutions and agent terminals commit
//! durably.

mod audit;
mod decisions;
mod gates;
mod hygiene;
mod terminals;
mod transfer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    AuditWriter, EventStore, LogBuffer, MAX_STATE_ENTRY, MAX_STATE_KEY, Maintenance, Settings,
    StateSnapshot, StateStore, StateWriteError, StoredEvent, TurnStore,
};
use crate::config::LogConfig;
use crate::decision_log::{LogEntry, PendingLogEntry};
use crate::error::{Error, Result};
use crate::store::hygiene::{Retention, StoreStats, SweepReport};
use decisions::{DECISIONS, apply_retention};
pub use hygiene::compact;

/// (policy, key) → value.
const STATE: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("state");
/// policy → bytes used by its namespace (keys + values).
pub(crate) const STATE_USAGE: TableDefinition<&str, u64> = TableDefinition::new("state_usage");
/// seq → event (JSON).
pub(crate) const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// Move the gates of a store written when a thread held one pause at most
/// into [`PENDING_GATES`], in one transaction: none is lost, and a store
/// without them is not written to.
fn move_gates_of_one_per_thread(db: &Database) -> std::result::Result<(), redb::Error> {
    match db.begin_read()?.open_table(ONE_GATE_PER_THREAD) {
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(err) => return Err(err.into()),
        Ok(_) => {}
    }
    let txn = db.begin_write()?;
    {
        let old = txn.open_table(ONE_GATE_PER_THREAD)?;
        let mut new = txn.open_table(PENDING_GATES)?;
        for entry in old.iter()? {
            let (key, value) = entry?;
            let (user, thread) = key.value();
            // A gate that does not parse keeps its place under an id of
            // its own, for `store check` to name, rather than vanish.
            let request_id = serde_json::from_slice::<crate::gates::PendingGate>(value.value())
                .map_or_else(|_| "unreadable".to_string(), |g| g.request_id);
            new.insert((user, thread, request_id.as_str()), value.value())?;
        }
    }
    txn.delete_table(ONE_GATE_PER_THREAD)?;
    txn.commit()?;
    Ok(())
}

/// (policy, session, seq) → ().
pub(crate) const EVENTS_BY_SESSION: TableDefinition<(&str, &str, u64), ()> =
    TableDefinition::new("events_by_session");
/// (policy, tool, seq) → session.
pub(crate) const EVENTS_BY_TOOL: TableDefinition<(&str, &str, u64), &str> =
    TableDefinition::new("events_by_tool");
/// (user, thread, request id) → pending gate (JSON): any number per thread.
pub(crate) const PENDING_GATES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("pending_gates");
/// Stores written before a thread could hold more than one pause kept
/// them here, (user, thread) → gate; they move to [`PENDING_GATES`] when
/// such a store opens.
const ONE_GATE_PER_THREAD: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("gates");

/// How many event appends may wait for the writer before new ones are dropped
/// (with a warning).
pub const EVENT_QUEUE_CAPACITY: usize = 4096;
/// redb's page cache. Its default (1 GiB) let a long-running daemon grow
/// by about 1.8 KB a decision, the decision log's pages kept until the
/// cache was full; what a decision reads (state, gates, recent events) is
/// a few megabytes.
const CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The most appends committed in one write transaction.
const EVENT_BATCH: usize = 256;
/// Non-durable commits (policy state) become durable within this time.
pub const DURABLE_WITHIN: std::time::Duration = std::time::Duration::from_millis(100);
enum WriterMessage {
    Append(Box<StoredEvent>),
    Flush(mpsc::Sender<()>),
    /// Take the decision log's waiting entries now (see `LogBuffer`).
    Drain,
}

/// session → current turn, for runtimes that do not number turns.
pub(crate) const TURNS: TableDefinition<&str, u64> = TableDefinition::new("turns");

/// The toolgate store: one redb file.
pub struct RedbStore {
    db: Arc<Database>,
    path: PathBuf,
    queue: Mutex<Option<SyncSender<WriterMessage>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    dropped_events: AtomicU64,
    settings: Settings,
    /// Decision-log entries for the writer (see [`LogBuffer`]).
    log_buffer: Arc<LogBuffer>,
    /// What is committed but not yet durable (see [`Unsynced`]).
    unsynced: Arc<Unsynced>,
    /// Whether the file may hold a resolution: false only while it holds
    /// none and this process has recorded none. The file is this process's
    /// alone (redb locks it), so while false a decision neither reads its
    /// resolutions nor fingerprints its call.
    pub(crate) may_hold_resolutions: std::sync::atomic::AtomicBool,
    /// How many times each state namespace was written by this process,
    /// the file's only writer: see [`StateStore::state_version`].
    state_versions: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish()
    }
}

impl RedbStore {
    /// Open (or create) the store at `path`, waiting up to `wait` while
    /// another process holds it (redb allows one owner at a time), then
    /// failing with [`Error::StoreBusy`].
    pub fn open_waiting(path: &Path, wait: std::time::Duration) -> Result<Self> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            match Self::open(path) {
                Err(Error::StoreBusy { .. }) if started.elapsed() < wait => {
                    std::thread::sleep(pause.min(wait.saturating_sub(started.elapsed())));
                    pause = (pause * 2).min(std::time::Duration::from_millis(100));
                }
                Err(Error::StoreBusy { path, .. }) => {
                    return Err(Error::StoreBusy {
                        path,
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
                other => return other,
            }
        }
    }

    /// Open (or create) the redb file and every table; whether it holds
    /// resolutions. Its page cache is [`CACHE_BYTES`].
    fn open_database(path: &Path) -> Result<(Database, bool)> {
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|err| open_error(path, err.into()))?;
        let store_err = |err: redb::Error| open_error(path, err);
        let txn = db.begin_write().map_err(|e| store_err(e.into()))?;
        {
            txn.open_table(STATE).map_err(|e| store_err(e.into()))?;
            txn.open_table(STATE_USAGE)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(EVENTS).map_err(|e| store_err(e.into()))?;
            txn.open_table(EVENTS_BY_SESSION)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(EVENTS_BY_TOOL)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(PENDING_GATES)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(DECISIONS).map_err(|e| store_err(e.into()))?;
            txn.open_table(audit::AUDIT)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(audit::AUDIT_HEAD)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(TURNS).map_err(|e| store_err(e.into()))?;
            txn.open_table(hygiene::EVENTS_BY_POLICY)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(hygiene::EVENT_COUNTS)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(hygiene::TURN_SEEN)
                .map_err(|e| store_err(e.into()))?;
            txn.open_table(gates::RESOLUTIONS)
                .map_err(|e| store_err(e.into()))?;
        }
        txn.commit().map_err(|e| store_err(e.into()))?;
        move_gates_of_one_per_thread(&db).map_err(store_err)?;
        let holds_resolutions = (|| -> std::result::Result<bool, redb::Error> {
            let txn = db.begin_read()?;
            Ok(txn.open_table(gates::RESOLUTIONS)?.first()?.is_some())
        })()
        .map_err(store_err)?;
        Ok((db, holds_resolutions))
    }

    /// Open (or create) the store at `path`, creating parent directories.
    /// Fails at once with [`Error::StoreBusy`] if another process holds it.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|err| Error::store_caused(path, "cannot create its directory", err))?;
        }
        refuse_cut_short(path)?;
        // redb panics on some damaged files (a page's type byte): that is
        // a damaged store, named as one, not a crash of the caller.
        let opened = std::panic::catch_unwind(|| Self::open_database(path));
        let (db, holds_resolutions) = opened.unwrap_or_else(|panic| {
            let detail = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("redb stopped reading it");
            Err(open_error(path, redb::Error::Corrupted(detail.to_string())))
        })?;

        let db = Arc::new(db);
        let (sender, receiver) = mpsc::sync_channel(EVENT_QUEUE_CAPACITY);
        let writer_db = Arc::clone(&db);
        let settings = Settings::default();
        let writer_settings = settings.clone();
        let log_buffer = Arc::new(LogBuffer::default());
        let writer_log = Arc::clone(&log_buffer);
        let unsynced = Arc::new(Unsynced::default());
        let writer_unsynced = Arc::clone(&unsynced);
        let writer = std::thread::Builder::new()
            .name("toolgate-event-writer".into())
            .spawn(move || {
                run_event_writer(
                    &writer_db,
                    receiver,
                    &writer_log,
                    &writer_settings,
                    &writer_unsynced,
                )
            })
            .map_err(|err| Error::store_caused(path, "cannot start the event writer", err))?;
        Ok(Self {
            db,
            path: path.to_path_buf(),
            queue: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
            dropped_events: AtomicU64::new(0),
            log_buffer,
            settings,
            unsynced,
            may_hold_resolutions: holds_resolutions.into(),
            state_versions: Mutex::default(),
        })
    }

    pub(crate) fn queue_decision(&self, entry: PendingLogEntry) {
        self.log_buffer.queue(entry, &self.dropped_events, || {
            let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            // A full queue wakes the writer anyway; a closed one drains.
            let _ = queue.as_ref().map(|q| q.try_send(WriterMessage::Drain));
        });
    }

    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    pub(crate) fn error(&self, err: impl Into<redb::Error>) -> Error {
        engine_error(&self.path, err.into())
    }

    /// Run `change` on the state table in one write transaction; it returns
    /// its result and how many bytes it added to the namespace, or `None`
    /// when it wrote nothing (then nothing commits, and no answer waits
    /// for it: see [`Maintenance::settle`]). Commits only if a growing
    /// namespace stays within `quota`.
    fn with_state_txn<T>(
        &self,
        policy: &str,
        quota: u64,
        change: impl FnOnce(
            &mut redb::Table<(&str, &str), &[u8]>,
        ) -> std::result::Result<(T, Option<i64>), redb::StorageError>,
    ) -> Result<T, StateWriteError> {
        let storage = |e: redb::Error| {
            StateWriteError::Storage(Error::store_caused(
                &self.path,
                format!("writing policy `{policy}`'s state"),
                e,
            ))
        };
        let txn = self.fast_write().map_err(storage)?;
        let result = {
            let mut table = txn.open_table(STATE).map_err(|e| storage(e.into()))?;
            let (result, delta) = change(&mut table).map_err(|e| storage(e.into()))?;
            let Some(delta) = delta else {
                return Ok(result); // dropped: aborted
            };
            let mut usage = txn.open_table(STATE_USAGE).map_err(|e| storage(e.into()))?;
            let before = usage
                .get(policy)
                .map_err(|e| storage(e.into()))?
                .map_or(0, |v| v.value());
            let after = before.saturating_add_signed(delta);
            if delta > 0 && after > quota {
                return Err(StateWriteError::QuotaExceeded(quota));
            }
            usage.insert(policy, after).map_err(|e| storage(e.into()))?;
            result
        };
        let committed = self.commit_fast(txn);
        // After the commit (or its failure), never before: a reader that
        // sees the old version then reads at least what was there before.
        *self
            .state_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(policy.to_string())
            .or_default() += 1;
        committed.map_err(storage)?;
        Ok(result)
    }

    /// A write transaction that commits without waiting for the disk
    /// ([`Self::commit_fast`]): the writer thread makes it durable within
    /// [`DURABLE_WITHIN`] (group commit), at shutdown, or when an answer
    /// depends on it ([`Maintenance::settle`]). Policy state and turn
    /// counters use it; the writer's own batches (events, the decision log)
    /// are group-committed the same way; pending gates, resolutions and
    /// agent terminals commit durably at once.
    fn fast_write(&self) -> std::result::Result<redb::WriteTransaction, redb::Error> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None)?;
        Ok(txn)
    }

    /// Commit a [`Self::fast_write`] transaction, counted for `settle`.
    fn commit_fast(&self, txn: redb::WriteTransaction) -> std::result::Result<(), redb::Error> {
        // Counted while the transaction holds the write lock: see
        // `Unsynced::state_commits`.
        self.unsynced.state_commits.fetch_add(1, Ordering::SeqCst);
        self.unsynced.dirty.store(true, Ordering::Release);
        Ok(txn.commit()?)
    }

    fn load_event(
        &self,
        events: &impl ReadableTable<u64, &'static [u8]>,
        seq: u64,
    ) -> Result<Option<StoredEvent>> {
        let Some(bytes) = events.get(seq).map_err(|e| self.error(e))? else {
            return Ok(None);
        };
        serde_json::from_slice(bytes.value())
            .map(Some)
            .map_err(|err| {
                Error::store_caused(
                    &self.path,
                    format!("event {seq} is unreadable; the file may be damaged"),
                    err,
                )
            })
    }
}

impl Maintenance for RedbStore {
    fn set_log_config(&self, config: LogConfig) {
        self.settings.set_log(config);
    }

    fn set_retention(&self, retention: Retention) {
        self.settings.set_retention(retention);
    }

    /// Sweep now what is past its retention (the writer also does this every
    /// `sweep_interval`).
    fn sweep(&self) -> Result<SweepReport> {
        let retention = self.settings.retention();
        let report =
            hygiene::sweep(&self.db, &retention, crate::now_ms()).map_err(|e| self.error(e))?;
        self.unsynced.dirty.store(true, Ordering::Release);
        Ok(report)
    }

    fn log_config(&self) -> LogConfig {
        self.settings.log()
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Events dropped because the queue was full.
    fn dropped_events(&self) -> u64 {
        self.dropped_events.load(Ordering::Relaxed)
    }

    /// Wait until everything written or queued so far (state, events, the
    /// decision log) is committed and durable on disk. Concurrent callers
    /// share one fsync.
    fn persist(&self) {
        let (done, wait) = mpsc::channel();
        let sent = {
            let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue
                .as_ref()
                .is_some_and(|q| q.send(WriterMessage::Flush(done)).is_ok())
        };
        if sent {
            let _ = wait.recv();
        }
    }

    /// Wait for a durable commit only when policy state or a turn counter
    /// is committed but not yet durable (or the log is to be durable
    /// before each answer); otherwise return at once.
    fn settle(&self) {
        if self.settings.log().durable_before_answer || self.unsynced.state_pending() {
            self.persist();
        }
    }

    fn durability_failure(&self) -> Option<String> {
        self.unsynced
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Drain the event queue and stop the writer. Called by `Drop`; call it
    /// explicitly to shut down at a known point.
    fn shutdown(&self) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = writer.join();
        }
    }

    fn stats(&self) -> Result<StoreStats> {
        self.compute_stats()
    }
}

impl TurnStore for RedbStore {
    fn next_turn(&self, session: &str) -> Result<u64> {
        let txn = self.fast_write().map_err(|e| self.error(e))?;
        let turn = {
            let mut table = txn.open_table(TURNS).map_err(|e| self.error(e))?;
            let turn = table
                .get(session)
                .map_err(|e| self.error(e))?
                .map_or(0, |v| v.value())
                + 1;
            table.insert(session, turn).map_err(|e| self.error(e))?;
            txn.open_table(hygiene::TURN_SEEN)
                .map_err(|e| self.error(e))?
                .insert(session, crate::now_ms())
                .map_err(|e| self.error(e))?;
            turn
        };
        self.commit_fast(txn).map_err(|e| self.error(e))?;
        Ok(turn)
    }

    fn turn(&self, session: &str) -> Result<u64> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(TURNS).map_err(|e| self.error(e))?;
        let turn = table.get(session).map_err(|e| self.error(e))?;
        Ok(turn.map_or(0, |v| v.value()))
    }
}

impl StateStore for RedbStore {
    fn state_get(&self, policy: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let mut values = self.state_get_many(policy, std::slice::from_ref(&key))?;
        Ok(values.pop().flatten())
    }

    fn state_get_many(&self, policy: &str, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
        self.state_snapshot(policy)?.get_many(keys)
    }

    fn state_keys(&self, policy: &str, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.state_snapshot(policy)?.keys(prefix, limit)
    }

    /// Every write of a namespace goes through [`Self::with_state_txn`],
    /// which counts it; redb lets no other process open the file.
    fn state_version(&self, policy: &str) -> Option<u64> {
        let versions = self
            .state_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Some(versions.get(policy).copied().unwrap_or(0))
    }

    fn state_snapshot(&self, policy: &str) -> Result<Box<dyn StateSnapshot>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(STATE).map_err(|e| self.error(e))?;
        Ok(Box::new(Snapshot {
            policy: policy.to_string(),
            path: self.path.clone(),
            table,
        }))
    }

    fn state_put(
        &self,
        policy: &str,
        key: &str,
        value: Option<&[u8]>,
        quota: u64,
    ) -> Result<(), StateWriteError> {
        if key.len() > MAX_STATE_KEY || value.is_some_and(|v| v.len() > MAX_STATE_ENTRY) {
            return Err(StateWriteError::TooLarge);
        }
        // Deleting a key that is not there changes nothing: a read
        // transaction says so for far less than a write (policies clear
        // markers they may not have set, on every call). A key written
        // after this read is one the delete would have preceded anyway.
        if value.is_none() && self.state_get(policy, key).is_ok_and(|v| v.is_none()) {
            return Ok(());
        }
        self.with_state_txn(policy, quota, |table| {
            let old = entry_size(table, policy, key)?;
            let new = match value {
                Some(value) => {
                    table.insert((policy, key), value)?;
                    (key.len() + value.len()) as i64
                }
                None => {
                    table.remove((policy, key))?;
                    0
                }
            };
            Ok(((), Some(new - old)))
        })
    }

    /// Atomically increment the counter at `key` (8 bytes, little-endian) if
    /// it is below `limit`. Redb serialises write transactions, so two
    /// concurrent callers can never both take the last unit.
    fn state_try_increment(
        &self,
        policy: &str,
        key: &str,
        limit: u64,
        quota: u64,
    ) -> Result<Option<u64>, StateWriteError> {
        if key.len() > MAX_STATE_KEY {
            return Err(StateWriteError::TooLarge);
        }
        self.with_state_txn(policy, quota, |table| {
            let old = entry_size(table, policy, key)?;
            let current = table
                .get((policy, key))?
                .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            if current >= limit {
                return Ok((None, None)); // at the limit: nothing to write
            }
            let next = current + 1;
            table.insert((policy, key), next.to_le_bytes().as_slice())?;
            Ok((Some(next), Some((key.len() + 8) as i64 - old)))
        })
    }

    fn state_usage(&self, policy: &str) -> Result<u64> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(STATE_USAGE).map_err(|e| self.error(e))?;
        let usage = table.get(policy).map_err(|e| self.error(e))?;
        Ok(usage.map(|v| v.value()).unwrap_or(0))
    }
}

impl EventStore for RedbStore {
    /// Queue an event for the writer. Never blocks: when the queue is full
    /// the event is dropped and counted (see [`Store::dropped_events`]).
    fn append_event(&self, event: StoredEvent) {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(sender) = queue.as_ref() else {
            tracing::warn!(policy = %event.policy, kind = %event.kind, "event dropped: the store is shutting down");
            self.dropped_events.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Err(err) = sender.try_send(WriterMessage::Append(Box::new(event))) {
            let event = match err {
                TrySendError::Full(WriterMessage::Append(e))
                | TrySendError::Disconnected(WriterMessage::Append(e)) => e,
                _ => return,
            };
            self.dropped_events.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                policy = %event.policy,
                kind = %event.kind,
                capacity = EVENT_QUEUE_CAPACITY,
                "event dropped: the write queue is full"
            );
        }
    }

    fn session_recent(
        &self,
        policy: &str,
        session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let index = txn
            .open_table(EVENTS_BY_SESSION)
            .map_err(|e| self.error(e))?;
        let events = txn.open_table(EVENTS).map_err(|e| self.error(e))?;
        let mut found = Vec::new();
        let range = index
            .range((policy, session, 0)..=(policy, session, u64::MAX))
            .map_err(|e| self.error(e))?;
        for entry in range.rev() {
            if found.len() >= limit {
                break;
            }
            let (key, _) = entry.map_err(|e| self.error(e))?;
            let seq = key.value().2;
            if let Some(event) = self.load_event(&events, seq)?
                && !exclude_kinds.contains(&event.kind)
            {
                found.push(event);
            }
        }
        found.reverse();
        Ok(found)
    }

    fn tool_history(
        &self,
        policy: &str,
        tool: &str,
        exclude_session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let index = txn.open_table(EVENTS_BY_TOOL).map_err(|e| self.error(e))?;
        let events = txn.open_table(EVENTS).map_err(|e| self.error(e))?;
        let mut found = Vec::new();
        let range = index
            .range((policy, tool, 0)..=(policy, tool, u64::MAX))
            .map_err(|e| self.error(e))?;
        let tenant = crate::tenant::of_session(exclude_session);
        for entry in range.rev() {
            if found.len() >= limit {
                break;
            }
            let (key, session) = entry.map_err(|e| self.error(e))?;
            let session = session.value();
            if session == exclude_session || crate::tenant::of_session(session) != tenant {
                continue;
            }
            if let Some(event) = self.load_event(&events, key.value().2)?
                && !exclude_kinds.contains(&event.kind)
            {
                found.push(event);
            }
        }
        found.reverse();
        Ok(found)
    }

    fn recent_events(&self, limit: usize) -> Result<Vec<(u64, StoredEvent)>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let events = txn.open_table(EVENTS).map_err(|e| self.error(e))?;
        let mut found = Vec::new();
        for entry in events.iter().map_err(|e| self.error(e))?.rev().take(limit) {
            let (seq, bytes) = entry.map_err(|e| self.error(e))?;
            if let Ok(event) = serde_json::from_slice(bytes.value()) {
                found.push((seq.value(), event));
            }
        }
        found.reverse();
        Ok(found)
    }
}

/// One policy's namespace in one read transaction.
struct Snapshot {
    policy: String,
    path: PathBuf,
    table: redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
}

impl Snapshot {
    fn error(&self, err: impl Into<redb::Error>) -> Error {
        engine_error(&self.path, err.into())
    }
}

impl StateSnapshot for Snapshot {
    fn get_many(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter()
            .map(|key| {
                let value = self
                    .table
                    .get((self.policy.as_str(), *key))
                    .map_err(|e| self.error(e))?;
                Ok(value.map(|v| v.value().to_vec()))
            })
            .collect()
    }

    fn keys(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let policy = self.policy.as_str();
        let mut keys = Vec::new();
        for entry in self
            .table
            .range((policy, prefix)..)
            .map_err(|e| self.error(e))?
        {
            let (key, _) = entry.map_err(|e| self.error(e))?;
            let (owner, key) = key.value();
            if owner != policy || !key.starts_with(prefix) || keys.len() >= limit {
                break;
            }
            keys.push(key.to_string());
        }
        Ok(keys)
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Bytes an existing entry uses (key + value), 0 when absent.
fn entry_size(
    table: &redb::Table<(&str, &str), &[u8]>,
    policy: &str,
    key: &str,
) -> std::result::Result<i64, redb::StorageError> {
    Ok(table
        .get((policy, key))?
        .map_or(0, |v| (key.len() + v.value().len()) as i64))
}

/// What redb said, kept as the cause of toolgate's words.
pub(super) fn engine_error(path: &Path, err: redb::Error) -> Error {
    Error::store_caused(path, "the redb file could not be read or written", err)
}

/// A file that exists but is empty is a store cut short (a crash while it
/// was made, a full disk, a bad copy), not a new one: refused, untouched.
fn refuse_cut_short(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() == 0 => Err(Error::store(
            path,
            "the file is empty (0 bytes), so it is not a toolgate store: a crash, a full disk or \
             a bad copy cut it short. Restore it from a copy (`toolgate store copy` makes \
             one), or move it aside and toolgate will create a new one (its pauses, leases and \
             log are then gone)",
        )),
        _ => Ok(()),
    }
}

fn open_error(path: &Path, err: redb::Error) -> Error {
    let message = match err {
        redb::Error::DatabaseAlreadyOpen => {
            return Error::StoreBusy {
                path: path.to_path_buf(),
                waited_ms: 0,
            };
        }
        redb::Error::Corrupted(detail) => format!(
            "it is not a valid toolgate store ({detail}); move it aside and toolgate will create \
             a new one"
        ),
        redb::Error::UpgradeRequired(version) => format!(
            "it was written in an old redb file format ({version}); move it aside and toolgate \
             will create a new one"
        ),
        other => {
            return Error::store_caused(
                path,
                "it cannot be opened; if the file is not a toolgate store, move it aside",
                other,
            );
        }
    };
    Error::store(path, message)
}

/// The writer thread: commit queued events and decision-log entries in
/// batches until the queue closes.
fn run_event_writer(
    db: &Database,
    queue: Receiver<WriterMessage>,
    log_buffer: &LogBuffer,
    settings: &Settings,
    unsynced: &Unsynced,
) {
    let dirty = &unsynced.dirty;
    let mut last_sweep = std::time::Instant::now();
    let mut next_seq = match last_event_seq(db) {
        Ok(seq) => seq.map_or(0, |s| s + 1),
        Err(err) => {
            tracing::error!(error = %err, "event writer cannot read the store; events will be dropped");
            return;
        }
    };
    // Under load the queue never goes quiet, so the time since the last
    // durable commit decides too.
    let mut last_durable = std::time::Instant::now();
    // Its allocation goes back to the buffer (see `LogBuffer::take`).
    let mut scratch = Vec::new();
    let mut audit = AuditWriter::default();
    let mut log_decisions = || {
        let decisions = log_buffer.take(&mut scratch);
        if decisions.is_empty() && !settings.audit.has_waiting() {
            return;
        }
        dirty.store(true, Ordering::Release);
        if let Err(err) = commit_decisions(db, &decisions, settings, &mut audit) {
            audit.failed(&settings.audit);
            tracing::warn!(error = %err, count = decisions.len(), "failed to write the decision log");
        }
    };
    loop {
        let first = match queue.recv_timeout(DURABLE_WITHIN / 2) {
            Ok(message) => message,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                log_decisions();
                make_durable(db, unsynced, false);
                last_durable = std::time::Instant::now();
                sweep_if_due(db, settings, &mut last_sweep, dirty);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Batch {
            events: batch,
            flushes,
        } = Batch::collect(first, &queue);
        log_decisions();
        if !batch.is_empty() {
            dirty.store(true, Ordering::Release);
            let count = batch.len();
            match commit_events(db, next_seq, &batch, &settings.retention()) {
                Ok(()) => next_seq += count as u64,
                Err(err) => {
                    tracing::warn!(error = %err, count, "failed to persist queued events")
                }
            }
        }
        if !flushes.is_empty() || last_durable.elapsed() >= DURABLE_WITHIN {
            make_durable(db, unsynced, !flushes.is_empty());
            last_durable = std::time::Instant::now();
        }
        for done in flushes {
            let _ = done.send(());
        }
        sweep_if_due(db, settings, &mut last_sweep, dirty);
    }
    log_decisions();
    make_durable(db, unsynced, true);
}

/// What is committed without an fsync and not yet durable, shared by the
/// store and its writer thread.
#[derive(Default)]
struct Unsynced {
    /// Something (state, events, the log, a sweep) was committed without
    /// an fsync since the last durable commit.
    dirty: std::sync::atomic::AtomicBool,
    /// State and turn commits so far, each counted while its transaction
    /// holds redb's write lock. A durable commit reads the count while it
    /// holds the lock itself, so every commit counted by then is before it
    /// and becomes durable with it.
    state_commits: AtomicU64,
    /// The count the last successful durable commit covered.
    durable_through: AtomicU64,
    /// Why the last durable commit failed, until one succeeds.
    failure: std::sync::Mutex<Option<String>>,
}

impl Unsynced {
    /// Whether a state or turn commit may not be durable yet. A reader
    /// that saw a commit's data sees its count too (counted before the
    /// commit), so an answer built on it waits.
    fn state_pending(&self) -> bool {
        self.state_commits.load(Ordering::SeqCst) > self.durable_through.load(Ordering::SeqCst)
    }
}

/// An empty durable commit, which makes the earlier non-durable ones
/// durable, when something looks dirty; `force` (a caller waits in
/// `persist`) commits even when nothing does: a writer may have set the
/// flag and not committed yet.
fn make_durable(db: &Database, unsynced: &Unsynced, force: bool) {
    if unsynced.dirty.swap(false, Ordering::AcqRel) || force {
        let committed = db.begin_write().map_err(redb::Error::from).and_then(|txn| {
            let covered = unsynced.state_commits.load(Ordering::SeqCst);
            txn.commit().map_err(redb::Error::from)?;
            Ok(covered)
        });
        match committed {
            Ok(covered) => {
                unsynced
                    .durable_through
                    .fetch_max(covered, Ordering::SeqCst);
                *unsynced.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            Err(err) => {
                unsynced.dirty.store(true, Ordering::Release);
                tracing::error!(error = %err, "cannot make recent state durable");
                *unsynced.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(err.to_string());
            }
        }
    }
}

fn last_event_seq(db: &Database) -> std::result::Result<Option<u64>, redb::Error> {
    let txn = db.begin_read()?;
    let events = txn.open_table(EVENTS)?;
    Ok(events.last()?.map(|(seq, _)| seq.value()))
}

/// A write transaction that does not wait for the disk; the writer makes
/// it durable within [`DURABLE_WITHIN`] and at shutdown.
fn group_committed(db: &Database) -> std::result::Result<redb::WriteTransaction, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(redb::Durability::None)?;
    Ok(txn)
}

/// What the writer commits together.
#[derive(Default)]
struct Batch {
    events: Vec<StoredEvent>,
    flushes: Vec<mpsc::Sender<()>>,
}

impl Batch {
    /// `first` and whatever else is queued, up to [`EVENT_BATCH`] rows.
    fn collect(first: WriterMessage, queue: &Receiver<WriterMessage>) -> Self {
        let mut batch = Self::default();
        let mut message = Some(first);
        while let Some(m) = message.take() {
            match m {
                WriterMessage::Append(event) => batch.events.push(*event),
                WriterMessage::Flush(done) => batch.flushes.push(done),
                // Every pass takes the log's entries.
                WriterMessage::Drain => {}
            }
            if batch.events.len() < EVENT_BATCH {
                message = queue.try_recv().ok();
            }
        }
        batch
    }
}

/// Run the retention sweep when its interval has passed.
fn sweep_if_due(
    db: &Database,
    settings: &Settings,
    last_sweep: &mut std::time::Instant,
    dirty: &std::sync::atomic::AtomicBool,
) {
    let retention = settings.retention();
    if last_sweep.elapsed() < retention.sweep_interval {
        return;
    }
    *last_sweep = std::time::Instant::now();
    match hygiene::sweep(db, &retention, crate::now_ms()) {
        Ok(report) if report != SweepReport::default() => {
            dirty.store(true, Ordering::Release);
            tracing::info!(?report, "swept what is past its retention");
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "the retention sweep failed"),
    }
}

fn commit_events(
    db: &Database,
    first_seq: u64,
    batch: &[StoredEvent],
    retention: &Retention,
) -> std::result::Result<(), redb::Error> {
    let txn = group_committed(db)?;
    let mut appended: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (seq, event) in (first_seq..).zip(batch) {
        appended.entry(event.policy.as_str()).or_default().push(seq);
    }
    {
        let mut events = txn.open_table(EVENTS)?;
        let mut by_session = txn.open_table(EVENTS_BY_SESSION)?;
        let mut by_tool = txn.open_table(EVENTS_BY_TOOL)?;
        for (seq, event) in (first_seq..).zip(batch) {
            let bytes = serde_json::to_vec(event).expect("events always serialise");
            events.insert(seq, bytes.as_slice())?;
            by_session.insert((event.policy.as_str(), event.session_id.as_str(), seq), ())?;
            if let Some(tool) = &event.tool {
                by_tool.insert(
                    (event.policy.as_str(), tool.as_str(), seq),
                    event.session_id.as_str(),
                )?;
            }
        }
    }
    let dropped = hygiene::index_and_trim(&txn, &appended, retention)?;
    if dropped > 0 {
        tracing::debug!(dropped, "events past their policy's quota were dropped");
    }
    txn.commit()?;
    Ok(())
}

/// The decision log's new entries and the audit chain's links for them
/// (and for the other records waiting), in one transaction. Entries are
/// serialised, and links hashed and signed, before it begins: a decision
/// that writes state waits for this transaction's lock.
fn commit_decisions(
    db: &Database,
    entries: &[LogEntry],
    settings: &Settings,
    audit: &mut AuditWriter,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let logged: Vec<(u64, Vec<u8>)> = entries
        .iter()
        .map(|entry| {
            let bytes = serde_json::to_vec(entry).expect("log entries always serialise");
            (entry.at_ms, bytes)
        })
        .collect();
    let chained = audit::prepare(db, &settings.audit, audit, &logged)?;
    let txn = group_committed(db)?;
    {
        let mut table = txn.open_table(DECISIONS)?;
        let first = table.last()?.map_or(0, |(seq, _)| seq.value() + 1);
        for (seq, (_, bytes)) in (first..).zip(&logged) {
            table.insert(seq, bytes.as_slice())?;
        }
        if !entries.is_empty() {
            apply_retention(&mut table, &settings.log(), crate::now_ms())?;
        }
    }
    if let Some(pass) = chained {
        audit::commit(&txn, audit, pass)?;
    }
    txn.commit()?;
    audit.committed();
    Ok(())
}
