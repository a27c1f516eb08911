//! `toolgate release`: sign a release's checksum list, and verify
//! downloaded artifacts against it.
//!
//! A release is a folder of artifacts (tarballs, packages, wheels, SBOMs)
//! with `SHA256SUMS` (as `sha256sum` writes it, so `sha256sum -c` works too)
//! and `SHA256SUMS.sig`, an ed25519 signature over that list made for
//! releases only (see `toolgate::signing`). Verifying checks the signature
//! with the key the person trusts, then each artifact's sha256 against the
//! list: a changed, swapped or unlisted artifact is refused, naming it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use toolgate::signing::Purpose;

use crate::plugins;

/// The checksum list's file name, beside the artifacts.
const SUMS: &str = "SHA256SUMS";

#[derive(clap::Subcommand)]
pub enum ReleaseCommand {
    /// Make an ed25519 key pair for signing releases: PREFIX.key (secret,
    /// owner-only) and PREFIX.pub (what people verify with).
    Keygen {
        /// Where to write the keys (PREFIX.key, PREFIX.pub).
        #[arg(long, value_name = "PREFIX")]
        out: PathBuf,
    },
    /// Sign a release's checksum list: writes FILE.sig (`cargo xtask dist
    /// --sign-key KEY` does this for you).
    Sign {
        /// The secret key file (from `toolgate release keygen`).
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        /// The release's SHA256SUMS.
        file: PathBuf,
    },
    /// Check downloaded artifacts: SHA256SUMS.sig beside them must be
    /// signed by KEY, and each artifact's sha256 must be the one SHA256SUMS
    /// lists. Exit 0 when every one holds, 1 naming the first that does
    /// not.
    Verify {
        /// The release's public key: 64 hex digits, or the .pub file.
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Artifacts (each checked against the SHA256SUMS beside it), or a
        /// release folder (every artifact its SHA256SUMS lists must be
        /// there).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

pub fn run(command: ReleaseCommand) -> anyhow::Result<ExitCode> {
    match command {
        ReleaseCommand::Keygen { out } => plugins::keygen(&out, |public| {
            format!(
                "people verify releases with:\n  toolgate release verify --key {public} ARTIFACT…"
            )
        }),
        ReleaseCommand::Sign { key, file } => plugins::sign(Purpose::Release, &key, &file),
        ReleaseCommand::Verify { key, paths } => {
            let key = trusted_key(&key)?;
            for path in &paths {
                for (artifact, sha256) in verify(&key, path)? {
                    println!("ok  {sha256}  {}", artifact.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The key as hex: given as hex, or read from a `.pub` file.
fn trusted_key(given: &str) -> anyhow::Result<String> {
    let is_hex = |text: &str| text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit());
    if is_hex(given) {
        return Ok(given.to_ascii_lowercase());
    }
    let text = std::fs::read_to_string(given).with_context(|| {
        format!("--key {given:?} is neither 64 hex digits nor a readable .pub file")
    })?;
    let text = text.trim();
    anyhow::ensure!(
        is_hex(text),
        "{given} does not hold a public key (64 hex digits, as `toolgate release keygen` writes it)"
    );
    Ok(text.to_ascii_lowercase())
}

/// `path` verified with `key`: each artifact it stands for with its sha256.
fn verify(key: &str, path: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let (dir, only) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{} is not a file name", path.display()))?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        (dir.unwrap_or(Path::new(".")).to_path_buf(), Some(name))
    };
    let sums_path = dir.join(SUMS);
    let sums = std::fs::read(&sums_path).with_context(|| {
        format!(
            "cannot read {}: download the release's {SUMS} and {SUMS}.sig beside the artifacts",
            sums_path.display()
        )
    })?;
    let sig_path = plugins::sig_path(&sums_path);
    let sig = std::fs::read_to_string(&sig_path).with_context(|| {
        format!(
            "cannot read {}: the release's signature",
            sig_path.display()
        )
    })?;
    let signature = toolgate::signing::parse(&sig)
        .map_err(|why| anyhow::anyhow!("{} is malformed: {why}", sig_path.display()))?;
    if !signature.key.eq_ignore_ascii_case(key) {
        bail!(
            "{} is signed by key {}, not the key you trust ({key}): refused",
            sig_path.display(),
            signature.key
        );
    }
    signature
        .verify(Purpose::Release, &sums)
        .map_err(|why| anyhow::anyhow!("{} does not sign {SUMS}: {why}", sig_path.display()))?;

    let listed = parse_sums(&String::from_utf8_lossy(&sums))
        .with_context(|| format!("{} is malformed", sums_path.display()))?;
    let chosen: Vec<&(String, String)> = match only {
        None => listed.iter().collect(),
        Some(name) => vec![
            listed
                .iter()
                .find(|(_, listed)| listed == name)
                .with_context(|| format!("{name} is not in the release's {SUMS}: refused"))?,
        ],
    };
    chosen
        .into_iter()
        .map(|(sha256, name)| {
            let artifact = dir.join(name);
            let bytes = std::fs::read(&artifact)
                .with_context(|| format!("cannot read {}", artifact.display()))?;
            let actual = hex::encode(Sha256::digest(&bytes));
            if &actual != sha256 {
                bail!(
                    "{}'s sha256 is {actual}, but the signed {SUMS} says {sha256}: it changed \
                     after the release was signed (download it again from the release)",
                    artifact.display()
                );
            }
            Ok((artifact, actual))
        })
        .collect()
}

/// `sha256sum`'s lines: (sha256, file name), names plain (no folders).
fn parse_sums(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (sha256, name) = line
                .split_once(' ')
                .with_context(|| format!("line {line:?} is not `SHA256  NAME`"))?;
            let name = name.trim_start_matches([' ', '*']);
            anyhow::ensure!(
                sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()),
                "line {line:?} does not start with a sha256"
            );
            anyhow::ensure!(
                !name.is_empty() && !name.contains('/') && name != "..",
                "line {line:?} names no plain file"
            );
            Ok((sha256.to_ascii_lowercase(), name.to_string()))
        })
        .collect()
}
