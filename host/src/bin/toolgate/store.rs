//! `toolgate store`: the store's size, and giving space back.

use std::process::ExitCode;

use toolgate::daemon::{Client, DaemonRequest};
use toolgate::store::hygiene::StoreStats;

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum StoreCommand {
    /// Sizes per table and per policy (state bytes, events), and the file.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Sweep what is past its retention first.
        #[arg(long)]
        sweep: bool,
    },
    /// Give freed space back to the file system. Needs the store to itself:
    /// stop the daemon first.
    Compact,
}

pub fn run(ctx: &Ctx, command: StoreCommand) -> anyhow::Result<ExitCode> {
    match command {
        StoreCommand::Stats { json, sweep } => {
            let target = ctx.target(None)?;
            if sweep {
                let report = target.call(DaemonRequest::Sweep)?;
                eprintln!("swept: {report}");
            }
            let stats: StoreStats =
                serde_json::from_value(target.call(DaemonRequest::StoreStats)?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("file {} bytes", stats.file_bytes);
            println!("{:<24} {:>10} {:>14}", "TABLE", "ROWS", "STORED BYTES");
            for (name, table) in &stats.tables {
                println!("{name:<24} {:>10} {:>14}", table.rows, table.stored_bytes);
            }
            println!("{:<24} {:>10} {:>14}", "POLICY", "EVENTS", "STATE BYTES");
            for (name, policy) in &stats.policies {
                println!(
                    "{name:<24} {:>10} {:>14}",
                    policy.events, policy.state_bytes
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Compact => {
            let socket = ctx.socket(None);
            if let Ok(health) = Client::new(&socket).call(&DaemonRequest::Health) {
                anyhow::bail!(
                    "the daemon (pid {}) holds the store; stop it first (kill -TERM {0}), then compact",
                    health["pid"]
                );
            }
            let (before, after) = toolgate::store::hygiene::compact(&ctx.store_path())?;
            println!(
                "compacted {}: {before} → {after} bytes",
                ctx.store_path().display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
