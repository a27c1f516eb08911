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
///
/// Runs on every commit of the log, so in a daemon past `max_entries` it
/// removes as many rows as it appends. Rows over the count go a key range
/// at a time, in one cursor pass that never decodes them (one `remove` and
/// one JSON parse per row was half the writer's time in steady state); only
/// the oldest remaining row is read, for its age.
pub(crate) fn apply_retention(
    table: &mut redb::Table<u64, &[u8]>,
    config: &LogConfig,
    now_ms: u64,
) -> std::result::Result<u64, redb::StorageError> {
    let before = table.len()?;
    let mut len = before;
    while len > config.max_entries {
        let Some(first) = table.first()?.map(|(seq, _)| seq.value()) else {
            break;
        };
        // Sequence numbers are consecutive, so this is `len - max_entries`
        // rows; if some are missing it is fewer, and the next pass goes on.
        let end = first.saturating_add(len - config.max_entries);
        table.retain_in(first..end, |_, _| false)?;
        len = table.len()?;
    }
    // Entries are appended in the order they were decided: the old ones
    // are at the front. One that cannot be read goes too.
    let cutoff = now_ms.saturating_sub(config.max_age_secs.saturating_mul(1000));
    loop {
        let (seq, old) = match table.first()? {
            Some((seq, entry)) => (
                seq.value(),
                decided_at(entry.value()).is_none_or(|at_ms| at_ms < cutoff),
            ),
            None => break,
        };
        if !old {
            break;
        }
        table.remove(seq)?;
    }
    Ok(before - table.len()?)
}

/// When a stored entry was decided, reading nothing else of it.
fn decided_at(entry: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct DecidedAt {
        at_ms: u64,
    }
    serde_json::from_slice::<DecidedAt>(entry)
        .ok()
        .map(|e| e.at_ms)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `rows` (seq, decided at) in a fresh table; retention applied once;
    /// what it removed and the sequence numbers left.
    fn retain(rows: &[(u64, &str)], config: LogConfig, now_ms: u64) -> (u64, Vec<u64>) {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("log.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let mut table = txn.open_table(DECISIONS).unwrap();
        for (seq, at_ms) in rows {
            let entry = format!(r#"{{"call_id":"c{seq}","at_ms":{at_ms},"tool":"Bash"}}"#);
            table.insert(seq, entry.as_bytes()).unwrap();
        }
        let removed = apply_retention(&mut table, &config, now_ms).unwrap();
        let left = table
            .iter()
            .unwrap()
            .map(|r| r.unwrap().0.value())
            .collect();
        (removed, left)
    }

    fn keep(max_entries: u64, max_age_secs: u64) -> LogConfig {
        LogConfig {
            max_entries,
            max_age_secs,
            ..LogConfig::default()
        }
    }

    #[test]
    fn the_oldest_entries_over_the_count_go_first() {
        let rows: Vec<_> = (0..10).map(|seq| (seq, "1000")).collect();
        assert_eq!(retain(&rows, keep(4, 60), 1000), (6, vec![6, 7, 8, 9]));
        assert_eq!(retain(&rows, keep(10, 60), 1000), (0, (0..10).collect()));
        assert_eq!(retain(&rows, keep(0, 60), 1000), (10, vec![]));
    }

    #[test]
    fn missing_sequence_numbers_do_not_leave_too_many_entries() {
        let rows: Vec<_> = [0, 1, 5, 6, 7, 20, 21].map(|seq| (seq, "1000")).into();
        assert_eq!(retain(&rows, keep(3, 60), 1000), (4, vec![7, 20, 21]));
        assert_eq!(retain(&rows, keep(1, 60), 1000), (6, vec![21]));
    }

    #[test]
    fn entries_past_their_age_go_from_the_front_and_unreadable_ones_with_them() {
        let now = 100_000;
        // decided at: unreadable, 10 s ago, 90 s ago, 1 s ago, 90 s ago
        let rows = [
            (0, r#""soon""#),
            (1, "90000"),
            (2, "10000"),
            (3, "99000"),
            (4, "10000"),
        ];
        // 60 s: the front goes up to the first young entry; an old entry
        // behind it waits until it reaches the front
        assert_eq!(retain(&rows, keep(100, 60), now), (1, vec![1, 2, 3, 4]));
        assert_eq!(retain(&rows, keep(100, 5), now), (3, vec![3, 4]));
        // both limits at once
        assert_eq!(retain(&rows, keep(2, 60), now), (3, vec![3, 4]));
    }
}
