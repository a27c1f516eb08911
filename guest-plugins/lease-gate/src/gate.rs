//! The gate itself, as a pure function of what the policy found in its state:
//! lease, then approval, then credential.

use crate::catalogue::{ActionSpec, Approval, Credential};
use toolgate_guest::ExecutionMode;

/// Everything the gate needs to decide one call.
pub struct GateInput<'a> {
    /// The lease-gate action name (`Bash`, `mcp:github/create_issue`).
    pub action: &'a str,
    /// The action's catalogue entry.
    pub spec: &'a ActionSpec,
    /// The thread.
    pub thread: &'a str,
    /// A valid lease covering the action, with a use left.
    pub has_lease: bool,
    /// How the runtime asks people.
    pub mode: ExecutionMode,
    /// An earlier "allow always" covers this action for this user and thread.
    pub auto_approved: bool,
    /// A person approved this very call.
    pub approved_now: bool,
    /// The action's credential is on file (or was just supplied).
    pub credential_present: bool,
    /// A short preview of the arguments, for the approval question.
    pub preview: &'a str,
}

/// What the gate answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    /// Run it.
    Allow,
    /// Refuse it, saying why and what would help.
    Deny(String),
    /// Ask a person to approve it.
    PauseForApproval {
        /// The question.
        description: String,
        /// Whether "allow always" may be offered.
        allow_always: bool,
    },
    /// Ask a person for a credential.
    PauseForCredential(Credential),
}

/// Decide: no lease → deny; approval needed and not given → pause (or, with
/// nobody to ask, deny); credential missing → pause (or deny); else allow.
///
/// `always` actions pause in every mode with a person, even
/// interactive-auto-approve, and "allow always" never covers them.
/// `unless-auto-approved` actions pause only in interactive mode without an
/// earlier "allow always". In autonomous mode nobody can answer a pause, so
/// anything needing a person is denied: the safe answer.
pub fn evaluate(input: &GateInput<'_>) -> GateOutcome {
    let action = input.action;
    if !input.has_lease {
        return GateOutcome::Deny(format!(
            "No valid lease grants `{action}` to thread `{}`. A lease is missing, expired, \
             revoked or used up; an operator can grant one with: toolgate command lease-gate \
             lease-grant '{{\"thread\": \"{}\", \"actions\": [\"{action}\"]}}'",
            input.thread, input.thread
        ));
    }
    let nobody_to_ask = input.mode == ExecutionMode::Autonomous;
    let needs_approval = match input.spec.approval {
        Approval::Never => false,
        Approval::UnlessAutoApproved => {
            input.mode != ExecutionMode::InteractiveAutoApprove && !input.auto_approved
        }
        Approval::Always => true,
    };
    if needs_approval && !input.approved_now {
        if nobody_to_ask {
            return GateOutcome::Deny(format!(
                "`{action}` needs a person's approval and this agent runs autonomously, with \
                 nobody to ask. Run it from an interactive session, or have an operator \
                 pre-approve it."
            ));
        }
        return GateOutcome::PauseForApproval {
            description: format!("Allow `{action}`? {}", input.preview),
            allow_always: input.spec.approval == Approval::UnlessAutoApproved,
        };
    }
    if let Some(credential) = &input.spec.credential
        && !input.credential_present
    {
        if nobody_to_ask {
            return GateOutcome::Deny(format!(
                "`{action}` needs the credential `{}` and nobody is present to supply it: {}",
                credential.name, credential.instructions
            ));
        }
        return GateOutcome::PauseForCredential(credential.clone());
    }
    GateOutcome::Allow
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Effect;

    fn spec(approval: Approval, credential: bool) -> ActionSpec {
        ActionSpec {
            effects: vec![Effect::WriteExternal],
            approval,
            credential: credential.then(|| Credential {
                name: "notion".into(),
                instructions: "Authenticate your Notion workspace".into(),
                url: None,
            }),
            administrative: false,
        }
    }

    fn input(spec: &ActionSpec, mode: ExecutionMode) -> GateInput<'_> {
        GateInput {
            action: "http",
            spec,
            thread: "t1",
            has_lease: true,
            mode,
            auto_approved: false,
            approved_now: false,
            credential_present: false,
            preview: "{}",
        }
    }

    #[test]
    fn no_lease_denies_naming_the_action_and_the_fix() {
        let spec = spec(Approval::Never, false);
        let mut gate = input(&spec, ExecutionMode::Autonomous);
        gate.has_lease = false;
        let GateOutcome::Deny(reason) = evaluate(&gate) else {
            panic!()
        };
        assert!(
            reason.contains("`http`") && reason.contains("lease-grant"),
            "{reason}"
        );
        gate.has_lease = true;
        assert_eq!(evaluate(&gate), GateOutcome::Allow);
    }

    #[test]
    fn always_pauses_even_in_auto_approve_mode() {
        let spec = spec(Approval::Always, false);
        for mode in [
            ExecutionMode::Interactive,
            ExecutionMode::InteractiveAutoApprove,
        ] {
            let mut gate = input(&spec, mode);
            gate.auto_approved = true;
            assert!(
                matches!(
                    evaluate(&gate),
                    GateOutcome::PauseForApproval {
                        allow_always: false,
                        ..
                    }
                ),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn unless_auto_approved_pauses_only_when_interactive() {
        let spec = spec(Approval::UnlessAutoApproved, false);
        assert!(matches!(
            evaluate(&input(&spec, ExecutionMode::Interactive)),
            GateOutcome::PauseForApproval {
                allow_always: true,
                ..
            }
        ));
        assert_eq!(
            evaluate(&input(&spec, ExecutionMode::InteractiveAutoApprove)),
            GateOutcome::Allow
        );
        let mut remembered = input(&spec, ExecutionMode::Interactive);
        remembered.auto_approved = true;
        assert_eq!(evaluate(&remembered), GateOutcome::Allow);
    }

    #[test]
    fn autonomous_mode_denies_what_needs_a_person() {
        for approval in [Approval::UnlessAutoApproved, Approval::Always] {
            let spec = spec(approval, false);
            assert!(
                matches!(evaluate(&input(&spec, ExecutionMode::Autonomous)), GateOutcome::Deny(r) if r.contains("autonomous"))
            );
        }
        let spec = spec(Approval::Never, true);
        assert!(
            matches!(evaluate(&input(&spec, ExecutionMode::Autonomous)), GateOutcome::Deny(r) if r.contains("notion"))
        );
    }

    #[test]
    fn install_chains_approval_then_credential_then_runs() {
        let spec = spec(Approval::Always, true);
        let mut gate = input(&spec, ExecutionMode::Interactive);
        assert!(matches!(
            evaluate(&gate),
            GateOutcome::PauseForApproval { .. }
        ));
        gate.approved_now = true;
        assert!(
            matches!(evaluate(&gate), GateOutcome::PauseForCredential(c) if c.name == "notion")
        );
        gate.credential_present = true;
        assert_eq!(evaluate(&gate), GateOutcome::Allow);
    }
}
