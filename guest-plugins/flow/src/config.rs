//! The policy's config table: which MCP servers are trusted, which git
//! remotes are the usual ones, and the flow rules (the operator's, then the
//! defaults).

use rulebook::rules::OneOrMany;
use serde::Deserialize;
use toolgate_guest::ConfigError;

/// The kinds of sink a rule can name: where a call would send what its
/// session took in, or what it would change.
pub const SINKS: &[&str] = &[
    "egress",
    "publish",
    "exfil-capable",
    "system",
    "persistence",
    "destructive",
    "outside-write",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlowConfig {
    /// MCP servers whose answers are not untrusted text (their names as
    /// the runtime reports them).
    pub trusted_servers: Vec<String>,
    /// Git remotes a push to is not a new sink.
    pub known_remotes: Vec<String>,
    /// The operator's rules, checked before the defaults.
    pub rule: Vec<RuleSpec>,
    /// Whether the default rules follow the operator's.
    pub default_rules: bool,
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self {
            trusted_servers: Vec::new(),
            known_remotes: vec!["origin".into(), "upstream".into()],
            rule: Vec::new(),
            default_rules: true,
        }
    }
}

/// What a rule does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Pause for a person (a deny where nobody can answer).
    Ask,
    /// Refuse.
    Deny,
}

/// One rule as written: after a session took in `after`, a call to a sink
/// of `to` is asked about (or refused).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    pub name: Option<String>,
    pub after: OneOrMany,
    pub to: OneOrMany,
    #[serde(default = "ask")]
    pub action: Action,
    /// What the agent or person reads, after what was taken in and where
    /// it would go.
    pub reason: Option<String>,
}

fn ask() -> Action {
    Action::Ask
}

/// A rule, checked.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub after: Vec<String>,
    pub to: Vec<String>,
    pub action: Action,
    pub reason: Option<String>,
}

impl Rule {
    fn new(at: usize, spec: RuleSpec) -> Result<Self, ConfigError> {
        let name = spec.name.unwrap_or_else(|| format!("rule[{at}]"));
        let after = spec.after.into_vec();
        let to = spec.to.into_vec();
        if after.is_empty() || after.iter().any(String::is_empty) {
            return Err(ConfigError::at(
                format!("rule[{at}].after"),
                format!("rule `{name}`: `after` names the label kinds it follows, e.g. \"secret\""),
            ));
        }
        if let Some(unknown) = to.iter().find(|t| !SINKS.contains(&t.as_str())) {
            return Err(ConfigError::at(
                format!("rule[{at}].to"),
                format!(
                    "rule `{name}`: there is no sink `{unknown}`; the sinks are {}",
                    SINKS.join(", ")
                ),
            ));
        }
        if to.is_empty() {
            return Err(ConfigError::at(
                format!("rule[{at}].to"),
                format!(
                    "rule `{name}`: `to` names at least one sink ({})",
                    SINKS.join(", ")
                ),
            ));
        }
        Ok(Self {
            name,
            after,
            to,
            action: spec.action,
            reason: spec.reason,
        })
    }
}

/// The default rules: a secret does not leave, and untrusted text does not
/// change the system, without a person.
pub fn default_rules() -> Vec<Rule> {
    let rule = |name: &str, after: &str, to: &[&str]| Rule {
        name: name.into(),
        after: vec![after.into()],
        to: to.iter().map(|t| t.to_string()).collect(),
        action: Action::Ask,
        reason: None,
    };
    vec![
        rule(
            "secret-out",
            "secret",
            &["egress", "publish", "exfil-capable"],
        ),
        rule(
            "untrusted-changes-system",
            "untrusted",
            &["system", "persistence", "destructive", "outside-write"],
        ),
    ]
}

/// The rules, the operator's first.
pub fn rules(config: &mut FlowConfig) -> Result<Vec<Rule>, ConfigError> {
    let mut rules = std::mem::take(&mut config.rule)
        .into_iter()
        .enumerate()
        .map(|(at, spec)| Rule::new(at, spec))
        .collect::<Result<Vec<_>, _>>()?;
    if config.default_rules {
        rules.extend(default_rules());
    }
    Ok(rules)
}
