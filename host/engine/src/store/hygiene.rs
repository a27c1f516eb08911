//! What the store keeps and for how long, and what it reports of its size:
//! the same for every backend (each backend enforces it in its own engine).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long things are kept.
#[derive(Debug, Clone)]
pub struct Retention {
    /// Events kept per policy, by policy name.
    pub events_max: BTreeMap<String, u64>,
    /// For a policy not named above.
    pub default_events_max: u64,
    /// Events older than this are swept.
    pub events_max_age: Duration,
    /// Turn counters of sessions idle this long are swept.
    pub sessions_max_idle: Duration,
    /// How often the sweep runs.
    pub sweep_interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            events_max: BTreeMap::new(),
            default_events_max: 100_000,
            events_max_age: Duration::from_secs(30 * 24 * 3600),
            sessions_max_idle: Duration::from_secs(7 * 24 * 3600),
            sweep_interval: Duration::from_secs(60),
        }
    }
}

impl Retention {
    /// The retention under `config`: per-plugin event quotas and the
    /// `[retention]` table.
    pub fn from_config(config: &crate::Config) -> Self {
        let events_max = config
            .effective_plugins()
            .unwrap_or_default()
            .into_iter()
            .map(|(name, plugin)| (name, plugin.limits.events_max))
            .collect();
        let secs = Duration::from_secs;
        let table = &config.retention;
        Self {
            events_max,
            default_events_max: crate::config::Limits::default().events_max,
            events_max_age: secs(table.events_max_age_secs),
            sessions_max_idle: secs(table.sessions_max_idle_secs),
            sweep_interval: secs(table.sweep_interval_secs.max(1)),
        }
    }

    pub(crate) fn quota(&self, policy: &str) -> u64 {
        self.events_max
            .get(policy)
            .copied()
            .unwrap_or(self.default_events_max)
    }
}

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Events past their age.
    pub events: u64,
    /// Expired pending gates.
    pub gates: u64,
    /// Expired resolutions.
    pub resolutions: u64,
    /// Turn counters of idle sessions.
    pub sessions: u64,
}

/// Sizes of the store, for `toolgate store stats`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStats {
    /// The file's size on disk, bytes.
    pub file_bytes: u64,
    /// Per table: rows and bytes stored.
    pub tables: BTreeMap<String, TableStats>,
    /// Per policy: state bytes and events.
    pub policies: BTreeMap<String, PolicyStats>,
}

/// One table's size.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TableStats {
    /// Rows.
    pub rows: u64,
    /// Bytes of keys and values stored.
    pub stored_bytes: u64,
}

/// One policy's share of the store.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct PolicyStats {
    /// Bytes of its state namespace.
    pub state_bytes: u64,
    /// Events in its stream.
    pub events: u64,
}
