//! Conversions between the host's own types and the WIT bindings' — the
//! one place where the two meet, so requests, decisions and gates stay plain
//! data that needs no wasmtime.

use crate::bindings::toolgate::policy::types as wit;
use crate::decision::{BudgetReport, RiskCategory};
use crate::gates::{GateResolution, RecordedResolution};
use crate::request::{Mode, Origin, ToolRequest};

/// The WIT view of a call, for the policies.
pub(crate) trait ToWit {
    /// The call as `tool-call`, with these resolutions.
    fn to_wit(&self, call_id: &str, resolutions: &[RecordedResolution]) -> wit::ToolCall;
}

impl ToWit for ToolRequest {
    fn to_wit(&self, call_id: &str, resolutions: &[RecordedResolution]) -> wit::ToolCall {
        wit::ToolCall {
            call_id: call_id.to_string(),
            tool: self.tool.clone(),
            origin: match &self.origin {
                Origin::Builtin => wit::ToolOrigin::Builtin,
                Origin::Mcp(server) => wit::ToolOrigin::Mcp(server.clone()),
                Origin::Other(name) => wit::ToolOrigin::Other(name.clone()),
            },
            arguments: self.arguments_json(),
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

impl From<wit::RiskCategory> for RiskCategory {
    fn from(category: wit::RiskCategory) -> Self {
        match category {
            wit::RiskCategory::Low => Self::Low,
            wit::RiskCategory::McpUnclassified => Self::McpUnclassified,
            wit::RiskCategory::FileWrite => Self::FileWrite,
            wit::RiskCategory::ExfilCapable => Self::ExfilCapable,
            wit::RiskCategory::Shell => Self::Shell,
        }
    }
}

impl From<RiskCategory> for wit::RiskCategory {
    fn from(category: RiskCategory) -> Self {
        match category {
            RiskCategory::Low => Self::Low,
            RiskCategory::McpUnclassified => Self::McpUnclassified,
            RiskCategory::FileWrite => Self::FileWrite,
            RiskCategory::ExfilCapable => Self::ExfilCapable,
            RiskCategory::Shell => Self::Shell,
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
