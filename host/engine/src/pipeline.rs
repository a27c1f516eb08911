//! Composition: run every policy over one call and compose their answers.
//!
//! 0. the host's built-in policies ([`crate::native`]) vote first in the
//!    same composer; a refusal ends the evaluation before any policy is
//!    asked. They vote again on a call a policy rewrote.
//! 1. classify: policies that export `risk` report one; the host keeps the
//!    highest level.
//! 2. in ascending priority: `account` (if the policy exports `budget`) then
//!    `decide`; a policy that answers `ask-model` has the host ask the model
//!    (outside the sandbox, within the policy's probe limits) and its
//!    `verdict.parse` turns the reply into its decision. The first deny wins
//!    and later policies do not run; otherwise a pause beats allow; skip
//!    abstains. Notes from every policy that ran are kept.
//!
//! Each policy's instance is taken at its first step, which begins the
//! evaluation there (`gate.begin`): the call is lowered into each policy
//! once, and its phases read it from the policy's own memory.
//!
//! A policy that fails (trap, deadline, memory, oversized output) is handled
//! by its fail mode: `open` → skip plus a note, `closed` → deny naming it.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bindings::toolgate::policy::types as wit;
use crate::compose::{Ballot, Composed, Composer, Next, Vote, failure_ballot};
use crate::config::{FailMode, PluginMode, RefusalScope};
use crate::decision::HOST;
use crate::decision::{
    BudgetReport, Decision, Note, PauseInfo, PolicyResult, PolicyVerdict, RiskReport, Verdict,
};
use crate::error::Result;
use crate::gates::{
    GateResolution, PauseKind, PendingGate, RecordedResolution, call_fingerprint, new_request_id,
};
use crate::native::NativePolicy;
use crate::plugins::{Plugin, PluginSet};
use crate::pool::Pooled;
use crate::probe::{ProbeClient, ProbeFailure};
use crate::request::{ArgumentsText, ToolRequest, new_call_id};
use crate::runtime::{PolicyFailure, PolicyInstance, Runtime};
use crate::store::Store;
use crate::wit_convert::ToWit as _;

/// The longest question (system and user text) a policy may put to the
/// model, bytes.
const MAX_QUESTION_BYTES: usize = 256 * 1024;

/// What the pipeline needs from the host.
pub(crate) struct Env<'a> {
    pub runtime: &'a Runtime,
    pub store: &'a Arc<Store>,
    pub probe: &'a Arc<ProbeClient>,
    pub gate_ttl: Duration,
    pub transcript_cap: u32,
    /// How long a person's refusal of a call holds.
    pub refusal_scope: RefusalScope,
    /// A person's "always" answers.
    pub standing: &'a crate::standing::StandingApprovals,
    /// Decide without effects on gates and resolutions (shadow plugins).
    pub dry_run: bool,
    /// The policies built into the host, which vote first on every version
    /// of the call ([`crate::native`]).
    pub natives: &'a [&'a dyn NativePolicy],
}

impl Env<'_> {
    /// A configured sandbox for `plugin`, on loan for one evaluation (see
    /// [`Plugin::checkout`]).
    pub(crate) fn sandbox<'p>(
        &self,
        plugin: &'p Arc<Plugin>,
        request: Option<&ToolRequest>,
    ) -> Result<Pooled<'p>, PolicyFailure> {
        plugin.checkout(self.runtime, self.store, request, self.transcript_cap)
    }
}

/// One policy's progress through an evaluation.
struct Slot<'p> {
    plugin: &'p Arc<Plugin>,
    sandbox: Option<Pooled<'p>>,
    /// The [`Call::generation`] the sandbox was begun with.
    begun: u32,
    risk: Option<wit::Risk>,
    /// What its `account` said, once it ran in this evaluation.
    accounted: Option<wit::BudgetStatus>,
    failure: Option<PolicyFailure>,
    elapsed: Duration,
}

impl<'p> Slot<'p> {
    fn new(plugin: &'p Arc<Plugin>) -> Self {
        Self {
            plugin,
            sandbox: None,
            begun: 0,
            risk: None,
            accounted: None,
            failure: None,
            elapsed: Duration::ZERO,
        }
    }

    /// Run `f` on this policy's sandbox, timing it. The sandbox is taken
    /// on first use and begins the evaluation of `call` there, so the call
    /// crosses into each policy once however many of its phases run. A
    /// failure retires the instance and is remembered: no later step of
    /// this evaluation runs this policy again.
    fn run<T>(
        &mut self,
        env: &Env<'_>,
        call: &Call<'_>,
        f: impl FnOnce(&mut PolicyInstance) -> Result<T, PolicyFailure>,
    ) -> Result<T, PolicyFailure> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        let _span = tracing::debug_span!("toolgate.policy", policy = %self.plugin.name).entered();
        let started = Instant::now();
        let result = match &mut self.sandbox {
            // Begun with the call as an earlier policy has since rewritten
            // it: begun again with the call as it would now run.
            Some(sandbox) if self.begun != call.generation => {
                self.begun = call.generation;
                sandbox
                    .begin(&call.for_policy(self.plugin))
                    .and_then(|()| f(sandbox))
            }
            Some(sandbox) => f(sandbox),
            None => env
                .sandbox(self.plugin, Some(&call.request))
                .and_then(|mut sandbox| {
                    self.begun = call.generation;
                    let result = sandbox
                        .begin(&call.for_policy(self.plugin))
                        .and_then(|()| f(&mut sandbox));
                    self.sandbox = Some(sandbox);
                    result
                }),
        };
        self.elapsed += started.elapsed();
        result.inspect_err(|failure| {
            // Whatever failed (a trap, or an answer over its limit), this
            // instance is not used again.
            if let Some(sandbox) = self.sandbox.as_mut() {
                sandbox.failed = true;
            }
            self.failure = Some(failure.clone());
        })
    }

    /// What the policy's calls logged, and how much transcript they read.
    fn output(&self) -> (Vec<String>, u64) {
        self.sandbox.as_ref().map_or_else(Default::default, |s| {
            let call = &s.store.data().call;
            (call.logs.clone(), call.transcript_bytes)
        })
    }
}

/// The call as every step of one evaluation sees it: as the runtime
/// proposed it, or as the policies so far have rewritten it.
struct Call<'r> {
    request: Cow<'r, ToolRequest>,
    arguments: Cow<'r, ArgumentsText>,
    /// How many rewrites made this call from the proposed one (0: none).
    generation: u32,
    id: String,
    /// The proposed call's, taken on first use (see [`Call::fingerprint`]).
    fingerprint: std::cell::OnceCell<String>,
    /// Unexpired resolutions of this exact call.
    resolutions: Vec<RecordedResolution>,
    /// What standing approvals (a person's "always") say of it: kept apart
    /// from `resolutions`, which a final decision uses up.
    standing: Vec<RecordedResolution>,
    /// The WIT view without resolutions: what a policy with none of its
    /// own begins with, and what `observe` hears.
    wit: wit::ToolCall,
}

impl<'r> Call<'r> {
    fn prepare(
        env: &Env<'_>,
        request: &'r ToolRequest,
        arguments: &'r ArgumentsText,
    ) -> Result<Self> {
        let id = request.call_id.clone().unwrap_or_else(new_call_id);
        let wit = request.to_wit(&id, &arguments.json, &[]);
        let mut call = Self {
            request: Cow::Borrowed(request),
            arguments: Cow::Borrowed(arguments),
            generation: 0,
            id,
            fingerprint: Default::default(),
            resolutions: Vec::new(),
            standing: env.standing.for_call(request),
            wit,
        };
        if env.store.gates().may_hold_resolutions() {
            call.resolutions = env.store.gates().resolutions_for(
                &request.user_id,
                request.thread(),
                call.fingerprint(),
                crate::now_ms(),
            )?;
        }
        Ok(call)
    }

    /// What ties this call to resolutions of its pauses: needed only to
    /// look them up or to pause, so most decisions never hash their
    /// arguments. Always the proposed call's: that is what the runtime
    /// resubmits.
    fn fingerprint(&self) -> &str {
        self.fingerprint.get_or_init(|| {
            let request = &self.request;
            call_fingerprint(
                &request.tool,
                &request.origin.key(),
                self.arguments.sha256(),
            )
        })
    }

    /// This call with `arguments` instead, as a policy rewrote it.
    fn rewritten(&self, arguments: serde_json::Value) -> Self {
        let fingerprint = std::cell::OnceCell::new();
        let _ = fingerprint.set(self.fingerprint().to_string());
        let request = ToolRequest {
            arguments,
            ..self.request.as_ref().clone()
        };
        let text = request.arguments_text();
        let wit = request.to_wit(&self.id, &text.json, &[]);
        Self {
            request: Cow::Owned(request),
            arguments: Cow::Owned(text),
            generation: self.generation + 1,
            id: self.id.clone(),
            fingerprint,
            resolutions: self.resolutions.clone(),
            standing: self.standing.clone(),
            wit,
        }
    }

    /// The sha256 (hex) of the arguments as the call would run, when
    /// policies rewrote them.
    fn rewritten_sha256(&self) -> Option<String> {
        (self.generation > 0).then(|| hex::encode(self.arguments.sha256()))
    }

    /// The newest refusal a person made of this exact call, if any.
    fn refused_by_a_person(&self) -> Option<&RecordedResolution> {
        self.resolutions
            .iter()
            .rev()
            .find(|r| r.resolution == GateResolution::Deny)
    }

    /// A person's approval (or credential) for this exact call, if any:
    /// an answer to its pause, else a standing approval.
    fn approved_by_a_person(&self) -> Option<&RecordedResolution> {
        self.resolutions
            .iter()
            .rev()
            .find(|r| r.resolution != GateResolution::Deny)
            .or(self.standing.first())
    }

    /// The call as `plugin`'s decision sees it: with the resolutions of its
    /// own pauses only.
    fn for_policy(&self, plugin: &Plugin) -> std::borrow::Cow<'_, wit::ToolCall> {
        let own: Vec<_> = self
            .resolutions
            .iter()
            .chain(&self.standing)
            .filter(|r| r.is_for(&plugin.name, &plugin.sha256))
            .cloned()
            .collect();
        if own.is_empty() {
            std::borrow::Cow::Borrowed(&self.wit)
        } else {
            std::borrow::Cow::Owned(self.request.to_wit(&self.id, &self.arguments.json, &own))
        }
    }
}

/// Decide on `request` live: the built-in policies vote first; unless one
/// of them refused, the live policies of `plugins` then vote in the same
/// ballot, and the shadow plugins' dry runs are recorded beside.
pub(crate) fn evaluate_live(
    env: &Env<'_>,
    plugins: &PluginSet,
    request: &ToolRequest,
    arguments: &ArgumentsText,
) -> Result<Decision> {
    let first = first_ballots(env, request)?;
    if let Some((policy, reason)) = first.denied() {
        // Nothing of the call's is read or changed in the store: a
        // person's answers to it stay for when it may be asked again.
        let call_id = request.call_id.clone().unwrap_or_else(new_call_id);
        let mut decision = Decision::host_deny(&call_id, reason.to_string());
        decision.decided_by = Some(policy.to_string());
        return Ok(decision);
    }
    let live = plugins.for_call(PluginMode::Live, request);
    let mut decision = evaluate(env, first, &live, request, arguments)?;
    decision.shadows = shadow(env, plugins, request, arguments);
    Ok(decision)
}

/// `first` holds the ballots the built-in policies cast over `request`
/// (none refused); the policies' ballots join them.
fn evaluate(
    env: &Env<'_>,
    first: Composer<wit::PauseRequest>,
    plugins: &[Arc<Plugin>],
    request: &ToolRequest,
    arguments: &ArgumentsText,
) -> Result<Decision> {
    let started = Instant::now();
    let span =
        tracing::info_span!("toolgate.decide", tool = %request.tool, session = %request.session_id);
    let _entered = span.enter();

    let call = Call::prepare(env, request, arguments)?;
    if let Some(refusal) = call.refused_by_a_person() {
        return person_refused(env, &call, refusal, started);
    }
    let mut slots: Vec<Slot<'_>> = plugins.iter().map(Slot::new).collect();
    let Judged {
        call,
        risk,
        results,
        outcome,
        notes,
    } = judge(env, call, first, &mut slots)?;
    if let Composed::Deny { policy, .. } = &outcome {
        release_reservations(env, &call, &risk, &mut slots, &results, policy);
    }
    // Dropping the slots returns their instances to the pools.
    drop(slots);
    let mut decision = conclude(env, &call, outcome, notes, risk, results)?;
    decision.output_checked = plugins.iter().any(|p| p.phases.check_output);
    if !env.dry_run && decision.verdict != Verdict::Pause && !call.resolutions.is_empty() {
        env.store.gates().clear_resolutions(
            &request.user_id,
            request.thread(),
            call.fingerprint(),
        )?;
    }
    decision.duration_us = started.elapsed().as_micros() as u64;
    tracing::info!(verdict = ?decision.verdict, decided_by = ?decision.decided_by, duration_us = decision.duration_us, "decision");
    Ok(decision)
}

/// The verdicts of the shadow plugins that take part in `request`, each
/// run alone, as a dry run (no gates, no resolutions used up): recorded
/// beside the live decision, never used. A shadow that fails or loops is
/// bounded by its own limits and changes nothing.
fn shadow(
    env: &Env<'_>,
    plugins: &PluginSet,
    request: &ToolRequest,
    arguments: &ArgumentsText,
) -> Vec<PolicyResult> {
    let shadows = plugins.for_call(PluginMode::Shadow, request);
    if shadows.is_empty() {
        return Vec::new();
    }
    // The built-in policies voted on the call live; what a shadow
    // rewrites it to never runs.
    let env = Env {
        dry_run: true,
        natives: &[],
        ..*env
    };
    shadows
        .iter()
        .filter_map(|shadow| {
            let first = Composer::default();
            match evaluate(&env, first, std::slice::from_ref(shadow), request, arguments) {
                Ok(decision) => decision.policies.into_iter().next().map(digested),
                Err(err) => {
                    tracing::warn!(policy = %shadow.name, error = %err.report(), "shadow evaluation failed");
                    None
                }
            }
        })
        .collect()
}

/// A shadow's result with its rewrite as a digest only (see
/// [`PolicyResult::rewrite_sha256`]).
fn digested(mut result: PolicyResult) -> PolicyResult {
    result.rewrite = None;
    result
}

/// Tell every policy that takes part in `request` and observes what
/// happened to it. Failures are logged, never returned: observing must not
/// disturb the runtime.
pub(crate) fn observe(
    env: &Env<'_>,
    plugins: &PluginSet,
    request: &ToolRequest,
    outcome: crate::decision::Outcome,
    summary: &str,
    risk: &RiskReport,
) {
    let event = request.to_wit_event(outcome, summary, risk);
    let observers = plugins
        .iter()
        .filter(|p| p.phases.observe && p.takes_part(request));
    for plugin in observers {
        let result = env
            .sandbox(plugin, Some(request))
            .and_then(|mut sandbox| sandbox.observe(&event));
        if let Err(failure) = result {
            tracing::warn!(policy = %plugin.name, cause = %failure, "observe failed");
        }
    }
}

/// A call a person refused, asked for again: refused with their answer,
/// without asking any policy (so no new pause); a different call asks
/// anew. With `refusal_scope = "once"` the refusal is then used up.
fn person_refused(
    env: &Env<'_>,
    call: &Call<'_>,
    refusal: &RecordedResolution,
    started: Instant,
) -> Result<Decision> {
    let request = &call.request;
    let when = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(refusal.at_ms),
    );
    let by = if refusal.by.is_empty() {
        "a channel"
    } else {
        refusal.by.as_str()
    };
    let reason = format!(
        "A person refused this call ({} had asked; refused over `{by}` at {when}). Do not \
         retry it: tell the person what you meant to do, or do it another way.",
        refusal.policy
    );
    tracing::info!(tool = %request.tool, policy = %refusal.policy, "refused: a person said no to this call");
    if !env.dry_run && env.refusal_scope == RefusalScope::Once {
        env.store.gates().clear_resolutions(
            &request.user_id,
            request.thread(),
            call.fingerprint(),
        )?;
    }
    let mut decision = Decision::host_deny(&call.id, reason);
    decision.duration_us = started.elapsed().as_micros() as u64;
    Ok(decision)
}

/// What the policies made of a call.
struct Judged<'r> {
    call: Call<'r>,
    risk: RiskReport,
    results: Vec<PolicyResult>,
    outcome: Composed<wit::PauseRequest>,
    notes: Vec<(String, String)>,
}

/// Classify and decide. A rewrite reaches the later policies at once, but
/// the earlier ones allowed the call as it was: so a rewritten call that
/// no policy denied is judged again, as it will run, by every policy, its
/// risk classified anew; what that second round rewrites is not applied
/// (the call was settled by the first). No order of policies can run a
/// call that one of them denies. What the first round's allows reserved is
/// released first (as for a deny).
fn judge<'r>(
    env: &Env<'_>,
    call: Call<'r>,
    first: Composer<wit::PauseRequest>,
    slots: &mut [Slot<'_>],
) -> Result<Judged<'r>> {
    let proposed = call.request.arguments.clone();
    let risk = classify(env, &call, slots);
    let (results, composer, call) = decide(env, call, &risk, slots, Rewrites::Apply, first);
    let (outcome, notes) = composer.finish();
    if call.generation == 0 || matches!(outcome, Composed::Deny { .. }) {
        return Ok(Judged {
            call,
            risk,
            results,
            outcome,
            notes,
        });
    }
    // The built-in policies vote on the call as rewritten, as they did on
    // the call as proposed.
    let mut first = match first_ballots(env, &call.request) {
        Ok(first) => first,
        Err(err) => {
            // Failing closed: what the first round's allows reserved is
            // not used.
            release_reservations(env, &call, &risk, slots, &results, HOST);
            return Err(err);
        }
    };
    if let Some(undone) = undone_rewrite(&proposed, &call.request.arguments, &results) {
        let reason = format!(
            "the policies disagree on the arguments this call would run with: a later policy \
             changed `{undone}` from what an earlier one rewrote it to; it is not run"
        );
        first.add(Ballot {
            policy: HOST.into(),
            vote: Vote::Deny(reason),
            notes: Vec::new(),
        });
    }
    if first.is_denied() {
        let (outcome, _) = first.finish();
        return Ok(Judged {
            call,
            risk,
            results,
            outcome,
            notes,
        });
    }
    let again = "the call as rewritten, judged again";
    release_reservations(env, &call, &risk, slots, &results, again);
    let risk = classify(env, &call, slots);
    let (mut again, composer, call) = decide(env, call, &risk, slots, Rewrites::Ignore, first);
    // Who rewrote the call.
    for (result, first) in again.iter_mut().zip(results) {
        (result.rewrite, result.rewrite_sha256) = (first.rewrite, first.rewrite_sha256);
    }
    let (outcome, notes) = composer.finish();
    Ok(Judged {
        call,
        risk,
        results: again,
        outcome,
        notes,
    })
}

/// The ballots of the built-in policies over `request`, in a composer the
/// loaded policies' ballots are then added to: a refusal by one of them
/// decides before any policy is asked.
fn first_ballots(env: &Env<'_>, request: &ToolRequest) -> Result<Composer<wit::PauseRequest>> {
    let mut composer = Composer::default();
    for native in env.natives {
        if composer.add(crate::native::ballot(*native, env.store, request)?) == Next::Stop {
            break;
        }
    }
    Ok(composer)
}

/// The first argument (a top-level key) an earlier policy's rewrite set
/// that the call as it will run (`last`) no longer has as that policy set
/// it: a later policy changed it, and the earlier one allowed the call only
/// as it rewrote it. Each rewrite is compared with the call before it,
/// starting from the `proposed` arguments. (A policy that rewrites every
/// time otherwise, a counter say, is not a disagreement: only what a later
/// policy changed counts.)
fn undone_rewrite(
    proposed: &serde_json::Value,
    last: &serde_json::Value,
    results: &[PolicyResult],
) -> Option<String> {
    let object = |value: &serde_json::Value| value.as_object().cloned().unwrap_or_default();
    let last = object(last);
    let mut before = object(proposed);
    for rewrite in results.iter().filter_map(|r| r.rewrite.as_ref()) {
        let after = object(rewrite);
        let set = after
            .iter()
            .filter(|(key, value)| before.get(*key) != Some(*value))
            .map(|(key, _)| key);
        let removed = before.keys().filter(|key| !after.contains_key(*key));
        if let Some(key) = set
            .chain(removed)
            .find(|key| last.get(*key) != after.get(*key))
        {
            return Some(key.clone());
        }
        before = after;
    }
    None
}

/// Whether a round of deciding applies the rewrites policies make.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rewrites {
    Apply,
    /// The call is settled: judge it as it is.
    Ignore,
}

/// Phase 1: every policy that classifies reports a risk; the highest wins.
fn classify(env: &Env<'_>, call: &Call<'_>, slots: &mut [Slot<'_>]) -> RiskReport {
    for slot in slots.iter_mut().filter(|s| s.plugin.phases.classify) {
        slot.risk = slot
            .run(env, call, |sandbox| {
                sandbox.call("classify", |p, s| match &p.risk {
                    Some(risk) => risk.call_classify(s),
                    None => unreachable!("filtered on the phase"),
                })
            })
            // Bounded before it is kept or handed to any other policy.
            .map(crate::bounds::risk)
            .ok();
    }
    compose_risk(slots)
}

/// Phase 2: account and decide, in priority order, until a deny. A policy
/// that rewrites the call hands every later one the rewritten call; the
/// call as it would run comes back with the results.
fn decide<'r>(
    env: &Env<'_>,
    mut call: Call<'r>,
    risk: &RiskReport,
    slots: &mut [Slot<'_>],
    rewrites: Rewrites,
    mut composer: Composer<wit::PauseRequest>,
) -> (Vec<PolicyResult>, Composer<wit::PauseRequest>, Call<'r>) {
    let wit_risk = wit::Risk::from(risk);
    let mut results = Vec::new();
    for slot in slots.iter_mut() {
        let plugin = slot.plugin;
        let (budget, decided) = decide_one(env, &call, &wit_risk, slot);
        let (ballot, rewrite) = match decided {
            Ok((decision, rewrite)) => (ballot_of(plugin, decision), rewrite),
            Err(failure) => {
                log_failure(plugin, &failure);
                let ballot = failure_ballot(&plugin.name, plugin.fail_mode, &failure.to_string());
                (ballot, None)
            }
        };
        let mut result = policy_result(slot, &ballot, budget);
        // Arguments the call has already are no rewrite.
        let rewrite =
            rewrite.filter(|a| rewrites == Rewrites::Apply && *a != call.request.arguments);
        if let Some(arguments) = rewrite {
            tracing::info!(policy = %plugin.name, "the call was rewritten");
            call = call.rewritten(arguments.clone());
            result.rewrote(arguments);
        }
        results.push(result);
        tracing::debug!(policy = %plugin.name, verdict = ?results.last().map(|r| r.verdict), elapsed_us = slot.elapsed.as_micros() as u64, "policy decided");
        if composer.add(ballot) == Next::Stop {
            break;
        }
    }
    (results, composer, call)
}

/// One policy's budget (when it accounts) and decision — its model
/// question answered, and the rewrite it carries checked.
#[allow(clippy::type_complexity)]
fn decide_one(
    env: &Env<'_>,
    call: &Call<'_>,
    wit_risk: &wit::Risk,
    slot: &mut Slot<'_>,
) -> (
    Option<wit::BudgetStatus>,
    Result<(wit::Decision, Option<serde_json::Value>), PolicyFailure>,
) {
    let plugin = slot.plugin;
    let budget = match &slot.accounted {
        // Accounted once per evaluation: a call judged again is not
        // charged again.
        Some(status) => Ok(Some(status.clone())),
        None if plugin.phases.account => slot
            .run(env, call, |sandbox| {
                sandbox.call("account", |p, s| match &p.budget {
                    Some(budget) => budget.call_account(s, wit_risk),
                    None => unreachable!("checked on the phase"),
                })
            })
            .map(|status| Some(crate::bounds::budget(status))),
        None => Ok(None),
    };
    if let Ok(Some(status)) = &budget {
        slot.accounted = Some(status.clone());
    }
    let limit = plugin.limits.max_output_bytes.get() as usize;
    let decided = budget.clone().and_then(|budget| {
        let budget = budget.unwrap_or(wit::BudgetStatus::Ok);
        let decision = slot.run(env, call, |sandbox| {
            let decision =
                sandbox.call("decide", |p, s| p.gate.call_decide(s, wit_risk, &budget))?;
            check_output_size(&decision, limit)?;
            Ok(decision)
        })?;
        let decision = match decision.verdict {
            wit::Verdict::AskModel(question) => {
                let reply = ask_model(env, plugin, &question);
                slot.run(env, call, |sandbox| {
                    let decision = sandbox.parse_reply(&reply)?;
                    check_output_size(&decision, limit)?;
                    Ok(decision)
                })?
            }
            _ => decision,
        };
        let rewrite = slot.run(env, call, |_| {
            checked_rewrite(&decision, &call.request, limit)
        })?;
        Ok((decision, rewrite))
    });
    (budget.ok().flatten(), decided)
}

/// The most keys (at any depth) a rewrite's arguments may hold.
const MAX_REWRITE_KEYS: usize = 1024;

/// The arguments a decision rewrites the call to, if it does: a JSON
/// object, on an allow, within the policy's output cap (`limit`, checked
/// before it is parsed) and [`MAX_REWRITE_KEYS`], that the tool's schema
/// (when known) accepts. Why not is cut to 1 KiB: it may quote the policy.
fn checked_rewrite(
    decision: &wit::Decision,
    request: &ToolRequest,
    limit: usize,
) -> Result<Option<serde_json::Value>, PolicyFailure> {
    let Some(text) = &decision.rewrite else {
        return Ok(None);
    };
    let refuse = |why: String| Err(PolicyFailure::BadRewrite(crate::bounds::cut(why, 1024)));
    if !matches!(decision.verdict, wit::Verdict::Allow) {
        return refuse("a rewrite rides only on an allow".into());
    }
    if text.len() > limit {
        return refuse(format!(
            "{} bytes of arguments, over the policy's {limit}-byte cap for what it answers \
             (`limits.max_output_bytes`)",
            text.len(),
        ));
    }
    let arguments: serde_json::Value = match serde_json::from_str(text) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        Ok(_) => return refuse("the new arguments are not a JSON object".into()),
        Err(err) => return refuse(format!("the new arguments are not JSON: {err}")),
    };
    if keys(&arguments) > MAX_REWRITE_KEYS {
        return refuse(format!(
            "the new arguments hold more than {MAX_REWRITE_KEYS} keys"
        ));
    }
    if let Some(schema) = &request.input_schema
        && let Err(problem) = crate::schema::check(schema, &arguments)
    {
        return refuse(format!("the tool's input schema refuses them: {problem}"));
    }
    Ok(Some(arguments))
}

/// How many object keys `value` holds, at any depth.
fn keys(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(object) => {
            object.len() + object.values().map(keys).sum::<usize>()
        }
        serde_json::Value::Array(items) => items.iter().map(keys).sum(),
        _ => 0,
    }
}

/// Policies that allowed before `denier` denied may have reserved something
/// for the call (a lease use): tell them it will not run.
fn release_reservations(
    env: &Env<'_>,
    call: &Call<'_>,
    risk: &RiskReport,
    slots: &mut [Slot<'_>],
    results: &[PolicyResult],
    denier: &str,
) {
    let event = wit::ToolEvent {
        call: call.wit.clone(),
        outcome: wit::ToolOutcome::Denied,
        summary: format!("denied by {denier}"),
        risk: wit::Risk::from(risk),
    };
    for (slot, result) in slots.iter_mut().zip(results) {
        if result.verdict == PolicyVerdict::Allow && slot.plugin.phases.observe {
            let _ = slot.run(env, call, |sandbox| sandbox.observe(&event));
        }
    }
}

/// The decision: the composed outcome, and for a pause, its pending gate.
fn conclude(
    env: &Env<'_>,
    call: &Call<'_>,
    outcome: Composed<wit::PauseRequest>,
    notes: Vec<(String, String)>,
    risk: RiskReport,
    results: Vec<PolicyResult>,
) -> Result<Decision> {
    let mut decision = Decision {
        verdict: Verdict::Allow,
        reason: None,
        decided_by: None,
        notes: notes
            .into_iter()
            .map(|(policy, text)| Note { policy, text })
            .collect(),
        risk,
        pause: None,
        approved_by: None,
        arguments: (call.generation > 0).then(|| call.request.arguments.clone()),
        output_checked: false,
        call_id: call.id.clone(),
        policies: results,
        shadows: Vec::new(),
        duration_us: 0,
    };
    match outcome {
        Composed::Allow => match rewritten_since_approval(call) {
            None => decision.approved_by = call.approved_by_a_person().map(|r| r.by.clone()),
            Some(reason) => {
                decision.verdict = Verdict::Deny;
                decision.reason = Some(reason);
                decision.decided_by = Some(HOST.into());
            }
        },
        Composed::Deny { policy, reason } => {
            decision.verdict = Verdict::Deny;
            decision.reason = Some(reason);
            decision.decided_by = Some(policy);
        }
        Composed::Pause { policy, pause } => {
            decision.verdict = Verdict::Pause;
            decision.reason = Some(crate::redact::for_display(&pause_reason(&pause)));
            if !env.dry_run {
                raise_gate(env, call, &policy, pause, &mut decision)?;
            }
            decision.decided_by = Some(policy);
        }
    }
    Ok(decision)
}

/// Why a person's approval of this call does not hold, if it does not: they
/// approved it as rewritten to other arguments than the policies rewrite it
/// to now (or as not rewritten at all). It runs only as approved.
fn rewritten_since_approval(call: &Call<'_>) -> Option<String> {
    let approval = call.approved_by_a_person()?;
    (approval.rewritten_sha256 != call.rewritten_sha256()).then(|| {
        "A person approved this call as it was to run then, but the policies now rewrite it to \
         other arguments, so that approval does not hold. Make the call again to be asked anew."
            .to_string()
    })
}

/// Keep `decision`'s pause as a pending gate, bound to the pausing
/// policy's build and to the arguments the call would run with.
fn raise_gate(
    env: &Env<'_>,
    call: &Call<'_>,
    policy: &str,
    pause: wit::PauseRequest,
    decision: &mut Decision,
) -> Result<()> {
    let request = &call.request;
    let now = crate::now_ms();
    let policy_sha256 = decision
        .policies
        .iter()
        .find(|r| r.name == policy)
        .map(|r| r.sha256.clone())
        .unwrap_or_default();
    let gate = PendingGate {
        request_id: new_request_id(),
        policy: policy.to_string(),
        user_id: request.user_id.clone(),
        thread_id: request.thread().to_string(),
        session_id: request.session_id.clone(),
        source_channel: request.channel.clone(),
        tool: request.tool.clone(),
        call_id: call.id.clone(),
        arguments: crate::redact::for_display(&call.arguments.json),
        fingerprint: call.fingerprint().to_string(),
        pause: pause_kind(pause),
        risk: Some(decision.risk.clone()),
        transcript_path: request.transcript_path.clone(),
        created_at_ms: now,
        expires_at_ms: now.saturating_add(env.gate_ttl.as_millis() as u64),
        policy_sha256,
        rewritten_sha256: call.rewritten_sha256(),
        project: request.cwd.clone(),
        always_digest: Some(crate::standing::call_digest(request)),
    };
    // The same call asked again while its pause is still pending (an agent
    // retrying, a graph resumed before anyone answered, two copies at
    // once) keeps that pause's request id and expiry (see
    // `GateStore::raise_gate`).
    let gate = env.store.gates().raise_gate(&gate, now)?;
    decision.pause = Some(PauseInfo {
        request_id: gate.request_id,
        user_id: gate.user_id,
        thread_id: gate.thread_id,
        channel: gate.source_channel,
        expires_at_ms: gate.expires_at_ms,
        kind: gate.pause,
    });
    Ok(())
}

/// A policy's decision as a ballot.
fn ballot_of(plugin: &Plugin, decision: wit::Decision) -> Ballot<wit::PauseRequest> {
    Ballot {
        policy: plugin.name.to_string(),
        vote: match decision.verdict {
            wit::Verdict::Allow => Vote::Allow,
            wit::Verdict::Skip => Vote::Skip,
            wit::Verdict::Deny(reason) => Vote::Deny(reason),
            wit::Verdict::Pause(pause) => Vote::Pause(pause),
            // `parse_reply` refuses a second question, so none reaches here.
            wit::Verdict::AskModel(_) => unreachable!("answered before the ballot"),
        },
        notes: decision.notes,
    }
}

/// What the decision reports of one policy.
fn policy_result(
    slot: &Slot<'_>,
    ballot: &Ballot<wit::PauseRequest>,
    budget: Option<wit::BudgetStatus>,
) -> PolicyResult {
    let plugin = slot.plugin;
    let (verdict, reason) = match &ballot.vote {
        Vote::Allow => (PolicyVerdict::Allow, None),
        Vote::Skip => (PolicyVerdict::Skip, None),
        Vote::Deny(reason) => (PolicyVerdict::Deny, Some(reason.clone())),
        Vote::Pause(pause) => (PolicyVerdict::Pause, Some(pause_reason(pause))),
    };
    let (logs, transcript_bytes) = slot.output();
    PolicyResult {
        name: plugin.name.to_string(),
        priority: plugin.priority,
        sha256: plugin.sha256.clone(),
        verdict,
        reason: reason.as_deref().map(crate::redact::for_display),
        notes: ballot.notes.clone(),
        rewrite: None,
        rewrite_sha256: None,
        risk: slot.risk.clone().map(RiskReport::from),
        budget: budget.as_ref().map(BudgetReport::from),
        failure: slot.failure.as_ref().map(ToString::to_string),
        logs,
        transcript_bytes,
        duration_us: slot.elapsed.as_micros() as u64,
    }
}

/// The highest level any policy reported; ties go to the earlier policy.
fn compose_risk(slots: &[Slot<'_>]) -> RiskReport {
    let mut best = RiskReport::default();
    for slot in slots {
        if let Some(risk) = &slot.risk {
            let report = RiskReport {
                by: Some(slot.plugin.name.to_string()),
                ..RiskReport::from(risk.clone())
            };
            if best.by.is_none() || report.level > best.level {
                best = report;
            }
        }
    }
    best
}

/// Ask the host's model the question `plugin`'s `decide` put, within that
/// policy's probe limits. Never fails: what went wrong is the reply.
fn ask_model(env: &Env<'_>, plugin: &Plugin, question: &wit::ModelQuestion) -> wit::ModelReply {
    let limits = &plugin.limits;
    if limits.probe_max_calls == 0 || limits.probe_max_wait_ms == 0 {
        tracing::warn!(policy = %plugin.name, "model question refused: the policy's probe limits allow none");
        return wit::ModelReply::Unanswered(wit::ModelError::BudgetSpent);
    }
    let timeout_ms = question.timeout_ms.min(limits.probe_max_wait_ms).max(1);
    let _span = tracing::debug_span!("toolgate.probe", policy = %plugin.name, timeout_ms).entered();
    match env.probe.ask(&question.system, &question.user, timeout_ms) {
        Ok(text) => wit::ModelReply::Answered(text),
        Err(failure) => {
            // No endpoint is a normal state (the default config has none).
            if matches!(failure, ProbeFailure::NotConfigured) {
                tracing::debug!(policy = %plugin.name, "model question: no endpoint configured");
            } else {
                tracing::warn!(policy = %plugin.name, error = %failure, "model question failed");
            }
            wit::ModelReply::Unanswered(match failure {
                ProbeFailure::NotConfigured => wit::ModelError::NotConfigured,
                ProbeFailure::Timeout => wit::ModelError::Timeout,
                other => wit::ModelError::Transport(other.to_string()),
            })
        }
    }
}

fn check_output_size(decision: &wit::Decision, limit: usize) -> Result<(), PolicyFailure> {
    let reason = match &decision.verdict {
        wit::Verdict::Deny(reason) => reason.len(),
        wit::Verdict::Pause(pause) => pause_reason(pause).len(),
        // A question is bounded by the host's own cap, not the output limit:
        // a prompt with recent history is legitimately longer than a reason.
        wit::Verdict::AskModel(question) => {
            let bytes = question.system.len() + question.user.len();
            if bytes > MAX_QUESTION_BYTES {
                return Err(PolicyFailure::OutputTooLarge {
                    bytes,
                    limit: MAX_QUESTION_BYTES,
                });
            }
            0
        }
        _ => 0,
    };
    let bytes = reason + decision.notes.iter().map(String::len).sum::<usize>();
    if bytes > limit {
        return Err(PolicyFailure::OutputTooLarge { bytes, limit });
    }
    Ok(())
}

/// Log a policy failure at the level its fail mode deserves.
fn log_failure(plugin: &Plugin, failure: &PolicyFailure) {
    match plugin.fail_mode {
        FailMode::Open => {
            tracing::warn!(policy = %plugin.name, cause = %failure, "policy failed; skipped (fail-open)");
        }
        FailMode::Closed => {
            tracing::error!(policy = %plugin.name, cause = %failure, "policy failed; call denied (fail-closed)");
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
