//! The tool catalogue: which actions exist, what they touch, whether they
//! need a person's approval or a credential — and from that, their tier.
//!
//! Tiers, from least to most sensitive:
//! - **read-only**: only read effects, no approval;
//! - **standard**: writes, no approval;
//! - **privileged**: needs approval (`always` or `unless-auto-approved`),
//!   or runs arbitrary code (`execute`): a research thread plans no shell;
//! - **administrative**: marked `administrative`, or on the denylist of
//!   actions that change the agent system itself (e.g. `routine_create`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toolgate_guest::glob;

/// What an action touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Reads local files or state.
    ReadLocal,
    /// Reads from the network.
    ReadExternal,
    /// Writes local files or state.
    WriteLocal,
    /// Writes to the network or other systems.
    WriteExternal,
    /// Runs arbitrary code.
    Execute,
}

/// When a person must approve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    /// Never.
    #[default]
    Never,
    /// Unless the mode or an earlier "allow always" pre-approves it.
    UnlessAutoApproved,
    /// Every time, whatever the mode.
    Always,
}

/// A credential an action needs before it can run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// Its name, e.g. `github_token`.
    pub name: String,
    /// How a person supplies it.
    pub instructions: String,
    /// Where to obtain it.
    #[serde(default)]
    pub url: Option<String>,
}

/// One catalogue entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// What it touches.
    #[serde(default)]
    pub effects: Vec<Effect>,
    /// When it needs approval.
    #[serde(default)]
    pub approval: Approval,
    /// A credential it needs, if any.
    #[serde(default)]
    pub credential: Option<Credential>,
    /// Changes the agent system itself.
    #[serde(default)]
    pub administrative: bool,
}

/// Sensitivity tiers, ascending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// Reads only.
    ReadOnly,
    /// Writes without approval.
    Standard,
    /// Needs approval.
    Privileged,
    /// Changes the agent system.
    Administrative,
}

/// Actions that are administrative whatever their entry says.
pub const ADMINISTRATIVE_DENYLIST: &[&str] = &[
    "routine_create",
    "routine_update",
    "routine_delete",
    "mission_create",
    "mission_delete",
    "lease_grant",
    "secret_*",
];

impl ActionSpec {
    fn new(effects: &[Effect], approval: Approval) -> Self {
        Self {
            effects: effects.to_vec(),
            approval,
            credential: None,
            administrative: false,
        }
    }
}

/// The tier of `action` with `spec`.
pub fn tier(action: &str, spec: &ActionSpec) -> Tier {
    let denylisted = ADMINISTRATIVE_DENYLIST
        .iter()
        .any(|pattern| glob::matches(pattern, action));
    if spec.administrative || denylisted {
        Tier::Administrative
    } else if spec.approval != Approval::Never || spec.effects.contains(&Effect::Execute) {
        Tier::Privileged
    } else if spec
        .effects
        .iter()
        .all(|e| matches!(e, Effect::ReadLocal | Effect::ReadExternal))
    {
        Tier::ReadOnly
    } else {
        Tier::Standard
    }
}

/// The catalogue: entries by action name or glob pattern, plus the spec for
/// actions no entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalogue {
    /// Operator entries first, then the defaults; the first match wins.
    entries: Vec<(String, ActionSpec)>,
    /// For unknown actions.
    pub unknown: ActionSpec,
}

impl Catalogue {
    /// The defaults, overridden and extended by the operator's `actions`.
    pub fn new(overrides: &BTreeMap<String, ActionSpec>, unknown: Option<ActionSpec>) -> Self {
        let mut entries: Vec<(String, ActionSpec)> = overrides
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Exact names before patterns, so `Bash` beats `*`.
        entries.sort_by_key(|(name, _)| name.contains('*'));
        for (name, spec) in default_entries() {
            if !overrides.contains_key(&name) {
                entries.push((name, spec));
            }
        }
        Self {
            entries,
            unknown: unknown.unwrap_or_else(default_unknown),
        }
    }

    /// The spec for `action`.
    pub fn spec(&self, action: &str) -> &ActionSpec {
        self.entries
            .iter()
            .find(|(name, _)| name == action)
            .or_else(|| {
                self.entries
                    .iter()
                    .find(|(name, _)| glob::matches(name, action))
            })
            .map(|(_, spec)| spec)
            .unwrap_or(&self.unknown)
    }

    /// Every entry's name (or pattern) with its tier.
    pub fn tiers(&self) -> impl Iterator<Item = (&str, Tier)> {
        self.entries
            .iter()
            .map(|(name, spec)| (name.as_str(), tier(name, spec)))
    }
}

/// Unknown actions may write anywhere: they need approval.
fn default_unknown() -> ActionSpec {
    ActionSpec::new(&[Effect::WriteExternal], Approval::UnlessAutoApproved)
}

/// Claude Code's built-in tools and MCP tools, by their lease-gate action
/// names (`mcp:SERVER/TOOL` for MCP tools).
fn default_entries() -> Vec<(String, ActionSpec)> {
    use Approval::*;
    use Effect::*;
    let read_local = [
        "Read",
        "Grep",
        "Glob",
        "LS",
        "NotebookRead",
        "TodoWrite",
        "Task",
        "Agent",
        "ExitPlanMode",
    ];
    let read_external = ["WebFetch", "WebSearch"];
    let write_local = ["Write", "Edit", "MultiEdit", "NotebookEdit"];
    let mut entries = Vec::new();
    entries.extend(read_local.map(|n| (n.to_string(), ActionSpec::new(&[ReadLocal], Never))));
    entries.extend(read_external.map(|n| (n.to_string(), ActionSpec::new(&[ReadExternal], Never))));
    entries.extend(write_local.map(|n| (n.to_string(), ActionSpec::new(&[WriteLocal], Never))));
    entries.push((
        "SendMessage".into(),
        ActionSpec::new(&[WriteExternal], Never),
    ));
    // A shell command is judged by what it does (the safeguards policy),
    // not asked about for being one: a person approving `git status` learns
    // to approve everything. Its tier stays privileged (it executes).
    entries.push(("Bash".into(), ActionSpec::new(&[Execute], Never)));
    entries.push((
        "mcp:*".into(),
        ActionSpec::new(&[WriteExternal], UnlessAutoApproved),
    ));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(effects: &[Effect], approval: Approval) -> ActionSpec {
        ActionSpec::new(effects, approval)
    }

    #[test]
    fn tiers_come_from_effects_approval_and_the_denylist() {
        assert_eq!(
            tier("echo", &spec(&[Effect::ReadLocal], Approval::Never)),
            Tier::ReadOnly
        );
        assert_eq!(
            tier("save", &spec(&[Effect::WriteLocal], Approval::Never)),
            Tier::Standard
        );
        assert_eq!(
            tier(
                "http",
                &spec(&[Effect::WriteExternal], Approval::UnlessAutoApproved)
            ),
            Tier::Privileged
        );
        assert_eq!(
            tier("http", &spec(&[Effect::WriteExternal], Approval::Always)),
            Tier::Privileged
        );
        assert_eq!(
            tier(
                "routine_create",
                &spec(&[Effect::WriteLocal], Approval::Never)
            ),
            Tier::Administrative
        );
        assert_eq!(
            tier("secret_read", &spec(&[Effect::ReadLocal], Approval::Never)),
            Tier::Administrative
        );
        let mut admin = spec(&[Effect::ReadLocal], Approval::Never);
        admin.administrative = true;
        assert_eq!(tier("x", &admin), Tier::Administrative);
    }

    #[test]
    fn defaults_cover_claude_code_and_mcp_and_overrides_win() {
        let catalogue = Catalogue::new(&BTreeMap::new(), None);
        assert_eq!(tier("Read", catalogue.spec("Read")), Tier::ReadOnly);
        assert_eq!(tier("Write", catalogue.spec("Write")), Tier::Standard);
        assert_eq!(tier("Bash", catalogue.spec("Bash")), Tier::Privileged);
        assert_eq!(
            catalogue.spec("mcp:github/create_issue").approval,
            Approval::UnlessAutoApproved
        );
        assert_eq!(catalogue.spec("frobnicate"), &default_unknown());

        let mut overrides = BTreeMap::new();
        overrides.insert(
            "Bash".to_string(),
            spec(&[Effect::Execute], Approval::Always),
        );
        overrides.insert(
            "mcp:github/*".to_string(),
            spec(&[Effect::ReadExternal], Approval::Never),
        );
        let catalogue = Catalogue::new(&overrides, None);
        assert_eq!(catalogue.spec("Bash").approval, Approval::Always);
        assert_eq!(
            catalogue.spec("mcp:github/list_issues").approval,
            Approval::Never
        );
        assert_eq!(
            catalogue.spec("mcp:slack/post").approval,
            Approval::UnlessAutoApproved
        );
    }
}
