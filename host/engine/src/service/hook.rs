//! A runtime's hook event answered end to end: parsed by its adapter,
//! confined to the caller's tenant, decided or observed by the host, and
//! answered in the runtime's words (or its failure answer).

use serde_json::{Value, json};

use crate::Toolgate;
use crate::decision::{Decision, Verdict};
use crate::error::Result;
use crate::gates::GateKey;
use crate::hooks::{Adapter, EventKind, HookRuntime, Needs, OnError, adapter};
use crate::request::{DEFAULT_USER_ID, ToolRequest};
use crate::tenant::Tenant;

/// What [`handle_as`] produced.
#[derive(Debug)]
pub struct Handled {
    /// The text the hook prints on stdout: never empty, since the
    /// installed command line counts no output as a failure.
    pub output: String,
    /// The decision, for a call that was decided.
    pub decision: Option<Decision>,
}

/// Handle one event of `runtime` end to end for `tenant` (the event's
/// session and call made its own). Never fails: an error becomes the
/// runtime's failure answer for `on_error`.
pub fn handle_as(
    host: &Toolgate,
    tenant: Tenant,
    runtime: HookRuntime,
    input: &str,
    on_error: OnError,
) -> Handled {
    let mut decision = None;
    let adapter = adapter(runtime);
    let output = drive(host, (adapter, tenant), input, &mut decision).unwrap_or_else(|err| {
        let why = err.report();
        tracing::error!(error = %why, "hook failed; answering with the fail mode");
        crate::hooks::failure_answer(runtime, on_error, &why)
    });
    Handled {
        output: output.to_string(),
        decision,
    }
}

/// The walk every event takes: parse, then turn, decision or outcome.
fn drive(
    host: &Toolgate,
    (adapter, tenant): (&dyn Adapter, Tenant),
    input: &str,
    decided: &mut Option<Decision>,
) -> Result<Value> {
    let mut event = adapter.parse(input)?;
    tenant.confine_event(&mut event)?;
    let prompt = event.prompt.as_deref();
    if let (Some(declined), Needs::Store | Needs::Policies) =
        (adapter.decline_detector(), event.needs())
    {
        // A call the person declined in the prompt ends its gate now at
        // the latest (a daemon ends it within a second).
        let key = GateKey {
            user_id: tenant.user_id().unwrap_or_else(|| DEFAULT_USER_ID.into()),
            thread_id: event.session.clone(),
        };
        host.end_declined_gates(Some(&key), declined)?;
    }
    match event.kind {
        EventKind::Nothing => Ok(json!({})),
        EventKind::NewTurn => {
            host.turn_of(&event.session, prompt, true)?;
            Ok(adapter.new_turn_answer())
        }
        EventKind::Decide {
            mut request,
            can_ask,
        } => {
            request.turn = host.turn_of(&event.session, prompt, false)?;
            let mut decision = host.evaluate(&request)?;
            if !adapter.applies_rewrites() {
                refuse_rewritten(&mut decision);
            }
            if let Some(answer) = own_rules_answer(host, adapter, &request, &decision)? {
                *decided = Some(decision);
                return Ok(answer);
            }
            let answer = adapter.answer(&decision, can_ask);
            *decided = Some(decision);
            Ok(answer)
        }
        EventKind::Ran {
            mut request,
            outcome,
            summary,
            output,
        } => {
            request.turn = host.turn_of(&event.session, prompt, false)?;
            // The call ran, so if toolgate had asked, the person said yes
            // in the runtime's own prompt: that gate is answered.
            if let Some(gate) = host.close_answered_gate(&request)? {
                tracing::info!(request_id = %gate.request_id, policy = %gate.policy, "gate answered in the runtime's prompt");
            }
            host.check_ran_as_judged(&request)?;
            let answer = output.and_then(|output| {
                adapter.output_answer(&host.check_output(&request, outcome, &output))
            });
            host.observe(&request, outcome, &summary);
            Ok(answer.unwrap_or_else(|| json!({})))
        }
    }
}

/// With `[approvals] follow_client_rules`, a call the policies only ask
/// about, as asked, left to a runtime that enforces its own rules and asks
/// a person for the rest: its pause withdrawn (the runtime asks, not
/// toolgate), and the runtime's answer for "your rules decide".
fn own_rules_answer(
    host: &Toolgate,
    adapter: &dyn Adapter,
    request: &ToolRequest,
    decision: &Decision,
) -> Result<Option<Value>> {
    let asked_only = decision.verdict == Verdict::Pause
        && decision.arguments.is_none()
        && decision
            .pause
            .as_ref()
            .is_some_and(|p| matches!(p.kind, crate::gates::PauseKind::Approval { .. }));
    if !asked_only || !host.with_config(|c| c.approvals.follow_client_rules) {
        return Ok(None);
    }
    let Some(answer) = adapter.own_rules_answer(request) else {
        return Ok(None);
    };
    if let Some(pause) = &decision.pause {
        host.withdraw_pause(pause)?;
    }
    Ok(Some(answer))
}

/// A rewritten call allowed (or paused) for a runtime that can only run
/// the call as proposed: a deny that says what to call instead. The call as
/// proposed never runs; the agent's retry with the rewritten arguments is
/// decided anew.
fn refuse_rewritten(decision: &mut Decision) {
    let Some(arguments) = &decision.arguments else {
        return;
    };
    if decision.verdict == Verdict::Deny {
        return;
    }
    let rewriters: Vec<&str> = decision
        .policies
        .iter()
        .filter(|p| p.rewrite_sha256.is_some())
        .map(|p| p.name.as_str())
        .collect();
    decision.verdict = Verdict::Deny;
    decision.reason = Some(format!(
        "toolgate ({} rewrote this call): it may run only with these arguments instead: {}. \
         Call the tool again with exactly these arguments.",
        rewriters.join(", "),
        crate::redact::for_display(&arguments.to_string())
    ));
    decision.pause = None;
}
