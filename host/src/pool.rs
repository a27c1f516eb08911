//! Warm policy instances: kept per plugin version, handed out only to calls
//! of the same user and (by default) the same session, and returned from
//! every path by a guard.
//!
//! A guest's linear memory and statics survive between calls on one
//! instance, so an instance that served one user must never serve another:
//! the pool is keyed by [`instance_key`]. Instantiating and configuring
//! costs far more than a decision, so within one key (Claude Code's
//! PreToolUse, PostToolUse, next PreToolUse of one session) the same
//! instance serves again. An instance any call into which failed is
//! dropped, never reused.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Isolation;
use crate::request::ToolRequest;
use crate::runtime::Sandbox;

/// Idle instances one plugin version keeps, over all keys; past it the
/// least recently returned goes.
const MAX_IDLE: usize = 32;

/// The key of calls that carry no user (operator commands).
const OPERATOR: &str = "\0operator";

/// Idle instances of one plugin version, by key.
#[derive(Default)]
pub(crate) struct Pool {
    /// Oldest first.
    idle: Mutex<Vec<(String, Sandbox)>>,
    /// Instances created (instantiated and configured) so far.
    created: AtomicU64,
}

impl Pool {
    /// An idle instance for `key`, the most recently returned first.
    pub(crate) fn take(&self, key: &str) -> Option<Sandbox> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let at = idle.iter().rposition(|(k, _)| k == key)?;
        Some(idle.remove(at).1)
    }

    fn put(&self, key: String, sandbox: Sandbox) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push((key, sandbox));
        if idle.len() > MAX_IDLE {
            idle.remove(0);
        }
    }

    /// Count a fresh instance.
    pub(crate) fn created_one(&self) {
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    /// Instances created so far.
    pub(crate) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }
}

/// Which warm instances a call may use.
pub(crate) fn instance_key(isolation: Isolation, request: Option<&ToolRequest>) -> String {
    match (request, isolation) {
        (None, _) => OPERATOR.into(),
        (Some(r), Isolation::User) => format!("{}\0", r.user_id),
        (Some(r), Isolation::Session) => format!("{}\0{}", r.user_id, r.session_id),
    }
}

/// An instance on loan: it goes back to its plugin's pool when dropped,
/// unless it failed or the plugin does not reuse instances.
pub(crate) struct Pooled<'p> {
    pool: &'p Pool,
    /// Whether the plugin keeps instances warm at all.
    reuse: bool,
    key: String,
    sandbox: Option<Sandbox>,
}

impl<'p> Pooled<'p> {
    pub(crate) fn new(pool: &'p Pool, reuse: bool, key: String, sandbox: Sandbox) -> Self {
        Self {
            pool,
            reuse,
            key,
            sandbox: Some(sandbox),
        }
    }
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        self.sandbox.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Sandbox {
        self.sandbox.as_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let Some(sandbox) = self.sandbox.take() else {
            return;
        };
        if !sandbox.failed && self.reuse {
            self.pool.put(std::mem::take(&mut self.key), sandbox);
        }
    }
}
