//! `toolgate store`: the store's size, giving space back, moving a store
//! between backends, and checking and salvaging a damaged one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use toolgate::daemon::{Client, DaemonRequest};
use toolgate::locations::StoreLocation;
use toolgate::store::hygiene::StoreStats;
use toolgate::store::{Lost, Record, Store};

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
    /// Read every record of the store (the config's, or --store) and name
    /// each one that cannot be read; exit 1 if any. Stop the daemon first.
    Check,
    /// Copy every record of a damaged store (the config's, or --store)
    /// that can still be read into a new store OUT, and list what was lost
    /// (pending gates first). Stop the daemon first; then put OUT in the
    /// damaged store's place.
    Salvage {
        /// The new store: a redb file that does not exist yet, or an empty
        /// `postgres://` database.
        #[arg(value_name = "OUT")]
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
        StoreCommand::Check => check(ctx),
        StoreCommand::Salvage { to } => salvage(ctx, &to.into()),
        StoreCommand::Compact => {
            let store = ctx.store_location();
            let Some(file) = store.file() else {
                anyhow::bail!(
                    "compact is for a redb file; a PostgreSQL store gives space back with VACUUM"
                );
            };
            refuse_while_served(ctx, "compact")?;
            let (before, after) = toolgate::store::compact(file)?;
            println!("compacted {store}: {before} → {after} bytes");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Records queued (events, decisions) between waits for the writer, well
/// under its queue's capacity, so a copy never drops one.
const COPY_FLUSH_EVERY: usize = 1000;

/// Refuse to `act` on the store while its daemon serves it, or when there
/// is no store file to act on (rather than make an empty one).
fn refuse_while_served(ctx: &Ctx, act: &str) -> anyhow::Result<()> {
    if let Some(file) = ctx.store_location().file()
        && !file.exists()
    {
        anyhow::bail!(
            "there is no store at {}; name it with --store",
            file.display()
        );
    }
    if let Ok(health) = Client::new(ctx.socket(None)).call(&DaemonRequest::Health) {
        anyhow::bail!(
            "the daemon (pid {}) holds the store; stop it first (kill -TERM {0}), then {act}",
            health["pid"]
        );
    }
    Ok(())
}

fn copy(ctx: &Ctx, from: &StoreLocation, to: &StoreLocation) -> anyhow::Result<ExitCode> {
    let (source, destination) = open_pair(ctx, from, to)?;
    let counts = transfer(&source, &destination, to, None)?;
    println!("copied {} to {}:", from, to);
    print_counts(&counts);
    Ok(ExitCode::SUCCESS)
}

fn check(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    refuse_while_served(ctx, "check it")?;
    let store = ctx.store_location();
    let source = Store::open_location(&store, crate::target::store_wait(&ctx.config))
        .with_context(|| format!("cannot open {store}"))?;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut lost = Vec::new();
    source.transfer().export_salvaging(
        &mut |record| {
            *counts.entry(kind(&record)).or_default() += 1;
            Ok(())
        },
        &mut |what| lost.push(what),
    )?;
    println!("checked {store}: read");
    print_counts(&counts);
    if lost.is_empty() {
        println!("every record reads");
        return Ok(ExitCode::SUCCESS);
    }
    print_lost("cannot be read", &mut lost);
    println!(
        "fix: stop the daemon, `toolgate --store {store} store salvage NEW.redb` copies every \
         record that reads into a new store; then put NEW.redb in its place"
    );
    Ok(ExitCode::from(1))
}

fn salvage(ctx: &Ctx, to: &StoreLocation) -> anyhow::Result<ExitCode> {
    refuse_while_served(ctx, "salvage it")?;
    let from = ctx.store_location();
    let (source, destination) = open_pair(ctx, &from, to)?;
    let mut lost = Vec::new();
    let counts = transfer(&source, &destination, to, Some(&mut lost))?;
    println!("salvaged {from} into {to}:");
    print_counts(&counts);
    if lost.is_empty() {
        println!("nothing was lost");
    } else {
        print_lost("lost (could not be read)", &mut lost);
    }
    Ok(ExitCode::SUCCESS)
}

/// The source and an empty destination, both opened.
fn open_pair(
    ctx: &Ctx,
    from: &StoreLocation,
    to: &StoreLocation,
) -> anyhow::Result<(Store, Store)> {
    let wait = crate::target::store_wait(&ctx.config);
    let source = Store::open_location(from, wait)
        .with_context(|| format!("cannot open the source {from}"))?;
    let destination = Store::open_location(to, wait)
        .with_context(|| format!("cannot open the destination {to}"))?;
    let mut occupied = false;
    let _ = destination.transfer().export(&mut |_| {
        occupied = true;
        Err(toolgate::Error::Request("not empty".into()))
    });
    if occupied {
        anyhow::bail!(
            "the destination {} is not empty; copy into a new file or an empty database",
            to
        );
    }
    Ok((source, destination))
}

/// Every record of `source` into `destination` (`to`), counted by kind;
/// with `lost`, what cannot be read is listed there instead of failing.
fn transfer(
    source: &Store,
    destination: &Store,
    to: &StoreLocation,
    lost: Option<&mut Vec<Lost>>,
) -> anyhow::Result<BTreeMap<&'static str, u64>> {
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut queued = 0;
    let mut each = |record: Record| {
        if matches!(record, Record::Event(_) | Record::Decision(_)) {
            queued += 1;
            if queued % COPY_FLUSH_EVERY == 0 {
                destination.maintenance().persist();
            }
        }
        let kind = kind(&record);
        destination.transfer().import(record)?;
        *counts.entry(kind).or_default() += 1;
        Ok(())
    };
    match lost {
        Some(lost) => source
            .transfer()
            .export_salvaging(&mut each, &mut |what| lost.push(what))?,
        None => source.transfer().export(&mut each)?,
    }
    destination.maintenance().persist();
    let dropped = destination.maintenance().dropped_events();
    if dropped > 0 {
        anyhow::bail!("{dropped} events or log entries could not be written to {to}");
    }
    Ok(counts)
}

fn kind(record: &Record) -> &'static str {
    match record {
        Record::State { .. } => "state entries",
        Record::Event(_) => "events",
        Record::Gate(_) => "pending gates",
        Record::Resolutions { .. } => "resolved calls",
        Record::Decision(_) => "decision-log entries",
        Record::Turn { .. } => "turn counters",
        Record::AgentTerminal { .. } => "agent terminals",
    }
}

fn print_counts(counts: &BTreeMap<&'static str, u64>) {
    for (kind, n) in counts {
        println!("  {n:>10} {kind}");
    }
}

/// What could not be read, pending gates (a person's open questions)
/// first.
fn print_lost(heading: &str, lost: &mut [Lost]) {
    let gates = |table: &str| matches!(table, "gates" | "pending_gates");
    lost.sort_by_key(|l| (!gates(&l.table), l.table.clone()));
    println!("{heading}:");
    for l in lost.iter() {
        println!("  !! {} {}: {}", l.table, l.what, l.why);
    }
}
