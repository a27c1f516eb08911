//! `toolgate:policy/events`: the policy's own append-only event stream.

use crate::bindings::toolgate::policy::events::{Event, Host};
use crate::sandbox::SandboxState;
use crate::store::StoredEvent;

/// Summaries and details longer than this are cut (on a char boundary).
const MAX_EVENT_TEXT: usize = 1024;

fn cut(text: Option<String>) -> Option<String> {
    text.map(|mut t| {
        if t.len() > MAX_EVENT_TEXT {
            let mut end = MAX_EVENT_TEXT;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t.truncate(end);
        }
        t
    })
}

fn to_wit(event: StoredEvent) -> Event {
    Event {
        session_id: event.session_id,
        turn: event.turn,
        kind: event.kind,
        tool: event.tool,
        detail: event.detail,
        summary: event.summary,
        at_ms: event.at_ms,
    }
}

impl Host for SandboxState {
    fn append(&mut self, event: Event) {
        let call = &self.call;
        call.store.append_event(StoredEvent {
            policy: call.policy.to_string(),
            session_id: event.session_id,
            turn: event.turn,
            kind: event.kind,
            tool: event.tool,
            detail: cut(event.detail),
            summary: cut(event.summary),
            at_ms: crate::now_ms(),
        });
    }

    fn session_recent(
        &mut self,
        session_id: String,
        limit: u32,
        exclude_kinds: Vec<String>,
    ) -> Vec<Event> {
        let call = &self.call;
        call.store
            .session_recent(&call.policy, &session_id, limit as usize, &exclude_kinds)
            .inspect_err(
                |err| tracing::warn!(policy = %call.policy, error = %err, "event read failed"),
            )
            .unwrap_or_default()
            .into_iter()
            .map(to_wit)
            .collect()
    }

    fn tool_history(
        &mut self,
        tool: String,
        exclude_session: String,
        limit: u32,
        exclude_kinds: Vec<String>,
    ) -> Vec<Event> {
        let call = &self.call;
        call.store
            .tool_history(
                &call.policy,
                &tool,
                &exclude_session,
                limit as usize,
                &exclude_kinds,
            )
            .inspect_err(
                |err| tracing::warn!(policy = %call.policy, error = %err, "event read failed"),
            )
            .unwrap_or_default()
            .into_iter()
            .map(to_wit)
            .collect()
    }
}
