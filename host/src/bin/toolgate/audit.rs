//! `toolgate audit`: prove the audit trail whole, and write it out.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use toolgate::audit::{Verifier, host_name, link_hash, public_path};
use toolgate::audit_export::{cef, otlp, read_chain};

use crate::target::Ctx;

#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// Check the chain: every link follows the one before, and the
    /// checkpoints and the newest link are signed by the trusted key. Names
    /// the first broken link and exits 1 if one is.
    Verify {
        #[command(flatten)]
        range: Range,
        /// The trusted public key: 64 hex digits, or a file holding them.
        /// Default: the `.pub` file beside the audit key (`[audit] key`,
        /// else STORE.audit-key.pub). Keep a copy where the agent cannot
        /// write, and pass it here.
        #[arg(long)]
        key: Option<String>,
    },
    /// Write the chain to stdout: `jsonl` (each link exactly as stored, so
    /// the copy verifies the same way), `cef` (ArcSight CEF lines, as a
    /// SIEM reads them from syslog) or `otlp` (OTLP/JSON, a traces request
    /// and a logs request per line for each batch of links, as the
    /// OpenTelemetry collector's file exporter writes and its file receiver
    /// reads).
    Export {
        #[command(flatten)]
        range: Range,
        /// The format.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: Format,
    },
    /// Print this host's audit public key (what `verify --key` trusts).
    Key,
}

/// Which links.
#[derive(clap::Args)]
pub struct Range {
    /// From this link (default: the first kept).
    #[arg(long)]
    from: Option<u64>,
    /// Through this link (default: the newest).
    #[arg(long)]
    to: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Jsonl,
    Cef,
    Otlp,
}

pub fn run(ctx: &Ctx, command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify { range, key } => verify(ctx, &range, key.as_deref()),
        AuditCommand::Export { range, format } => export(ctx, &range, format),
        AuditCommand::Key => {
            println!("{}", trusted_key(ctx, None)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn verify(ctx: &Ctx, range: &Range, key: Option<&str>) -> anyhow::Result<ExitCode> {
    let trusted = trusted_key(ctx, key)?;
    let target = ctx.target(None)?;
    let call = |request| target.call(request).map_err(anyhow::Error::from);
    // The link before the range, to check the range's first link against.
    let mut before = None;
    if let Some(from) = range.from.filter(|from| *from > 0) {
        read_chain(call, from.checked_sub(2), Some(from - 1), |seq, link| {
            before = Some((seq, link_hash(link.as_bytes())));
            Ok(())
        })?;
    }
    let mut verifier = Verifier::new(&trusted, before);
    let (mut broken, mut read) = (None, 0u64);
    let after = range.from.and_then(|from| from.checked_sub(1));
    let head = read_chain(call, after, range.to, |seq, link| {
        read += 1;
        if broken.is_none()
            && let Err(err) = verifier.next(seq, link.as_bytes())
        {
            broken = Some(err);
        }
        Ok(())
    })?;
    // `--from` past the newest link: nothing to check. (A whole chain with
    // no links but a signed head is broken: `finish` says so.)
    if read == 0 && range.from.is_some() {
        println!("the audit chain holds no links in this range");
        return Ok(ExitCode::SUCCESS);
    }
    // When the range reaches the newest link, the signed head must be
    // there and name it.
    let reaches_end = match (range.to, &head) {
        (Some(to), Some(head)) => to >= head.seq,
        _ => true,
    };
    let result = match broken {
        Some(err) => Err(err),
        None => verifier.finish(reaches_end.then_some(head.as_ref())),
    };
    match result {
        Ok(found) if found.links == 0 => {
            println!("the audit chain holds no links");
            Ok(ExitCode::SUCCESS)
        }
        Ok(found) => {
            let end = if found.head_signed {
                format!(", the newest signed by {trusted}")
            } else {
                ", up to the range's end (links after the last checkpoint in it are anchored \
                 only by the rest of the chain: verify without --to for that)"
                    .to_string()
            };
            println!(
                "audit chain whole: links {}..={} ({} links, {} signed checkpoints and prunes){end}",
                found.first.unwrap_or_default(),
                found.last.unwrap_or_default(),
                found.links,
                found.checkpoints,
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) => {
            eprintln!("toolgate: {broken}");
            Ok(ExitCode::from(1))
        }
    }
}

fn export(ctx: &Ctx, range: &Range, format: Format) -> anyhow::Result<ExitCode> {
    let target = ctx.target(None)?;
    let call = |request| target.call(request).map_err(anyhow::Error::from);
    let mut out = std::io::stdout().lock();
    let host = ctx.config.audit.host.clone().unwrap_or_else(host_name);
    let mut batch = Vec::new();
    let write_otlp = |batch: &mut Vec<(u64, String)>, out: &mut dyn std::io::Write| {
        if !batch.is_empty() {
            let (traces, logs) = otlp::requests(batch, &host);
            writeln!(out, "{}", serde_json::to_string(&traces)?)?;
            writeln!(out, "{}", serde_json::to_string(&logs)?)?;
            batch.clear();
        }
        anyhow::Ok(())
    };
    let after = range.from.and_then(|from| from.checked_sub(1));
    read_chain(call, after, range.to, |seq, link| {
        match format {
            Format::Jsonl => writeln!(out, "{link}")?,
            Format::Cef => writeln!(out, "{}", cef::line(link).map_err(anyhow::Error::msg)?)?,
            Format::Otlp => {
                batch.push((seq, link.to_string()));
                if batch.len() >= OTLP_BATCH {
                    write_otlp(&mut batch, &mut out)?;
                }
            }
        }
        Ok(())
    })?;
    write_otlp(&mut batch, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Links per OTLP/JSON line pair.
const OTLP_BATCH: usize = 500;

/// `key` (hex, or a file holding it), else this store's public audit key.
fn trusted_key(ctx: &Ctx, key: Option<&str>) -> anyhow::Result<String> {
    let is_hex = |text: &str| text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit());
    let file = match key {
        Some(key) if is_hex(key.trim()) => return Ok(key.trim().to_string()),
        Some(file) => PathBuf::from(file),
        None => public_path(
            &ctx.config
                .audit_key_path(&ctx.store_location().local_name()),
        ),
    };
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "cannot read the audit public key {} (the daemon writes it when it first starts; \
             or pass --key with the 64 hex digits)",
            file.display()
        )
    })?;
    anyhow::ensure!(
        is_hex(text.trim()),
        "{} does not hold an audit public key (64 hex digits)",
        file.display()
    );
    Ok(text.trim().to_string())
}
