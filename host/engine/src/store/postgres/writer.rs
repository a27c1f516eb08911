//! The host's one writer of events and decision-log entries: batches from a
//! bounded queue, one transaction per batch, trimming each policy's stream to
//! its quota and the log to its retention, and sweeping on schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::client::{Client, PgError, Queries as _};

use super::{Pool, describe, i64_of};
use crate::audit::LinkHead;
use crate::decision::Verdict;
use crate::decision_log::LogEntry;
use crate::error::{StoreCause, with_causes};
use crate::store::hygiene::{Retention, SweepReport};
use crate::store::{AuditWriter, LogBuffer, Settings, StoredEvent};

/// The most queued writes committed in one transaction.
const BATCH: usize = 256;

pub(super) enum Message {
    Event(Box<StoredEvent>),
    /// Answer once everything queued before it is committed.
    Flush(Sender<()>),
    /// Take the decision log's waiting entries now (see `LogBuffer`).
    Drain,
}

/// How often the writer looks for decision-log entries when nothing else
/// wakes it.
const TICK: Duration = Duration::from_millis(50);

pub(super) struct Writer {
    pub pool: Arc<Pool>,
    pub settings: Settings,
    pub log_buffer: Arc<LogBuffer>,
    pub dropped: Arc<AtomicU64>,
}

/// A failed batch as the log says it: PostgreSQL's refusal in its own
/// words, with its SQLSTATE ([`describe`]); anything else with its causes.
fn said(err: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    match err.downcast_ref::<PgError>() {
        Some(pg) => describe(pg),
        None => with_causes(err),
    }
}

/// How a verdict is spelled in the `decisions.verdict` column.
pub(super) fn verdict_name(verdict: &Verdict) -> Result<String, String> {
    match serde_json::to_value(verdict) {
        Ok(serde_json::Value::String(name)) => Ok(name),
        other => Err(format!("unexpected verdict encoding: {other:?}")),
    }
}

impl Writer {
    pub(super) fn run(self, queue: Receiver<Message>) {
        let mut last_sweep = Instant::now();
        let mut scratch = Vec::new();
        let mut audit = AuditWriter::default();
        loop {
            let interval = self.retention().sweep_interval;
            let (first, closing) = match queue.recv_timeout(TICK) {
                Ok(message) => (Some(message), false),
                Err(RecvTimeoutError::Timeout) => (None, false),
                Err(RecvTimeoutError::Disconnected) => (None, true),
            };
            let mut batch = Vec::new();
            let mut flushes = Vec::new();
            let mut next = first;
            while let Some(message) = next.take() {
                match message {
                    Message::Flush(done) => flushes.push(done),
                    // Every pass takes the log's entries.
                    Message::Drain => {}
                    other => batch.push(other),
                }
                if batch.len() < BATCH {
                    next = queue.try_recv().ok();
                }
            }
            let decisions = self.log_buffer.take(&mut scratch);
            if !batch.is_empty() || !decisions.is_empty() || self.settings.audit.has_waiting() {
                let written = (batch.len() + decisions.len()) as u64;
                if let Err(err) = self.commit(batch, &decisions, &mut audit) {
                    audit.failed(&self.settings.audit);
                    self.dropped.fetch_add(written, Ordering::Relaxed);
                    tracing::error!(error = %said(&*err), written, "store writes lost: the batch could not be committed");
                }
            }
            if last_sweep.elapsed() >= interval {
                last_sweep = Instant::now();
                let retention = self.retention();
                let swept = self
                    .pool
                    .for_maintenance()
                    .map_err(|e| e.report())
                    .and_then(|mut c| {
                        sweep(&mut c, &retention, crate::now_ms()).map_err(|e| describe(&e))
                    });
                if let Err(err) = swept {
                    tracing::warn!(error = %err, "store sweep failed; it runs again later");
                }
            }
            for done in flushes {
                let _ = done.send(());
            }
            if closing {
                return;
            }
        }
    }

    fn retention(&self) -> Retention {
        self.settings.retention()
    }

    fn commit(
        &self,
        batch: Vec<Message>,
        decisions: &[LogEntry],
        audit: &mut AuditWriter,
    ) -> Result<(), StoreCause> {
        let mut client = self.pool.get()?;
        let mut txn = client.transaction()?;
        let mut policies = std::collections::BTreeSet::new();
        for message in batch {
            match message {
                Message::Event(event) => {
                    let body = serde_json::to_vec(&event).expect("events always serialise");
                    txn.execute(
                        "INSERT INTO events (policy, session_id, tool, kind, at_ms, body) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                        &[
                            &event.policy,
                            &event.session_id,
                            &event.tool,
                            &event.kind,
                            &i64_of(event.at_ms),
                            &body,
                        ],
                    )?;
                    policies.insert(event.policy);
                }
                Message::Flush(_) | Message::Drain => unreachable!("answered by the loop"),
            }
        }
        let logged = !decisions.is_empty();
        let mut chained = Vec::with_capacity(decisions.len());
        for entry in decisions {
            let body = serde_json::to_vec(entry).expect("log entries always serialise");
            txn.execute(
                "INSERT INTO decisions (at_ms, session_id, tool, verdict, body) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &i64_of(entry.at_ms),
                    &entry.session_id,
                    &entry.tool,
                    &verdict_name(&entry.verdict)?,
                    &body,
                ],
            )?;
            chained.push((entry.at_ms, body));
        }
        chain(&mut txn, &self.settings, audit, chained)?;
        let retention = self.retention();
        for policy in policies {
            let quota = retention
                .events_max
                .get(&policy)
                .copied()
                .unwrap_or(retention.default_events_max);
            // Keep the newest `quota` events of the policy.
            txn.execute(
                "DELETE FROM events WHERE policy = $1 AND seq <= \
                 (SELECT seq FROM events WHERE policy = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                &[&policy, &i64_of(quota)],
            )?;
        }
        if logged {
            let config = self.settings.log();
            let cutoff = crate::now_ms().saturating_sub(config.max_age_secs.saturating_mul(1000));
            txn.execute(
                "DELETE FROM decisions WHERE at_ms < $1 OR seq <= \
                 (SELECT seq FROM decisions ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                &[&i64_of(cutoff), &i64_of(config.max_entries)],
            )?;
        }
        txn.commit()?;
        audit.committed();
        Ok(())
    }
}

/// Chain `decisions` (decided at, log bytes) and the records waiting for
/// the chain inside `txn`, apply the chain's retention, and sign its head.
fn chain(
    txn: &mut super::client::Transaction<'_>,
    settings: &Settings,
    audit: &mut AuditWriter,
    decisions: Vec<(u64, Vec<u8>)>,
) -> Result<(), StoreCause> {
    let Some(host) = settings.audit.settings().map(|s| s.host) else {
        return Ok(());
    };
    if !settings.audit.has_waiting() && decisions.is_empty() {
        return Ok(());
    }
    // Processes of one host (several `serve` on one machine) append to one
    // chain: one at a time, each from the newest link committed.
    txn.execute(
        "SELECT pg_advisory_xact_lock(hashtext('toolgate-audit:' || $1))",
        &[&host],
    )?;
    audit.forget_end();
    let newest = || -> Result<_, PgError> {
        let row = txn.query_opt(
            "SELECT seq, link FROM audit WHERE host = $1 ORDER BY seq DESC LIMIT 1",
            &[&host],
        )?;
        let last = row.map(|row| (row.get::<_, i64>(0) as u64, row.get(1)));
        let head = txn
            .query_opt("SELECT head FROM audit_heads WHERE host = $1", &[&host])?
            .and_then(|row| serde_json::from_slice(&row.get::<_, Vec<u8>>(0)).ok());
        Ok((last, head))
    };
    let Some(mut pass) = audit.pass(&settings.audit, &decisions, newest)? else {
        return Ok(());
    };
    let insert = |txn: &mut super::client::Transaction<'_>, seq: u64, bytes: &[u8]| {
        let at_ms = serde_json::from_slice::<LinkHead>(bytes).map_or(0, |l| l.at_ms);
        txn.execute(
            "INSERT INTO audit (host, seq, at_ms, link) VALUES ($1, $2, $3, $4)",
            &[&host, &i64_of(seq), &i64_of(at_ms), &bytes],
        )
        .map(drop)
    };
    for (seq, bytes) in &pass.links {
        insert(txn, *seq, bytes)?;
    }
    let (newest, _) = pass.links.last().expect("a pass has links");
    if let Some((kept, removed)) = retain(txn, &host, &pass.settings, *newest)? {
        let kept = kept.as_ref().map(|(seq, prev)| (*seq, prev.as_str()));
        if let Some((seq, bytes)) = audit.prune(&mut pass, kept, removed) {
            insert(txn, seq, &bytes)?;
        }
    }
    let head = serde_json::to_vec(&pass.head).map_err(|e| format!("the audit head: {e}"))?;
    txn.execute(
        "INSERT INTO audit_heads (host, head) VALUES ($1, $2) \
         ON CONFLICT (host) DO UPDATE SET head = EXCLUDED.head",
        &[&host, &head],
    )?;
    Ok(())
}

/// Remove `host`'s links over the count (see `AuditSettings::excess`;
/// numbered without gaps, so the count is the span up to `newest`) and past
/// their age (rare: only the first link's age is read), from the front;
/// the first kept link's number and `prev` and how many went, if any did.
fn retain(
    txn: &mut super::client::Transaction<'_>,
    host: &str,
    settings: &crate::audit::AuditSettings,
    newest: u64,
) -> Result<Option<crate::audit::Pruned>, StoreCause> {
    let first = txn
        .query_opt(
            "SELECT seq, at_ms FROM audit WHERE host = $1 ORDER BY seq LIMIT 1",
            &[&host],
        )?
        .map(|row| (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64));
    let Some((first, at_ms)) = first else {
        return Ok(None);
    };
    let span = newest.saturating_add(1).saturating_sub(first);
    let mut keep_from = first.saturating_add(settings.excess(span));
    let cutoff = settings.cutoff_ms(crate::now_ms());
    if at_ms < cutoff {
        // Up to the first young link: never one from the middle.
        let young: i64 = txn
            .query_one(
                "SELECT COALESCE(min(seq), $2) FROM audit WHERE host = $1 AND at_ms >= $3",
                &[&host, &i64_of(newest + 1), &i64_of(cutoff)],
            )?
            .get(0);
        keep_from = keep_from.max(young as u64);
    }
    if keep_from <= first {
        return Ok(None);
    }
    let removed = txn.execute(
        "DELETE FROM audit WHERE host = $1 AND seq < $2",
        &[&host, &i64_of(keep_from)],
    )?;
    let kept = txn
        .query_opt(
            "SELECT seq, link FROM audit WHERE host = $1 ORDER BY seq LIMIT 1",
            &[&host],
        )?
        .map(|row| {
            let link: Vec<u8> = row.get(1);
            serde_json::from_slice::<LinkHead>(&link).map(|l| (row.get::<_, i64>(0) as u64, l.prev))
        })
        .transpose()
        .map_err(|e| format!("the first kept audit link cannot be read: {e}"))?;
    Ok(Some((kept, removed)))
}

/// Remove what is past its retention: old events, expired gates and
/// resolutions, turn counters of idle sessions.
pub(super) fn sweep(
    client: &mut Client,
    retention: &Retention,
    now_ms: u64,
) -> Result<SweepReport, PgError> {
    let age = |d: std::time::Duration| i64_of(now_ms.saturating_sub(d.as_millis() as u64));
    let mut txn = client.transaction()?;
    let events = txn.execute(
        "DELETE FROM events WHERE at_ms < $1",
        &[&age(retention.events_max_age)],
    )?;
    let gates = txn.execute(
        "DELETE FROM gates WHERE expires_at_ms <= $1",
        &[&i64_of(now_ms)],
    )?;
    let resolutions = txn.execute(
        "DELETE FROM resolutions WHERE expires_at_ms <= $1",
        &[&i64_of(now_ms)],
    )?;
    let sessions = txn.execute(
        "DELETE FROM turns WHERE seen_at_ms < $1",
        &[&age(retention.sessions_max_idle)],
    )?;
    txn.commit()?;
    Ok(SweepReport {
        events,
        gates,
        resolutions,
        sessions,
    })
}
