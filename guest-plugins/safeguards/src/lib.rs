//! safeguards: judges each call by what it does, not by which tool it uses.
//!
//! Ordinary work — reading, searching, building, testing, writing inside
//! the project — runs without asking. A call that destroys work or data,
//! reads a secret, makes something run later, sends data out, changes the
//! system or publishes is denied with a reason the agent can act on, or
//! paused for a person, by class ([`rules::Class`]) and rule.
//!
//! The judgment is data: rule packs (`rulebook/packs/*.toml`, bundled) plus the
//! operator's own `rule` list in the config, in one syntax ([`rules`]).
//! Shell commands are read as the shell would split them ([`shell`]),
//! wrappers, `sh -c`, heredocs and interpreter one-liners included; file
//! tools are judged by the path they touch ([`paths`]).
//!
//! The permission mode does not change a verdict: a deny is a deny in
//! `bypassPermissions` too. Only where nobody can answer (autonomous) does
//! a pause become a deny. Fail-closed: if this policy fails, the call is
//! denied.

pub use rulebook::{paths, rules, shell};

mod commands;

use std::collections::BTreeMap;

use rulebook::RuleBook;
use rules::{Action, Class, Rule};
use serde::Deserialize;
use toolgate_guest::serde_json::Value;
use toolgate_guest::{
    BudgetStatus, Config, ConfigError, Decision, ExecutionMode, FailMode, Policy, PolicyInfo,
    Resolution, Risk, ToolCall,
};

/// Shell text longer than this is not judged: it is refused (the guard in
/// front refuses a `command` this long already).
const MAX_SHELL_TEXT: usize = 64 * 1024;

/// The policy's config table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SafeguardsConfig {
    /// Class → action, over the defaults ([`default_action`]).
    pub classes: BTreeMap<String, Action>,
    /// The operator's own rules, in the packs' syntax; checked before the
    /// packs'.
    pub rule: Vec<Value>,
    /// Rules (by `PACK.NAME`, or a glob such as `cloud.*`) switched off.
    pub disable: Vec<String>,
}

/// What a class does unless the config says otherwise: what cannot be
/// undone is refused with a reason; what a person may well want is asked.
pub fn default_action(class: Class) -> Action {
    match class {
        Class::Destructive | Class::Secret => Action::Deny,
        Class::Persistence | Class::Egress | Class::System | Class::Publish => Action::Ask,
    }
}

/// The policy: its rules, operator's first, and each class's action.
pub struct Safeguards {
    book: RuleBook,
    actions: BTreeMap<Class, Action>,
}

/// One rule that matched, and what it matched.
#[derive(Debug)]
pub struct Hit<'r> {
    /// The rule.
    pub rule: &'r Rule,
    /// What it saw: the command, or the path.
    pub subject: String,
    /// What it does to the call.
    pub action: Action,
}

impl Safeguards {
    /// Build from the config: the operator's rules, then the bundled packs
    /// less what `disable` names.
    pub fn from_config(config: SafeguardsConfig) -> Result<Self, ConfigError> {
        let mut actions: BTreeMap<Class, Action> = Class::ALL
            .iter()
            .map(|c| (*c, default_action(*c)))
            .collect();
        for (name, action) in &config.classes {
            let class = Class::ALL
                .iter()
                .find(|c| c.name() == name)
                .ok_or_else(|| {
                    ConfigError::at(
                        format!("classes.{name}"),
                        format!(
                            "there is no class `{name}`; the classes are destructive, secret, \
                             persistence, egress, system and publish"
                        ),
                    )
                })?;
            actions.insert(*class, *action);
        }
        Ok(Self {
            book: RuleBook::new(config.rule, &config.disable)?,
            actions,
        })
    }

    /// Every rule that matches what `call` does, with what it does to
    /// the call.
    pub fn hits(&self, call: &ToolCall) -> Vec<Hit<'_>> {
        self.with_actions(self.book.hits(call))
    }

    fn with_actions<'r>(&self, hits: Vec<rulebook::Hit<'r>>) -> Vec<Hit<'r>> {
        hits.into_iter()
            .map(|hit| Hit {
                action: hit.rule.action.unwrap_or(self.actions[&hit.rule.class]),
                rule: hit.rule,
                subject: hit.subject,
            })
            .collect()
    }

    /// The verdict over `hits`: the strongest action wins; the reason is
    /// the first rule's with that action.
    fn verdict(&self, call: &ToolCall, hits: &[Hit<'_>]) -> Decision {
        let Some(strongest) = hits.iter().map(|h| h.action).max() else {
            return Decision::allow();
        };
        let first = hits
            .iter()
            .find(|h| h.action == strongest)
            .expect("the strongest is one of them");
        let rule = first.rule;
        let said = format!(
            "{} (toolgate safeguards: {} rule `{}`)",
            rule.reason,
            rule.class.name(),
            rule.name
        );
        match strongest {
            Action::Allow => Decision::allow(),
            Action::Deny => Decision::deny(said),
            Action::Ask => {
                let approved = call
                    .resolutions
                    .iter()
                    .any(|r| matches!(r, Resolution::Approved(_)));
                if approved {
                    Decision::allow()
                } else if call.caller.mode == ExecutionMode::Autonomous {
                    Decision::deny(format!(
                        "{said}. This needs a person's approval and this agent runs with \
                         nobody to ask."
                    ))
                } else {
                    let preview: String = first.subject.chars().take(200).collect();
                    Decision::pause_for_approval(
                        format!("[{}] {preview} — {}", rule.class.name(), rule.reason),
                        // A person may make it a standing approval: the host
                        // keeps it as a rule for this exact call in this
                        // project.
                        true,
                    )
                }
            }
        }
    }
}

impl Policy for Safeguards {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "safeguards".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "judges each call by what it does: ordinary work runs; destructive, \
                          secret, persistence, egress, system and publishing calls are refused \
                          or asked, in every permission mode"
                .into(),
            default_fail_mode: FailMode::Closed,
            commands: vec!["rules".into(), "explain".into()],
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        Self::from_config(config.parse()?)
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        if call.arguments.len() > MAX_SHELL_TEXT
            && rulebook::ArgumentFields::of(&call.arguments)
                .shell_text()
                .is_some_and(|text| text.len() > MAX_SHELL_TEXT)
        {
            return Decision::deny(format!(
                "This shell text is longer than the {} KiB safeguards judges. Write a long \
                 script to a file with the Write tool and run the file. (toolgate safeguards)",
                MAX_SHELL_TEXT / 1024
            ));
        }
        let hits = self.hits(call);
        self.verdict(call, &hits)
    }

    fn command(&self, name: &str, args: &str) -> Result<String, String> {
        commands::answer(self, name, args)
    }
}

toolgate_guest::export_policy!(Safeguards);

#[cfg(test)]
mod tests;
