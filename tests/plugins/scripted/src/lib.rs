//! A policy that answers whatever its config tells it to, and counts how often
//! it decided (state key `decided`) so tests can prove it did or did not run.

use serde::Deserialize;
use toolgate_guest::serde_json;
use toolgate_guest::{
    BudgetStatus, Caller, CheckOutput, Classify, Config, ConfigError, Decision, FailMode,
    FilterTools, Policy, PolicyInfo, Redaction, Resolution, ResultVerdict, Risk, RiskLevel,
    ToolCall, ToolDescriptor, ToolResult, host,
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
    /// With an allow: rewrite the call to its arguments with these fields set.
    set: serde_json::Map<String, serde_json::Value>,
    /// With `set`: also set this field to how many calls the policy has
    /// decided, so each rewrite differs from the last.
    set_count: Option<String>,
    /// Return this as the rewrite, verbatim (to test what the host refuses).
    rewrite_raw: Option<String>,
    /// Add a note with the arguments the policy saw.
    report_arguments: bool,
    /// What it makes of a tool's output: "pass" (the default), "replace"
    /// or "withhold" (with `output_text`), "trap", or "bad-span" (a
    /// redaction out of bounds).
    output: String,
    /// Redact every occurrence of these words in a tool's output.
    redact: Vec<String>,
    /// The replacement text or the reason to withhold.
    output_text: String,
    /// Tools it would never offer; "*" hides every one; "!trap" traps.
    hide: Vec<String>,
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
        let decided = host::state::try_increment("decided", u64::MAX)
            .ok()
            .flatten()
            .unwrap_or(0);
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
        let decision = Decision {
            rewrite: self.rewrite(call, decided),
            ..decision
        };
        let decision = self
            .0
            .notes
            .iter()
            .fold(decision, |d, note| d.with_note(note));
        let decision = if self.0.report_arguments {
            decision.with_note(format!("saw {}", call.arguments))
        } else {
            decision
        };
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

impl Scripted {
    /// The rewrite the script asks for, if any.
    fn rewrite(&self, call: &ToolCall, decided: u64) -> Option<String> {
        if let Some(raw) = &self.0.rewrite_raw {
            return Some(raw.clone());
        }
        if self.0.set.is_empty() && self.0.set_count.is_none() {
            return None;
        }
        let mut arguments: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&call.arguments).unwrap_or_default();
        arguments.extend(self.0.set.clone());
        if let Some(field) = &self.0.set_count {
            arguments.insert(field.clone(), decided.into());
        }
        Some(serde_json::Value::Object(arguments).to_string())
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

impl CheckOutput for Scripted {
    fn check_output(&self, result: &ToolResult) -> ResultVerdict {
        let script = &self.0;
        match script.output.as_str() {
            "replace" => return ResultVerdict::Replace(script.output_text.clone()),
            "withhold" => return ResultVerdict::Withhold(script.output_text.clone()),
            "trap" => panic!("the script traps on output"),
            "bad-span" => {
                return ResultVerdict::Redact(vec![Redaction {
                    start: 0,
                    end: u32::MAX,
                    replacement: String::new(),
                }]);
            }
            _ => {}
        }
        let spans: Vec<Redaction> = script
            .redact
            .iter()
            .flat_map(|word| {
                result
                    .output
                    .match_indices(word.as_str())
                    .map(|(at, found)| Redaction {
                        start: at as u32,
                        end: (at + found.len()) as u32,
                        replacement: "[redacted]".into(),
                    })
            })
            .collect();
        if spans.is_empty() {
            ResultVerdict::Pass
        } else {
            ResultVerdict::Redact(spans)
        }
    }
}

impl FilterTools for Scripted {
    fn visible(&self, _caller: &Caller, tools: &[ToolDescriptor]) -> Vec<bool> {
        let hide = &self.0.hide;
        if hide.iter().any(|h| h == "!trap") {
            panic!("the script traps on visibility");
        }
        // `!spin`: loop until the host's deadline ends the phase.
        if hide.iter().any(|h| h == "!spin") {
            loop {
                std::hint::black_box(&hide);
            }
        }
        // `!write`: try to write state, which the phase may not; offer
        // every tool if the write was refused, none if it went through.
        if hide.iter().any(|h| h == "!write") {
            let refused = host::state::set("written-while-filtering", b"x").is_err();
            return vec![refused; tools.len()];
        }
        tools
            .iter()
            .map(|tool| !hide.iter().any(|h| h == "*" || *h == tool.name))
            .collect()
    }
}

toolgate_guest::export_policy!(Scripted, classify, check_output, filter_tools);
