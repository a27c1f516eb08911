//! A policy that answers whatever its config tells it to, and counts how often
//! it decided (state key `decided`) so tests can prove it did or did not run.

use serde::Deserialize;
use toolgate_guest::{
    BudgetStatus, Decision, FailMode, Phases, Policy, PolicyInfo, Resolution, Risk, RiskCategory,
    ToolCall, host,
};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Script {
    /// "allow", "deny", "pause", "auth" or "skip".
    verdict: String,
    reason: String,
    notes: Vec<String>,
    /// A risk category to report from `classify`.
    risk: Option<String>,
    /// Add a note counting the calls this instance has decided, to show
    /// whether the host reused it.
    report_instance: bool,
    /// Deny (with `reason`) only the calls whose arguments contain this.
    deny_if_arguments_contain: Option<String>,
}

/// Calls decided by this instance (lives in the instance's own memory).
static INSTANCE_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Scripted(Script);

impl Policy for Scripted {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "scripted".into(),
            version: "0.1.0".into(),
            description: "answers from its config (test policy)".into(),
            phases: Phases::CLASSIFY,
            default_fail_mode: FailMode::Open,
            commands: vec!["decided".into()],
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let script: Script = toolgate_guest::parse_config(config)?;
        if !["", "allow", "deny", "pause", "auth", "skip"].contains(&script.verdict.as_str()) {
            return Err(format!(
                "verdict `{}` is not one of allow, deny, pause, auth, skip",
                script.verdict
            ));
        }
        Ok(Self(script))
    }

    fn classify(&self, _call: &ToolCall) -> Risk {
        let category = match self.0.risk.as_deref() {
            Some("shell") => RiskCategory::Shell,
            Some("exfil-capable") => RiskCategory::ExfilCapable,
            Some("file-write") => RiskCategory::FileWrite,
            Some("mcp-unclassified") => RiskCategory::McpUnclassified,
            _ => RiskCategory::Low,
        };
        Risk {
            category,
            signals: self
                .0
                .risk
                .iter()
                .map(|r| format!("scripted:{r}"))
                .collect(),
        }
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        let _ = host::state::try_increment("decided", u64::MAX);
        let calls = INSTANCE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let approved = call
            .resolutions
            .iter()
            .any(|r| matches!(r, Resolution::Approved(_)));
        let authenticated = call
            .resolutions
            .iter()
            .any(|r| matches!(r, Resolution::Authenticated(c) if c == "token"));
        let conditional_deny = self
            .0
            .deny_if_arguments_contain
            .as_deref()
            .is_some_and(|needle| call.arguments.contains(needle));
        let decision = match self.0.verdict.as_str() {
            _ if conditional_deny => Decision::deny(&self.0.reason),
            "deny" => Decision::deny(&self.0.reason),
            // A pause is resolved by a person; the resubmitted call runs.
            "pause" if !approved => Decision::pause_for_approval(&self.0.reason, true),
            "auth" if !authenticated => {
                Decision::pause_for_credential("token", &self.0.reason, None)
            }
            "skip" => Decision::skip(),
            _ => Decision::allow(),
        };
        let decision = self
            .0
            .notes
            .iter()
            .fold(decision, |d, note| d.with_note(note));
        if self.0.report_instance {
            decision.with_note(format!("instance-calls:{calls}"))
        } else {
            decision
        }
    }

    fn command(&self, name: &str, _args: &str) -> Result<String, String> {
        match name {
            "decided" => {
                let count = host::state::get("decided")
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                    .unwrap_or(0);
                Ok(count.to_string())
            }
            other => Err(format!("unknown command `{other}`")),
        }
    }
}

toolgate_guest::export_policy!(Scripted);
