//! Small constructors that keep policy code short and readable.

use crate::{
    ApprovalRequest, AuthRequest, ConfigError, Decision, ModelQuestion, PauseRequest, Verdict,
};

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

    /// Ask the host's model first; the policy's [`crate::ParseVerdict`]
    /// turns the reply into its decision.
    pub fn ask_model(system: impl Into<String>, user: impl Into<String>, timeout_ms: u32) -> Self {
        Self::of(Verdict::AskModel(ModelQuestion {
            system: system.into(),
            user: user.into(),
            timeout_ms,
        }))
    }

    /// Let the call run with `arguments` instead of the ones it has: the
    /// whole new arguments, a JSON object. Later policies decide on the
    /// rewritten call.
    pub fn allow_rewritten(arguments: &serde_json::Value) -> Self {
        Self {
            rewrite: Some(arguments.to_string()),
            ..Self::allow()
        }
    }

    /// A decision with the given verdict and no notes.
    pub fn of(verdict: Verdict) -> Self {
        Self {
            verdict,
            notes: Vec::new(),
            rewrite: None,
        }
    }

    /// Add a note for the agent.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

impl ConfigError {
    /// A problem with one key, or with a path into the table
    /// (`rule[2].args.command`), which the host turns into a line.
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            message: message.into(),
        }
    }

    /// A problem with the table as a whole.
    pub fn whole(message: impl Into<String>) -> Self {
        Self {
            key: None,
            message: message.into(),
        }
    }
}
