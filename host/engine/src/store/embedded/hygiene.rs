//! Store hygiene in the redb file (what is kept is in
//! [`crate::store::hygiene`]): nothing a policy or time writes grows without bound.
//!
//! - Each policy's event stream keeps at most its `limits.events_max`
//!   events: the writer drops the oldest in the same transaction that goes
//!   past it.
//! - A background sweep (in the writer thread, every
//!   `[retention] sweep_interval_secs`) removes events older than
//!   `events_max_age_secs`, expired pending gates, expired resolutions, and
//!   turn counters of sessions idle past `sessions_max_idle_secs`.
//! - [`Store::stats`] reports sizes per table and per policy
//!   (`toolgate store stats`); [`compact`] gives freed pages back to the
//!   file system (`toolgate store compact`, with no daemon running).
//!
//! Events written before the per-policy index existed are not counted
//! against a quota; the age sweep removes them in time.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{
    Database, ReadableDatabase as _, ReadableTable, ReadableTableMetadata as _, TableDefinition,
    TableHandle as _, WriteTransaction,
};

use super::gates::RESOLUTIONS;
use super::{
    EVENTS, EVENTS_BY_SESSION, EVENTS_BY_TOOL, PENDING_GATES, RedbStore, STATE_USAGE, StoredEvent,
    TURNS,
};
use crate::error::{Error, Result};
use crate::gates::{PendingGate, RecordedResolution};
use crate::store::hygiene::{PolicyStats, Retention, StoreStats, SweepReport, TableStats};

/// (policy, seq) → (): a policy's events, oldest first.
pub(crate) const EVENTS_BY_POLICY: TableDefinition<(&str, u64), ()> =
    TableDefinition::new("events_by_policy");
/// policy → events in its stream (those the index above holds).
pub(crate) const EVENT_COUNTS: TableDefinition<&str, u64> = TableDefinition::new("event_counts");
/// session → when its turn counter last moved (ms).
pub(crate) const TURN_SEEN: TableDefinition<&str, u64> = TableDefinition::new("turn_seen");

/// The most rows one sweep removes from one table, so a sweep never holds
/// the writer for long; the next sweep goes on.
const SWEEP_BATCH: usize = 10_000;

/// Record `seq` in `policy`'s index and count; then drop its oldest events
/// past its quota. Runs inside the writer's transaction.
pub(crate) fn index_and_trim(
    txn: &WriteTransaction,
    appended: &BTreeMap<&str, Vec<u64>>,
    retention: &Retention,
) -> std::result::Result<u64, redb::Error> {
    let mut dropped = 0;
    for (policy, seqs) in appended {
        {
            let mut index = txn.open_table(EVENTS_BY_POLICY)?;
            for seq in seqs {
                index.insert((*policy, *seq), ())?;
            }
            let mut counts = txn.open_table(EVENT_COUNTS)?;
            let count = counts.get(*policy)?.map_or(0, |v| v.value()) + seqs.len() as u64;
            counts.insert(*policy, count)?;
        }
        let quota = retention.quota(policy);
        let over = count_of(txn, policy)?.saturating_sub(quota);
        if over > 0 {
            let oldest: Vec<u64> = {
                let index = txn.open_table(EVENTS_BY_POLICY)?;
                index
                    .range((*policy, 0)..=(*policy, u64::MAX))?
                    .take(over as usize)
                    .map(|entry| entry.map(|(key, _)| key.value().1))
                    .collect::<std::result::Result<_, _>>()?
            };
            for seq in oldest {
                dropped += u64::from(remove_event(txn, seq)?);
            }
        }
    }
    Ok(dropped)
}

fn count_of(txn: &WriteTransaction, policy: &str) -> std::result::Result<u64, redb::Error> {
    let counts = txn.open_table(EVENT_COUNTS)?;
    Ok(counts.get(policy)?.map_or(0, |v| v.value()))
}

/// Remove one event and its index entries; whether it existed.
fn remove_event(txn: &WriteTransaction, seq: u64) -> std::result::Result<bool, redb::Error> {
    let event: Option<StoredEvent> = {
        let mut events = txn.open_table(EVENTS)?;
        let removed = events.remove(seq)?;
        removed.and_then(|v| serde_json::from_slice(v.value()).ok())
    };
    let Some(event) = event else {
        return Ok(false);
    };
    let policy = event.policy.as_str();
    txn.open_table(EVENTS_BY_SESSION)?
        .remove((policy, event.session_id.as_str(), seq))?;
    if let Some(tool) = &event.tool {
        txn.open_table(EVENTS_BY_TOOL)?
            .remove((policy, tool.as_str(), seq))?;
    }
    if txn
        .open_table(EVENTS_BY_POLICY)?
        .remove((policy, seq))?
        .is_some()
    {
        let mut counts = txn.open_table(EVENT_COUNTS)?;
        let count = counts.get(policy)?.map_or(0, |v| v.value());
        counts.insert(policy, count.saturating_sub(1))?;
    }
    Ok(true)
}

/// One sweep at `now_ms`, in one write transaction.
pub(crate) fn sweep(
    db: &Database,
    retention: &Retention,
    now_ms: u64,
) -> std::result::Result<SweepReport, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(redb::Durability::None)?;
    let event_cutoff = now_ms.saturating_sub(retention.events_max_age.as_millis() as u64);
    let idle_before = now_ms.saturating_sub(retention.sessions_max_idle.as_millis() as u64);
    let report = SweepReport {
        events: sweep_events(&txn, event_cutoff)?,
        gates: sweep_gates(&txn, now_ms)?,
        resolutions: sweep_resolutions(&txn, now_ms)?,
        sessions: sweep_sessions(&txn, idle_before, now_ms)?,
    };
    txn.commit()?;
    Ok(report)
}

/// Events older than `cutoff`, oldest first (sequence numbers follow time).
fn sweep_events(txn: &WriteTransaction, cutoff: u64) -> std::result::Result<u64, redb::Error> {
    let old: Vec<u64> = {
        let events = txn.open_table(EVENTS)?;
        let mut old = Vec::new();
        for entry in events.iter()?.take(SWEEP_BATCH) {
            let (seq, bytes) = entry?;
            let at = serde_json::from_slice::<StoredEvent>(bytes.value()).map_or(0, |e| e.at_ms);
            if at >= cutoff {
                break;
            }
            old.push(seq.value());
        }
        old
    };
    let mut removed = 0;
    for seq in old {
        removed += u64::from(remove_event(txn, seq)?);
    }
    Ok(removed)
}

/// Pending gates expired at `now_ms`.
fn sweep_gates(txn: &WriteTransaction, now_ms: u64) -> std::result::Result<u64, redb::Error> {
    let mut gates = txn.open_table(PENDING_GATES)?;
    let expired: Vec<(String, String, String)> = gates
        .iter()?
        .filter_map(|entry| {
            let (key, value) = entry.ok()?;
            let gate: PendingGate = serde_json::from_slice(value.value()).ok()?;
            gate.is_expired(now_ms).then(|| {
                let (user, thread, request_id) = key.value();
                (user.to_string(), thread.to_string(), request_id.to_string())
            })
        })
        .take(SWEEP_BATCH)
        .collect();
    for (user, thread, request_id) in &expired {
        gates.remove((user.as_str(), thread.as_str(), request_id.as_str()))?;
    }
    Ok(expired.len() as u64)
}

/// Resolutions expired at `now_ms`, and the rows they leave empty.
fn sweep_resolutions(txn: &WriteTransaction, now_ms: u64) -> std::result::Result<u64, redb::Error> {
    let mut table = txn.open_table(RESOLUTIONS)?;
    let mut removed = 0;
    let mut changes: Vec<((String, String, String), Vec<RecordedResolution>)> = Vec::new();
    for entry in table.iter()?.take(SWEEP_BATCH) {
        let (key, value) = entry?;
        let recorded: Vec<RecordedResolution> =
            serde_json::from_slice(value.value()).unwrap_or_default();
        let live: Vec<RecordedResolution> = recorded
            .iter()
            .filter(|r| now_ms < r.expires_at_ms)
            .cloned()
            .collect();
        if live.len() != recorded.len() {
            removed += (recorded.len() - live.len()) as u64;
            let (user, thread, fingerprint) = key.value();
            changes.push(((user.into(), thread.into(), fingerprint.into()), live));
        }
    }
    for ((user, thread, fingerprint), live) in changes {
        let key = (user.as_str(), thread.as_str(), fingerprint.as_str());
        if live.is_empty() {
            table.remove(key)?;
        } else {
            let bytes = serde_json::to_vec(&live).expect("resolutions always serialise");
            table.insert(key, bytes.as_slice())?;
        }
    }
    Ok(removed)
}

/// Turn counters of sessions idle since before `idle_before` (a counter
/// never seen moving is adopted now, and swept once idle).
fn sweep_sessions(
    txn: &WriteTransaction,
    idle_before: u64,
    now_ms: u64,
) -> std::result::Result<u64, redb::Error> {
    let mut turns = txn.open_table(TURNS)?;
    let mut seen = txn.open_table(TURN_SEEN)?;
    let mut idle = Vec::new();
    let mut adopt = Vec::new();
    for entry in turns.iter()?.take(SWEEP_BATCH) {
        let (session, _) = entry?;
        let session = session.value().to_string();
        match seen.get(session.as_str())?.map(|v| v.value()) {
            Some(at) if at < idle_before => idle.push(session),
            Some(_) => {}
            None => adopt.push(session),
        }
    }
    for session in &adopt {
        seen.insert(session.as_str(), now_ms)?;
    }
    for session in &idle {
        turns.remove(session.as_str())?;
        seen.remove(session.as_str())?;
    }
    Ok(idle.len() as u64)
}

impl RedbStore {
    /// Sizes per table and per policy.
    pub(super) fn compute_stats(&self) -> Result<StoreStats> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let mut tables = BTreeMap::new();
        for handle in txn.list_tables().map_err(|e| self.error(e))? {
            let name = handle.name().to_string();
            // Only the metadata is read; the key and value types do not matter.
            if let Ok(table) = txn.open_untyped_table(handle) {
                let stats = table.stats().map_err(|e| self.error(e))?;
                let rows = table.len().map_err(|e| self.error(e))?;
                tables.insert(
                    name,
                    TableStats {
                        rows,
                        stored_bytes: stats.stored_bytes(),
                    },
                );
            }
        }
        let mut policies: BTreeMap<String, PolicyStats> = BTreeMap::new();
        if let Ok(usage) = txn.open_table(STATE_USAGE) {
            for entry in usage.iter().map_err(|e| self.error(e))? {
                let (policy, bytes) = entry.map_err(|e| self.error(e))?;
                policies
                    .entry(policy.value().to_string())
                    .or_default()
                    .state_bytes = bytes.value();
            }
        }
        if let Ok(counts) = txn.open_table(EVENT_COUNTS) {
            for entry in counts.iter().map_err(|e| self.error(e))? {
                let (policy, count) = entry.map_err(|e| self.error(e))?;
                policies
                    .entry(policy.value().to_string())
                    .or_default()
                    .events = count.value();
            }
        }
        Ok(StoreStats {
            file_bytes: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
            tables,
            policies,
        })
    }
}

/// Compact the store file at `path` (no other process may hold it): redb
/// gives freed pages back, and the file shrinks.
pub fn compact(path: &Path) -> Result<(u64, u64)> {
    let before = std::fs::metadata(path).map_or(0, |m| m.len());
    let mut db = Database::open(path).map_err(|err| match err {
        redb::DatabaseError::DatabaseAlreadyOpen => Error::StoreBusy {
            path: path.to_path_buf(),
            waited_ms: 0,
        },
        other => super::engine_error(path, other.into()),
    })?;
    db.compact()
        .map_err(|e| super::engine_error(path, e.into()))?;
    drop(db);
    let after = std::fs::metadata(path).map_or(0, |m| m.len());
    Ok((before, after))
}
