//! `toolgate:policy/events`: the policy's own append-only event stream.

use super::{MAX_FIELD, MAX_LIST, MAX_LIST_ARGUMENT, cut};
use crate::bindings::toolgate::policy::events::{Event, EventsError, Host};
use crate::decision::RiskReport;
use crate::request::Origin;
use crate::sandbox::SandboxState;
use crate::store::StoredEvent;

/// Summaries and details longer than this are cut (on a char boundary).
const MAX_EVENT_TEXT: usize = 1024;

/// Capped, as every list argument is.
fn kinds(mut exclude: Vec<String>) -> Vec<String> {
    exclude.truncate(MAX_LIST_ARGUMENT);
    exclude.into_iter().map(|k| cut(k, MAX_FIELD)).collect()
}

/// Names kept to the short-field cap.
fn capped_origin(origin: Origin) -> Origin {
    match origin {
        Origin::Builtin => Origin::Builtin,
        Origin::Mcp(server) => Origin::Mcp(cut(server, MAX_FIELD)),
        Origin::Other(name) => Origin::Other(cut(name, MAX_FIELD)),
    }
}

/// A category and signals kept to the caps every list argument has.
fn capped_risk(mut risk: RiskReport) -> RiskReport {
    risk.category = cut(risk.category, MAX_FIELD);
    risk.signals.truncate(MAX_LIST_ARGUMENT);
    risk.signals = risk
        .signals
        .into_iter()
        .map(|s| cut(s, MAX_FIELD))
        .collect();
    risk
}

fn to_wit(event: StoredEvent) -> Event {
    Event {
        session_id: event.session_id,
        turn: event.turn,
        kind: event.kind,
        tool: event.tool,
        origin: event.origin.as_ref().map(Into::into),
        risk: event.risk.as_ref().map(Into::into),
        detail: event.detail,
        summary: event.summary,
        at_ms: event.at_ms,
    }
}

/// A failed read, logged for the operator and told to the policy as such
/// (never as "no events").
fn read_failed(policy: &str, err: crate::Error) -> EventsError {
    let why = err.report();
    tracing::warn!(policy, error = %why, "event read failed");
    EventsError::Storage(why)
}

impl Host for SandboxState {
    fn append(&mut self, event: Event) {
        let call = &mut self.call;
        // A pure phase (visibility) records nothing.
        if call.read_only {
            return;
        }
        if call.events_appended >= call.events_per_call {
            if call.events_appended == call.events_per_call {
                tracing::warn!(policy = %call.policy, max = call.events_per_call, "event appends past limits.events_per_call are dropped");
            }
            call.events_appended = call.events_appended.saturating_add(1);
            return;
        }
        call.events_appended += 1;
        call.events.append_event(StoredEvent {
            policy: call.policy.to_string(),
            session_id: cut(event.session_id, MAX_FIELD),
            turn: event.turn,
            kind: cut(event.kind, MAX_FIELD),
            tool: event.tool.map(|t| cut(t, MAX_FIELD)),
            origin: event.origin.map(|o| capped_origin(o.into())),
            risk: event.risk.map(|r| capped_risk(r.into())),
            detail: event.detail.map(|t| cut(t, MAX_EVENT_TEXT)),
            summary: event.summary.map(|t| cut(t, MAX_EVENT_TEXT)),
            at_ms: crate::now_ms(),
        });
    }

    fn session_recent(
        &mut self,
        session_id: String,
        limit: u32,
        exclude_kinds: Vec<String>,
    ) -> Result<Vec<Event>, EventsError> {
        let call = &self.call;
        call.events
            .session_recent(
                &call.policy,
                &cut(session_id, MAX_FIELD),
                (limit as usize).min(MAX_LIST),
                &kinds(exclude_kinds),
            )
            .map(|events| events.into_iter().map(to_wit).collect())
            .map_err(|err| read_failed(&call.policy, err))
    }

    fn tool_history(
        &mut self,
        tool: String,
        exclude_session: String,
        limit: u32,
        exclude_kinds: Vec<String>,
    ) -> Result<Vec<Event>, EventsError> {
        let call = &self.call;
        call.events
            .tool_history(
                &call.policy,
                &cut(tool, MAX_FIELD),
                &cut(exclude_session, MAX_FIELD),
                (limit as usize).min(MAX_LIST),
                &kinds(exclude_kinds),
            )
            .map(|events| events.into_iter().map(to_wit).collect())
            .map_err(|err| read_failed(&call.policy, err))
    }
}
