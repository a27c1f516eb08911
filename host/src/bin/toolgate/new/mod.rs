//! `toolgate new policy NAME [--lang rust|python|typescript]`: a policy
//! project that builds with its language's own tool (cargo; componentize-py;
//! jco) and passes its own sample fixtures out of the box. It carries a copy
//! of the helper layer and the WIT contract this host speaks, so it builds
//! anywhere, not only inside this repository.

mod python;
mod rust;
mod typescript;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

#[derive(clap::Subcommand)]
pub enum NewCommand {
    /// A new policy project named NAME.
    ///
    /// Each builds with its language's own tool: cargo (rust),
    /// componentize-py (python), jco (typescript). The
    /// project's README says how, and `fixtures.toml` is ready for
    /// `toolgate test`.
    Policy {
        /// The policy's name: lowercase letters, digits and dashes.
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value_t = Language::Rust)]
        lang: Language,
        /// The optional phases it implements besides `decide`, comma
        /// separated: classify (a risk report), account (a budget), parse
        /// (read a model's reply), observe (hear what happened to calls),
        /// check-output (redact or withhold a tool's output before the model
        /// reads it), filter-tools (which tools may be offered at all).
        #[arg(long, value_enum, value_delimiter = ',', value_name = "PHASE,...")]
        phases: Vec<Phase>,
        /// Where to create it (default: ./NAME).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// A language a policy can be written in.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    #[value(alias = "ts", alias = "javascript", alias = "js")]
    Typescript,
}

/// An optional phase, named as the Rust helper's `export_policy!` names it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Phase {
    Classify,
    Account,
    Parse,
    Observe,
    CheckOutput,
    FilterTools,
}

impl Phase {
    /// This phase's entry in `table`, which lists something for each phase
    /// in the order classify, account, parse, observe, check-output,
    /// filter-tools.
    fn of<T: Copy>(self, table: [T; 6]) -> T {
        table[self as usize]
    }

    /// Each of `phases`' entry in `table` (as [`Phase::of`] reads it),
    /// joined: the code a generated policy adds for the phases asked for.
    fn each_of(phases: &[Phase], table: [&str; 6]) -> String {
        phases.iter().map(|phase| phase.of(table)).collect()
    }

    /// The contract's world that exports this phase.
    fn world(self) -> &'static str {
        self.of([
            "classifier",
            "accountant",
            "verdict-parser",
            "observer",
            "output-checker",
            "tool-filter",
        ])
    }
}

/// A new project: its files, and what to run next.
struct Project {
    files: Vec<(String, String)>,
    next: String,
}

pub fn run(command: NewCommand) -> anyhow::Result<ExitCode> {
    let NewCommand::Policy {
        name,
        lang,
        mut phases,
        dir,
    } = command;
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
    phases.sort();
    phases.dedup();
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!(
            "{} already exists and is not empty; choose another --dir",
            dir.display()
        );
    }
    let project = match lang {
        Language::Rust => rust::project(&name, &phases),
        Language::Python => python::project(&name, &phases),
        Language::Typescript => typescript::project(&name, &phases),
    };
    for (path, text) in &project.files {
        write(&dir, path, text)?;
    }
    eprintln!(
        "created {dir}\n\nnext:\n  cd {dir}\n{next}",
        dir = dir.display(),
        next = project.next
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

/// The WIT contract as this binary was built with it: its own files, and
/// the packages it depends on (path inside `wit/`, text).
const CONTRACT: &[(&str, &str)] = &[
    ("types.wit", include_str!("../../../../../wit/types.wit")),
    ("phases.wit", include_str!("../../../../../wit/phases.wit")),
    ("host.wit", include_str!("../../../../../wit/host.wit")),
    ("world.wit", include_str!("../../../../../wit/world.wit")),
];
const CONTRACT_DEPS: &[(&str, &str)] = &[
    (
        "config/store.wit",
        include_str!("../../../../../wit/deps/config/store.wit"),
    ),
    (
        "logging/logging.wit",
        include_str!("../../../../../wit/deps/logging/logging.wit"),
    ),
];

/// The `wit/` of a project built by a toolchain that takes one world
/// (componentize-py, jco): the contract under `wit/deps/`, and a world of
/// the project's own that includes the `policy` world and the phase worlds
/// it implements. (Rust's helper crate exports phases one by one instead.)
fn single_world_wit(phases: &[Phase], add_phase_hint: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = CONTRACT
        .iter()
        .map(|(path, text)| (format!("wit/deps/toolgate-policy/{path}"), text.to_string()))
        .chain(
            CONTRACT_DEPS
                .iter()
                .map(|(path, text)| (format!("wit/deps/{path}"), text.to_string())),
        )
        .collect();
    let version = toolgate::WIT_VERSION;
    let mut world = format!(
        "package local:policy;\n\n\
         /// This policy's exports: the gate every policy has, and the optional\n\
         /// phases it implements. Its build tool exports exactly one world, so\n\
         /// to add a phase, include its world here {add_phase_hint}:\n\
         /// classifier (risk), accountant (budget), verdict-parser (verdict),\n\
         /// observer (observe), output-checker (output), tool-filter (visibility).\n\
         world policy {{\n    include toolgate:policy/policy@{version};\n"
    );
    for phase in phases {
        world.push_str(&format!(
            "    include toolgate:policy/{}@{version};\n",
            phase.world()
        ));
    }
    world.push_str("}\n");
    files.push(("wit/world.wit".into(), world));
    files
}

/// The sample's fixture cases, the same in every language: the sample
/// refuses the configured command fragments and abstains on the rest.
const FIXTURES: &str = r#"# Table-driven cases, run with `toolgate test POLICY.wasm fixtures.toml`.
config = { blocked = ["rm -rf /", "mkfs"] }

[[case]]
name = "an ordinary command is left alone"
request = { tool = "Bash", arguments = { command = "ls -la" } }
expect = { verdict = "skip" }

[[case]]
name = "a blocked command is refused with a reason"
request = { tool = "Bash", arguments = { command = "sudo mkfs.ext4 /dev/sdb1" } }
expect = { verdict = "deny", reason = "mkfs" }

[[case]]
name = "other tools are not this policy's business"
request = { tool = "Write", arguments = { file_path = "notes.txt", content = "rm -rf /" } }
expect = { verdict = "skip", no_notes = true }
"#;

/// How to use a built policy, for every project's README.
fn readme_usage(name: &str, wasm: &str) -> String {
    format!(
        r#"To use it, copy the `.wasm` into a running daemon's `plugin_dir` (it is
picked up within a second), or add it to the config:

```toml
[plugins.{name}]
path = "path/to/{wasm}"
priority = 50
[plugins.{name}.config]
blocked = ["rm -rf /"]
```
"#
    )
}
