//! `toolgate replay`: what a candidate set of plugins would decide for the
//! calls in the decision log.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use toolgate::daemon::DaemonRequest;
use toolgate::decision_log::LogEntry;
use toolgate::{Config, Service};

use crate::target::Ctx;

/// Exit status when some verdict would change.
const EXIT_CHANGED: u8 = 3;

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The candidate config (default: the current one).
    #[arg(long, value_name = "FILE")]
    candidate_config: Option<PathBuf>,
    /// Replace (or add) one plugin of the candidate: NAME=SOURCE, or just
    /// SOURCE (a .wasm file, named by its file stem, or bundled:NAME).
    #[arg(long = "plugin", value_name = "[NAME=]SOURCE")]
    plugins: Vec<String>,
    /// Only calls logged this long ago or less, e.g. 24h, 7d.
    #[arg(long, value_name = "DURATION")]
    since: Option<humantime::Duration>,
    /// The most log entries to read (newest).
    #[arg(long, default_value_t = 100_000)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(ctx: &Ctx, args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let entries = logged(ctx, args)?;
    let candidate = candidate_config(ctx, args)?;
    // A scratch copy of the store: the candidate's writes touch nothing live.
    let scratch = tempfile::tempdir().context("cannot make a scratch directory")?;
    let copy = scratch.path().join("replay.redb");
    let store = ctx.store_location();
    let Some(file) = store.file() else {
        anyhow::bail!(
            "replay runs the candidate over a scratch copy of a redb store; copy the database \
             to a file first (`toolgate store copy --from {store} --to FILE`), then replay with \
             --store FILE"
        );
    };
    if file.exists() {
        std::fs::copy(file, &copy).with_context(|| format!("cannot copy {store}"))?;
    }
    let host = Service::open(candidate, Some(copy.into())).context("cannot start the candidate")?;
    let report = toolgate::replay::replay(&entries, &host)?;

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "replayed {} calls ({} not replayable: logged without full arguments)",
            report.replayed, report.not_replayable
        );
        for (kind, count) in &report.changes {
            println!("  {kind}: {count}");
        }
        for call in &report.changed {
            println!(
                "  {} {} ({}): {:?} → {:?} {}",
                call.call_id,
                call.tool,
                call.session_id,
                call.before,
                call.after,
                call.reason.as_deref().unwrap_or("")
            );
        }
        println!(
            "candidate decision time: p50 {} µs, p99 {} µs",
            report.p50_us, report.p99_us
        );
    }
    Ok(if report.changed_anything() {
        ExitCode::from(EXIT_CHANGED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The logged decisions to replay, oldest first (`--since`, `--limit`).
fn logged(ctx: &Ctx, args: &ReplayArgs) -> anyhow::Result<Vec<LogEntry>> {
    #[derive(serde::Deserialize)]
    struct Row {
        entry: LogEntry,
    }
    let rows: Vec<Row> = serde_json::from_value(ctx.target(None)?.call(DaemonRequest::Log {
        filter: Default::default(),
        limit: args.limit,
    })?)?;
    let since = args
        .since
        .map(|d| toolgate::now_ms().saturating_sub(d.as_millis() as u64));
    Ok(rows
        .into_iter()
        .map(|r| r.entry)
        .filter(|e| since.is_none_or(|since| e.at_ms >= since))
        .collect())
}

/// The candidate: `--candidate-config` (else the live config) with each
/// `--plugin` put in.
fn candidate_config(ctx: &Ctx, args: &ReplayArgs) -> anyhow::Result<Config> {
    let mut candidate = match &args.candidate_config {
        Some(path) => Config::load(path)?,
        None => ctx.config.clone(),
    };
    for plugin in &args.plugins {
        let (name, source) = match plugin.split_once('=') {
            Some((name, source)) => (name.to_string(), source.to_string()),
            None => (plugin_name(plugin)?, plugin.clone()),
        };
        let entry = candidate
            .plugins
            .entry(name)
            .or_insert_with(|| toolgate::config::PluginConfig::for_path(source.clone(), 100));
        entry.path = Some(source);
    }
    Ok(candidate)
}

/// The plugin name a bare SOURCE stands for.
fn plugin_name(source: &str) -> anyhow::Result<String> {
    if let Some(name) = source.strip_prefix("bundled:") {
        return Ok(name.to_string());
    }
    std::path::Path::new(source)
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string)
        .with_context(|| format!("cannot name a plugin after {source}; write NAME={source}"))
}
