//! The decision log in the store: appended by the writer in batches,
//! trimmed by count and age, read newest first (see `crate::decision_log`
//! for what an entry holds).

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::RedbStore;
use crate::config::LogConfig;
use crate::decision_log::{LogEntry, LogFilter, PendingLogEntry};
use crate::error::Result;
use crate::store::DecisionLog;

/// seq → entry (JSON).
pub(crate) const DECISIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("decisions");

/// Remove entries beyond `config.max_entries` and older than
/// `config.max_age_secs`, oldest first. Returns how many were removed.
pub(crate) fn apply_retention(
    table: &mut redb::Table<u64, &[u8]>,
    config: &LogConfig,
    now_ms: u64,
) -> std::result::Result<u64, redb::StorageError> {
    let mut removed = 0;
    let over = table.len()?.saturating_sub(config.max_entries);
    let cutoff = now_ms.saturating_sub(config.max_age_secs.saturating_mul(1000));
    loop {
        let (seq, old) = match table.first()? {
            Some((seq, entry)) => (
                seq.value(),
                serde_json::from_slice::<LogEntry>(entry.value())
                    .map_or(true, |e| e.at_ms < cutoff),
            ),
            None => break,
        };
        if removed >= over && !old {
            break;
        }
        table.remove(seq)?;
        removed += 1;
    }
    Ok(removed)
}

impl DecisionLog for RedbStore {
    fn log_decision(&self, entry: PendingLogEntry) {
        self.queue_decision(entry);
    }

    fn decision_log(&self, filter: &LogFilter, limit: usize) -> Result<Vec<(u64, LogEntry)>> {
        let txn = self.db().begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(DECISIONS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.error(e)),
        };
        let mut found = Vec::new();
        for entry in table.iter().map_err(|e| self.error(e))?.rev() {
            if found.len() >= limit {
                break;
            }
            let (seq, bytes) = entry.map_err(|e| self.error(e))?;
            let Ok(entry) = serde_json::from_slice::<LogEntry>(bytes.value()) else {
                continue;
            };
            let keep = filter
                .session
                .as_ref()
                .is_none_or(|s| *s == entry.session_id)
                && filter.tool.as_ref().is_none_or(|t| *t == entry.tool)
                && filter.verdict.is_none_or(|v| v == entry.verdict);
            if keep {
                found.push((seq.value(), entry));
            }
        }
        found.reverse();
        Ok(found)
    }
}
