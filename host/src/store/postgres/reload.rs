//! Fleet reload over `LISTEN`/`NOTIFY`: a host that reloads tells the
//! others on channel `toolgate_reload`; each of them reloads from its own
//! config before its next decision. The config and plugin files themselves
//! reach every host the way the operator deploys them (the same files, a
//! shared directory); sha256 pins still decide what may load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator as _;

use super::Pool;

/// The notification channel.
const CHANNEL: &str = "toolgate_reload";
/// How often the listener checks whether its store is gone.
const POLL: Duration = Duration::from_millis(200);

/// This host's subscription to the fleet's reloads.
pub(super) struct Listener {
    /// This host's name on the channel, so it ignores its own announcements.
    id: String,
    requested: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub(super) fn start(pool: Arc<Pool>) -> Result<Self, String> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
        let id = hex::encode(bytes);
        // The first subscription is made here, so a store that opens is one
        // that follows the fleet.
        let first = subscribe(&pool)?;
        let requested = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (id, requested, stop) = (id.clone(), requested.clone(), stop.clone());
            std::thread::Builder::new()
                .name("toolgate-pg-reloads".into())
                .spawn(move || follow(&pool, first, &id, &requested, &stop))
                .map_err(|e| e.to_string())?
        };
        Ok(Self {
            id,
            requested,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn announce(&self, pool: &Pool) -> crate::Result<()> {
        pool.get()?
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &self.id])
            .map(drop)
            .map_err(|e| pool.error(e))
    }

    pub(super) fn requested(&self) -> bool {
        self.requested.swap(false, Ordering::AcqRel)
    }
}

/// A connection listening on the channel.
fn subscribe(pool: &Pool) -> Result<postgres::Client, String> {
    let mut client = pool.connect().map_err(|e| super::describe(&e))?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| super::describe(&e))?;
    Ok(client)
}

/// Flag every other host's announcement until told to stop. A lost
/// connection is re-made; since announcements may have been missed
/// meanwhile, a reload is requested once it is back.
fn follow(
    pool: &Pool,
    first: postgres::Client,
    id: &str,
    requested: &AtomicBool,
    stop: &AtomicBool,
) {
    let mut client = Some(first);
    while !stop.load(Ordering::Acquire) {
        let Some(listening) = client.as_mut() else {
            std::thread::sleep(POLL);
            if let Ok(again) = subscribe(pool) {
                tracing::info!(
                    "the fleet-reload listener is back; reloading in case a change was missed"
                );
                requested.store(true, Ordering::Release);
                client = Some(again);
            }
            continue;
        };
        let heard = listening
            .notifications()
            .timeout_iter(POLL)
            .next()
            .map(|note| note.is_some_and(|n| n.payload() != id));
        match heard {
            Ok(true) => requested.store(true, Ordering::Release),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "the fleet-reload listener lost its connection; reconnecting");
                client = None;
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
