//! `toolgate flows`: what sessions took in (secrets, untrusted text) and
//! which files hold it, as the flow labels say; and lifting them, which is
//! a person's act.

use std::process::ExitCode;

use anyhow::Context as _;
use toolgate::daemon::DaemonRequest;
use toolgate::flows::{FlowsClear, Label};

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum FlowsCommand {
    /// Every label: each session's, then each file's, oldest first.
    List {
        /// Print JSON (one array of labels) instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove labels, so the calls they held back run again without a
    /// person. A person's act: through the daemon it is authorized as
    /// `toolgate gates resolve` is (a terminal of the person's own), and
    /// self-protection refuses it to an agent.
    Clear {
        /// Every label of this session (its id as `list` shows it).
        #[arg(long, conflicts_with_all = ["file", "all"])]
        session: Option<String>,
        /// Every label of this file (its absolute path, as `list` shows it).
        #[arg(long, conflicts_with = "all")]
        file: Option<String>,
        /// Whose file: `local`, or a tenant's `uid:N` (as `list` shows it).
        #[arg(long, default_value = "local", requires = "file")]
        owner: String,
        /// Every label there is.
        #[arg(long)]
        all: bool,
    },
}

pub fn run(ctx: &Ctx, command: FlowsCommand) -> anyhow::Result<ExitCode> {
    let target = ctx.target(None)?;
    match command {
        FlowsCommand::List { json } => {
            let labels = target.call(DaemonRequest::Flows)?;
            let labels: Vec<Label> =
                serde_json::from_value(labels).context("the daemon's flow labels")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&labels)?);
            } else if labels.is_empty() {
                println!("no flow labels");
            } else {
                print_labels(&labels);
            }
            Ok(ExitCode::SUCCESS)
        }
        FlowsCommand::Clear {
            session,
            file,
            owner,
            all,
        } => {
            let what = match (session, file, all) {
                (Some(session), _, _) => FlowsClear::Session(session),
                (_, Some(path), _) => FlowsClear::File { owner, path },
                (_, _, true) => FlowsClear::All,
                _ => anyhow::bail!(
                    "say which labels: --session ID, --file PATH or --all (`toolgate flows list` \
                     shows them)"
                ),
            };
            let answer = target.call(DaemonRequest::ClearFlows { what })?;
            println!("cleared {} label(s)", answer["cleared"]);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One line per label: where it is, what, from where, when.
fn print_labels(labels: &[Label]) {
    let (files, sessions): (Vec<&Label>, Vec<&Label>) =
        labels.iter().partition(|l| l.file.is_some());
    for label in sessions {
        println!(
            "session {}: {} {} ({})",
            label.session,
            label.kind,
            label.source,
            humantime::format_rfc3339_seconds(at(label.at_ms))
        );
    }
    for label in files {
        println!(
            "file {} [{}]: {} {} (from session {}, {})",
            label.file.as_deref().unwrap_or("?"),
            label.owner.as_deref().unwrap_or("local"),
            label.kind,
            label.source,
            label.session,
            humantime::format_rfc3339_seconds(at(label.at_ms))
        );
    }
}

fn at(ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}
