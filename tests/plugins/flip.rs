// Shared body of the two flip policies used by the hot-reload test: the same
// policy name, two builds (so two digests), opposite answers.

use toolgate_guest::{
    BudgetStatus, Config, ConfigError, Decision, FailMode, Policy, PolicyInfo, Risk, ToolCall,
};

struct Flip;

impl Policy for Flip {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "flip".into(),
            version: if DENIES { "2.0.0-deny" } else { "1.0.0-allow" }.into(),
            description: "answers by version (test policy)".into(),
            default_fail_mode: FailMode::Closed,
            commands: Vec::new(),
        }
    }

    fn open(_config: Config) -> Result<Self, ConfigError> {
        Ok(Flip)
    }

    fn decide(&self, _call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        if DENIES {
            Decision::deny("the deny version")
        } else {
            Decision::allow()
        }
    }
}

toolgate_guest::export_policy!(Flip);
