//! rules: the operator's own rules, written in the config, with no compiler.
//!
//! ```toml
//! [[plugins.rules.config.rule]]
//! name = "no-get-env"
//! tool = "mcp:everything/get-env"
//! action = "deny"
//! reason = "get-env prints the server's environment, secrets included"
//! ```
//!
//! A rule matches on the call's action name (`Bash`, `mcp:SERVER/TOOL`),
//! its argument fields, the execution mode, whether a subagent calls and
//! the thread's kind; it allows, denies, asks a person, or adds a note. A
//! `limit` makes it fire only past N matching calls per turn, session or
//! time window ([`limit`]).
//!
//! Order: the rules are tried in the order written and **the first that
//! fires decides**, as in a firewall: put an exception before the rule it
//! carves from. A `note` rule adds its note and the next rule is tried. No
//! rule firing is an abstention. The policy fails closed: if it cannot
//! read its counters, it denies.
//!
//! For what the TOML shorthand cannot say, `cedar = '''…'''` holds Cedar
//! policies ([`cedar`]), asked when no TOML rule decided.

pub mod cedar;
pub mod limit;
pub mod matcher;
pub mod rule;

use serde::Deserialize;
use serde_json::Value;
use toolgate_guest::host::{self, StateError, state};
use toolgate_guest::{
    BudgetStatus, Config, ConfigError, Decision, ExecutionMode, FailMode, Policy, PolicyInfo,
    Resolution, Risk, ToolCall, action_name, state_key,
};

use matcher::Arguments;
use rule::{Action, Rule};

/// The policy's config table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RulesConfig {
    /// The rules, in the order they are tried.
    rule: Vec<Value>,
    /// Cedar policies, asked when no rule decided.
    cedar: Option<String>,
}

/// The compiled rules.
pub struct Rules {
    rules: Vec<Rule>,
    cedar: Option<cedar::CedarPolicies>,
}

/// What the rules keep between calls: limit counters and remembered
/// "allow always" answers. The policy's state in the host; a map in native
/// tests.
pub trait Memory {
    /// Take one unit of the counter at `key` if fewer than `limit` are
    /// taken: the count taken, or none when the limit is reached.
    fn take(&mut self, key: &str, limit: u64) -> Result<Option<u64>, StateError>;
    /// The counter at `key`, taking nothing.
    fn peek(&mut self, key: &str) -> Result<u64, StateError>;
    /// Drop the keys under `prefix` other than `keep` (older windows).
    fn sweep(&mut self, prefix: &str, keep: &str) -> Result<(), StateError>;
    fn remembers(&mut self, key: &str) -> Result<bool, StateError>;
    fn remember(&mut self, key: &str) -> Result<(), StateError>;
}

/// The policy's state, through the host.
struct HostMemory;

impl Memory for HostMemory {
    fn take(&mut self, key: &str, limit: u64) -> Result<Option<u64>, StateError> {
        state::try_increment(key, limit)
    }

    fn peek(&mut self, key: &str) -> Result<u64, StateError> {
        // A counter is 8 bytes, little-endian (see `state.try-increment`).
        Ok(state::get(key)?
            .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
            .map_or(0, u64::from_le_bytes))
    }

    fn sweep(&mut self, prefix: &str, keep: &str) -> Result<(), StateError> {
        for key in state::keys(prefix, 64)? {
            if key != keep {
                state::delete(&key)?;
            }
        }
        Ok(())
    }

    fn remembers(&mut self, key: &str) -> Result<bool, StateError> {
        Ok(state::get(key)?.is_some())
    }

    fn remember(&mut self, key: &str) -> Result<(), StateError> {
        state::set(key, b"approved always")
    }
}

impl Rules {
    /// Decide on `call` at `now_ms`, the rules' state in `memory`.
    pub fn evaluate(
        &self,
        call: &ToolCall,
        now_ms: u64,
        memory: &mut impl Memory,
    ) -> Result<Decision, StateError> {
        // A call resumed after a person approved one of these rules' pauses:
        // its limits were counted when it paused, so they are not counted
        // again, and the rule that asked (the first `ask` to fire) allows.
        let approved = call.resolutions.iter().find_map(|r| match r {
            Resolution::Approved(grant) => Some(grant.always),
            Resolution::Authenticated(_) => None,
        });
        let action = action_name(call);
        // Cedar's forbids hold whatever a TOML rule says; its permits speak
        // only where no TOML rule decided.
        let cedar = match &self.cedar {
            Some(cedar) => cedar.evaluate(call, &action, approved.is_some(), memory)?,
            None => cedar::Answer::Abstain,
        };
        if let cedar::Answer::Deny { reason, notes } = cedar {
            return Ok(Decision {
                notes,
                ..Decision::deny(reason)
            });
        }
        let arguments = Arguments::new(&call.arguments);
        let mut notes = Vec::new();
        for rule in &self.rules {
            if !rule.matches(call, &action, &arguments)
                || !Self::fires(rule, call, now_ms, approved.is_some(), memory)?
            {
                continue;
            }
            notes.extend(rule.note.clone());
            let decision = match rule.action {
                Action::Note => continue,
                Action::Allow => Decision::allow(),
                Action::Deny => Decision::deny(Self::reason(rule)),
                Action::Ask => Self::ask(rule, call, approved, memory)?,
            };
            return Ok(Decision { notes, ..decision });
        }
        let decision = match cedar {
            cedar::Answer::Abstain | cedar::Answer::Deny { .. } => Decision::skip(),
            cedar::Answer::Allow { notes: more } => {
                notes.extend(more);
                Decision::allow()
            }
            cedar::Answer::Ask {
                reason,
                notes: more,
            } => {
                notes.extend(more);
                Self::approval(reason, false, call, approved)
            }
        };
        Ok(Decision { notes, ..decision })
    }

    /// Whether a matching rule fires: always, unless it has a limit with
    /// calls left (taking one of them).
    fn fires(
        rule: &Rule,
        call: &ToolCall,
        now_ms: u64,
        resumed: bool,
        memory: &mut impl Memory,
    ) -> Result<bool, StateError> {
        let Some(limit) = &rule.limit else {
            return Ok(true);
        };
        if resumed {
            // Counted when it paused: only the asking kind fired then.
            return Ok(rule.action == Action::Ask);
        }
        let counter = limit.counter(&rule.name, call, now_ms);
        match memory.take(&counter.key, limit.calls)? {
            Some(taken) => {
                if taken == 1
                    && let Some(siblings) = &counter.siblings
                {
                    memory.sweep(siblings, &counter.key)?;
                }
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// An `ask` rule that fired: allowed if the person approved (or said
    /// "always" before, where the rule offers it), refused when no person
    /// is there to ask, paused otherwise.
    fn ask(
        rule: &Rule,
        call: &ToolCall,
        approved: Option<bool>,
        memory: &mut impl Memory,
    ) -> Result<Decision, StateError> {
        let remembered = state_key(&["always", &rule.name, &call.caller.session_id]);
        match approved {
            Some(always) if always && rule.allow_always => memory.remember(&remembered)?,
            None if rule.allow_always && memory.remembers(&remembered)? => {
                return Ok(Decision::allow());
            }
            _ => {}
        }
        Ok(Self::approval(
            Self::reason(rule),
            rule.allow_always,
            call,
            approved,
        ))
    }

    /// Asking a person to approve `reason`: allowed once they have,
    /// refused when no person is there to ask, paused otherwise.
    fn approval(
        reason: String,
        allow_always: bool,
        call: &ToolCall,
        approved: Option<bool>,
    ) -> Decision {
        if approved.is_some() {
            return Decision::allow();
        }
        if call.caller.mode == ExecutionMode::Autonomous {
            return Decision::deny(format!(
                "{reason} This needs a person's approval, and no person is present (autonomous mode)."
            ));
        }
        Decision::pause_for_approval(reason, allow_always)
    }

    /// The rule's reason with its name, so the agent and the person see
    /// which rule speaks (and, for a limit, which limit).
    fn reason(rule: &Rule) -> String {
        let text = rule
            .reason
            .as_deref()
            .unwrap_or("Refused by the operator's rules.");
        match &rule.limit {
            Some(limit) => format!(
                "{text} (rule `{}`: at most {})",
                rule.name,
                limit.describe()
            ),
            None => format!("{text} (rule `{}`)", rule.name),
        }
    }
}

impl Policy for Rules {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "rules".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "The operator's own rules from the config: allow, deny, ask or note by tool, arguments and mode, with call limits per turn, session or time window.".into(),
            default_fail_mode: FailMode::Closed,
            commands: Vec::new(),
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        let config: RulesConfig = config.parse()?;
        Ok(Self {
            rules: rule::compile_all(config.rule)?,
            cedar: config
                .cedar
                .as_deref()
                .map(cedar::CedarPolicies::parse)
                .transpose()?,
        })
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        // Fail closed: a limit the store cannot count is not a limit.
        self.evaluate(call, host::now_ms(), &mut HostMemory)
            .unwrap_or_else(|err| {
                host::log(host::Level::Error, &format!("rules' state failed: {err:?}"));
                Decision::deny(
                    "The operator's rules cannot read their counters right now (the store failed); try again shortly.",
                )
            })
    }
}

toolgate_guest::export_policy!(Rules);

#[cfg(test)]
mod tests;
