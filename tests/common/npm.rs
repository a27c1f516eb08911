//! Real clients and servers from npm, installed once into
//! `target/real-clients` (`.ci/run` installs them up front).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the npm packages live: `target/real-clients` (the guests are in
/// `target/guests/wasm32-wasip2/release`).
pub fn prefix() -> PathBuf {
    let target = Path::new(env!("TOOLGATE_GUEST_DIR")).ancestors().nth(3);
    target
        .expect("the guest dir is inside target/")
        .join("real-clients")
}

/// One npm install at a time: concurrent installs into one prefix leave
/// packages half-written.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `node_modules` holding `packages`, installing those missing. When npm
/// cannot run or cannot reach its registry the test fails, naming the
/// install command (`None` only when `TOOLGATE_TEST_SKIP` says `npm`). Each package is `(npm spec, a path inside node_modules that
/// exists once it is installed)`.
pub fn node_modules(packages: &[(&str, &str)]) -> Option<PathBuf> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = prefix();
    let modules = prefix.join("node_modules");
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(_, probe)| !modules.join(probe).exists())
        .map(|(spec, _)| *spec)
        .collect();
    if missing.is_empty() {
        return Some(modules);
    }
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
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
