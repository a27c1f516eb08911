//! Replay: decide the calls of the decision log again with a candidate set
//! of plugins, and say what would change: a verdict, or the arguments the
//! policies rewrite a call to.
//!
//! Only entries logged with `[log] arguments = "full"` can be replayed (the
//! other modes keep a digest or the shape, not the call); likely secrets in
//! their arguments were redacted when logged, and transcripts are not kept,
//! so a policy that reads them sees none. The candidate runs over a scratch
//! copy of the store, so its state changes and pauses touch nothing live.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Service;
use crate::decision::Verdict;
use crate::decision_log::LogEntry;
use crate::error::Result;

/// A call whose verdict would change.
#[derive(Debug, Clone, Serialize)]
pub struct Changed {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The session.
    pub session_id: String,
    /// What was decided then.
    pub before: Verdict,
    /// What the candidate decides.
    pub after: Verdict,
    /// The candidate's reason.
    pub reason: Option<String>,
    /// The arguments the candidate would run the call with, when its
    /// policies rewrite them (likely secrets redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewritten: Option<serde_json::Value>,
}

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// Calls decided again.
    pub replayed: u64,
    /// Log entries that could not be (not logged in full).
    pub not_replayable: u64,
    /// `before→after` → count, for the calls that changed.
    pub changes: BTreeMap<String, u64>,
    /// The calls that changed, oldest first.
    pub changed: Vec<Changed>,
    /// The candidate's decision time, p50 and p99, microseconds.
    pub p50_us: u64,
    /// See `p50_us`.
    pub p99_us: u64,
}

impl ReplayReport {
    /// Whether any verdict would change.
    pub fn changed_anything(&self) -> bool {
        !self.changed.is_empty()
    }
}

fn name(verdict: Verdict) -> String {
    format!("{verdict:?}").to_lowercase()
}

/// Decide `entries` (oldest first) again with `candidate`.
pub fn replay(entries: &[LogEntry], candidate: &Service) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut times = Vec::new();
    for entry in entries {
        let Some(request) = entry.replayable() else {
            report.not_replayable += 1;
            continue;
        };
        // A scratch copy: its answers wait for no disk.
        let decision = candidate.host().evaluate(&request)?;
        report.replayed += 1;
        times.push(decision.duration_us);
        // Logged in full, so shown the same way.
        let rewritten = decision.arguments.as_ref().map(crate::redact::redact_json);
        let rewritten_otherwise = rewritten != entry.rewritten;
        if decision.verdict != entry.verdict || rewritten_otherwise {
            let mut kind = format!("{}→{}", name(entry.verdict), name(decision.verdict));
            if rewritten_otherwise {
                kind.push_str(", rewritten otherwise");
            }
            *report.changes.entry(kind).or_default() += 1;
            report.changed.push(Changed {
                call_id: entry.call_id.clone(),
                tool: entry.tool.clone(),
                session_id: entry.session_id.clone(),
                before: entry.verdict,
                after: decision.verdict,
                reason: decision.reason,
                rewritten,
            });
        }
    }
    times.sort_unstable();
    let at = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    report.p50_us = at(0.5).unwrap_or(0);
    report.p99_us = at(0.99).unwrap_or(0);
    Ok(report)
}
