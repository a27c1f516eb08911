//! The Python package (`host/python`), as a user installs it: a wheel built
//! from source with maturin, installed into a virtualenv beside the exact
//! versions `host/python/requirements-test.txt` pins (pytest, and LangGraph
//! and the OpenAI Agents SDK from PyPI for the integrations), then the
//! package's own pytest suite run against the real bundled policies and the
//! real `toolgate` binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::embed::{BIN, POLICIES, ROOT, run, suite_passed};

/// The virtualenv's `python`, with the package built from this tree
/// installed in it, once per run.
fn python() -> Option<&'static Path> {
    static READY: OnceLock<Option<PathBuf>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let python = common::python::venv(
                &common::target_dir().join("embed/python"),
                include_str!("../host/python/requirements-test.txt"),
                "host/python/requirements-test.txt",
            )?;
            let bin = python.parent().unwrap();
            let wheels = tempfile::tempdir().unwrap();
            // The dev profile: the workspace's dependencies are already
            // built in it, so only the package's own crates compile.
            run(
                Command::new(bin.join("maturin"))
                    .args(["build", "--quiet", "--profile", "dev", "--manifest-path"])
                    .arg(Path::new(ROOT).join("host/python/Cargo.toml"))
                    .arg("--out")
                    .arg(wheels.path())
                    .arg("--interpreter")
                    .arg(&python),
                "building the wheel",
            );
            let wheel = std::fs::read_dir(wheels.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"))
                .expect("maturin wrote a wheel");
            run(
                Command::new(bin.join("pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check"])
                    .args(["--force-reinstall", "--no-deps"])
                    .arg(&wheel),
                "installing the wheel",
            );
            Some(python)
        })
        .as_deref()
}

/// Run the package's pytest `file`: all `tests` must pass.
fn pytest(file: &str, tests: usize) {
    let Some(python) = python() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(scratch.path().join("pytest"))
        .arg(Path::new(ROOT).join("host/python/tests").join(file))
        .env("TOOLGATE_BIN", BIN)
        .env("TOOLGATE_TEST_POLICIES", POLICIES)
        .output()
        .unwrap();
    // pytest's summary names skipped tests when there are any.
    let summary = format!("\n{tests} passed in ");
    suite_passed(&out, &[&summary]);
}

#[test]
fn the_python_package_passes_its_own_tests() {
    pytest("test_toolgate.py", 15);
}

#[test]
fn in_an_openai_agents_sdk_run_a_refused_call_never_runs_and_a_pause_waits_for_a_person() {
    pytest("test_openai_agents.py", 4);
}

#[test]
fn in_a_langgraph_agent_a_refused_call_never_runs_and_a_pause_waits_for_a_person() {
    pytest("test_langgraph.py", 3);
}
