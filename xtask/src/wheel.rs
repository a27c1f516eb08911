//! The `toolgate-cli` Python wheel: the release binaries as the wheel's
//! scripts, so `pip install toolgate-cli` puts `toolgate` and
//! `toolgate-hook` on a virtualenv's (or the user's) `PATH` with no Rust
//! toolchain. The same layout maturin's `bindings = "bin"` makes, built from
//! the binaries already packaged rather than a second build.
//!
//! Its platform tag is the oldest the binaries run on: `manylinux_2_N` for
//! the newest glibc symbol version they need (PEP 600), `musllinux_1_2` for
//! a static musl build.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::dist::{BINARIES, Release, run_tool};

/// The wheel's distribution name on PyPI.
const NAME: &str = "toolgate-cli";

impl Release {
    /// The `toolgate-cli` wheel of the binaries in `bins` (built for
    /// `target`), in `out`.
    pub fn cli_wheel(&self, target: &str, bins: &Path) -> anyhow::Result<PathBuf> {
        let binaries: Vec<(&str, Vec<u8>)> = BINARIES
            .iter()
            .map(|bin| {
                let path = bins.join(bin);
                std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))
                    .map(|bytes| (*bin, bytes))
            })
            .collect::<anyhow::Result<_>>()?;
        let tag = format!(
            "py3-none-{}",
            platform_tag(target, binaries.iter().map(|(_, b)| b.as_slice()))?
        );
        let stem = format!("{}-{}", NAME.replace('-', "_"), self.version);
        let path = self.out.join(format!("{stem}-{tag}.whl"));

        let readme = std::fs::read_to_string(self.root.join("README.md"))?;
        let mut files: Vec<(String, Vec<u8>, u32)> = binaries
            .into_iter()
            .map(|(bin, bytes)| (format!("{stem}.data/scripts/{bin}"), bytes, 0o755))
            .collect();
        files.push((
            format!("{stem}.dist-info/METADATA"),
            self.metadata(&readme).into_bytes(),
            0o644,
        ));
        files.push((
            format!("{stem}.dist-info/WHEEL"),
            format!(
                "Wheel-Version: 1.0\nGenerator: cargo xtask dist\nRoot-Is-Purelib: false\nTag: {tag}\n"
            )
            .into_bytes(),
            0o644,
        ));
        let record_name = format!("{stem}.dist-info/RECORD");
        let mut record = String::new();
        for (name, bytes, _) in &files {
            let digest =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(bytes));
            record += &format!("{name},sha256={digest},{}\n", bytes.len());
        }
        record += &format!("{record_name},,\n");
        files.push((record_name, record.into_bytes(), 0o644));

        write_zip(&path, &files)?;
        Ok(path)
    }

    /// Core metadata 2.1: what PyPI shows.
    fn metadata(&self, readme: &str) -> String {
        format!(
            "Metadata-Version: 2.1\n\
             Name: {NAME}\n\
             Version: {}\n\
             Summary: toolgate's `toolgate` and `toolgate-hook` binaries: ask sandboxed WebAssembly policies before an agent runs a tool.\n\
             License-Expression: Apache-2.0\n\
             Classifier: Environment :: Console\n\
             Classifier: Operating System :: POSIX :: Linux\n\
             Classifier: Programming Language :: Rust\n\
             Description-Content-Type: text/markdown\n\n\
             {readme}",
            self.version
        )
    }
}

impl Release {
    /// The embedding package's wheel (`toolgate`, abi3, for every Python
    /// from 3.9) built for `target` by maturin, which checks the manylinux
    /// policy the library meets and tags it so.
    pub fn python_wheel(&self, target: &str) -> anyhow::Result<PathBuf> {
        run_tool(
            std::process::Command::new("maturin")
                .current_dir(&self.root)
                .args(["build", "--quiet", "--profile", crate::dist::PROFILE])
                .args([
                    "--target",
                    target,
                    "--manifest-path",
                    "host/python/Cargo.toml",
                ])
                .arg("--out")
                .arg(&self.out),
            "`pip install maturin==1.16.0` (or --no-python)",
        )?;
        let name = format!("toolgate-{}-cp39-abi3-", self.version);
        std::fs::read_dir(&self.out)?
            .filter_map(|entry| Some(entry.ok()?.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&name))
            })
            .context("maturin wrote no wheel")
    }
}

/// The wheel platform tag of binaries built for `target`.
pub fn platform_tag<'a>(
    target: &str,
    binaries: impl Iterator<Item = &'a [u8]>,
) -> anyhow::Result<String> {
    let arch = target.split('-').next().unwrap_or("");
    if !matches!(arch, "x86_64" | "aarch64") || !target.contains("-linux-") {
        bail!("no wheel platform tag known for {target}");
    }
    if target.ends_with("-musl") {
        return Ok(format!("musllinux_1_2_{arch}"));
    }
    let newest = binaries
        .flat_map(glibc_versions)
        .max()
        .context("the binaries name no glibc symbol version: are they built for -linux-gnu?")?;
    // manylinux2014 (glibc 2.17) is the oldest a current pip installs.
    Ok(format!("manylinux_2_{}_{arch}", newest.max(17)))
}

/// The minor versions of the `GLIBC_2.N` symbol versions `binary` needs.
fn glibc_versions(binary: &[u8]) -> Vec<u32> {
    const MARK: &[u8] = b"GLIBC_2.";
    memchr::memmem::find_iter(binary, MARK)
        .filter_map(|at| {
            let digits: String = binary[at + MARK.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|b| char::from(*b))
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// A zip of `files` (name, bytes, mode), in that order, every entry
/// dated 1980-01-01 (zip's first day): the same files make the same bytes.
fn write_zip(path: &Path, files: &[(String, Vec<u8>, u32)]) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    for (name, bytes, mode) in files {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(*mode)
            .last_modified_time(zip::DateTime::default());
        zip.start_file(name.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    zip.finish()?;
    Ok(())
}
