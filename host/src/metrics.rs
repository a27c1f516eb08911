//! Prometheus-format metrics for the daemon: decisions by verdict and by
//! policy, a latency histogram, fail-mode activations and reloads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::decision::{Decision, PolicyVerdict, Verdict};

/// Upper bounds of the latency buckets, microseconds.
const BUCKETS_US: [u64; 10] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000,
];

/// Counters since the daemon started.
#[derive(Debug, Default)]
pub struct Metrics(Mutex<Counters>);

#[derive(Debug, Default)]
struct Counters {
    decisions: BTreeMap<&'static str, u64>,
    policy_verdicts: BTreeMap<(String, &'static str), u64>,
    fail_mode: BTreeMap<String, u64>,
    reloads: BTreeMap<&'static str, u64>,
    buckets: [u64; BUCKETS_US.len()],
    latency_sum_us: u64,
    latency_count: u64,
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
    /// Count one decision.
    pub fn record(&self, decision: &Decision) {
        let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *c.decisions
            .entry(verdict_name(decision.verdict))
            .or_default() += 1;
        for policy in &decision.policies {
            let key = (policy.name.clone(), policy_verdict_name(policy.verdict));
            *c.policy_verdicts.entry(key).or_default() += 1;
            if policy.failure.is_some() {
                *c.fail_mode.entry(policy.name.clone()).or_default() += 1;
            }
        }
        let us = decision.duration_us;
        for (bucket, bound) in c.buckets.iter_mut().zip(BUCKETS_US) {
            if us <= bound {
                *bucket += 1;
            }
        }
        c.latency_sum_us += us;
        c.latency_count += 1;
    }

    /// Count one reload.
    pub fn record_reload(&self, ok: bool) {
        let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *c.reloads
            .entry(if ok { "ok" } else { "error" })
            .or_default() += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP toolgate_decisions_total Decisions by final verdict."
        );
        let _ = writeln!(out, "# TYPE toolgate_decisions_total counter");
        for (verdict, n) in &c.decisions {
            let _ = writeln!(out, "toolgate_decisions_total{{verdict=\"{verdict}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP toolgate_policy_verdicts_total Each policy's own verdicts."
        );
        let _ = writeln!(out, "# TYPE toolgate_policy_verdicts_total counter");
        for ((policy, verdict), n) in &c.policy_verdicts {
            let _ = writeln!(
                out,
                "toolgate_policy_verdicts_total{{policy=\"{policy}\",verdict=\"{verdict}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP toolgate_fail_mode_activations_total Policy failures handled by their fail mode."
        );
        let _ = writeln!(out, "# TYPE toolgate_fail_mode_activations_total counter");
        for (policy, n) in &c.fail_mode {
            let _ = writeln!(
                out,
                "toolgate_fail_mode_activations_total{{policy=\"{policy}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP toolgate_reloads_total Plugin reloads by result."
        );
        let _ = writeln!(out, "# TYPE toolgate_reloads_total counter");
        for (result, n) in &c.reloads {
            let _ = writeln!(out, "toolgate_reloads_total{{result=\"{result}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP toolgate_decision_seconds Time to decide one call."
        );
        let _ = writeln!(out, "# TYPE toolgate_decision_seconds histogram");
        for (bound, n) in BUCKETS_US.iter().zip(c.buckets) {
            let _ = writeln!(
                out,
                "toolgate_decision_seconds_bucket{{le=\"{}\"}} {n}",
                *bound as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "toolgate_decision_seconds_bucket{{le=\"+Inf\"}} {}",
            c.latency_count
        );
        let _ = writeln!(
            out,
            "toolgate_decision_seconds_sum {}",
            c.latency_sum_us as f64 / 1e6
        );
        let _ = writeln!(out, "toolgate_decision_seconds_count {}", c.latency_count);
        out
    }
}
