//! Table-driven policy tests: `toolgate test POLICY FIXTURES...`.
//!
//! A fixture file (TOML, or JSON with the same shape) holds cases. Each case
//! runs against a fresh store with only the policy under test loaded (as the
//! plugin `policy`), after setting up any prior state, events, admin
//! commands and earlier calls, and compares the policy's own result with the
//! expectation.
//!
//! ```toml
//! config = { warn_tokens = 250000 }     # the policy's table for every case
//!
//! [[case]]
//! name = "a subagent past the warn threshold gets a note"
//! request = { tool = "Read", is_subagent = true, context_tokens = 268000 }
//! expect = { verdict = "allow", notes = ["268000"] }
//! ```
//!
//! Per case: `config` (replaces the file's), `state` (key → string value),
//! `events` (prior events of the policy's stream), `commands` (admin commands
//! run first: `{ name, args }`), `before` (calls evaluated first), and
//! `expect`: `verdict` (allow, deny, pause, skip), `reason` (a substring),
//! `notes` (substrings, each in some note), `no_notes`, `risk` (a category),
//! `budget` (ok, warning, exceeded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Toolgate;
use crate::config::{Config, PluginConfig};
use crate::decision::{BudgetReport, PolicyResult, PolicyVerdict};
use crate::error::{Error, Result};
use crate::request::ToolRequest;
use crate::store::StoredEvent;

/// The plugin name the policy under test runs as (its state namespace).
pub const UNDER_TEST: &str = "policy";

/// A fixture file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureFile {
    /// The policy's config table for every case.
    #[serde(default)]
    pub config: toml::Table,
    /// The cases.
    #[serde(rename = "case")]
    pub cases: Vec<Case>,
}

/// One case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What it checks.
    pub name: String,
    /// Replaces the file's config table.
    #[serde(default)]
    pub config: Option<toml::Table>,
    /// State to write first (key → value).
    #[serde(default)]
    pub state: BTreeMap<String, String>,
    /// Events to append first.
    #[serde(default)]
    pub events: Vec<FixtureEvent>,
    /// Admin commands to run first.
    #[serde(default)]
    pub commands: Vec<FixtureCommand>,
    /// Calls to evaluate first.
    #[serde(default)]
    pub before: Vec<ToolRequest>,
    /// The call.
    pub request: ToolRequest,
    /// What the policy must answer.
    pub expect: Expect,
}

/// A prior event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureEvent {
    /// Its session.
    pub session_id: String,
    /// Its kind (default `tool_call`).
    #[serde(default = "tool_call")]
    pub kind: String,
    /// Its tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Its turn.
    #[serde(default)]
    pub turn: u64,
    /// Its summary.
    #[serde(default)]
    pub summary: Option<String>,
    /// Its detail.
    #[serde(default)]
    pub detail: Option<String>,
}

fn tool_call() -> String {
    "tool_call".into()
}

/// A prior admin command.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureCommand {
    /// The command.
    pub name: String,
    /// Its JSON arguments.
    #[serde(default)]
    pub args: serde_json::Value,
}

/// The expectation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The policy's own verdict.
    pub verdict: Option<PolicyVerdict>,
    /// A substring of its reason.
    pub reason: Option<String>,
    /// Substrings, each found in some note.
    #[serde(default)]
    pub notes: Vec<String>,
    /// No notes at all.
    #[serde(default)]
    pub no_notes: bool,
    /// Its risk category (e.g. "shell").
    pub risk: Option<String>,
    /// Its budget status: ok, warning or exceeded.
    pub budget: Option<String>,
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct CaseOutcome {
    /// The case.
    pub name: String,
    /// What differed from the expectation (empty: passed).
    pub differences: Vec<String>,
}

impl CaseOutcome {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Parse a fixture file (TOML, or JSON when it ends in `.json`).
pub fn parse(path: &Path) -> Result<FixtureFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Error::Request(format!("{}: {err}", path.display())))?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        toml::from_str(&text).map_err(|e| e.to_string())
    };
    parsed.map_err(|err| Error::Request(format!("fixture file {}: {err}", path.display())))
}

/// Run every case of `fixtures` against the policy at `source` (a `.wasm`
/// path or `bundled:NAME`), caching compiled components in `cache_dir`.
pub fn run(
    source: &str,
    fixtures: &FixtureFile,
    cache_dir: Option<PathBuf>,
) -> Result<Vec<CaseOutcome>> {
    fixtures
        .cases
        .iter()
        .map(|case| run_case(source, &fixtures.config, case, cache_dir.clone()))
        .collect()
}

fn run_case(
    source: &str,
    file_config: &toml::Table,
    case: &Case,
    cache_dir: Option<PathBuf>,
) -> Result<CaseOutcome> {
    let scratch = tempdir()?;
    let mut config = Config::parse("", "<fixture>", PathBuf::from("."))?;
    config.cache = cache_dir.is_some();
    config.cache_dir = cache_dir;
    let mut entry = PluginConfig::for_path(source, 0);
    entry.config = case.config.clone().unwrap_or_else(|| file_config.clone());
    config.plugins.insert(UNDER_TEST.to_string(), entry);
    let outcome = (|| -> Result<CaseOutcome> {
        let host = Toolgate::open(config, Some(scratch.join("fixture.redb").into()))?;
        let store = host.store();
        for (key, value) in &case.state {
            store
                .state()
                .state_put(UNDER_TEST, key, Some(value.as_bytes()), u64::MAX)
                .map_err(|e| Error::Request(format!("case `{}`: state {key}: {e}", case.name)))?;
        }
        for event in &case.events {
            store.events().append_event(StoredEvent {
                policy: UNDER_TEST.into(),
                session_id: event.session_id.clone(),
                turn: event.turn,
                kind: event.kind.clone(),
                tool: event.tool.clone(),
                origin: None,
                risk: None,
                detail: event.detail.clone(),
                summary: event.summary.clone(),
                at_ms: crate::now_ms(),
            });
        }
        store.maintenance().persist();
        for command in &case.commands {
            let args = if command.args.is_null() {
                "{}".to_string()
            } else {
                command.args.to_string()
            };
            host.command(UNDER_TEST, &command.name, &args)?;
        }
        for call in &case.before {
            host.evaluate(call)?;
            store.maintenance().persist();
        }
        let decision = host.evaluate(&case.request)?;
        let differences = match decision.policies.first() {
            Some(result) => compare(&case.expect, result),
            None => vec!["the policy did not run".into()],
        };
        Ok(CaseOutcome {
            name: case.name.clone(),
            differences,
        })
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

fn compare(expect: &Expect, got: &PolicyResult) -> Vec<String> {
    let mut differences = Vec::new();
    let reason = got.reason.as_deref().unwrap_or("");
    if let Some(verdict) = expect.verdict
        && verdict != got.verdict
    {
        differences.push(format!(
            "verdict: expected {verdict:?}, got {:?}{}",
            got.verdict,
            got.failure
                .as_ref()
                .map(|f| format!(" (the policy {f})"))
                .unwrap_or_default()
        ));
    }
    if let Some(want) = &expect.reason
        && !reason.contains(want.as_str())
    {
        differences.push(format!(
            "reason: expected it to contain {want:?}, got {reason:?}"
        ));
    }
    for want in &expect.notes {
        if !got.notes.iter().any(|n| n.contains(want.as_str())) {
            differences.push(format!(
                "notes: expected one containing {want:?}, got {:?}",
                got.notes
            ));
        }
    }
    if expect.no_notes && !got.notes.is_empty() {
        differences.push(format!("notes: expected none, got {:?}", got.notes));
    }
    if let Some(risk) = &expect.risk {
        let actual = got.risk.as_ref().map(|r| r.category.as_str());
        if actual != Some(risk.as_str()) {
            differences.push(format!("risk: expected {risk:?}, got {actual:?}"));
        }
    }
    if let Some(want) = &expect.budget {
        let actual = match &got.budget {
            Some(BudgetReport::Ok) => "ok",
            Some(BudgetReport::Warning(_)) => "warning",
            Some(BudgetReport::Exceeded(_)) => "exceeded",
            None => "none (the policy does not account)",
        };
        if actual != want {
            differences.push(format!("budget: expected {want}, got {actual}"));
        }
    }
    differences
}

fn tempdir() -> Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("toolgate-fixture-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Request(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}
