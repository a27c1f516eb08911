//! toolgate's clock across restarts. Within a process [`crate::now`] never
//! goes back (see there); this keeps it so across processes: the latest
//! moment shown is recorded in the store, at most [`EVERY`] old, and a
//! process that opens the store starts no earlier than that moment plus,
//! on the same boot, the time since. So a daemon started after the clock
//! was stepped back (a restored VM, a bad NTP source, `date -s`) extends no
//! lease and no TTL either.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Result;
use crate::decision::HOST;
use crate::store::Store;

/// Where the moment is kept: the host's own state namespace, which no
/// policy can read or write (a plugin may not be named `toolgate`), under
/// this machine's id: hosts of a fleet share a PostgreSQL store, and one
/// host's clock (wrongly ahead, say) must never move another's.
fn key() -> String {
    // Containers often lack a machine id; their host names differ.
    let machine = ["/etc/machine-id", "/proc/sys/kernel/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|id| id.trim().to_string())
        .find(|id| !id.is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("clock/latest/{machine}")
}

/// How often the moment is recorded again.
const EVERY_MS: u64 = 10_000;

/// Records the latest moment now and then.
pub(crate) struct Clock {
    recorded_ms: AtomicU64,
    /// See [`key`].
    key: String,
}

impl Clock {
    /// For `store`: never behind the moment it holds, which is then
    /// brought up to now.
    pub(crate) fn open(store: &Store) -> Result<Self> {
        let key = key();
        let recorded = store.state().state_get(HOST, &key)?;
        if let Some(moment) = recorded.and_then(|bytes| serde_json::from_slice(&bytes).ok()) {
            toolgate_wire::never_before(&moment);
        }
        let clock = Self {
            recorded_ms: AtomicU64::new(0),
            key,
        };
        clock.record(store);
        Ok(clock)
    }

    /// Record the moment if the last record is [`EVERY_MS`] old; a failure
    /// is logged (the decision does not depend on it).
    pub(crate) fn tick(&self, store: &Store) {
        let last = self.recorded_ms.load(Ordering::Relaxed);
        if crate::now_ms().saturating_sub(last) >= EVERY_MS {
            self.record(store);
        }
    }

    fn record(&self, store: &Store) {
        let moment = toolgate_wire::moment();
        self.recorded_ms.store(moment.at_ms, Ordering::Relaxed);
        let bytes = serde_json::to_vec(&moment).expect("a moment serialises");
        if let Err(err) = store
            .state()
            .state_put(HOST, &self.key, Some(&bytes), u64::MAX)
        {
            tracing::warn!(error = %err, "cannot record the clock's latest moment");
        }
    }
}
