//! Sending the audit trail as it is written: one thread in the daemon that
//! follows the chain in the store and sends what is new to each `[audit]`
//! export (OTLP, syslog). It sends committed links only, a batch at a time,
//! and remembers how far each export got in `STORE.audit-sent` after the
//! receiver took the batch: a receiver that is down gets the links later
//! (at least once; a span sent twice has the same ids), never none.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prost::Message as _;
use toolgate_engine::{Error, Result, Service};

use super::otlp;
use super::syslog::Syslog;
use crate::metrics::AuditExportCounters;

/// Links sent in one batch.
const BATCH: usize = 500;
/// How often the chain is read when nothing is new.
const POLL: Duration = Duration::from_millis(250);
/// The longest wait before a failed export is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long one OTLP request may take.
const OTLP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where links go.
enum Sink {
    Otlp {
        agent: ureq::Agent,
        endpoint: String,
        host: String,
    },
    Syslog(Syslog),
}

impl Sink {
    /// The kind of export, as metrics label it.
    fn kind(&self) -> &'static str {
        match self {
            Self::Otlp { .. } => "otlp",
            Self::Syslog(_) => "syslog",
        }
    }

    /// The receiver: how far it got is remembered by it, so a new receiver
    /// gets the whole trail.
    fn name(&self) -> String {
        match self {
            Self::Otlp { endpoint, .. } => format!("otlp {endpoint}"),
            Self::Syslog(syslog) => format!("syslog {}", syslog.url()),
        }
    }

    fn send(&mut self, links: &[(u64, String)]) -> std::result::Result<(), String> {
        match self {
            Self::Otlp {
                agent,
                endpoint,
                host,
            } => {
                let (traces, logs) = otlp::requests(links, host);
                post(
                    agent,
                    &format!("{endpoint}/v1/traces"),
                    traces.encode_to_vec(),
                )?;
                post(agent, &format!("{endpoint}/v1/logs"), logs.encode_to_vec())
            }
            Self::Syslog(syslog) => syslog.send(links),
        }
    }
}

fn post(agent: &ureq::Agent, url: &str, body: Vec<u8>) -> std::result::Result<(), String> {
    match agent
        .post(url)
        .header("Content-Type", "application/x-protobuf")
        .send(&body[..])
    {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(format!("{url}: HTTP {}", response.status())),
        Err(err) => Err(format!("{url}: {err}")),
    }
}

/// The running exporter; stopping it (drop) sends what is left first.
pub struct Shipper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Shipper {
    /// Start sending `host`'s trail to the config's exports, counting in
    /// `counters`; none when the config names none (or keeps no trail).
    pub fn start(host: Arc<Service>, counters: AuditExportCounters) -> Result<Option<Self>> {
        let (audit, sent_path) =
            host.with_config(|c| (c.audit.clone(), c.audit_sent_path(host.store_path())));
        let refuse = |message: String| Error::Config {
            path: "[audit]".into(),
            message,
        };
        let name = audit
            .host
            .clone()
            .unwrap_or_else(toolgate_engine::audit::host_name);
        let mut sinks = Vec::new();
        if let Some(endpoint) = &audit.otlp_endpoint {
            if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
                return Err(refuse(format!(
                    "otlp_endpoint = {endpoint:?}: write the collector's OTLP/HTTP base URL, \
                     e.g. http://127.0.0.1:4318"
                )));
            }
            sinks.push(Sink::Otlp {
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(OTLP_TIMEOUT))
                    .build()
                    .into(),
                endpoint: endpoint.trim_end_matches('/').to_string(),
                host: name.clone(),
            });
        }
        if let Some(url) = &audit.syslog {
            sinks.push(Sink::Syslog(Syslog::parse(url, &name).map_err(refuse)?));
        }
        if sinks.is_empty() || !audit.enabled {
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let follower = Follower {
            host,
            counters,
            sinks,
            sent_path,
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("toolgate-audit-export".into())
            .spawn(move || follower.run())
            .map_err(|err| refuse(format!("cannot start the export thread: {err}")))?;
        Ok(Some(Self {
            stop,
            thread: Some(thread),
        }))
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The export thread's state.
struct Follower {
    host: Arc<Service>,
    counters: AuditExportCounters,
    sinks: Vec<Sink>,
    sent_path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Follower {
    fn run(mut self) {
        let mut sent = read_sent(&self.sent_path);
        // Per export: when to try again after a failure, and the wait.
        let mut retry: Vec<(Instant, Duration)> =
            vec![(Instant::now(), Duration::ZERO); self.sinks.len()];
        loop {
            let stopping = self.stop.load(Ordering::Acquire);
            if stopping {
                // Whatever the daemon decided last is committed first.
                self.host.persist();
            }
            let mut more = false;
            for (sink, retry) in self.sinks.iter_mut().zip(&mut retry) {
                if Instant::now() < retry.0 && !stopping {
                    continue;
                }
                let before = sent.get(&sink.name()).copied();
                match send_next(&self.host, sink, &mut sent) {
                    Ok(links) => {
                        self.counters.sent(sink.kind(), links as u64);
                        more |= links >= BATCH;
                        *retry = (Instant::now(), Duration::ZERO);
                    }
                    Err(err) => {
                        self.counters.failed(sink.kind());
                        let wait = (retry.1 * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                        tracing::warn!(export = %sink.name(), error = %err, retry_in = ?wait, "audit export failed; the links are sent again");
                        *retry = (Instant::now() + wait, wait);
                    }
                }
                if sent.get(&sink.name()).copied() != before {
                    write_sent(&self.sent_path, &sent);
                }
            }
            if stopping && !more {
                return;
            }
            if !more {
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Send the next batch to `sink`; how many links went (a full batch: more
/// may be waiting).
fn send_next(
    host: &Service,
    sink: &mut Sink,
    sent: &mut BTreeMap<String, u64>,
) -> std::result::Result<usize, String> {
    let after = sent.get(&sink.name()).copied();
    let page = host
        .audit_links(after, BATCH)
        .map_err(|err| err.to_string())?;
    let Some((last, _)) = page.links.last() else {
        // Past the newest link (the store was replaced, or a crash lost
        // links sent before they were durable): send the kept trail again.
        if let (Some(after), Some(head)) = (after, &page.head)
            && after > head.seq
        {
            tracing::warn!(export = %sink.name(), sent_through = after, newest = head.seq, "the audit trail is behind what was sent; sending it again from its first kept link");
            sent.remove(&sink.name());
        }
        return Ok(0);
    };
    if let (Some(after), Some((first, _))) = (after, page.links.first())
        && *first > after + 1
    {
        tracing::warn!(export = %sink.name(), from = after + 1, to = first - 1, "audit links removed by retention before they were sent");
    }
    // Only what is on disk leaves: a link sent and then lost to a crash
    // would be replaced by another under the same number.
    host.persist();
    sink.send(&page.links)?;
    sent.insert(sink.name(), *last);
    Ok(page.links.len())
}

/// How far each export got; nothing (send from the first kept link) when
/// the file is missing or unreadable.
fn read_sent(path: &std::path::Path) -> BTreeMap<String, u64> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Write how far each export got (replaced whole: a crash leaves the old
/// file or the new one, and at worst links are sent again).
fn write_sent(path: &std::path::Path, sent: &BTreeMap<String, u64>) {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let written = serde_json::to_vec(sent)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&temporary, bytes))
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(err) = written {
        tracing::warn!(path = %path.display(), error = %err, "cannot record how far the audit export got");
    }
}
