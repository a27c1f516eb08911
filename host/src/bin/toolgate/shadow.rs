//! `toolgate shadow report`: how shadow plugins would have decided, next to
//! what the live plugins did, from the decision log.

use std::collections::BTreeMap;
use std::process::ExitCode;

use toolgate::daemon::DaemonRequest;
use toolgate::decision::shadow_verdict;
use toolgate::decision_log::LogEntry;

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum ShadowCommand {
    /// Agreements and disagreements per shadow plugin, with examples.
    Report {
        /// How many of the newest log entries to read.
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
        /// Examples of disagreement shown per plugin.
        #[arg(long, default_value_t = 3)]
        examples: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Default, serde::Serialize)]
struct PluginReport {
    agree: u64,
    disagree: u64,
    /// "live→shadow" → count.
    by_kind: BTreeMap<String, u64>,
    examples: Vec<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct Row {
    entry: LogEntry,
}

pub fn run(ctx: &Ctx, command: ShadowCommand) -> anyhow::Result<ExitCode> {
    let ShadowCommand::Report {
        limit,
        examples,
        json,
    } = command;
    let rows: Vec<Row> = serde_json::from_value(ctx.target(None)?.call(DaemonRequest::Log {
        filter: Default::default(),
        limit,
    })?)?;
    let mut reports: BTreeMap<String, PluginReport> = BTreeMap::new();
    for Row { entry } in rows {
        for shadow in &entry.shadows {
            let said = shadow_verdict(shadow.verdict);
            let report = reports.entry(shadow.name.clone()).or_default();
            let name = |v: toolgate::Verdict| format!("{v:?}").to_lowercase();
            if said == entry.verdict {
                report.agree += 1;
                continue;
            }
            report.disagree += 1;
            let kind = format!("{}→{}", name(entry.verdict), name(said));
            *report.by_kind.entry(kind.clone()).or_default() += 1;
            if report.examples.len() < examples {
                report.examples.push(serde_json::json!({
                    "call_id": entry.call_id, "tool": entry.tool, "session": entry.session_id,
                    "change": kind, "shadow_failure": shadow.failure,
                }));
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(ExitCode::SUCCESS);
    }
    if reports.is_empty() {
        println!("no shadow verdicts in the newest {limit} log entries");
    }
    for (plugin, report) in &reports {
        println!(
            "{plugin}: {} agree, {} disagree",
            report.agree, report.disagree
        );
        for (kind, count) in &report.by_kind {
            println!("  {kind}: {count}");
        }
        for example in &report.examples {
            println!("  e.g. {example}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
