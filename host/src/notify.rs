//! Notifications of new pauses: a signed JSON POST to each configured
//! webhook, so a person hears that a call waits for them.
//!
//! A decision never waits for a notification: the daemon hands the pause
//! to a bounded queue per webhook (full: the notification is dropped and
//! counted) and a worker thread per webhook delivers it, retrying with
//! backoff. Each pause is announced once, however often the paused call
//! is retried.
//!
//! The body is signed like this: header `X-Toolgate-Signature:
//! t=UNIX_SECONDS,v1=HEX`, where HEX is HMAC-SHA256 with the key from
//! `[notify] secret_env` over `UNIX_SECONDS.BODY`. A receiver recomputes
//! it, compares in constant time and rejects old timestamps (replays).

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::config::NotifyConfig;
use crate::gates::PendingGate;
use crate::{Error, Result};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "X-Toolgate-Signature";
/// Notifications waiting per webhook before new ones are dropped.
const QUEUE: usize = 256;
/// Request ids remembered to announce each pause once.
const REMEMBERED: usize = 4096;
/// The first retry's wait; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// One delivery attempt may take this long.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends notifications of new pauses.
pub struct Notifier {
    queues: Vec<(String, SyncSender<String>)>,
    announced: Mutex<Announced>,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&str> = self.queues.iter().map(|(url, _)| url.as_str()).collect();
        f.debug_struct("Notifier").field("webhooks", &urls).finish()
    }
}

#[derive(Default)]
struct Announced {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl Announced {
    /// Whether `id` is new (and remember it).
    fn first_time(&mut self, id: &str) -> bool {
        if !self.ids.insert(id.to_string()) {
            return false;
        }
        self.order.push_back(id.to_string());
        if self.order.len() > REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        true
    }
}

impl Notifier {
    /// Start a worker per webhook; `None` without webhooks. The signing key
    /// is read from the environment once, here.
    pub fn start(config: &NotifyConfig) -> Result<Option<Self>> {
        if config.webhooks.is_empty() {
            return Ok(None);
        }
        let name = config.secret_env.as_deref().unwrap_or_default();
        let key = std::env::var(name).ok().filter(|k| !k.is_empty());
        let Some(key) = key else {
            return Err(Error::Config {
                path: "[notify]".into(),
                message: format!(
                    "the signing key is missing: set the environment variable {name} (see \
                     notify.secret_env) where the daemon starts"
                ),
            });
        };
        let mut queues = Vec::new();
        for url in &config.webhooks {
            let (sender, receiver) = std::sync::mpsc::sync_channel(QUEUE);
            let worker = Worker {
                url: url.clone(),
                key: key.clone().into_bytes(),
                attempts: config.attempts,
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(ATTEMPT_TIMEOUT))
                    .build()
                    .into(),
            };
            std::thread::Builder::new()
                .name("toolgate-notify".into())
                .spawn(move || worker.run(receiver))
                .map_err(|err| Error::Config {
                    path: "[notify]".into(),
                    message: format!("cannot start the notification thread: {err}"),
                })?;
            queues.push((url.clone(), sender));
        }
        Ok(Some(Self {
            queues,
            announced: Mutex::default(),
            dropped: AtomicU64::new(0),
        }))
    }

    /// Announce a new pause (once per request id); never blocks.
    pub fn paused(&self, gate: &PendingGate, reason: Option<&str>) {
        let first = self
            .announced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first_time(&gate.request_id);
        if !first {
            return;
        }
        let body = payload(gate, reason).to_string();
        for (url, queue) in &self.queues {
            match queue.try_send(body.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%url, "notification queue full; a pause was not announced");
                }
            }
        }
    }

    /// Notifications dropped because a webhook's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What a webhook receives for a pause.
pub fn payload(gate: &PendingGate, reason: Option<&str>) -> Value {
    json!({
        "event": "pause",
        "request_id": gate.request_id,
        "policy": gate.policy,
        "reason": reason,
        "user_id": gate.user_id,
        "thread_id": gate.thread_id,
        "session_id": gate.session_id,
        "channel": gate.source_channel,
        "tool": gate.tool,
        "arguments": gate.arguments,
        "pause": gate.pause,
        "created_at_ms": gate.created_at_ms,
        "expires_at_ms": gate.expires_at_ms,
        "approve_with": format!(
            "toolgate gates resolve --user {} --thread {} --request-id {}",
            gate.user_id, gate.thread_id, gate.request_id
        ),
    })
}

/// The signature header's value for `body` at `unix_seconds`.
pub fn signature(key: &[u8], unix_seconds: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(format!("{unix_seconds}.{body}").as_bytes());
    format!(
        "t={unix_seconds},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

struct Worker {
    url: String,
    key: Vec<u8>,
    attempts: u32,
    agent: ureq::Agent,
}

impl Worker {
    fn run(self, queue: Receiver<String>) {
        for body in queue {
            self.deliver(&body);
        }
    }

    fn deliver(&self, body: &str) {
        let mut wait = FIRST_BACKOFF;
        for attempt in 1..=self.attempts {
            let now = crate::now_ms() / 1000;
            let sent = self
                .agent
                .post(&self.url)
                .header("Content-Type", "application/json")
                .header(SIGNATURE_HEADER, &signature(&self.key, now, body))
                .send(body);
            let failure = match sent {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => format!("HTTP {}", response.status()),
                Err(err) => err.to_string(),
            };
            tracing::warn!(url = %self.url, attempt, error = %failure, "webhook failed");
            if attempt < self.attempts {
                std::thread::sleep(wait);
                wait = (wait * 2).min(MAX_BACKOFF);
            }
        }
        tracing::error!(url = %self.url, "gave up announcing a pause");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_time_and_body() {
        let a = signature(b"key", 1_700_000_000, "{}");
        assert!(a.starts_with("t=1700000000,v1="), "{a}");
        assert_ne!(a, signature(b"key", 1_700_000_001, "{}"));
        assert_ne!(a, signature(b"key", 1_700_000_000, "{ }"));
        assert_ne!(a, signature(b"other", 1_700_000_000, "{}"));
    }

    #[test]
    fn each_pause_is_announced_once() {
        let mut announced = Announced::default();
        assert!(announced.first_time("r1"));
        assert!(!announced.first_time("r1"));
        for n in 0..REMEMBERED {
            announced.first_time(&format!("x{n}"));
        }
        assert!(announced.ids.len() <= REMEMBERED);
    }
}
