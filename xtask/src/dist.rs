//! Release artifacts for one or more targets: `toolgate-VERSION-TARGET.tar.gz`
//! (the `toolgate` and `toolgate-hook` binaries, README, LICENSE), its SBOM
//! `toolgate-VERSION-TARGET.cdx.json`, then `SHA256SUMS` over every artifact
//! in the folder and, with a key, `SHA256SUMS.sig` (which `toolgate release
//! verify` checks).
//!
//! Archives are reproducible: entries in a fixed order, one time for all
//! (`SOURCE_DATE_EPOCH`, else the last commit's), owner root, no host
//! details; the same binaries make the same bytes.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use sha2::{Digest as _, Sha256};

/// The binaries a release ships.
pub const BINARIES: [&str; 2] = ["toolgate", "toolgate-hook"];

/// The cargo profile releases are built with (see the workspace manifest).
pub const PROFILE: &str = "dist";

/// The most a shipped binary may weigh, bytes: a person downloads it, and a
/// binary that grows by megabytes has gained a dependency someone should
/// have noticed. Measured (x86_64-unknown-linux-gnu, profile `dist`,
/// 2026-12): `toolgate` 62.2 MiB (wasmtime and Cranelift, the servers, the
/// bundled policies at 6.4 MiB, 13 MiB of symbols kept for backtraces),
/// `toolgate-hook` 0.95 MiB (a thin client: no wasmtime).
pub const SIZE_BUDGET: [(&str, u64); 2] = [("toolgate", 68 << 20), ("toolgate-hook", 3 << 19)];

/// What a release is made from.
pub struct Release {
    /// The workspace root.
    pub root: PathBuf,
    /// Where the artifacts go (created; artifacts of the same name replaced).
    pub out: PathBuf,
    /// The version the artifacts are named after.
    pub version: String,
    /// The archives' time (seconds since the epoch).
    pub epoch: u64,
}

impl Release {
    /// A release of the workspace at `root` into `out`: its `toolgate`
    /// package's version, `SOURCE_DATE_EPOCH` or the last commit's time.
    pub fn new(root: &Path, out: &Path) -> anyhow::Result<Self> {
        let metadata = crate::sbom::metadata(root)?;
        let version = crate::sbom::member(&metadata, "toolgate")?["version"]
            .as_str()
            .context("the toolgate package has no version")?
            .to_string();
        Ok(Self {
            root: root.to_path_buf(),
            out: out.to_path_buf(),
            version,
            epoch: source_date_epoch(root)?,
        })
    }

    /// Build the binaries for `target` (`cargo build --profile dist`): the
    /// folder holding them.
    pub fn build(&self, target: &str) -> anyhow::Result<PathBuf> {
        self.cargo_build(target, &["--package", "toolgate", "--bins"])
    }

    /// `cargo build --profile dist --target TARGET WHAT…`: the folder its
    /// output is in.
    pub fn cargo_build(&self, target: &str, what: &[&str]) -> anyhow::Result<PathBuf> {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&self.root)
            .args([
                "build",
                "--locked",
                "--profile",
                PROFILE,
                "--target",
                target,
            ])
            .args(what)
            .status()
            .context("cannot run cargo")?;
        ensure!(
            status.success(),
            "building for {target} failed (is its target installed? `rustup target add {target}`; \
             a -musl target also needs `musl-tools`)"
        );
        Ok(self.root.join("target").join(target).join(PROFILE))
    }

    /// Package the binaries in `bins` (built for `target`): the archive and
    /// the SBOM written into `out`. `budget`: refuse binaries heavier than
    /// [`SIZE_BUDGET`] (off for debug builds, which are larger).
    pub fn package(&self, target: &str, bins: &Path, budget: bool) -> anyhow::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("cannot create {}", self.out.display()))?;
        if budget {
            check_budget(bins)?;
        }
        let name = format!("toolgate-{}-{target}", self.version);
        let archive = self.out.join(format!("{name}.tar.gz"));
        let mut entries: Vec<(String, PathBuf, u32)> = BINARIES
            .iter()
            .map(|bin| (format!("{name}/{bin}"), bins.join(bin), 0o755))
            .collect();
        for doc in ["README.md", "LICENSE"] {
            entries.push((format!("{name}/{doc}"), self.root.join(doc), 0o644));
        }
        write_archive(&archive, &name, &entries, self.epoch)?;

        let sbom_path = self.out.join(format!("{name}.cdx.json"));
        let timestamp = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.epoch),
        )
        .to_string();
        let sbom = crate::sbom::sbom(&self.root, target, &timestamp)?;
        std::fs::write(&sbom_path, serde_json::to_string_pretty(&sbom)? + "\n")
            .with_context(|| format!("cannot write {}", sbom_path.display()))?;
        Ok(vec![archive, sbom_path])
    }

    /// `SHA256SUMS` over every other file in `out` (as `sha256sum` writes
    /// it), then, with `key`, `SHA256SUMS.sig` made by the `toolgate`
    /// binary `signer` (`toolgate release sign`).
    pub fn seal(&self, signer: &Path, key: Option<&Path>) -> anyhow::Result<PathBuf> {
        let sums = self.out.join("SHA256SUMS");
        let mut names: Vec<String> = std::fs::read_dir(&self.out)?
            .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()?;
        names.retain(|n| !n.starts_with("SHA256SUMS"));
        names.sort();
        let mut text = String::new();
        for name in &names {
            let bytes = std::fs::read(self.out.join(name))?;
            text += &format!("{}  {name}\n", hex::encode(Sha256::digest(&bytes)));
        }
        std::fs::write(&sums, text)?;
        let _ = std::fs::remove_file(self.out.join("SHA256SUMS.sig"));
        if let Some(key) = key {
            let signed = Command::new(signer)
                .args(["release", "sign", "--key"])
                .arg(key)
                .arg(&sums)
                .output()
                .with_context(|| format!("cannot run {}", signer.display()))?;
            ensure!(
                signed.status.success(),
                "signing {} failed: {}",
                sums.display(),
                String::from_utf8_lossy(&signed.stderr)
            );
        }
        Ok(sums)
    }
}

/// Run `command` (a tool, by name), its output kept; a tool that is not
/// installed, or that fails, is an error naming it (and `install`, how to
/// get it).
pub fn run_tool(command: &mut Command, install: &str) -> anyhow::Result<std::process::Output> {
    let tool = command.get_program().to_string_lossy().into_owned();
    let out = match command.output() {
        Ok(out) => out,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("{tool} is not installed: {install}")
        }
        Err(err) => return Err(err).with_context(|| format!("cannot run {tool}")),
    };
    ensure!(
        out.status.success(),
        "{tool} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// Each binary in `bins` within its [`SIZE_BUDGET`].
pub fn check_budget(bins: &Path) -> anyhow::Result<()> {
    for (bin, budget) in SIZE_BUDGET {
        let path = bins.join(bin);
        let size = std::fs::metadata(&path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        if size > budget {
            bail!(
                "{} is {:.1} MiB, over its budget of {:.1} MiB: find what grew it (`cargo \
                 bloat`, `cargo tree`), or raise SIZE_BUDGET in xtask/src/dist.rs saying why",
                path.display(),
                size as f64 / f64::from(1 << 20),
                budget as f64 / f64::from(1 << 20)
            );
        }
    }
    Ok(())
}

/// A gzip'd tar of `entries` (name in the archive, file, mode) under the
/// folder `dir`, every entry root's and dated `epoch`.
fn write_archive(
    path: &Path,
    dir: &str,
    entries: &[(String, PathBuf, u32)],
    epoch: u64,
) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let gzip = flate2::GzBuilder::new()
        .mtime(0)
        .write(file, flate2::Compression::best());
    let mut tar = tar::Builder::new(gzip);
    let header = |size: u64, mode: u32, kind: tar::EntryType| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(mode);
        header.set_mtime(epoch);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root").expect("a short name");
        header.set_groupname("root").expect("a short name");
        header
    };
    let mut folder = header(0, 0o755, tar::EntryType::Directory);
    tar.append_data(&mut folder, format!("{dir}/"), std::io::empty())?;
    for (name, source, mode) in entries {
        let bytes =
            std::fs::read(source).with_context(|| format!("cannot read {}", source.display()))?;
        let mut entry = header(bytes.len() as u64, *mode, tar::EntryType::Regular);
        tar.append_data(&mut entry, name, bytes.as_slice())?;
    }
    tar.into_inner()?.finish()?.flush()?;
    Ok(())
}

/// The target this machine builds for by default (`rustc -vV`'s host).
pub fn host_target() -> anyhow::Result<String> {
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .context("cannot run rustc")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_string)
        .context("rustc -vV names no host")
}

/// `SOURCE_DATE_EPOCH` (the reproducible-builds convention), else the last
/// commit's time, else 0.
fn source_date_epoch(root: &Path) -> anyhow::Result<u64> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value.trim().parse().with_context(|| {
            format!("SOURCE_DATE_EPOCH={value:?} is not seconds since the epoch")
        });
    }
    let commit = Command::new("git")
        .current_dir(root)
        .args(["log", "-1", "--format=%ct"])
        .output();
    Ok(commit
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(0))
}
