//! `toolgate store`: the store's size, giving space back, and moving a store
//! between backends.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use toolgate::daemon::{Client, DaemonRequest};
use toolgate::locations::StoreLocation;
use toolgate::store::hygiene::StoreStats;
use toolgate::store::{Record, Store};

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
    /// stop the daemon first. (redb only; PostgreSQL has VACUUM.)
    Compact,
    /// Copy everything — state, events, gates, resolutions, turns, the
    /// decision log — from one store to another, e.g. from the embedded
    /// redb file to a fleet's PostgreSQL. The destination must be empty;
    /// stop the daemons of both first.
    Copy {
        /// The source: a redb file or a `postgres://` URL.
        #[arg(long, value_name = "STORE")]
        from: PathBuf,
        /// The destination: a redb file or a `postgres://` URL.
        #[arg(long, value_name = "STORE")]
        to: PathBuf,
    },
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
        StoreCommand::Copy { from, to } => copy(ctx, &from.into(), &to.into()),
        StoreCommand::Compact => {
            let store = ctx.store_location();
            let Some(file) = store.file() else {
                anyhow::bail!(
                    "compact is for a redb file; a PostgreSQL store gives space back with VACUUM"
                );
            };
            let socket = ctx.socket(None);
            if let Ok(health) = Client::new(&socket).call(&DaemonRequest::Health) {
                anyhow::bail!(
                    "the daemon (pid {}) holds the store; stop it first (kill -TERM {0}), then compact",
                    health["pid"]
                );
            }
            let (before, after) = toolgate::store::compact(file)?;
            println!("compacted {store}: {before} → {after} bytes");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Records queued (events, decisions) between waits for the writer, well
/// under its queue's capacity, so a copy never drops one.
const COPY_FLUSH_EVERY: usize = 1000;

fn copy(ctx: &Ctx, from: &StoreLocation, to: &StoreLocation) -> anyhow::Result<ExitCode> {
    let wait = crate::target::store_wait(&ctx.config);
    let source = Store::open_location(from, wait)
        .with_context(|| format!("cannot open the source {from}"))?;
    let destination = Store::open_location(to, wait)
        .with_context(|| format!("cannot open the destination {to}"))?;
    let mut occupied = false;
    let _ = destination.export(&mut |_| {
        occupied = true;
        Err(toolgate::Error::Request("not empty".into()))
    });
    if occupied {
        anyhow::bail!(
            "the destination {} is not empty; copy into a new file or an empty database",
            to
        );
    }
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut queued = 0;
    source.export(&mut |record| {
        let kind = match &record {
            Record::State { .. } => "state entries",
            Record::Event(_) => "events",
            Record::Gate(_) => "pending gates",
            Record::Resolutions { .. } => "resolved calls",
            Record::Decision(_) => "decision-log entries",
            Record::Turn { .. } => "turn counters",
            Record::AgentTerminal { .. } => "agent terminals",
        };
        if matches!(record, Record::Event(_) | Record::Decision(_)) {
            queued += 1;
            if queued % COPY_FLUSH_EVERY == 0 {
                destination.persist();
            }
        }
        destination.import(record)?;
        *counts.entry(kind).or_default() += 1;
        Ok(())
    })?;
    destination.persist();
    let dropped = destination.dropped_events();
    if dropped > 0 {
        anyhow::bail!(
            "{dropped} events or log entries could not be written to {}",
            to
        );
    }
    println!("copied {} to {}:", from, to);
    for (kind, n) in &counts {
        println!("  {n:>10} {kind}");
    }
    Ok(ExitCode::SUCCESS)
}
