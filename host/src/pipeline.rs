//! Composition: run every policy over one call and compose their answers.
//!
//! 1. classify: policies with the `classify` phase report a risk; the host
//!    keeps the highest.
//! 2. in ascending priority: `account` (if the policy accounts) then
//!    `decide`. The first deny wins and later policies do not run; otherwise
//!    a pause beats allow; skip abstains. Notes from every policy that ran are
//!    kept.
//!
//! A policy that fails (trap, deadline, memory, oversized output) is handled
//! by its fail mode: `open` → skip plus a note, `closed` → deny naming it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bindings::toolgate::policy::types as wit;
use crate::capabilities::CallContext;
use crate::config::FailMode;
use crate::decision::{
    BudgetReport, Decision, Note, PauseInfo, PolicyResult, PolicyVerdict, RiskCategory, RiskReport,
    Verdict,
};
use crate::error::Result;
use crate::gates::{PauseKind, PendingGate, call_fingerprint, new_request_id};
use crate::plugins::{Plugin, PluginSet};
use crate::pool::{Pooled, instance_key};
use crate::probe::ProbeClient;
use crate::request::ToolRequest;
use crate::runtime::{PolicyFailure, Runtime, Sandbox};
use crate::store::Store;

/// What the pipeline needs from the host.
pub(crate) struct Env<'a> {
    pub runtime: &'a Runtime,
    pub store: &'a Arc<Store>,
    pub probe: &'a Arc<ProbeClient>,
    pub gate_ttl: Duration,
    pub transcript_cap: u32,
}

impl Env<'_> {
    /// A configured sandbox for `plugin`, on loan for one evaluation: a
    /// warm one of the same user (and session) when the plugin allows reuse
    /// and one is idle, else a fresh instance. It goes back when dropped.
    pub(crate) fn sandbox<'p>(
        &self,
        plugin: &'p Plugin,
        request: Option<&ToolRequest>,
    ) -> Result<Pooled<'p>, PolicyFailure> {
        let key = instance_key(plugin.limits.isolation, request);
        let warm = if plugin.limits.reuse_instances {
            plugin.pool.take(&key)
        } else {
            None
        };
        let call = CallContext::new(
            plugin.name.clone(),
            &plugin.limits,
            self.store.clone(),
            self.probe.clone(),
            request.and_then(|r| r.transcript_path.clone()),
            self.transcript_cap,
        );
        if let Some(mut sandbox) = warm {
            sandbox.reset(call);
            return Ok(Pooled::new(plugin, key, sandbox));
        }
        let mut sandbox = self
            .runtime
            .instantiate(&plugin.pre, &plugin.limits, call)?;
        plugin.pool.created_one();
        sandbox
            .call("configure", |p, s| {
                p.toolgate_policy_gate()
                    .call_configure(s, &plugin.config_json)
            })?
            .map_err(|message| PolicyFailure::Other(format!("configure refused: {message}")))?;
        Ok(Pooled::new(plugin, key, sandbox))
    }
}

/// One policy's progress through an evaluation.
struct Slot<'p> {
    plugin: &'p Arc<Plugin>,
    sandbox: Option<Pooled<'p>>,
    risk: Option<wit::Risk>,
    failure: Option<PolicyFailure>,
    elapsed: Duration,
}

impl Slot<'_> {
    /// Run `f` on this policy's sandbox (created on first use), timing it and
    /// recording a failure instead of returning it.
    fn run<T>(
        &mut self,
        env: &Env<'_>,
        request: &ToolRequest,
        f: impl FnOnce(&mut Sandbox) -> Result<T, PolicyFailure>,
    ) -> Option<T> {
        if self.failure.is_some() {
            return None;
        }
        let _span = tracing::debug_span!("toolgate.policy", policy = %self.plugin.name).entered();
        let started = Instant::now();
        let result = match &mut self.sandbox {
            Some(sandbox) => f(sandbox),
            None => env
                .sandbox(self.plugin, Some(request))
                .and_then(|mut sandbox| {
                    let result = f(&mut sandbox);
                    self.sandbox = Some(sandbox);
                    result
                }),
        };
        self.elapsed += started.elapsed();
        result
            .inspect_err(|failure| {
                // Whatever failed (a trap, or an answer over its limit), this
                // instance is not used again.
                if let Some(sandbox) = self.sandbox.as_mut() {
                    sandbox.failed = true;
                }
                self.failure = Some(failure.clone());
            })
            .ok()
    }
}

/// Evaluate one call through every plugin.
pub(crate) fn evaluate(
    env: &Env<'_>,
    plugins: &PluginSet,
    request: &ToolRequest,
) -> Result<Decision> {
    let started = Instant::now();
    let span =
        tracing::info_span!("toolgate.decide", tool = %request.tool, session = %request.session_id);
    let _entered = span.enter();

    let call_id = request.call_id.clone().unwrap_or_else(new_request_id);
    let arguments = request.arguments_json();
    let fingerprint = call_fingerprint(&request.tool, &request.origin.key(), &arguments);
    let resolutions = env.store.resolutions_for(
        &request.user_id,
        request.thread(),
        &fingerprint,
        crate::now_ms(),
    )?;
    // Classification sees no resolutions; each policy's decision sees only
    // the resolutions of its own pauses.
    let call = request.to_wit(&call_id, &[]);
    let call_for = |plugin: &Plugin| -> Option<wit::ToolCall> {
        let own: Vec<_> = resolutions
            .iter()
            .filter(|r| r.policy == *plugin.name)
            .cloned()
            .collect();
        (!own.is_empty()).then(|| request.to_wit(&call_id, &own))
    };

    let mut slots: Vec<Slot<'_>> = plugins
        .iter()
        .map(|plugin| Slot {
            plugin,
            sandbox: None,
            risk: None,
            failure: None,
            elapsed: Duration::ZERO,
        })
        .collect();

    // Phase 1: classification, by every policy that classifies.
    for slot in slots.iter_mut().filter(|s| s.plugin.description.classifies) {
        slot.risk = slot.run(env, request, |sandbox| {
            sandbox.call("classify", |p, s| {
                p.toolgate_policy_risk().call_classify(s, &call)
            })
        });
    }
    let risk = compose_risk(&slots);
    let wit_risk = wit::Risk {
        category: risk.category.into(),
        signals: risk.signals.clone(),
    };

    // Phase 2: account and decide, in priority order, until a deny.
    let mut results = Vec::new();
    let mut notes = Vec::new();
    let mut denied: Option<(String, String)> = None;
    let mut paused: Option<(String, wit::PauseRequest)> = None;
    for slot in &mut slots {
        let plugin = slot.plugin;
        let own_call = call_for(plugin);
        let call = own_call.as_ref().unwrap_or(&call);
        let budget = if plugin.description.accounts {
            slot.run(env, request, |sandbox| {
                sandbox.call("account", |p, s| {
                    p.toolgate_policy_budget().call_account(s, call, &wit_risk)
                })
            })
        } else {
            Some(wit::BudgetStatus::Ok)
        };
        let decision = budget.as_ref().and_then(|budget| {
            let limit = plugin.limits.max_output_bytes as usize;
            slot.run(env, request, |sandbox| {
                let decision = sandbox.call("decide", |p, s| {
                    p.toolgate_policy_gate()
                        .call_decide(s, call, &wit_risk, budget)
                })?;
                check_output_size(&decision, limit)?;
                Ok(decision)
            })
        });
        let decision = match (decision, &slot.failure) {
            (Some(decision), _) => decision,
            (None, failure) => {
                let failure = failure.clone().expect("a missing decision is a failure");
                apply_fail_mode(plugin, &failure)
            }
        };

        let (verdict, reason) = match &decision.verdict {
            wit::Verdict::Allow => (PolicyVerdict::Allow, None),
            wit::Verdict::Skip => (PolicyVerdict::Skip, None),
            wit::Verdict::Deny(reason) => (PolicyVerdict::Deny, Some(reason.clone())),
            wit::Verdict::Pause(pause) => (PolicyVerdict::Pause, Some(pause_reason(pause))),
        };
        notes.extend(decision.notes.iter().map(|text| Note {
            policy: plugin.name.to_string(),
            text: text.clone(),
        }));
        tracing::debug!(policy = %plugin.name, ?verdict, elapsed_us = slot.elapsed.as_micros() as u64, "policy decided");
        results.push(PolicyResult {
            name: plugin.name.to_string(),
            priority: plugin.priority,
            sha256: plugin.sha256.clone(),
            verdict,
            reason: reason.as_deref().map(crate::redact::for_display),
            notes: decision.notes.clone(),
            risk: slot.risk.as_ref().map(|r| RiskReport {
                category: r.category.into(),
                signals: r.signals.clone(),
                by: None,
            }),
            budget: budget
                .as_ref()
                .filter(|_| plugin.description.accounts)
                .map(BudgetReport::from),
            failure: slot.failure.as_ref().map(ToString::to_string),
            logs: slot
                .sandbox
                .as_ref()
                .map_or_else(Vec::new, |s| s.store.data().call.logs.clone()),
            transcript_bytes: slot
                .sandbox
                .as_ref()
                .map_or(0, |s| s.store.data().call.transcript_bytes),
            duration_us: slot.elapsed.as_micros() as u64,
        });
        match decision.verdict {
            wit::Verdict::Deny(reason) => {
                denied = Some((plugin.name.to_string(), reason));
                break;
            }
            wit::Verdict::Pause(pause) if paused.is_none() => {
                paused = Some((plugin.name.to_string(), pause));
            }
            _ => {}
        }
    }

    let mut decision = Decision {
        verdict: Verdict::Allow,
        reason: None,
        decided_by: None,
        notes,
        risk,
        pause: None,
        call_id: call_id.clone(),
        policies: results,
        duration_us: 0,
    };
    if let Some((policy, reason)) = denied {
        // Policies that allowed before the deny may have reserved something
        // for the call (a lease use): tell them it will not run.
        let event = wit::ToolEvent {
            call: call.clone(),
            outcome: wit::ToolOutcome::Denied,
            summary: format!("denied by {policy}"),
        };
        for (slot, result) in slots.iter_mut().zip(&decision.policies) {
            if result.verdict == PolicyVerdict::Allow {
                slot.run(env, request, |sandbox| {
                    sandbox.call("observe", |p, s| {
                        p.toolgate_policy_gate().call_observe(s, &event)
                    })
                });
            }
        }
        decision.verdict = Verdict::Deny;
        decision.reason = Some(reason);
        decision.decided_by = Some(policy);
    } else if let Some((policy, pause)) = paused {
        decision.verdict = Verdict::Pause;
        decision.reason = Some(crate::redact::for_display(&pause_reason(&pause)));
        let now = crate::now_ms();
        let gate = PendingGate {
            request_id: new_request_id(),
            policy: policy.clone(),
            user_id: request.user_id.clone(),
            thread_id: request.thread().to_string(),
            session_id: request.session_id.clone(),
            source_channel: request.channel.clone(),
            tool: request.tool.clone(),
            call_id,
            arguments: crate::redact::for_display(&arguments),
            fingerprint: fingerprint.clone(),
            pause: pause_kind(pause),
            created_at_ms: now,
            expires_at_ms: now.saturating_add(env.gate_ttl.as_millis() as u64),
        };
        env.store.insert_gate(&gate)?;
        decision.pause = Some(PauseInfo {
            request_id: gate.request_id,
            user_id: gate.user_id,
            thread_id: gate.thread_id,
            channel: gate.source_channel,
            expires_at_ms: gate.expires_at_ms,
            kind: gate.pause,
        });
        decision.decided_by = Some(policy);
    }
    // Dropping the slots returns their instances to the pools.
    drop(slots);
    if decision.verdict != Verdict::Pause && !resolutions.is_empty() {
        env.store
            .clear_resolutions(&request.user_id, request.thread(), &fingerprint)?;
    }
    decision.duration_us = started.elapsed().as_micros() as u64;
    tracing::info!(verdict = ?decision.verdict, decided_by = ?decision.decided_by, duration_us = decision.duration_us, "decision");
    Ok(decision)
}

/// The highest category any policy reported; ties go to the earlier policy.
fn compose_risk(slots: &[Slot<'_>]) -> RiskReport {
    let mut best = RiskReport::default();
    for slot in slots {
        if let Some(risk) = &slot.risk {
            let category = RiskCategory::from(risk.category);
            if best.by.is_none() || category > best.category {
                best = RiskReport {
                    category,
                    signals: risk.signals.clone(),
                    by: Some(slot.plugin.name.to_string()),
                };
            }
        }
    }
    best
}

fn check_output_size(decision: &wit::Decision, limit: usize) -> Result<(), PolicyFailure> {
    let reason = match &decision.verdict {
        wit::Verdict::Deny(reason) => reason.len(),
        wit::Verdict::Pause(pause) => pause_reason(pause).len(),
        _ => 0,
    };
    let bytes = reason + decision.notes.iter().map(String::len).sum::<usize>();
    if bytes > limit {
        return Err(PolicyFailure::OutputTooLarge { bytes, limit });
    }
    Ok(())
}

/// Turn a failure into the decision the plugin's fail mode prescribes.
fn apply_fail_mode(plugin: &Plugin, failure: &PolicyFailure) -> wit::Decision {
    match plugin.fail_mode {
        FailMode::Open => {
            tracing::warn!(policy = %plugin.name, cause = %failure, "policy failed; skipped (fail-open)");
            wit::Decision {
                verdict: wit::Verdict::Skip,
                notes: vec![format!(
                    "toolgate: policy `{}` {failure} and was skipped (fail-open)",
                    plugin.name
                )],
            }
        }
        FailMode::Closed => {
            tracing::error!(policy = %plugin.name, cause = %failure, "policy failed; call denied (fail-closed)");
            wit::Decision {
                verdict: wit::Verdict::Deny(format!(
                    "toolgate: policy `{}` {failure}; it is fail-closed, so the call is denied. \
                     An operator can inspect it with `toolgate plugins list` and the host log.",
                    plugin.name
                )),
                notes: Vec::new(),
            }
        }
    }
}

fn pause_reason(pause: &wit::PauseRequest) -> String {
    match pause {
        wit::PauseRequest::Approval(approval) => approval.description.clone(),
        wit::PauseRequest::Authentication(auth) => format!(
            "credential `{}` is required: {}",
            auth.credential, auth.instructions
        ),
    }
}

/// The pause as a person sees it: secrets in the description redacted.
fn pause_kind(pause: wit::PauseRequest) -> PauseKind {
    match pause {
        wit::PauseRequest::Approval(a) => PauseKind::Approval {
            description: crate::redact::for_display(&a.description),
            allow_always: a.allow_always,
        },
        wit::PauseRequest::Authentication(a) => PauseKind::Authentication {
            credential: a.credential,
            instructions: a.instructions,
            url: a.url,
        },
    }
}
