//! Real Python tools from PyPI (oras-py, the OCI client the registry tests
//! check interoperability with), in one virtualenv, `target/python-tools`,
//! at the exact versions `tests/requirements.txt` pins (`.ci/setup`
//! installs the same up front).

use std::path::{Path, PathBuf};
use std::process::Command;

const REQUIREMENTS: &str = include_str!("../requirements.txt");

/// One install at a time into the one virtualenv.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn venv_dir() -> PathBuf {
    super::target_dir().join("python-tools")
}

/// The virtualenv's `python`, with the pinned requirements installed
/// (made or brought up to date if needed). When Python or PyPI is out of
/// reach the test fails, naming the command (`None` only when
/// `TOOLGATE_TEST_SKIP` says `python`).
pub fn python() -> Option<PathBuf> {
    venv(&venv_dir(), REQUIREMENTS, "tests/requirements.txt")
}

/// The `python` of a virtualenv at `dir` with `requirements` (the text of
/// the repository's file `named`) installed, made or brought up to date if
/// needed, as [`python`] says.
pub fn venv(dir: &Path, requirements: &str, named: &str) -> Option<PathBuf> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let python = dir.join("bin/python");
    // The requirements this venv was made from, kept inside it.
    let stamp = dir.join("toolgate-requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == requirements) {
        return Some(python);
    }
    let install = format!(
        "python3 -m venv {0} && {0}/bin/pip install -r {named}",
        dir.display()
    );
    let made = python.exists()
        || Command::new("python3")
            .args(["-m", "venv"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
    if !made {
        super::missing::missing(
            "python",
            "cannot make a Python virtualenv (python3 with venv is needed)",
            &format!("apt-get install python3-venv && {install}"),
        );
        return None;
    }
    let pinned = dir.join("requirements.txt");
    std::fs::write(&pinned, requirements).unwrap();
    let out = Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&pinned)
        .output()
        .unwrap();
    if !out.status.success() {
        super::missing::missing(
            "python",
            &format!(
                "pip could not install {named}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            &install,
        );
        return None;
    }
    std::fs::write(&stamp, requirements).unwrap();
    Some(python)
}
