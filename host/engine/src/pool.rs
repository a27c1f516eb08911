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
//!
//! A call with no warm instance takes a *spare*: an instance opened ahead of
//! need on the chores thread (`chores.rs`) that has served no call, so it
//! carries nothing of any user and may go to anyone. The instances the pool
//! lets go are dropped on that thread too.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::chores::ChoreQueue;
use crate::config::Isolation;
use crate::request::ToolRequest;
use crate::runtime::{PolicyFailure, PolicyInstance};

/// Idle instances one plugin version keeps, over all keys; past it the
/// least recently returned goes. Enough for 64 agents taking turns to find
/// theirs still warm; the engine's slots are sized from it (see
/// [`crate::Config::instance_slots`]).
pub(crate) const MAX_IDLE: u32 = 96;

/// The key of calls that carry no user (operator commands).
const OPERATOR: &str = "\0operator";

/// Idle instances of one plugin version: warm ones by key, and spares.
pub(crate) struct Pool {
    /// Oldest first.
    idle: Mutex<Vec<(String, PolicyInstance)>>,
    /// Opened instances that have served no call.
    spares: Mutex<Vec<PolicyInstance>>,
    /// How many spares to keep (`limits.spare_instances`).
    spare_target: usize,
    /// A refill is queued or running.
    refilling: AtomicBool,
    /// Making a spare failed: this version makes no more, and calls make
    /// their own fresh instances (whose failures they report).
    spares_failed: AtomicBool,
    /// Instances that have served a call so far (fresh or spare).
    created: AtomicU64,
    /// Of those, spares.
    from_spares: AtomicU64,
    /// Where instances the pool lets go are dropped.
    chores: ChoreQueue,
}

impl Pool {
    /// A pool keeping `spare_target` spares and dropping the instances it
    /// lets go through `chores`.
    pub(crate) fn new(spare_target: usize, chores: ChoreQueue) -> Self {
        Self {
            idle: Mutex::default(),
            spares: Mutex::default(),
            spare_target,
            refilling: AtomicBool::new(false),
            spares_failed: AtomicBool::new(false),
            created: AtomicU64::new(0),
            from_spares: AtomicU64::new(0),
            chores,
        }
    }

    /// An idle instance for `key`, the most recently returned first.
    pub(crate) fn take(&self, key: &str) -> Option<PolicyInstance> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let at = idle.iter().rposition(|(k, _)| k == key)?;
        Some(idle.remove(at).1)
    }

    /// A spare, the oldest first (it has waited longest).
    pub(crate) fn take_spare(&self) -> Option<PolicyInstance> {
        let mut spares = self.spares.lock().unwrap_or_else(|p| p.into_inner());
        (!spares.is_empty()).then(|| spares.remove(0))
    }

    fn put(&self, key: String, sandbox: PolicyInstance) {
        let evicted = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.push((key, sandbox));
            (idle.len() > MAX_IDLE as usize).then(|| idle.remove(0).1)
        };
        if let Some(evicted) = evicted {
            self.retire(evicted);
        }
    }

    /// Drop an instance that will not serve again: on the chores thread
    /// when this version keeps spares (the thread is busy refilling them
    /// then anyway), else here. Waking an idle thread for each drop costs
    /// the caller more than the drop: a fresh composed decision with no
    /// spares took 57 µs (p50) dropping inline and 84 µs handing drops over.
    fn retire(&self, sandbox: PolicyInstance) {
        if self.spare_target > 0 {
            self.chores.drop_later(sandbox);
        } else {
            drop(sandbox);
        }
    }

    /// Whether a refill should be queued now; if so, marks one as queued.
    pub(crate) fn wants_spares(&self) -> bool {
        self.spare_target > 0
            && !self.spares_failed.load(Ordering::Relaxed)
            && !self.refilling.swap(true, Ordering::Relaxed)
    }

    /// The refill queued after [`Pool::wants_spares`] did not happen.
    pub(crate) fn refill_dropped(&self) {
        self.refilling.store(false, Ordering::Relaxed);
    }

    /// Make spares with `make` up to the target. A failure stops this
    /// version's spares for good, and is returned for the caller to log:
    /// calls then make their own instances and report what goes wrong.
    pub(crate) fn refill(
        &self,
        mut make: impl FnMut() -> Result<PolicyInstance, PolicyFailure>,
    ) -> Result<(), PolicyFailure> {
        // A spare taken from here on queues the next refill.
        self.refilling.store(false, Ordering::Relaxed);
        while self.spare_count() < self.spare_target {
            let spare =
                make().inspect_err(|_| self.spares_failed.store(true, Ordering::Relaxed))?;
            self.spares
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(spare);
        }
        Ok(())
    }

    /// Spares idle now.
    pub(crate) fn spare_count(&self) -> usize {
        self.spares.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Count an instance starting to serve calls.
    pub(crate) fn created_one(&self, spare: bool) {
        self.created.fetch_add(1, Ordering::Relaxed);
        if spare {
            self.from_spares.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Instances that have served calls so far, and how many of them were
    /// spares.
    pub(crate) fn created(&self) -> (u64, u64) {
        (
            self.created.load(Ordering::Relaxed),
            self.from_spares.load(Ordering::Relaxed),
        )
    }
}

/// Which warm instances a call may use.
pub(crate) fn instance_key(isolation: Isolation, request: Option<&ToolRequest>) -> String {
    match (request, isolation) {
        (None, _) => OPERATOR.into(),
        // Length-prefixed, so no two (user, session) pairs meet in one key
        // whatever the ids hold, and none meets the operator's.
        (Some(r), Isolation::User) => format!("{}:{}", r.user_id.len(), r.user_id),
        (Some(r), Isolation::Session) => {
            format!("{}:{}{}", r.user_id.len(), r.user_id, r.session_id)
        }
    }
}

/// An instance on loan: it goes back to its plugin's pool when dropped,
/// unless it failed or the plugin does not reuse instances.
pub(crate) struct Pooled<'p> {
    pool: &'p Pool,
    /// Whether the plugin keeps instances warm at all.
    reuse: bool,
    key: String,
    sandbox: Option<PolicyInstance>,
}

impl<'p> Pooled<'p> {
    pub(crate) fn new(pool: &'p Pool, reuse: bool, key: String, sandbox: PolicyInstance) -> Self {
        Self {
            pool,
            reuse,
            key,
            sandbox: Some(sandbox),
        }
    }
}

impl std::ops::Deref for Pooled<'_> {
    type Target = PolicyInstance;
    fn deref(&self) -> &PolicyInstance {
        self.sandbox.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut PolicyInstance {
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
        } else {
            self.pool.retire(sandbox);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chores::Chores;

    #[test]
    fn no_two_callers_share_an_instance_key() {
        let key = |isolation, user: &str, session: &str| {
            let mut request = ToolRequest::new("t", serde_json::json!({}));
            request.user_id = user.into();
            request.session_id = session.into();
            instance_key(isolation, Some(&request))
        };
        for isolation in [Isolation::Session, Isolation::User] {
            assert_ne!(
                key(isolation, "alice", "x\0y"),
                key(isolation, "alice\0x", "y")
            );
            assert_ne!(
                key(isolation, "", "\0operator"),
                instance_key(isolation, None)
            );
        }
        assert_ne!(
            key(Isolation::Session, "ab", "c"),
            key(Isolation::Session, "a", "bc")
        );
    }

    #[test]
    fn one_refill_is_queued_at_a_time_and_a_failed_spare_stops_them() {
        let chores = Chores::start().unwrap();
        let pool = Pool::new(2, chores.queue().clone());
        assert!(pool.wants_spares(), "the first request queues a refill");
        assert!(!pool.wants_spares(), "not a second while one is queued");
        pool.refill_dropped();
        assert!(
            pool.wants_spares(),
            "a refill that never ran does not block the next"
        );
        let mut attempts = 0;
        let failed = pool.refill(|| {
            attempts += 1;
            Err(PolicyFailure::Other("open trapped".into()))
        });
        assert!(failed.is_err());
        assert_eq!((attempts, pool.spare_count()), (1, 0));
        assert!(!pool.wants_spares(), "no spares after one failed");
    }

    #[test]
    fn a_pool_without_spares_never_queues_a_refill() {
        let chores = Chores::start().unwrap();
        assert!(!Pool::new(0, chores.queue().clone()).wants_spares());
    }
}
