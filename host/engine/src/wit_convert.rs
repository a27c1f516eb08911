//! Conversions between the host's own types and the WIT bindings' — the
//! one place where the two meet, so requests, decisions and gates stay plain
//! data that needs no wasmtime.

use crate::bindings::toolgate::policy::types as wit;
use crate::decision::{BudgetReport, RiskLevel, RiskReport};
use crate::gates::{GateResolution, RecordedResolution};
use crate::request::{Mode, Origin, ToolRequest};

/// The WIT view of a call, for the policies.
pub(crate) trait ToWit {
    /// The call as `tool-call`, with its arguments as JSON text (serialised
    /// once per evaluation) and these resolutions.
    fn to_wit(
        &self,
        call_id: &str,
        arguments: &str,
        resolutions: &[RecordedResolution],
    ) -> wit::ToolCall;

    /// What happened to the call, as `observe` hears it.
    fn to_wit_event(
        &self,
        outcome: crate::decision::Outcome,
        summary: &str,
        risk: &RiskReport,
    ) -> wit::ToolEvent;
}

impl ToWit for ToolRequest {
    fn to_wit_event(
        &self,
        outcome: crate::decision::Outcome,
        summary: &str,
        risk: &RiskReport,
    ) -> wit::ToolEvent {
        use crate::decision::Outcome;
        wit::ToolEvent {
            call: self.to_wit(
                self.call_id.as_deref().unwrap_or(""),
                &self.arguments_json(),
                &[],
            ),
            outcome: match outcome {
                Outcome::Succeeded => wit::ToolOutcome::Succeeded,
                Outcome::Failed => wit::ToolOutcome::Failed,
                Outcome::Denied => wit::ToolOutcome::Denied,
            },
            summary: summary.to_string(),
            risk: risk.into(),
        }
    }

    fn to_wit(
        &self,
        call_id: &str,
        arguments: &str,
        resolutions: &[RecordedResolution],
    ) -> wit::ToolCall {
        wit::ToolCall {
            call_id: call_id.to_string(),
            tool: self.tool.clone(),
            origin: (&self.origin).into(),
            arguments: arguments.to_string(),
            caller: wit::Caller {
                session_id: self.session_id.clone(),
                thread_id: self.thread().to_string(),
                user_id: self.user_id.clone(),
                channel: self.channel.clone(),
                thread_kind: self.thread_kind.clone(),
                is_subagent: self.is_subagent,
                turn: self.turn,
                mode: match self.mode {
                    Mode::Interactive => wit::ExecutionMode::Interactive,
                    Mode::InteractiveAutoApprove => wit::ExecutionMode::InteractiveAutoApprove,
                    Mode::Autonomous => wit::ExecutionMode::Autonomous,
                },
            },
            context_tokens: self.context_tokens,
            has_transcript: self.transcript_path.is_some(),
            resolutions: resolutions
                .iter()
                .filter_map(|r| match &r.resolution {
                    GateResolution::Approve { always } => {
                        Some(wit::Resolution::Approved(wit::ApprovalGrant {
                            always: *always,
                        }))
                    }
                    GateResolution::Authenticated { credential } => {
                        Some(wit::Resolution::Authenticated(credential.clone()))
                    }
                    GateResolution::Deny => None,
                })
                .collect(),
        }
    }
}

impl From<&Origin> for wit::ToolOrigin {
    fn from(origin: &Origin) -> Self {
        match origin {
            Origin::Builtin => Self::Builtin,
            Origin::Mcp(server) => Self::Mcp(server.clone()),
            Origin::Other(name) => Self::Other(name.clone()),
        }
    }
}

impl From<wit::ToolOrigin> for Origin {
    fn from(origin: wit::ToolOrigin) -> Self {
        match origin {
            wit::ToolOrigin::Builtin => Self::Builtin,
            wit::ToolOrigin::Mcp(server) => Self::Mcp(server),
            wit::ToolOrigin::Other(name) => Self::Other(name),
        }
    }
}

impl From<wit::RiskLevel> for RiskLevel {
    fn from(level: wit::RiskLevel) -> Self {
        match level {
            wit::RiskLevel::None => Self::None,
            wit::RiskLevel::Low => Self::Low,
            wit::RiskLevel::Medium => Self::Medium,
            wit::RiskLevel::High => Self::High,
            wit::RiskLevel::Critical => Self::Critical,
        }
    }
}

impl From<RiskLevel> for wit::RiskLevel {
    fn from(level: RiskLevel) -> Self {
        match level {
            RiskLevel::None => Self::None,
            RiskLevel::Low => Self::Low,
            RiskLevel::Medium => Self::Medium,
            RiskLevel::High => Self::High,
            RiskLevel::Critical => Self::Critical,
        }
    }
}

impl From<&RiskReport> for wit::Risk {
    fn from(risk: &RiskReport) -> Self {
        Self {
            level: risk.level.into(),
            category: risk.category.clone(),
            signals: risk.signals.clone(),
        }
    }
}

impl From<wit::Risk> for RiskReport {
    fn from(risk: wit::Risk) -> Self {
        Self {
            level: risk.level.into(),
            category: risk.category,
            signals: risk.signals,
            by: None,
        }
    }
}

impl From<&wit::BudgetStatus> for BudgetReport {
    fn from(status: &wit::BudgetStatus) -> Self {
        match status {
            wit::BudgetStatus::Ok => Self::Ok,
            wit::BudgetStatus::Warning(text) => Self::Warning(text.clone()),
            wit::BudgetStatus::Exceeded(text) => Self::Exceeded(text.clone()),
        }
    }
}
