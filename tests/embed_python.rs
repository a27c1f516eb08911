//! The Python package (`host/python`), as a user installs it: a wheel built
//! from source with maturin, installed into a fresh virtualenv beside the
//! exact versions `host/python/requirements-test.txt` pins (pytest, and
//! LangGraph from PyPI for the integration), then the package's own pytest
//! suite run against the real bundled policies and the real `toolgate`
//! binary (for its daemon and a person's `toolgate gates resolve`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target"))
}

/// Run `command`; its output, or why it failed.
fn run(command: &mut Command) -> Result<String, String> {
    let out = command
        .output()
        .map_err(|err| format!("cannot run {command:?}: {err}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{command:?} failed:\n{text}"))
    }
}

/// The virtualenv with the pinned test requirements, installed when its
/// pins changed; `None` only when the Python tests are skipped on purpose.
fn venv() -> Option<PathBuf> {
    let dir = target().join("embed/python");
    let pins = Path::new(ROOT).join("host/python/requirements-test.txt");
    let wanted = std::fs::read_to_string(&pins).unwrap();
    let stamp = dir.join("toolgate-requirements.txt");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Some(dir);
    }
    let installed = run(Command::new("python3").arg("-m").arg("venv").arg(&dir)).and_then(|_| {
        run(Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&pins))
    });
    match installed {
        Ok(_) => {
            std::fs::write(&stamp, wanted).unwrap();
            Some(dir)
        }
        Err(why) => {
            let install = format!(
                "python3 -m venv {0} && {0}/bin/pip install -r host/python/requirements-test.txt",
                dir.display()
            );
            common::missing::missing("python", &why, &install);
            None
        }
    }
}

/// The virtualenv with the package built from this tree and installed in
/// it, once per run.
fn installed() -> Option<&'static Path> {
    static READY: OnceLock<Option<PathBuf>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let venv = venv()?;
            let wheels = tempfile::tempdir().unwrap();
            // The dev profile: the workspace's dependencies are already
            // built in it, so only the package's own crates compile.
            let built = run(Command::new(venv.join("bin/maturin"))
                .args(["build", "--profile", "dev", "--manifest-path"])
                .arg(Path::new(ROOT).join("host/python/Cargo.toml"))
                .arg("--out")
                .arg(wheels.path())
                .arg("--interpreter")
                .arg(venv.join("bin/python")));
            if let Err(why) = built {
                panic!("the toolgate wheel did not build: {why}");
            }
            let wheel = std::fs::read_dir(wheels.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"))
                .expect("maturin wrote a wheel");
            run(Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(["--force-reinstall", "--no-deps"])
                .arg(&wheel))
            .unwrap_or_else(|why| panic!("the wheel did not install: {why}"));
            Some(venv)
        })
        .as_deref()
}

/// Run the package's pytest `file`; every test in it must pass (none
/// skipped).
fn pytest(file: &str, tests: usize) {
    let Some(venv) = installed() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(scratch.path().join("pytest"))
        .arg(Path::new(ROOT).join("host/python/tests").join(file))
        .env("TOOLGATE_BIN", BIN)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{tests} passed")) && !summary.contains("skipped"),
        "{text}"
    );
}

#[test]
fn the_python_package_passes_its_own_tests() {
    pytest("test_toolgate.py", 13);
}

#[test]
fn in_a_langgraph_agent_a_refused_call_never_runs_and_a_pause_waits_for_a_person() {
    pytest("test_langgraph.py", 3);
}
