//! A policy that answers whatever its config tells it to, and counts how often
//! it decided (state key `decided`) so tests can prove it did or did not run.

use serde::Deserialize;
use toolgate_guest::{
    BudgetStatus, Classify, Config, ConfigError, Decision, FailMode, Policy, PolicyInfo,
    Resolution, Risk, RiskLevel, ToolCall, host,
};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Script {
    /// "allow", "deny", "pause", "auth", "skip" or "ask" (ask the model,
    /// which this policy cannot parse: it exports no `verdict`).
    verdict: String,
    reason: String,
    notes: Vec<String>,
    /// A risk category to report from `classify` (the bundled categories
    /// get their usual level; any other name is `medium`).
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
            default_fail_mode: FailMode::Open,
            commands: vec!["decided".into()],
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        let script: Script = config.parse()?;
        if !["", "allow", "deny", "pause", "auth", "skip", "ask"].contains(&script.verdict.as_str())
        {
            return Err(ConfigError::at(
                "verdict",
                format!(
                    "`{}` is not one of allow, deny, pause, auth, skip, ask",
                    script.verdict
                ),
            ));
        }
        Ok(Self(script))
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
            "ask" => Decision::ask_model("system", "user", 1_000),
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
                    .map_err(|err| format!("state unavailable: {err:?}"))?
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                    .unwrap_or(0);
                Ok(count.to_string())
            }
            other => Err(format!("unknown command `{other}`")),
        }
    }
}

impl Classify for Scripted {
    fn classify(&self, _call: &ToolCall) -> Risk {
        let category = self.0.risk.clone().unwrap_or_else(|| "low".into());
        let level = match category.as_str() {
            "low" => RiskLevel::None,
            "mcp-unclassified" => RiskLevel::Low,
            "file-write" => RiskLevel::Medium,
            "exfil-capable" => RiskLevel::High,
            "shell" => RiskLevel::Critical,
            _ => RiskLevel::Medium,
        };
        Risk {
            level,
            signals: self
                .0
                .risk
                .iter()
                .map(|r| format!("scripted:{r}"))
                .collect(),
            category,
        }
    }
}

toolgate_guest::export_policy!(Scripted, classify);
