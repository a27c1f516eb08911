//! `toolgate log`: the decision log.

use std::process::ExitCode;

use toolgate::Toolgate;
use toolgate::decision::Verdict;
use toolgate::decision_log::LogFilter;

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

pub fn run(host: &Toolgate, args: &LogArgs) -> anyhow::Result<ExitCode> {
    let filter = LogFilter {
        session: args.session.clone(),
        tool: args.tool.clone(),
        verdict: args.verdict.map(|v| match v {
            VerdictArg::Allow => Verdict::Allow,
            VerdictArg::Deny => Verdict::Deny,
            VerdictArg::Pause => Verdict::Pause,
        }),
    };
    for (seq, entry) in host.store().decision_log(&filter, args.limit)? {
        if args.json {
            println!("{}", serde_json::json!({"seq": seq, "entry": entry}));
        } else {
            println!(
                "{seq:>6} {:>13} {:<6} {:<16} {:<20} {:>7}us {}",
                entry.at_ms,
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
