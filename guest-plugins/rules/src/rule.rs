//! One rule as the operator writes it (`[[plugins.rules.config.rule]]`), and
//! compiled: its patterns built once, in `open`, so a call matches without
//! compiling anything.
//!
//! A refused rule names itself (its `name`, or its place) and the key path
//! of what is wrong (`rule[2].args.command`), which the host turns into the
//! line of the config file.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use toolgate_guest::glob::Glob;
use toolgate_guest::{ConfigError, ExecutionMode, ToolCall};

use crate::limit::{Limit, LimitSpec};
use crate::matcher::{Arguments, FieldMatcher};

/// What a rule does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let the call run, as far as these rules go: no later rule is asked
    /// (it cannot overrule another policy's deny or pause).
    Allow,
    /// Refuse it; `reason` is what the agent reads.
    Deny,
    /// Pause it for a person's approval; `reason` is what they are asked.
    Ask,
    /// Add `note` for the agent and go on to the next rule.
    Note,
}

/// A rule's fields as written (public for the book's test that its key
/// table names exactly these).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    name: Option<String>,
    /// Action-name globs (`Bash`, `mcp:github/*`); any tool when absent.
    tool: Option<OneOrMany>,
    /// Argument fields (dotted paths) → a glob, or `{ regex = "…" }`.
    #[serde(default)]
    args: BTreeMap<String, Value>,
    mode: Option<Vec<ModeName>>,
    subagent: Option<bool>,
    thread_kind: Option<OneOrMany>,
    action: Action,
    reason: Option<String>,
    note: Option<String>,
    #[serde(default)]
    allow_always: bool,
    limit: Option<LimitSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn globs(self) -> Vec<Glob> {
        match self {
            Self::One(one) => vec![Glob::new(&one)],
            Self::Many(many) => many.iter().map(|p| Glob::new(p)).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum ModeName {
    Interactive,
    InteractiveAutoApprove,
    Autonomous,
}

impl ModeName {
    fn is(self, mode: ExecutionMode) -> bool {
        matches!(
            (self, mode),
            (Self::Interactive, ExecutionMode::Interactive)
                | (
                    Self::InteractiveAutoApprove,
                    ExecutionMode::InteractiveAutoApprove
                )
                | (Self::Autonomous, ExecutionMode::Autonomous)
        )
    }
}

/// A compiled rule.
pub struct Rule {
    /// Its name: what the logs, the reasons and its counters' keys say.
    pub name: String,
    tools: Vec<Glob>,
    args: Vec<(String, FieldMatcher)>,
    modes: Option<Vec<ModeName>>,
    subagent: Option<bool>,
    thread_kinds: Vec<Glob>,
    pub action: Action,
    pub reason: Option<String>,
    pub note: Option<String>,
    pub allow_always: bool,
    pub limit: Option<Limit>,
}

impl Rule {
    /// Compile the rule at `index` of the `rule` list.
    pub fn compile(index: usize, raw: Value) -> Result<Self, ConfigError> {
        let path = format!("rule[{index}]");
        let label = match raw.get("name").and_then(Value::as_str) {
            Some(name) => format!("rule `{name}`"),
            None => format!("rule {} (unnamed)", index + 1),
        };
        let refuse = |at: &str, message: String| ConfigError::at(at, format!("{label}: {message}"));
        let spec = RuleSpec::deserialize(raw).map_err(|err| refuse(&path, err.to_string()))?;
        let needs = |field: &str, what: &str| {
            refuse(
                &path,
                format!("a `{what}` rule needs `{field}`: {}", field_help(field)),
            )
        };
        match spec.action {
            Action::Deny if spec.reason.is_none() => return Err(needs("reason", "deny")),
            Action::Ask if spec.reason.is_none() => return Err(needs("reason", "ask")),
            Action::Note if spec.note.is_none() => return Err(needs("note", "note")),
            _ => {}
        }
        if spec.allow_always && spec.action != Action::Ask {
            return Err(refuse(
                &format!("{path}.allow_always"),
                "`allow_always` is for `ask` rules only".into(),
            ));
        }
        if matches!(&spec.name, Some(name) if name.trim().is_empty()) {
            return Err(refuse(
                &format!("{path}.name"),
                "a name cannot be empty".into(),
            ));
        }
        let args = spec
            .args
            .into_iter()
            .map(|(field, pattern)| {
                FieldMatcher::compile(&pattern)
                    .map(|matcher| (field.clone(), matcher))
                    .map_err(|why| refuse(&format!("{path}.args.{field}"), why))
            })
            .collect::<Result<_, _>>()?;
        let limit = spec
            .limit
            .map(|limit| Limit::compile(limit).map_err(|why| refuse(&format!("{path}.limit"), why)))
            .transpose()?;
        Ok(Self {
            name: spec.name.unwrap_or_else(|| format!("rule-{}", index + 1)),
            tools: spec.tool.map(OneOrMany::globs).unwrap_or_default(),
            args,
            modes: spec.mode,
            subagent: spec.subagent,
            thread_kinds: spec.thread_kind.map(OneOrMany::globs).unwrap_or_default(),
            action: spec.action,
            reason: spec.reason,
            note: spec.note,
            allow_always: spec.allow_always,
            limit,
        })
    }

    /// Whether every condition the rule names holds for `call` (`action`
    /// is its action name; `arguments` parses the call's JSON on first use).
    pub fn matches(&self, call: &ToolCall, action: &str, arguments: &Arguments) -> bool {
        let caller = &call.caller;
        (self.tools.is_empty() || self.tools.iter().any(|glob| glob.matches(action)))
            && self
                .modes
                .as_ref()
                .is_none_or(|modes| modes.iter().any(|m| m.is(caller.mode)))
            && self.subagent.is_none_or(|sub| sub == caller.is_subagent)
            && (self.thread_kinds.is_empty()
                || self
                    .thread_kinds
                    .iter()
                    .any(|glob| glob.matches(&caller.thread_kind)))
            && self
                .args
                .iter()
                .all(|(field, matcher)| arguments.field_matches(field, matcher))
    }
}

fn field_help(field: &str) -> &'static str {
    match field {
        "reason" => "what the agent reads when it is refused, or the person when asked",
        _ => "the text the agent reads",
    }
}

/// Compile the `rule` list, refusing two rules of one name (their counters
/// and remembered approvals would be one).
pub fn compile_all(raw: Vec<Value>) -> Result<Vec<Rule>, ConfigError> {
    let mut rules: Vec<Rule> = Vec::with_capacity(raw.len());
    for (index, raw) in raw.into_iter().enumerate() {
        let rule = Rule::compile(index, raw)?;
        if let Some(first) = rules.iter().position(|r| r.name == rule.name) {
            return Err(ConfigError::at(
                format!("rule[{index}].name"),
                format!(
                    "rule `{}` is named twice (rules {} and {}); give each rule its own name",
                    rule.name,
                    first + 1,
                    index + 1
                ),
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}
