//! Calls that ran with input toolgate did not judge. A runtime runs other
//! hooks beside toolgate's, and Claude Code runs mods: one that rewrites a
//! call after toolgate answered (`updatedInput`) makes something run that
//! no policy saw. toolgate cannot stop that call — it learns of it only
//! when the runtime reports it as run (`PostToolUse`, whose input is the
//! one that ran) — but it can stop what comes next: a question is raised
//! for a person, and until someone resolves it every further call of the
//! thread is refused (`[approvals] stop_on_unjudged_runs`).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::Result;
use crate::decision::HOST;
use crate::gates::{GateKey, PauseKind, PendingGate, new_request_id};
use crate::request::ToolRequest;
use crate::store::Store;

/// What starts the fingerprint of such a question's gate.
const MARK: &str = "unjudged:";

/// How long the question waits: long, since it stops a thread until a
/// person looks (a day; then the thread goes on).
const WAITS_MS: u64 = 24 * 3600 * 1000;

/// Whether any such question may be pending: false lets every decision
/// skip the lookup.
pub(crate) struct Unjudged {
    may_be_pending: AtomicBool,
}

fn is_unjudged(gate: &PendingGate) -> bool {
    gate.policy == HOST && gate.fingerprint.starts_with(MARK)
}

impl Unjudged {
    /// For `store`, which may hold questions from before a restart.
    pub(crate) fn open(store: &Store) -> Result<Self> {
        let pending = store.gates().list_gates(None, crate::now_ms())?;
        Ok(Self {
            may_be_pending: AtomicBool::new(pending.iter().any(is_unjudged)),
        })
    }

    /// Raise the question for `ran`, which ran with input toolgate did not
    /// judge.
    pub(crate) fn raise(&self, store: &Store, ran: &ToolRequest) -> Result<PendingGate> {
        let now = crate::now_ms();
        let call_id = ran.call_id.clone().unwrap_or_default();
        let gate = PendingGate {
            request_id: new_request_id(),
            policy: HOST.into(),
            user_id: ran.user_id.clone(),
            thread_id: ran.thread().to_string(),
            session_id: ran.session_id.clone(),
            source_channel: ran.channel.clone(),
            tool: ran.tool.clone(),
            call_id: call_id.clone(),
            arguments: crate::redact::for_display(&ran.arguments_text().json),
            fingerprint: format!("{MARK}{call_id}"),
            pause: PauseKind::Approval {
                description: format!(
                    "The `{}` call {call_id} ran with input toolgate did not judge: another hook \
                     or a mod changed it after toolgate's answer. Look at what ran (shown \
                     here), then resolve this to let the session go on.",
                    ran.tool
                ),
                allow_always: false,
            },
            risk: None,
            transcript_path: ran.transcript_path.clone(),
            created_at_ms: now,
            expires_at_ms: now.saturating_add(WAITS_MS),
            policy_sha256: String::new(),
            rewritten_sha256: None,
            project: ran.cwd.clone(),
            always_digest: None,
        };
        self.may_be_pending.store(true, Ordering::SeqCst);
        store.gates().raise_gate(&gate, now)
    }

    /// Why `request` is refused: its thread waits for a person to look at
    /// a call that ran as toolgate did not judge it. None when it does not.
    pub(crate) fn stopped(&self, store: &Store, request: &ToolRequest) -> Result<Option<String>> {
        if !self.may_be_pending.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let key = GateKey {
            user_id: request.user_id.clone(),
            thread_id: request.thread().to_string(),
        };
        let gates = store.gates().thread_gates(&key, crate::now_ms())?;
        Ok(gates.iter().find(|g| is_unjudged(g)).map(|gate| {
            format!(
                "toolgate: the `{}` call {} in this session ran with input toolgate did not \
                 judge (another hook or a mod changed it), so every call waits until a person \
                 looks: `toolgate gates resolve --request-id {}` from a terminal of their own",
                gate.tool, gate.call_id, gate.request_id
            )
        }))
    }
}
