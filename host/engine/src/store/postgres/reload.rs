//! Fleet reload over `LISTEN`/`NOTIFY`: a host that reloads tells the
//! others on channel `toolgate_reload`; each of them reloads from its own
//! config before its next decision. The config and plugin files themselves
//! reach every host the way the operator deploys them (the same files, a
//! shared directory); sha256 pins still decide what may load.
//!
//! The payload is JSON, `{"from": HOST-ID, "pins": {PLUGIN: "oci://…@sha256:…"}}`:
//! the digest each registry plugin resolved to on the announcing host, so
//! a tag is resolved once for the whole fleet. A bare host id (an older
//! host's announcement) is a reload with no pins.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::{Client, PgError, Queries as _};

use super::Pool;
use crate::error::StoreCause;
use crate::store::FleetPins;

/// The notification channel.
const CHANNEL: &str = "toolgate_reload";
/// How often the listener checks whether its store is gone.
const POLL: Duration = Duration::from_millis(200);
/// PostgreSQL's limit on a notification's payload is 8000 bytes; past it
/// the pins are left out and every host resolves its own.
const MAX_PAYLOAD: usize = 7900;

/// What one announcement says.
#[derive(serde::Serialize, serde::Deserialize)]
struct Announcement {
    from: String,
    #[serde(default)]
    pins: FleetPins,
}

/// This host's subscription to the fleet's reloads.
pub(super) struct Listener {
    /// This host's name on the channel, so it ignores its own announcements.
    id: String,
    /// The pins of the announcements heard since the last reload (newer
    /// win), once one was heard.
    requested: Arc<Mutex<Option<FleetPins>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub(super) fn start(pool: Arc<Pool>) -> Result<Self, StoreCause> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes)?;
        let id = hex::encode(bytes);
        // The first subscription is made here, so a store that opens is one
        // that follows the fleet.
        let first = subscribe(&pool)?;
        let requested = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (id, requested, stop) = (id.clone(), requested.clone(), stop.clone());
            std::thread::Builder::new()
                .name("toolgate-pg-reloads".into())
                .spawn(move || follow(&pool, first, &id, &requested, &stop))?
        };
        Ok(Self {
            id,
            requested,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn announce(&self, pool: &Pool, pins: &FleetPins) -> crate::Result<()> {
        let mut announcement = Announcement {
            from: self.id.clone(),
            pins: pins.clone(),
        };
        let mut payload = serde_json::to_string(&announcement).expect("JSON serializes");
        if payload.len() > MAX_PAYLOAD {
            tracing::warn!(
                "too many registry plugins to announce their digests; every host resolves its own"
            );
            announcement.pins.clear();
            payload = serde_json::to_string(&announcement).expect("JSON serializes");
        }
        pool.get()?
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
            .map(drop)
            .map_err(|e| pool.error(e))
    }

    pub(super) fn requested(&self) -> Option<FleetPins> {
        self.requested
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// A connection listening on the channel.
fn subscribe(pool: &Pool) -> Result<Client, PgError> {
    let mut client = pool.connect()?;
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    Ok(client)
}

/// Flag every other host's announcement until told to stop. A lost
/// connection is re-made; since announcements may have been missed
/// meanwhile, a reload is requested once it is back.
fn follow(
    pool: &Pool,
    first: Client,
    id: &str,
    requested: &Mutex<Option<FleetPins>>,
    stop: &AtomicBool,
) {
    let request = |pins: FleetPins| {
        let mut slot = requested.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(FleetPins::new).extend(pins);
    };
    let mut client = Some(first);
    while !stop.load(Ordering::Acquire) {
        let Some(listening) = client.as_mut() else {
            std::thread::sleep(POLL);
            if let Ok(again) = subscribe(pool) {
                tracing::info!(
                    "the fleet-reload listener is back; reloading in case a change was missed"
                );
                request(FleetPins::new());
                client = Some(again);
            }
            continue;
        };
        let heard = listening
            .notification(POLL)
            .map(|note| note.map(|n| announcement(n.payload())));
        match heard {
            Ok(Some(announcement)) if announcement.from != id => request(announcement.pins),
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "the fleet-reload listener lost its connection; reconnecting");
                client = None;
            }
        }
    }
}

/// An announcement's payload, or an older host's bare id.
fn announcement(payload: &str) -> Announcement {
    serde_json::from_str(payload).unwrap_or_else(|_| Announcement {
        from: payload.to_string(),
        pins: FleetPins::new(),
    })
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
