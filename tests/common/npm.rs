//! Real clients and servers from npm, installed once into
//! `target/real-clients` at the exact versions `tests/real-clients.json`
//! pins, the one place they are named (`.ci/setup` installs the same up
//! front; a range resolves differently per machine).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the npm packages live: `target/real-clients` (the guests are in
/// `target/guests/wasm32-wasip2/release`).
pub fn prefix() -> PathBuf {
    super::target_dir().join("real-clients")
}

/// One npm install at a time: concurrent installs into one prefix leave
/// packages half-written.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The pinned versions, by package.
const PINNED: &str = include_str!("../real-clients.json");

/// Where the pins of the oldest releases the docs claim are, in
/// `tests/real-clients.json`.
const OLDEST: &str = "oldest-supported";

/// `PACKAGE@VERSION` at the version `tests/real-clients.json` pins.
pub fn pinned(package: &str) -> String {
    format!("{package}@{}", version_of(&[package]))
}

/// The version pinned at `path` in `tests/real-clients.json`.
fn version_of(path: &[&str]) -> String {
    let pins: serde_json::Value = serde_json::from_str(PINNED).expect("real-clients.json parses");
    path.iter()
        .fold(&pins, |pins, key| &pins[key])
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not pinned in tests/real-clients.json"))
        .to_string()
}

/// `node_modules` holding `packages` at their pinned versions, installing
/// those missing or at another version. When npm cannot run or cannot
/// reach its registry the test fails, naming the install command (`None`
/// only when `TOOLGATE_TEST_SKIP` says `npm`). Each package is `(name, a
/// path inside node_modules that exists once it is installed)`.
pub fn node_modules(packages: &[(&str, &str)]) -> Option<PathBuf> {
    let pins: Vec<_> = packages
        .iter()
        .map(|&(package, probe)| (package, probe, version_of(&[package])))
        .collect();
    install(&prefix(), &pins)
}

/// As [`node_modules`], for the oldest release of `package` the docs claim
/// (`"oldest-supported"` in `tests/real-clients.json`), installed apart
/// from the current one (`target/real-clients/oldest`): their programs
/// have the same names.
pub fn oldest_supported(package: &str, probe: &str) -> Option<PathBuf> {
    let version = version_of(&[OLDEST, package]);
    install(&prefix().join("oldest"), &[(package, probe, version)])
}

/// `prefix`'s `node_modules` with each `(package, probe, version)`.
fn install(prefix: &Path, packages: &[(&str, &str, String)]) -> Option<PathBuf> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let modules = prefix.join("node_modules");
    let specs: Vec<String> = packages
        .iter()
        .filter(|(package, probe, version)| {
            let installed = std::fs::read_to_string(modules.join(package).join("package.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .and_then(|manifest| manifest["version"].as_str().map(str::to_string));
            !modules.join(probe).exists() || installed.as_ref() != Some(version)
        })
        .map(|(package, _, version)| format!("{package}@{version}"))
        .collect();
    let missing: Vec<&str> = specs.iter().map(String::as_str).collect();
    if missing.is_empty() {
        return Some(modules);
    }
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .args(&missing)
        .output();
    match installed {
        Err(err) => {
            super::missing::missing(
                "npm",
                &format!("npm cannot run here ({err})"),
                "apt-get install nodejs npm",
            );
            None
        }
        Ok(out) if out.status.success() => Some(modules),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let offline = [
                "ENOTFOUND",
                "EAI_AGAIN",
                "ECONNREFUSED",
                "ETIMEDOUT",
                "ENETUNREACH",
            ]
            .iter()
            .any(|code| stderr.contains(code));
            assert!(offline, "npm install {missing:?} failed: {stderr}");
            super::missing::missing(
                "npm",
                &format!("npm cannot reach its registry to install {missing:?}: {stderr}"),
                &format!(
                    "npm install --prefix {} {}",
                    prefix.display(),
                    missing.join(" ")
                ),
            );
            None
        }
    }
}
