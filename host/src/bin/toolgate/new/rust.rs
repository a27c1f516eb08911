//! The Rust project: a policy crate with a copy of the `toolgate-guest`
//! helper crate (and the contract inside it), built by cargo for
//! wasm32-wasip2.

use super::{CONTRACT, CONTRACT_DEPS, FIXTURES, Phase, Project, readme_usage};

/// The helper crate and contract, as this binary was built with them.
const HELPER: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/lib.rs"),
    ),
    (
        "src/host.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/host.rs"),
    ),
    (
        "src/glob.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/glob.rs"),
    ),
    (
        "src/verdicts.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/verdicts.rs"),
    ),
    (
        "src/naming.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/naming.rs"),
    ),
    (
        "src/secret_shapes.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/secret_shapes.rs"),
    ),
    (
        "src/config.rs",
        include_str!("../../../../../guest-plugins/toolgate-guest/src/config.rs"),
    ),
];

/// The crate's files and what to run next.
pub(super) fn project(name: &str, phases: &[Phase]) -> Project {
    let crate_name = name.replace('-', "_");
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo_toml(name)),
        ("src/lib.rs".into(), policy_source(name, phases)),
        ("fixtures.toml".into(), FIXTURES.to_string()),
        ("README.md".into(), readme(name, &crate_name)),
        (".gitignore".into(), "/target\n".to_string()),
        (
            "toolgate-guest/Cargo.toml".into(),
            HELPER_MANIFEST.to_string(),
        ),
    ];
    for (path, text) in HELPER {
        // In the copy, the contract sits inside the helper crate.
        let text = text.replace("path: \"../../wit\"", "path: \"wit\"");
        files.push((format!("toolgate-guest/{path}"), text));
    }
    files.extend(
        CONTRACT
            .iter()
            .map(|(path, text)| (format!("toolgate-guest/wit/{path}"), text.to_string())),
    );
    files.extend(
        CONTRACT_DEPS
            .iter()
            .map(|(path, text)| (format!("toolgate-guest/wit/deps/{path}"), text.to_string())),
    );
    Project {
        files,
        next: format!(
            "  cargo build --release --target wasm32-wasip2\n  toolgate test target/wasm32-wasip2/release/{crate_name}.wasm fixtures.toml"
        ),
    }
}

fn cargo_toml(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# cdylib: the wasm component; rlib: native unit tests of the logic.
crate-type = ["cdylib", "rlib"]

[dependencies]
toolgate-guest = {{ path = "toolgate-guest" }}
serde = {{ version = "1", features = ["derive"] }}

# A workspace of its own, so it builds wherever it is put.
[workspace]

[profile.release]
opt-level = "s"
"#
    )
}

const HELPER_MANIFEST: &str = r#"[package]
name = "toolgate-guest"
description = "Helpers for writing toolgate policies (a copy made by `toolgate new policy`)."
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
wit-bindgen = "0.61"
serde = { version = "1", features = ["derive"] }
serde_json = "1"
memchr = "2"
"#;

/// `src/lib.rs`: the sample policy, the phases asked for, their export
/// and a unit test.
fn policy_source(name: &str, phases: &[Phase]) -> String {
    let mut source = sample_policy(name);
    source.push_str(&Phase::each_of(
        phases,
        [
            CLASSIFY,
            ACCOUNT,
            PARSE,
            OBSERVE,
            CHECK_OUTPUT,
            FILTER_TOOLS,
        ],
    ));
    let exported = Phase::each_of(
        phases,
        [
            ", classify",
            ", account",
            ", parse",
            ", observe",
            ", check_output",
            ", filter_tools",
        ],
    );
    source.push_str(&export_and_test(&exported));
    source
}

/// The sample's settings, judgment and gate.
fn sample_policy(name: &str) -> String {
    format!(
        r#"//! {name}: a toolgate policy.
//!
//! This sample refuses shell commands containing any of the configured
//! `blocked` fragments and abstains on everything else. Replace `decide`
//! with your own logic; keep it a plain function of its inputs so it can be
//! unit-tested natively (`cargo test`).

use serde::Deserialize;
use toolgate_guest::serde_json;
use toolgate_guest::{{
    BudgetStatus, Config, ConfigError, Decision, FailMode, Policy, PolicyInfo, Risk, ToolCall,
}};

/// The policy's table in the toolgate config.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Settings {{
    /// Command fragments to refuse.
    blocked: Vec<String>,
}}

impl Default for Settings {{
    fn default() -> Self {{
        Self {{ blocked: vec!["rm -rf /".into()] }}
    }}
}}

struct Sample(Settings);

/// The decision, as a plain function.
fn judge(config: &Settings, tool: &str, command: Option<&str>) -> Decision {{
    let Some(command) = command.filter(|_| tool == "Bash") else {{
        return Decision::skip();
    }};
    match config.blocked.iter().find(|b| command.contains(b.as_str())) {{
        Some(fragment) => Decision::deny(format!("`{{fragment}}` is not allowed here; do it another way")),
        None => Decision::skip(),
    }}
}}

impl Policy for Sample {{
    fn info() -> PolicyInfo {{
        PolicyInfo {{
            name: "{name}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "refuses blocked shell commands".into(),
            default_fail_mode: FailMode::Open,
            commands: Vec::new(),
        }}
    }}

    fn open(config: Config) -> Result<Self, ConfigError> {{
        config.parse().map(Self)
    }}

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {{
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        judge(&self.0, &call.tool, arguments.get("command").and_then(|c| c.as_str()))
    }}
}}
"#
    )
}

/// The export of the gate and `exported` phases, and the sample's test.
fn export_and_test(exported: &str) -> String {
    format!(
        r#"
// The gate and the optional phases this policy implements: add `classify`,
// `account`, `parse`, `observe`, `check_output` or `filter_tools` here (and
// implement that phase's trait) to export another.
toolgate_guest::export_policy!(Sample{exported});

#[cfg(test)]
mod tests {{
    use super::*;
    use toolgate_guest::Verdict;

    #[test]
    fn blocks_only_what_is_configured() {{
        let config = Settings::default();
        assert!(matches!(judge(&config, "Bash", Some("rm -rf /")).verdict, Verdict::Deny(_)));
        assert!(matches!(judge(&config, "Bash", Some("ls")).verdict, Verdict::Skip));
        assert!(matches!(judge(&config, "Read", None).verdict, Verdict::Skip));
    }}
}}
"#
    )
}

const CLASSIFY: &str = r#"
/// The `risk` phase: how dangerous is the call? Pure: no state writes.
impl toolgate_guest::Classify for Sample {
    fn classify(&self, call: &ToolCall) -> Risk {
        use toolgate_guest::RiskLevel;
        let (level, category) = match call.tool.as_str() {
            "Bash" => (RiskLevel::High, "shell"),
            _ => (RiskLevel::None, "low"),
        };
        Risk { level, category: category.into(), signals: vec![format!("tool:{}", call.tool)] }
    }
}
"#;

const ACCOUNT: &str = r#"
/// The `budget` phase, right before `decide`: meter the call.
impl toolgate_guest::Account for Sample {
    fn account(&self, _call: &ToolCall, _risk: &Risk) -> BudgetStatus {
        BudgetStatus::Ok
    }
}
"#;

const PARSE: &str = r#"
/// The `verdict` phase: read the model's reply to a question `decide`
/// asked (`Decision::ask_model`). An error is a failure of the policy.
impl toolgate_guest::ParseVerdict for Sample {
    fn parse(&self, _call: &ToolCall, reply: &toolgate_guest::ModelReply) -> Result<Decision, String> {
        match reply {
            toolgate_guest::ModelReply::Answered(text) if text.trim() == "ALLOW" => Ok(Decision::allow()),
            toolgate_guest::ModelReply::Answered(text) => Ok(Decision::deny(text.trim())),
            toolgate_guest::ModelReply::Unanswered(why) => Err(format!("no answer from the model: {why:?}")),
        }
    }
}
"#;

const OBSERVE: &str = r#"
/// The `observe` phase: hear what happened to calls (perhaps more than once).
impl toolgate_guest::Observe for Sample {
    fn observe(&self, event: &toolgate_guest::ToolEvent) {
        toolgate_guest::host::log(
            toolgate_guest::host::Level::Debug,
            &format!("{} {:?}", event.call.tool, event.outcome),
        );
    }
}
"#;

const CHECK_OUTPUT: &str = r#"
/// The `output` phase: what the model may read of a tool's output, which is
/// untrusted input.
impl toolgate_guest::CheckOutput for Sample {
    fn check_output(&self, result: &toolgate_guest::ToolResult) -> toolgate_guest::ResultVerdict {
        if result.output.contains("PRIVATE KEY-----") {
            toolgate_guest::ResultVerdict::Withhold("it holds a private key".into())
        } else {
            toolgate_guest::ResultVerdict::Pass
        }
    }
}
"#;

const FILTER_TOOLS: &str = r#"
/// The `visibility` phase: which tools may be offered at all (pure; hiding
/// is not refusing, so `decide` must still refuse a hidden tool).
impl toolgate_guest::FilterTools for Sample {
    fn visible(&self, _caller: &toolgate_guest::Caller, tools: &[toolgate_guest::ToolDescriptor]) -> Vec<bool> {
        tools.iter().map(|tool| !tool.name.starts_with("debug_")).collect()
    }
}
"#;

fn readme(name: &str, crate_name: &str) -> String {
    format!(
        r#"# {name}

A toolgate policy in Rust.

```sh
rustup target add wasm32-wasip2                  # once
cargo test                                       # the logic, natively
cargo build --release --target wasm32-wasip2     # the component
toolgate test target/wasm32-wasip2/release/{crate_name}.wasm fixtures.toml
toolgate plugins inspect target/wasm32-wasip2/release/{crate_name}.wasm
```

{usage}
`toolgate-guest/` is a copy of the helper crate and the WIT contract of the
toolgate that created this crate.
"#,
        usage = readme_usage(name, &format!("{crate_name}.wasm"))
    )
}
