//! Prometheus metrics for the daemon, on `prometheus-client` (OpenMetrics
//! text). Its encoder writes label values as given, so free-text values
//! (policy names come from the config) are escaped here. Every metric:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `toolgate_decisions_total` | counter | `verdict` |
//! | `toolgate_policy_verdicts_total` | counter | `policy`, `verdict` |
//! | `toolgate_fail_mode_activations_total` | counter | `policy` |
//! | `toolgate_decision_seconds` | histogram | |
//! | `toolgate_reloads_total` | counter | `result` (`ok`, `error`) |
//! | `toolgate_requests_in_flight` | gauge | |
//! | `toolgate_busy_answers_total` | counter | |
//! | `toolgate_dropped_events_total` | counter | |
//! | `toolgate_shadow_verdicts_total` | counter | `policy`, `live`, `shadow`, `agreement` |
//! | `toolgate_audit_links_sent_total` | counter | `export` (`otlp`, `syslog`) |
//! | `toolgate_audit_export_failures_total` | counter | `export` |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::decision::{Decision, PolicyVerdict, Verdict};

/// Upper bounds of the latency buckets, seconds.
const BUCKETS_S: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05, 0.25,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyVerdictLabels {
    policy: String,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabel {
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    policy: String,
    live: &'static str,
    shadow: &'static str,
    agreement: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExportLabel {
    export: &'static str,
}

/// What the audit trail's export counts: links each receiver took, and
/// attempts that failed (to be sent again).
#[derive(Clone, Debug, Default)]
pub struct AuditExportCounters {
    sent: Family<ExportLabel, Counter>,
    failures: Family<ExportLabel, Counter>,
}

impl AuditExportCounters {
    /// `links` links went to `export`.
    pub fn sent(&self, export: &'static str, links: u64) {
        self.sent
            .get_or_create(&ExportLabel { export })
            .inc_by(links);
    }

    /// An attempt to send to `export` failed.
    pub fn failed(&self, export: &'static str) {
        self.failures.get_or_create(&ExportLabel { export }).inc();
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "audit_links_sent",
            "Audit links each export's receiver took",
            self.sent.clone(),
        );
        registry.register(
            "audit_export_failures",
            "Attempts to send audit links that failed (the links are sent again)",
            self.failures.clone(),
        );
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The daemon's metrics since it started.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    decisions: Family<VerdictLabel, Counter>,
    policy_verdicts: Family<PolicyVerdictLabels, Counter>,
    fail_mode: Family<PolicyLabel, Counter>,
    latency: Histogram,
    reloads: Family<ResultLabel, Counter>,
    in_flight: Gauge,
    busy: Counter,
    dropped_events: Counter,
    shadows: Family<ShadowLabels, Counter>,
    not_durable: Counter,
    connections_refused: Counter,
    audit_export: AuditExportCounters,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("toolgate");
        let metrics = Self {
            decisions: Family::default(),
            policy_verdicts: Family::default(),
            fail_mode: Family::default(),
            latency: Histogram::new(BUCKETS_S),
            reloads: Family::default(),
            in_flight: Gauge::default(),
            busy: Counter::default(),
            dropped_events: Counter::default(),
            shadows: Family::default(),
            not_durable: Counter::default(),
            connections_refused: Counter::default(),
            audit_export: AuditExportCounters::default(),
            registry: Registry::default(),
        };
        registry.register(
            "decisions",
            "Decisions by final verdict",
            metrics.decisions.clone(),
        );
        registry.register(
            "policy_verdicts",
            "Each policy's own verdicts",
            metrics.policy_verdicts.clone(),
        );
        registry.register(
            "fail_mode_activations",
            "Policy failures handled by their fail mode",
            metrics.fail_mode.clone(),
        );
        registry.register(
            "decision_seconds",
            "Time to decide one call",
            metrics.latency.clone(),
        );
        registry.register(
            "reloads",
            "Plugin reloads by result",
            metrics.reloads.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Requests running policies now",
            metrics.in_flight.clone(),
        );
        registry.register(
            "busy_answers",
            "Requests refused at daemon.max_in_flight",
            metrics.busy.clone(),
        );
        registry.register(
            "dropped_events",
            "Events and log entries dropped because the write queue was full",
            metrics.dropped_events.clone(),
        );
        registry.register(
            "shadow_verdicts",
            "Shadow plugins' verdicts against the live decision",
            metrics.shadows.clone(),
        );
        registry.register(
            "answers_not_durable",
            "Answers refused because what they depend on could not be made durable",
            metrics.not_durable.clone(),
        );
        registry.register(
            "connections_refused",
            "Socket connections refused at daemon.max_connections_per_user",
            metrics.connections_refused.clone(),
        );
        metrics.audit_export.register(&mut registry);
        Self {
            registry,
            ..metrics
        }
    }
}

/// A label value as the exposition format wants it: `\\`, `\"` and `\n`
/// escaped.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Deny => "deny",
        Verdict::Pause => "pause",
    }
}

fn policy_verdict_name(verdict: PolicyVerdict) -> &'static str {
    match verdict {
        PolicyVerdict::Allow => "allow",
        PolicyVerdict::Deny => "deny",
        PolicyVerdict::Pause => "pause",
        PolicyVerdict::Skip => "skip",
    }
}

impl Metrics {
    /// The audit export's counters, for its thread.
    pub fn audit_export(&self) -> AuditExportCounters {
        self.audit_export.clone()
    }

    /// Count one decision.
    pub fn record(&self, decision: &Decision) {
        self.decisions
            .get_or_create(&VerdictLabel {
                verdict: verdict_name(decision.verdict),
            })
            .inc();
        for policy in &decision.policies {
            self.policy_verdicts
                .get_or_create(&PolicyVerdictLabels {
                    policy: label_value(&policy.name),
                    verdict: policy_verdict_name(policy.verdict),
                })
                .inc();
            if policy.failure.is_some() {
                self.fail_mode
                    .get_or_create(&PolicyLabel {
                        policy: label_value(&policy.name),
                    })
                    .inc();
            }
        }
        self.latency.observe(decision.duration_us as f64 / 1e6);
        let live = verdict_name(decision.verdict);
        for shadow in &decision.shadows {
            let said = crate::decision::shadow_verdict(shadow.verdict);
            self.shadows
                .get_or_create(&ShadowLabels {
                    policy: label_value(&shadow.name),
                    live,
                    shadow: verdict_name(said),
                    agreement: if said == decision.verdict {
                        "agree"
                    } else {
                        "disagree"
                    },
                })
                .inc();
        }
    }

    /// Count one reload.
    pub fn record_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }

    /// Count one request refused as busy.
    pub fn record_busy(&self) {
        self.busy.inc();
    }

    /// Count one answer refused because its state could not be made
    /// durable.
    pub fn record_not_durable(&self) {
        self.not_durable.inc();
    }

    /// Count one connection refused at a user's connection cap.
    pub fn record_connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// The text exposition, with the gauges set from `in_flight` and the
    /// store's `dropped_events` count.
    pub fn render(&self, in_flight: usize, dropped_events: u64) -> String {
        self.in_flight.set(in_flight as i64);
        let seen = self.dropped_events.get();
        self.dropped_events
            .inc_by(dropped_events.saturating_sub(seen));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        let mut decision: Decision = serde_json::from_value(serde_json::json!({
            "verdict": "deny", "notes": [], "risk": {"category": "low"}, "call_id": "c",
            "policies": [], "duration_us": 10
        }))
        .unwrap();
        decision.policies.push(
            serde_json::from_value(serde_json::json!({
                "name": "evil\"name\\\n", "priority": 1, "sha256": "x", "verdict": "deny",
                "notes": [], "duration_us": 1
            }))
            .unwrap(),
        );
        metrics.record(&decision);
        let text = metrics.render(0, 3);
        assert!(text.contains(r#"policy="evil\"name\\\n""#), "{text}");
        assert!(text.contains("toolgate_dropped_events_total 3"), "{text}");
        assert!(
            text.contains("toolgate_decisions_total{verdict=\"deny\"} 1"),
            "{text}"
        );
    }
}
