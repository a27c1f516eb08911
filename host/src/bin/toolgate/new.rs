//! `toolgate new policy NAME`: a policy crate that builds for wasm32-wasip2
//! and passes its own sample fixture out of the box. It carries a copy of the
//! guest helper crate and the WIT contract this host speaks, so it builds
//! anywhere, not only inside this repository.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

/// The helper crate and contract, as this binary was built with them.
const HELPER: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/lib.rs"),
    ),
    (
        "src/host.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/host.rs"),
    ),
    (
        "src/glob.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/glob.rs"),
    ),
    (
        "src/verdicts.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/verdicts.rs"),
    ),
    (
        "src/naming.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/naming.rs"),
    ),
    (
        "src/config.rs",
        include_str!("../../../../guest-plugins/toolgate-guest/src/config.rs"),
    ),
    ("wit/types.wit", include_str!("../../../../wit/types.wit")),
    ("wit/phases.wit", include_str!("../../../../wit/phases.wit")),
    ("wit/host.wit", include_str!("../../../../wit/host.wit")),
    ("wit/world.wit", include_str!("../../../../wit/world.wit")),
    (
        "wit/deps/config/store.wit",
        include_str!("../../../../wit/deps/config/store.wit"),
    ),
    (
        "wit/deps/logging/logging.wit",
        include_str!("../../../../wit/deps/logging/logging.wit"),
    ),
];

#[derive(clap::Subcommand)]
pub enum NewCommand {
    /// A new policy crate named NAME.
    Policy {
        /// The crate (and policy) name: lowercase letters, digits and dashes.
        name: String,
        /// Where to create it (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

pub fn run(command: NewCommand) -> anyhow::Result<ExitCode> {
    let NewCommand::Policy { name, dir } = command;
    let valid = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        bail!(
            "`{name}` is not a usable name: use lowercase letters, digits and dashes, starting with a letter"
        );
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!(
            "{} already exists and is not empty; choose another --dir",
            dir.display()
        );
    }
    let crate_name = name.replace('-', "_");
    let files = [
        ("Cargo.toml", cargo_toml(&name)),
        ("src/lib.rs", policy_source(&name)),
        ("fixtures.toml", FIXTURES.to_string()),
        ("README.md", readme(&name, &crate_name)),
        (".gitignore", "/target\n".to_string()),
        ("toolgate-guest/Cargo.toml", HELPER_MANIFEST.to_string()),
    ];
    for (path, text) in files {
        write(&dir, path, &text)?;
    }
    for (path, text) in HELPER {
        // In the copy, the contract sits inside the helper crate.
        let text = text.replace("path: \"../../wit\"", "path: \"wit\"");
        write(&dir.join("toolgate-guest"), path, &text)?;
    }
    eprintln!(
        "created {dir}\n\nnext:\n  cd {dir}\n  cargo build --release --target wasm32-wasip2\n  toolgate test target/wasm32-wasip2/release/{crate_name}.wasm fixtures.toml",
        dir = dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
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

fn policy_source(name: &str) -> String {
    format!(
        r#"//! {name}: a toolgate policy.
//!
//! This sample refuses shell commands containing any of the configured
//! `blocked` fragments and abstains on everything else. Replace `decide`
//! with your own logic; keep it a plain function of its inputs so it can be
//! unit-tested natively (`cargo test`).

use serde::Deserialize;
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

// Only the gate: add `classify`, `account`, `parse` or `observe` here (and
// implement that phase's trait) to export an optional phase.
toolgate_guest::export_policy!(Sample);

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
    .replace("use serde::Deserialize;", "use serde::Deserialize;\nuse toolgate_guest::serde_json;")
}

const FIXTURES: &str = r#"# Table-driven cases, run with `toolgate test POLICY.wasm fixtures.toml`.
config = { blocked = ["rm -rf /", "mkfs"] }

[[case]]
name = "an ordinary command is left alone"
request = { tool = "Bash", arguments = { command = "ls -la" } }
expect = { verdict = "skip" }

[[case]]
name = "a blocked command is refused with a reason"
request = { tool = "Bash", arguments = { command = "sudo rm -rf / --no-preserve-root" } }
expect = { verdict = "deny", reason = "rm -rf /" }

[[case]]
name = "other tools are not this policy's business"
request = { tool = "Write", arguments = { file_path = "notes.txt", content = "rm -rf /" } }
expect = { verdict = "skip", no_notes = true }
"#;

fn readme(name: &str, crate_name: &str) -> String {
    format!(
        r#"# {name}

A toolgate policy.

```sh
rustup target add wasm32-wasip2                  # once
cargo test                                       # the logic, natively
cargo build --release --target wasm32-wasip2     # the component
toolgate test target/wasm32-wasip2/release/{crate_name}.wasm fixtures.toml
toolgate plugins inspect target/wasm32-wasip2/release/{crate_name}.wasm
```

To use it, copy the `.wasm` into a running daemon's `plugin_dir` (it is
picked up within a second), or add it to the config:

```toml
[plugins.{name}]
path = "path/to/{crate_name}.wasm"
priority = 50
[plugins.{name}.config]
blocked = ["rm -rf /"]
```

`toolgate-guest/` is a copy of the helper crate and the WIT contract of the
toolgate that created this crate.
"#
    )
}
