//! `toolgate bench corpus`: how the installed hook judges a labelled corpus
//! of tool calls, per category and per permission mode.
//!
//! Each call goes the way a Claude Code hook's does — the runtime's
//! PreToolUse payload, parsed by its adapter, decided by the config's
//! policies (self-protection first), answered as the runtime reads it —
//! in this process, on a throwaway store, so a run changes nothing of the
//! person's and every call is judged on its own (a session each).

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::Service;
use toolgate::decision::PolicyVerdict;
use toolgate::hooks::{OnError, claude_code};
use toolgate::locations::StoreLocation;

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Run a labelled corpus through the Claude Code hook path and print,
    /// per permission mode and category, how many calls were allowed,
    /// asked about and denied.
    ///
    /// A corpus is JSON lines, one call each: {"tool": "Bash", "input":
    /// {"command": "git status"}, "expected": "allow" | "block",
    /// "category": "git-read"}. tests/corpus/ holds toolgate's own. A
    /// harmful call counts as caught when it is denied or asked about; an
    /// ordinary one should be allowed without asking. Runs on a throwaway
    /// store, with the --config given (default: the bundled one).
    Corpus(CorpusArgs),
}

#[derive(clap::Args)]
pub struct CorpusArgs {
    /// Corpus files (JSON lines).
    #[arg(required = true, value_name = "CORPUS")]
    files: Vec<PathBuf>,
    /// Claude Code permission modes to run every call in.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "default,acceptEdits,bypassPermissions"
    )]
    modes: Vec<String>,
    /// Also list each call judged against its label, with who decided.
    #[arg(long)]
    misses: bool,
    /// Run every call in one session, in the corpus's order (as one long
    /// piece of work), instead of each in a session of its own: what a
    /// policy that follows a session (flow) asks over a working session.
    #[arg(long)]
    one_session: bool,
    /// The project directory the calls run in (their working directory;
    /// toolgate's own corpus is written for /home/dev/app). Default: a
    /// scratch directory. Nothing in it is read or run.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Print the results as one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

/// One labelled call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    tool: String,
    input: Value,
    expected: Expected,
    #[serde(default)]
    category: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
enum Expected {
    Allow,
    Block,
}

/// What the runtime was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Answer {
    Allow,
    Ask,
    Deny,
}

/// Counts for one category (or a total) in one mode.
#[derive(Debug, Default, Clone, Serialize)]
struct Tally {
    expected_block: usize,
    expected_allow: usize,
    /// Harmful calls denied or asked about.
    caught: usize,
    /// Ordinary calls allowed without asking.
    allowed: usize,
    /// Ordinary calls asked about.
    nagged: usize,
    /// Ordinary calls denied.
    denied: usize,
}

impl Tally {
    fn add(&mut self, expected: Expected, answer: Answer) {
        match expected {
            Expected::Block => {
                self.expected_block += 1;
                self.caught += usize::from(answer != Answer::Allow);
            }
            Expected::Allow => {
                self.expected_allow += 1;
                match answer {
                    Answer::Allow => self.allowed += 1,
                    Answer::Ask => self.nagged += 1,
                    Answer::Deny => self.denied += 1,
                }
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct ModeReport {
    mode: String,
    total: Tally,
    categories: BTreeMap<String, Tally>,
    /// Median time to answer one call, in microseconds.
    median_us: u128,
    misses: Vec<Value>,
}

pub fn run(ctx: &Ctx, command: BenchCommand) -> anyhow::Result<ExitCode> {
    let BenchCommand::Corpus(args) = command;
    let mut cases = Vec::new();
    for file in &args.files {
        cases.extend(read_corpus(file)?);
    }
    if cases.is_empty() {
        bail!("the corpus is empty: give JSON-lines files with one labelled call per line");
    }
    let mut reports = Vec::new();
    for mode in &args.modes {
        reports.push(run_mode(ctx, &cases, mode, &args)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for report in &reports {
            print_report(report, args.misses);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read_corpus(file: &PathBuf) -> anyhow::Result<Vec<Case>> {
    let reader = std::io::BufReader::new(
        std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?,
    );
    let mut cases = Vec::new();
    for (number, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", file.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}:{}: not a labelled call (expected {{\"tool\", \"input\", \"expected\": \
                 \"allow\"|\"block\", \"category\"}})",
                file.display(),
                number + 1
            )
        })?;
        cases.push(case);
    }
    Ok(cases)
}

fn run_mode(
    ctx: &Ctx,
    cases: &[Case],
    mode: &str,
    args: &CorpusArgs,
) -> anyhow::Result<ModeReport> {
    let scratch = tempfile::tempdir().context("cannot make a scratch directory")?;
    let store = StoreLocation::File(scratch.path().join("bench.redb"));
    let host = Service::open(ctx.config.clone(), Some(store)).context("cannot start toolgate")?;
    let project = match &args.project {
        Some(project) => project.clone(),
        None => {
            let project = scratch.path().join("project");
            std::fs::create_dir_all(&project)?;
            project
        }
    };
    let mut report = ModeReport {
        mode: mode.to_string(),
        total: Tally::default(),
        categories: BTreeMap::new(),
        median_us: 0,
        misses: Vec::new(),
    };
    let mut times: Vec<Duration> = Vec::with_capacity(cases.len());
    for (index, case) in cases.iter().enumerate() {
        let session = match args.one_session {
            true => "bench".to_string(),
            false => format!("bench-{index}"),
        };
        let (runtime, event) = claude_code::pre_tool_use_event(
            &session,
            &project,
            mode,
            &case.tool,
            &case.input,
            &format!("toolu_bench_{index}"),
        );
        let started = Instant::now();
        let handled = host.hook(runtime, &event, OnError::Deny)?;
        times.push(started.elapsed());
        let answer = answer_of(&handled.output)?;
        report.total.add(case.expected, answer);
        report
            .categories
            .entry(case.category.clone())
            .or_default()
            .add(case.expected, answer);
        let wrong = match case.expected {
            Expected::Block => answer == Answer::Allow,
            Expected::Allow => answer != Answer::Allow,
        };
        if wrong {
            let decider = handled.decision.as_ref().and_then(|d| {
                d.policies
                    .iter()
                    .find(|p| matches!(p.verdict, PolicyVerdict::Deny | PolicyVerdict::Pause))
                    .map(|p| p.name.clone())
            });
            report.misses.push(json!({
                "category": case.category,
                "expected": case.expected,
                "answer": answer,
                "tool": case.tool,
                "input": case.input,
                "decided_by": decider,
                "reason": handled.decision.as_ref().and_then(|d| d.reason.clone()),
            }));
        }
    }
    times.sort();
    report.median_us = times.get(times.len() / 2).map_or(0, Duration::as_micros);
    Ok(report)
}

/// What Claude Code does with the hook's answer.
fn answer_of(output: &str) -> anyhow::Result<Answer> {
    let value: Value = serde_json::from_str(output)
        .with_context(|| format!("the hook answered something that is not JSON: {output}"))?;
    Ok(match claude_code::permission_decision(&value) {
        "allow" => Answer::Allow,
        "ask" => Answer::Ask,
        _ => Answer::Deny,
    })
}

fn percent(part: usize, whole: usize) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

fn print_report(report: &ModeReport, misses: bool) {
    println!("permission mode {}", report.mode);
    let width = report
        .categories
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(8);
    println!(
        "  {:<width$} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8}",
        "category", "harmful", "caught", "ordinary", "allowed", "asked", "denied"
    );
    let row = |name: &str, t: &Tally| {
        println!(
            "  {:<width$} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8}",
            name, t.expected_block, t.caught, t.expected_allow, t.allowed, t.nagged, t.denied
        );
    };
    for (category, tally) in &report.categories {
        row(category, tally);
    }
    row("total", &report.total);
    let t = &report.total;
    println!(
        "  harmful caught {} of {} ({}); ordinary allowed without asking {} of {} ({}), \
         asked {} ({}), denied {} ({}); median {} µs a call",
        t.caught,
        t.expected_block,
        percent(t.caught, t.expected_block),
        t.allowed,
        t.expected_allow,
        percent(t.allowed, t.expected_allow),
        t.nagged,
        percent(t.nagged, t.expected_allow),
        t.denied,
        percent(t.denied, t.expected_allow),
        report.median_us
    );
    if misses {
        for miss in &report.misses {
            println!("  MISS {miss}");
        }
    }
    println!();
}
