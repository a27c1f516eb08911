//! Pending gates and resolutions in the store: insert, peek, the verified
//! take, and resolutions (see `crate::gates` for the data and the rules).

use std::sync::atomic::Ordering;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{PENDING_GATES, RedbStore};
use crate::error::{GateError, Result};
use crate::gates::{GateKey, GateResolution, PendingGate, RecordedResolution};
use crate::store::{
    GateStore, Take, TakeGateError, judge_take, parse_gate, parse_resolutions, raised,
};

/// A gate's key in [`PENDING_GATES`].
pub(crate) fn slot_of(gate: &PendingGate) -> (&str, &str, &str) {
    (
        gate.user_id.as_str(),
        gate.thread_id.as_str(),
        gate.request_id.as_str(),
    )
}

/// (user, thread, call fingerprint) → resolutions so far (JSON).
pub(crate) const RESOLUTIONS: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("gate_resolutions");

/// The thread's gates in `table`, parsed (expired ones too).
fn thread_rows(
    store: &RedbStore,
    table: &impl ReadableTable<(&'static str, &'static str, &'static str), &'static [u8]>,
    (user, thread): (&str, &str),
) -> Result<Vec<PendingGate>> {
    let mut gates = Vec::new();
    for entry in table
        .range((user, thread, "")..)
        .map_err(|e| store.error(e))?
    {
        let (key, value) = entry.map_err(|e| store.error(e))?;
        let (u, t, _) = key.value();
        if (u, t) != (user, thread) {
            break;
        }
        gates.push(parse_gate(&store.path, user, thread, value.value())?);
    }
    Ok(gates)
}

impl GateStore for RedbStore {
    fn insert_gate(&self, gate: &PendingGate) -> Result<()> {
        let bytes = serde_json::to_vec(gate).expect("gates always serialise");
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(PENDING_GATES).map_err(|e| self.error(e))?;
            table
                .insert(slot_of(gate), bytes.as_slice())
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }

    fn raise_gate(&self, gate: &PendingGate, now_ms: u64) -> Result<PendingGate> {
        // One write transaction: redb runs one at a time, so a copy of the
        // call raised meanwhile is either wholly before or wholly after.
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        let stored = {
            let mut table = txn.open_table(PENDING_GATES).map_err(|e| self.error(e))?;
            let thread = (gate.user_id.as_str(), gate.thread_id.as_str());
            let pending = thread_rows(self, &table, thread)?;
            let (stored, gone) = raised(pending, gate, now_ms);
            for request_id in &gone {
                table
                    .remove((thread.0, thread.1, request_id.as_str()))
                    .map_err(|e| self.error(e))?;
            }
            let bytes = serde_json::to_vec(&stored).expect("gates always serialise");
            table
                .insert(slot_of(&stored), bytes.as_slice())
                .map_err(|e| self.error(e))?;
            stored
        };
        txn.commit().map_err(|e| self.error(e))?;
        Ok(stored)
    }

    fn thread_gates(&self, key: &GateKey, now_ms: u64) -> Result<Vec<PendingGate>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(PENDING_GATES).map_err(|e| self.error(e))?;
        let mut gates = thread_rows(self, &table, (&key.user_id, &key.thread_id))?;
        gates.retain(|g| !g.is_expired(now_ms));
        gates.sort_by_key(|g| g.created_at_ms);
        Ok(gates)
    }

    fn list_gates(&self, user_id: Option<&str>, now_ms: u64) -> Result<Vec<PendingGate>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = txn.open_table(PENDING_GATES).map_err(|e| self.error(e))?;
        let mut gates = Vec::new();
        for entry in table.iter().map_err(|e| self.error(e))? {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            let (user, thread, _) = key.value();
            let gate = parse_gate(&self.path, user, thread, value.value())?;
            if !gate.is_expired(now_ms) && user_id.is_none_or(|u| u == gate.user_id) {
                gates.push(gate);
            }
        }
        Ok(gates)
    }

    /// Take the gate `request_id` of `key` if every check passes;
    /// otherwise leave it. An expired gate is removed and reported as
    /// [`GateError::Expired`].
    fn take_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        trusted_channels: &[String],
        now_ms: u64,
    ) -> Result<PendingGate, TakeGateError> {
        let storage = |e: redb::Error| TakeGateError::Storage(self.error(e));
        let txn = self.db().begin_write().map_err(|e| storage(e.into()))?;
        let outcome = {
            let mut table = txn
                .open_table(PENDING_GATES)
                .map_err(|e| storage(e.into()))?;
            let slot = (key.user_id.as_str(), key.thread_id.as_str(), request_id);
            let gate = match table.get(slot).map_err(|e| storage(e.into()))? {
                Some(body) => Some(parse_gate(
                    &self.path,
                    &key.user_id,
                    &key.thread_id,
                    body.value(),
                )?),
                None => None,
            };
            match judge_take(gate, key, request_id, channel, trusted_channels, now_ms) {
                Take::Taken(gate) => {
                    table.remove(slot).map_err(|e| storage(e.into()))?;
                    Ok(*gate)
                }
                Take::Expired => {
                    table.remove(slot).map_err(|e| storage(e.into()))?;
                    Err(GateError::Expired.into())
                }
                // Nothing changed: the transaction is dropped, not committed.
                Take::Refused(refusal) => return Err(refusal.into()),
            }
        };
        txn.commit().map_err(|e| storage(e.into()))?;
        outcome
    }

    fn record_resolution(
        &self,
        gate: &PendingGate,
        resolution: GateResolution,
        ttl: std::time::Duration,
        by: &str,
    ) -> Result<()> {
        let slot = (
            gate.user_id.as_str(),
            gate.thread_id.as_str(),
            gate.fingerprint.as_str(),
        );
        // Raised before the write: a lookup may then read for nothing, but
        // never skip a resolution that is there.
        self.may_hold_resolutions.store(true, Ordering::SeqCst);
        let txn = self.db().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = txn.open_table(RESOLUTIONS).map_err(|e| self.error(e))?;
            let mut recorded: Vec<RecordedResolution> =
                match table.get(slot).map_err(|e| self.error(e))? {
                    Some(value) => parse_resolutions(&self.path, slot.0, slot.1, value.value())?,
                    None => Vec::new(),
                };
            recorded.push(RecordedResolution::of(
                gate,
                resolution,
                ttl,
                by,
                crate::now_ms(),
            ));
            let bytes = serde_json::to_vec(&recorded).expect("resolutions always serialise");
            table
                .insert(slot, bytes.as_slice())
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(())
    }

    fn may_hold_resolutions(&self) -> bool {
        self.may_hold_resolutions.load(Ordering::SeqCst)
    }

    fn resolutions_for(
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
        let slot = (user_id, thread_id, fingerprint);
        let recorded: Vec<RecordedResolution> = match table.get(slot).map_err(|e| self.error(e))? {
            Some(value) => parse_resolutions(&self.path, user_id, thread_id, value.value())?,
            None => Vec::new(),
        };
        Ok(recorded
            .into_iter()
            .filter(|r| now_ms < r.expires_at_ms)
            .collect())
    }

    fn clear_resolutions(&self, user_id: &str, thread_id: &str, fingerprint: &str) -> Result<()> {
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
