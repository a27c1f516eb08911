//! Fair shares between the OS users one daemon serves (system mode's
//! tenants, see [`crate::tenant`]): how many connections each may hold
//! open, and how much of the daemon's capacity to run policies one may
//! take, so that one user's flood leaves room for the others' decisions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Counts per peer uid, under a cap: one user's hundreds of idle or slow
/// connections cannot take the daemon's file descriptors and memory from
/// the others.
pub(super) struct PerUser {
    open: Mutex<HashMap<u32, usize>>,
    pub(super) limit: usize,
}

impl PerUser {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            open: Default::default(),
            limit: limit.max(1),
        }
    }

    /// Count a connection of `uid`, unless it holds the most it may; it
    /// is counted until the guard drops.
    pub(super) fn open(&self, uid: u32) -> Option<Held<'_>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let held = open.entry(uid).or_default();
        if *held >= self.limit {
            return None;
        }
        *held += 1;
        Some(Held { users: self, uid })
    }
}

/// One counted connection.
pub(super) struct Held<'a> {
    users: &'a PerUser,
    uid: u32,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut open = self.users.open.lock().unwrap_or_else(|p| p.into_inner());
        count_down(&mut open, self.uid);
    }
}

/// One fewer of `uid`'s in `counts`.
fn count_down(counts: &mut HashMap<u32, usize>, uid: u32) {
    if let Some(held) = counts.get_mut(&uid) {
        *held -= 1;
        if *held == 0 {
            counts.remove(&uid);
        }
    }
}

/// The requests running policies at once (`[daemon] max_in_flight`), and
/// whose they are. A user with none running may take any free slot; one
/// already running some may take another only while more than a quarter
/// of them stays free. So a user flooding the daemon gets `busy` (its
/// client retries) and the next user's first request finds a slot.
pub(super) struct InFlight {
    max: usize,
    reserve: usize,
    running: Arc<Mutex<Running>>,
}

#[derive(Default)]
struct Running {
    total: usize,
    per_user: HashMap<u32, usize>,
}

/// One running request's slot, freed when dropped.
pub(super) struct Slot {
    running: Arc<Mutex<Running>>,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.total -= 1;
        count_down(&mut running.per_user, self.uid);
    }
}

impl InFlight {
    pub(super) fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            max,
            reserve: max / 4,
            running: Default::default(),
        }
    }

    /// How many run now.
    pub(super) fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).total
    }

    /// A slot for one of `uid`'s requests, or why there is none.
    pub(super) fn take(&self, uid: u32) -> Result<Slot, String> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let free = self.max - running.total;
        let own = running.per_user.get(&uid).copied().unwrap_or(0);
        if free == 0 {
            return Err(format!(
                "{} requests are in flight (daemon.max_in_flight); retry shortly",
                self.max
            ));
        }
        if own > 0 && free <= self.reserve {
            return Err(format!(
                "this user (uid {uid}) has {own} requests in flight, and the {free} slots left \
                 are kept for other users (daemon.max_in_flight); retry shortly"
            ));
        }
        running.total += 1;
        *running.per_user.entry(uid).or_default() += 1;
        Ok(Slot {
            running: Arc::clone(&self.running),
            uid,
        })
    }
}

/// The threads serving one user's connections at once: past it, that
/// user's connections with a request ready wait their turn on the runtime,
/// holding no thread. A user flooding the daemon from hundreds of
/// connections then keeps only a few threads busy, and another user's
/// hook finds a thread, and most of the CPU, at once.
pub(super) struct Turns {
    per_user: usize,
    users: Mutex<HashMap<u32, Arc<tokio::sync::Semaphore>>>,
}

impl Turns {
    pub(super) fn new(per_user: usize) -> Self {
        Self {
            per_user: per_user.max(1),
            users: Default::default(),
        }
    }

    /// A turn for one of `uid`'s connections, once one is free.
    pub(super) async fn wait(&self, uid: u32) -> tokio::sync::OwnedSemaphorePermit {
        let turns = {
            let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
            let turns = users
                .entry(uid)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.per_user)));
            Arc::clone(turns)
        };
        turns
            .acquire_owned()
            .await
            .expect("a user's turns are never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_user_leaves_a_quarter_for_the_others() {
        let slots = InFlight::new(8);
        let flood: Vec<Slot> = std::iter::from_fn(|| slots.take(1).ok()).collect();
        assert_eq!(flood.len(), 6, "8 less the reserve of 2");
        let why = slots.take(1).err().unwrap();
        assert!(why.contains("kept for other users"), "{why}");
        // Each other user's first request finds a slot, until none is left.
        let other = [slots.take(2).unwrap(), slots.take(3).unwrap()];
        let full = slots.take(4).err().unwrap();
        assert!(full.contains("8 requests are in flight"), "{full}");
        assert_eq!(slots.running(), 8);
        drop(flood);
        drop(other);
        assert_eq!(slots.running(), 0);
        assert!(slots.take(1).is_ok());
    }

    #[test]
    fn connections_are_capped_per_user() {
        let users = PerUser::new(2);
        let held = [users.open(1).unwrap(), users.open(1).unwrap()];
        assert!(users.open(1).is_none());
        assert!(users.open(2).is_some());
        drop(held);
        assert!(users.open(1).is_some());
    }
}
