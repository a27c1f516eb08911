//! `toolgate log`: the decision log.

use std::process::ExitCode;

use toolgate::daemon::DaemonRequest;
use toolgate::decision::Verdict;
use toolgate::decision_log::{LogEntry, LogFilter};

use crate::target::Target;

#[derive(clap::Args)]
pub struct LogArgs {
    /// How many entries (newest).
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// Only this tool.
    #[arg(long)]
    tool: Option<String>,
    /// Only this verdict.
    #[arg(long, value_enum)]
    verdict: Option<VerdictArg>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum VerdictArg {
    Allow,
    Deny,
    Pause,
}

pub fn run(target: &Target, args: &LogArgs) -> anyhow::Result<ExitCode> {
    let filter = LogFilter {
        session: args.session.clone(),
        tool: args.tool.clone(),
        verdict: args.verdict.map(|v| match v {
            VerdictArg::Allow => Verdict::Allow,
            VerdictArg::Deny => Verdict::Deny,
            VerdictArg::Pause => Verdict::Pause,
        }),
    };
    let request = DaemonRequest::Log {
        filter,
        limit: args.limit,
    };
    let rows: Vec<Row> = serde_json::from_value(target.call(request)?)?;
    for Row { seq, entry } in rows {
        if args.json {
            println!("{}", serde_json::json!({"seq": seq, "entry": entry}));
        } else {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(entry.at_ms);
            println!(
                "{seq:>6} {} {:<6} {:<16} {:<20} {:>7}us {}",
                humantime::format_rfc3339_millis(at),
                format!("{:?}", entry.verdict).to_lowercase(),
                entry.session_id,
                entry.tool,
                entry.duration_us,
                entry.decided_by.unwrap_or_default(),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One row as the daemon answers it.
#[derive(serde::Deserialize)]
struct Row {
    seq: u64,
    entry: LogEntry,
}
