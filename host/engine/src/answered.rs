//! A call asked again is answered again, not decided again. A runtime
//! resends a call it got no answer to (a hook's read timeout, a dropped
//! connection, a client that gave up and retried) with the same call id;
//! deciding each copy would take a lease use, a budget share or a
//! person's approval once per copy. So the first copy's allow or deny is
//! kept for a while, by user, session and call id, and every copy of the
//! same call gets it; copies that arrive together wait for the first.
//!
//! A pause is not kept: the same call asked after a person answered must
//! be decided again, with the answer (and the pause itself is one gate
//! with one request id however often it is raised). Memory only, like the
//! runtime's own retries: a daemon that restarted decides afresh.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::memo::BoundedMap;
use crate::plugins::PluginSet;
use crate::request::{ArgumentsText, ToolRequest};
use crate::{Decision, Verdict};

/// The calls answered lately, each behind its own lock; and what each call
/// allowed or asked about should run as (see [`Answered::ran_unjudged`]).
pub(crate) struct Answered {
    calls: Mutex<BoundedMap<CallKey, Slot>>,
    to_run: Mutex<BoundedMap<CallKey, [u8; 32]>>,
}

impl Default for Answered {
    fn default() -> Self {
        Self {
            calls: Mutex::new(BoundedMap::new(Self::KEPT)),
            to_run: Mutex::new(BoundedMap::new(Self::KEPT)),
        }
    }
}

/// User, session and the runtime's call id.
type CallKey = (String, String, String);

type Slot = Arc<Mutex<Option<Answer>>>;

struct Answer {
    /// What the call was: a copy must be the same call, not merely carry
    /// its id.
    fingerprint: [u8; 32],
    decision: Decision,
    at: Instant,
    /// The policies that decided it: after a reload the operator's new
    /// rules decide a copy. (A weak reference: it keeps no old policy
    /// alive, and no later set can take its address.)
    plugins: Weak<PluginSet>,
}

impl Answered {
    /// How many calls are remembered.
    const KEPT: usize = 4096;
    /// How long an answer stands for a copy (a hook's resend comes within
    /// its timeout, 30 s).
    const FOR: Duration = Duration::from_secs(600);
    /// A decision carrying more rewritten arguments than this is not kept
    /// (memory stays bounded); a copy of such a call is decided again.
    const LARGEST_REWRITE: usize = 64 * 1024;

    /// `decide` `request` once under `plugins`: a copy of a call decided
    /// lately by the same policies gets the same decision without deciding.
    pub(crate) fn once(
        &self,
        plugins: &Arc<PluginSet>,
        request: &ToolRequest,
        arguments: ArgumentsText,
        decide: impl FnOnce(ArgumentsText) -> crate::Result<Decision>,
    ) -> crate::Result<Decision> {
        let Some(call_id) = request.call_id.as_deref() else {
            return decide(arguments);
        };
        let slot = self.slot((
            request.user_id.clone(),
            request.session_id.clone(),
            call_id.to_string(),
        ));
        // Held while deciding: a copy arriving meanwhile waits for this
        // answer rather than deciding beside it.
        let mut answer = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let fingerprint = fingerprint(request, &arguments);
        if let Some(known) = answer
            .as_ref()
            .filter(|a| a.fingerprint == fingerprint && a.at.elapsed() < Self::FOR)
            .filter(|a| Weak::ptr_eq(&a.plugins, &Arc::downgrade(plugins)))
        {
            tracing::debug!(call_id, "the same call asked again: its first answer");
            return Ok(known.decision.clone());
        }
        let decision = decide(arguments)?;
        self.remember_what_runs(request, fingerprint, &decision);
        *answer = keeps(&decision).then(|| Answer {
            fingerprint,
            decision: decision.clone(),
            at: Instant::now(),
            plugins: Arc::downgrade(plugins),
        });
        Ok(decision)
    }

    /// What `request` should run as once `decision` lets it (its
    /// arguments, or the rewrite the decision carries), for
    /// [`Self::ran_unjudged`].
    fn remember_what_runs(&self, request: &ToolRequest, judged: [u8; 32], decision: &Decision) {
        let (Some(call_id), Verdict::Allow | Verdict::Pause) =
            (request.call_id.as_deref(), decision.verdict)
        else {
            return;
        };
        let expected = match &decision.arguments {
            Some(rewrite) => {
                let mut rewritten = request.clone();
                rewritten.arguments = rewrite.clone();
                fingerprint(request, &rewritten.arguments_text())
            }
            None => judged,
        };
        let key = (
            request.user_id.clone(),
            request.session_id.clone(),
            call_id.to_string(),
        );
        let mut to_run = self.to_run.lock().unwrap_or_else(PoisonError::into_inner);
        to_run.insert(key, expected);
    }

    /// Whether `ran`, a call the runtime reports as run, ran with input
    /// other than toolgate judged for its call id: another hook or a mod
    /// rewrote it after toolgate's answer. False for a call toolgate does
    /// not remember judging (a daemon restarted, a call without an id).
    pub(crate) fn ran_unjudged(&self, ran: &ToolRequest) -> bool {
        let Some(call_id) = ran.call_id.as_deref() else {
            return false;
        };
        let key = (
            ran.user_id.clone(),
            ran.session_id.clone(),
            call_id.to_string(),
        );
        let to_run = self.to_run.lock().unwrap_or_else(PoisonError::into_inner);
        to_run
            .get(&key)
            .is_some_and(|expected| *expected != fingerprint(ran, &ran.arguments_text()))
    }

    fn slot(&self, key: CallKey) -> Slot {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = calls.get(&key) {
            return slot.clone();
        }
        let slot = Slot::default();
        calls.insert(key, slot.clone());
        slot
    }
}

/// Whether `decision` stands for a copy of its call: an allow or a deny,
/// not too large to keep.
fn keeps(decision: &Decision) -> bool {
    matches!(decision.verdict, Verdict::Allow | Verdict::Deny)
        && decision.arguments.as_ref().is_none_or(|rewrite| {
            serde_json::to_string(rewrite).is_ok_and(|t| t.len() <= Answered::LARGEST_REWRITE)
        })
}

/// What makes two requests the same call: the tool, where it comes from,
/// its arguments, the thread and the mode it runs in.
fn fingerprint(request: &ToolRequest, arguments: &ArgumentsText) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [
        request.tool.as_bytes(),
        serde_json::to_string(&request.origin)
            .unwrap_or_default()
            .as_bytes(),
        arguments.sha256(),
        request.thread_id.as_deref().unwrap_or("").as_bytes(),
        format!("{:?}", request.mode).as_bytes(),
    ] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}
