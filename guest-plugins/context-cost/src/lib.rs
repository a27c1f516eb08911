//! context-cost: a context-window budget for agents.
//!
//! Every tool call re-sends the agent's whole context, so the last cheap
//! action of a long-lived agent is its most expensive one. This policy
//! measures the context the newest turn carried and, past `warn_tokens`,
//! allows the call with a note telling the agent to wrap up; past
//! `max_tokens` (off by default) it denies everything except saving and
//! reporting back (see [`escape`]). It fails open throughout.

pub mod budget;
pub mod escape;
pub mod transcript;

use budget::{CostConfig, Standing, evaluate_cost, stop_text, warn_text};
use toolgate_guest::{
    Account, BudgetStatus, Config, ConfigError, Decision, FailMode, Policy, PolicyInfo, Risk,
    ToolCall, host,
};

/// Added to a call permitted past the ceiling, so the agent knows why.
const ESCAPE_NOTE: &str = "Context ceiling reached: this call is permitted only because it saves \
     or reports your work. Finish saving and report back.";

/// The policy: its parsed config.
pub struct ContextCost(CostConfig);

impl ContextCost {
    /// The context size to judge this call by, or `None` (fail open) when the
    /// call is out of scope or nothing can be measured.
    fn measure(&self, call: &ToolCall) -> Option<u64> {
        let config = &self.0;
        if !config.enabled || (config.subagents_only && !call.caller.is_subagent) {
            return None;
        }
        call.context_tokens.or_else(|| {
            if !call.has_transcript {
                return None;
            }
            let tail = host::transcript_tail(config.transcript_tail_bytes)
                .inspect_err(|why| {
                    host::log(host::Level::Warn, &format!("transcript unreadable: {why}"))
                })
                .ok()
                .flatten()?;
            transcript::latest_context_tokens(&tail)
        })
    }
}

impl Policy for ContextCost {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "context-cost".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "warns (and optionally stops) an agent carrying too much context".into(),
            default_fail_mode: FailMode::Open,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        config.parse().map(Self)
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, budget: &BudgetStatus) -> Decision {
        match budget {
            BudgetStatus::Ok => Decision::allow(),
            BudgetStatus::Warning(text) => Decision::allow().with_note(text),
            BudgetStatus::Exceeded(text) => {
                let arguments = serde_json::from_str(&call.arguments).unwrap_or_default();
                if escape::is_persistence_escape(&call.tool, &arguments) {
                    Decision::allow().with_note(ESCAPE_NOTE)
                } else {
                    Decision::deny(text)
                }
            }
        }
    }
}

impl Account for ContextCost {
    fn account(&self, call: &ToolCall, _risk: &Risk) -> BudgetStatus {
        let Some(tokens) = self.measure(call) else {
            return BudgetStatus::Ok;
        };
        match evaluate_cost(tokens, &self.0) {
            Standing::Ok => BudgetStatus::Ok,
            Standing::Warning => BudgetStatus::Warning(warn_text(tokens, &self.0)),
            Standing::Exceeded => BudgetStatus::Exceeded(stop_text(tokens, self.0.max_tokens)),
        }
    }
}

toolgate_guest::export_policy!(ContextCost, account);
