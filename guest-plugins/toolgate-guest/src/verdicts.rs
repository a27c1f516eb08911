//! Small constructors that keep policy code short and readable.

use crate::{ApprovalRequest, AuthRequest, Decision, PauseRequest, Phases, Verdict};

impl Decision {
    /// Let the call run.
    pub fn allow() -> Self {
        Self::of(Verdict::Allow)
    }

    /// Refuse the call; `reason` is shown to the agent.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::of(Verdict::Deny(reason.into()))
    }

    /// Abstain.
    pub fn skip() -> Self {
        Self::of(Verdict::Skip)
    }

    /// Hold the call for a person's approval.
    pub fn pause_for_approval(description: impl Into<String>, allow_always: bool) -> Self {
        Self::of(Verdict::Pause(PauseRequest::Approval(ApprovalRequest {
            description: description.into(),
            allow_always,
        })))
    }

    /// Hold the call until a person supplies a credential.
    pub fn pause_for_credential(
        credential: impl Into<String>,
        instructions: impl Into<String>,
        url: Option<String>,
    ) -> Self {
        Self::of(Verdict::Pause(PauseRequest::Authentication(AuthRequest {
            credential: credential.into(),
            instructions: instructions.into(),
            url,
        })))
    }

    /// A decision with the given verdict and no notes.
    pub fn of(verdict: Verdict) -> Self {
        Self {
            verdict,
            notes: Vec::new(),
        }
    }

    /// Add a note for the agent.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

impl Phases {
    /// No optional phase: the policy only decides.
    pub fn decide_only() -> Self {
        Self::empty()
    }
}
