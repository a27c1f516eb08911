//! `toolgate check`: evaluate requests and print decisions.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use toolgate::daemon::DaemonRequest;
use toolgate::{Decision, ToolRequest, Verdict};

use crate::target::Target;

/// Exit status when some call was denied.
const EXIT_DENY: u8 = 3;
/// Exit status when some call was paused and none denied.
const EXIT_PAUSE: u8 = 4;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Request files (JSON), or - for stdin. Default: stdin.
    #[arg(value_name = "REQUEST")]
    requests: Vec<PathBuf>,
    /// Print compact JSON, one decision per line.
    #[arg(long)]
    compact: bool,
}

pub fn run(target: &Target, args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let stdin = [PathBuf::from("-")];
    let inputs = if args.requests.is_empty() {
        &stdin[..]
    } else {
        &args.requests[..]
    };
    let mut worst = 0u8;
    for input in inputs {
        let text = read_input(input)?;
        let request =
            ToolRequest::from_json(&text).with_context(|| format!("in {}", input.display()))?;
        let decision: Decision =
            serde_json::from_value(target.call(DaemonRequest::Evaluate { request })?)?;
        let json = if args.compact {
            serde_json::to_string(&decision)?
        } else {
            serde_json::to_string_pretty(&decision)?
        };
        println!("{json}");
        worst = worst.max(match decision.verdict {
            Verdict::Allow => 0,
            Verdict::Pause => 1,
            Verdict::Deny => 2,
        });
    }
    Ok(match worst {
        0 => ExitCode::SUCCESS,
        1 => ExitCode::from(EXIT_PAUSE),
        _ => ExitCode::from(EXIT_DENY),
    })
}

fn read_input(input: &PathBuf) -> anyhow::Result<String> {
    if input.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the request from stdin")?;
        return Ok(text);
    }
    std::fs::read_to_string(input).with_context(|| format!("cannot read {}", input.display()))
}
