//! The npm packages, as napi-rs lays them out: the addon of each platform
//! in a package of its own (`@toolgate/linux-x64-gnu`, which npm installs
//! only where its `os`, `cpu` and `libc` match), and the main `toolgate`
//! package naming every platform package as an optional dependency; its
//! loader takes the one npm installed. No toolchain is needed to install.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};
use serde_json::{Value, json};

use crate::dist::{Release, run_tool};

/// The npm scope of the platform packages.
const SCOPE: &str = "@toolgate";

/// The platform a Rust target's addon runs on, as napi-rs names it
/// (`linux-x64-gnu`), with npm's `os`, `cpu` and `libc` for it.
pub fn platform(
    target: &str,
) -> anyhow::Result<(String, &'static str, &'static str, &'static str)> {
    let cpu = match target.split('-').next() {
        Some("x86_64") => "x64",
        Some("aarch64") => "arm64",
        _ => bail!("no npm platform known for {target}"),
    };
    let (libc, npm_libc) = match target.rsplit('-').next() {
        Some("gnu") => ("gnu", "glibc"),
        Some("musl") => ("musl", "musl"),
        _ => bail!("no npm platform known for {target}"),
    };
    ensure!(
        target.contains("-linux-"),
        "no npm platform known for {target}"
    );
    Ok((format!("linux-{cpu}-{libc}"), "linux", cpu, npm_libc))
}

impl Release {
    /// Build the addon for `target` (`cargo build --profile dist`): the file.
    pub fn build_addon(&self, target: &str) -> anyhow::Result<PathBuf> {
        let dir = self.cargo_build(target, &["--package", "toolgate-node"])?;
        Ok(dir.join("libtoolgate_node.so"))
    }

    /// The platform package of `addon` (built for `target`), packed into
    /// `out`.
    pub fn npm_platform_package(&self, target: &str, addon: &Path) -> anyhow::Result<PathBuf> {
        let (name, os, cpu, libc) = platform(target)?;
        let file = format!("toolgate.{name}.node");
        let manifest = json!({
            "name": format!("{SCOPE}/{name}"),
            "version": self.version,
            "description": format!("toolgate's native addon for {name} (the `toolgate` package installs it)"),
            "license": "Apache-2.0",
            "os": [os],
            "cpu": [cpu],
            "libc": [libc],
            "main": file,
            "files": [file],
            "engines": { "node": ">=20" },
        });
        let staging = self.staging(&format!("npm-{name}"))?;
        std::fs::copy(addon, staging.join(&file))
            .with_context(|| format!("cannot read {}", addon.display()))?;
        std::fs::write(
            staging.join("package.json"),
            serde_json::to_string_pretty(&manifest)?,
        )?;
        self.pack(&staging)
    }

    /// The main `toolgate` package from `host/node`, its `optionalDependencies`
    /// naming each of `platforms` at this version, packed into `out`.
    pub fn npm_package(&self, platforms: &[String]) -> anyhow::Result<PathBuf> {
        let source = self.root.join("host/node");
        let mut manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(source.join("package.json"))
                .context("cannot read host/node/package.json")?,
        )?;
        let staging = self.staging("npm-toolgate")?;
        let files: Vec<String> = manifest["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str())
            .filter(|f| !f.ends_with('/')) // native/: the platform packages'
            .map(str::to_string)
            .chain(["README.md".to_string()])
            .collect();
        for file in &files {
            std::fs::copy(source.join(file), staging.join(file))
                .with_context(|| format!("cannot copy host/node/{file}"))?;
        }
        let optional: serde_json::Map<String, Value> = platforms
            .iter()
            .map(|p| (format!("{SCOPE}/{p}"), json!(self.version)))
            .collect();
        manifest["version"] = json!(self.version);
        manifest["files"] = json!(files);
        manifest["optionalDependencies"] = Value::Object(optional);
        // What only building from the source tree needs.
        let object = manifest
            .as_object_mut()
            .context("package.json is not an object")?;
        for key in ["scripts", "devDependencies", "napi"] {
            object.remove(key);
        }
        std::fs::write(
            staging.join("package.json"),
            serde_json::to_string_pretty(&manifest)?,
        )?;
        self.pack(&staging)
    }

    fn staging(&self, name: &str) -> anyhow::Result<PathBuf> {
        let staging = self.out.join(format!(".{name}"));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)?;
        Ok(staging)
    }

    /// `npm pack` of `staging` into `out` (then `staging` removed).
    fn pack(&self, staging: &Path) -> anyhow::Result<PathBuf> {
        let packed = run_tool(
            Command::new("npm")
                .args(["pack", "--silent", "--pack-destination"])
                .arg(&self.out)
                .current_dir(staging)
                .env("SOURCE_DATE_EPOCH", self.epoch.to_string()),
            "install Node.js 20 or later, which brings npm (or --no-node)",
        );
        std::fs::remove_dir_all(staging)?;
        let packed = packed?;
        let name = String::from_utf8_lossy(&packed.stdout).trim().to_string();
        let tarball = self.out.join(name.lines().last().unwrap_or_default());
        ensure!(tarball.is_file(), "npm pack wrote no {}", tarball.display());
        Ok(tarball)
    }
}
