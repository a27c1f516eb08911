//! The Python packages as a user installs them: the embedding package's
//! wheel and the `toolgate-cli` wheel of the binaries under test (packed by
//! `cargo xtask dist`'s code), installed with pip into a
//! fresh virtualenv with no Rust toolchain on `PATH`; the package's own
//! pytest suite then runs against the real bundled policies and the
//! `toolgate` the `toolgate-cli` wheel installed. The test dependencies
//! (pytest, and LangGraph and the OpenAI Agents SDK from PyPI for the
//! integrations, at the versions `host/python/requirements-test.txt` pins)
//! come from a virtualenv of their own, read through a `.pth` file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::embed::{BIN, POLICIES, ROOT, library, run, suite_passed};

/// A `PATH` with no Rust toolchain on it: the fresh virtualenv's `bin`
/// and the system's.
fn path_without_rust(venv: &Path) -> String {
    format!("{}:/usr/bin:/bin", venv.join("bin").display())
}

/// `python`'s site-packages folder.
fn site_packages(python: &Path) -> PathBuf {
    let out = run(
        Command::new(python).args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ]),
        "finding site-packages",
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The wheels, as `cargo xtask dist` packs them: the embedding package's
/// (its `_native` library from the workspace's own build, so nothing
/// compiles twice) and `toolgate-cli`'s (the binaries under test).
fn build_wheels(into: &Path) -> Vec<PathBuf> {
    let release = xtask::dist::Release::new(Path::new(ROOT), into).unwrap();
    let target = xtask::dist::host_target().unwrap();
    release.python_wheel(&target, &library("_native")).unwrap();
    let cli = release
        .cli_wheel(&target, Path::new(BIN).parent().unwrap())
        .unwrap();
    let name = cli.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.contains("-py3-none-manylinux_2_"),
        "the toolgate-cli wheel is tagged for the glibc it needs: {name}"
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(into)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(wheels.len(), 2, "{wheels:?}");
    wheels
}

/// The fresh virtualenv's `python`, with the two wheels installed in it,
/// once per run.
fn python() -> Option<&'static Path> {
    static READY: OnceLock<Option<PathBuf>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let deps = common::python::venv(
                &common::target_dir().join("embed/python"),
                include_str!("../host/python/requirements-test.txt"),
                "host/python/requirements-test.txt",
            )?;
            let tools = deps.parent().unwrap();
            // An earlier layout installed the package here: only the fresh
            // virtualenv may hold it.
            let _ = Command::new(tools.join("pip"))
                .args(["uninstall", "--quiet", "--yes", "toolgate", "toolgate-cli"])
                .output();
            let wheels_dir = common::target_dir().join("embed/python-wheels");
            let fresh = common::target_dir().join("embed/python-fresh");
            for dir in [&wheels_dir, &fresh] {
                let _ = std::fs::remove_dir_all(dir);
            }
            std::fs::create_dir_all(&wheels_dir).unwrap();
            let wheels = build_wheels(&wheels_dir);

            // No Rust from here on: pip installs the wheels as they are.
            // The interpreter the dependencies were installed for.
            let base = run(
                Command::new(&deps).args(["-c", "import sys; print(sys._base_executable)"]),
                "finding the base interpreter",
            );
            run(
                Command::new(String::from_utf8_lossy(&base.stdout).trim())
                    .args(["-m", "venv"])
                    .arg(&fresh)
                    .env("PATH", "/usr/bin:/bin"),
                "making a fresh virtualenv",
            );
            let python = fresh.join("bin/python");
            std::fs::write(
                site_packages(&python).join("toolgate-test-dependencies.pth"),
                format!("{}\n", site_packages(&deps).display()),
            )
            .unwrap();
            let no_rust = path_without_rust(&fresh);
            let found = Command::new("sh")
                .args(["-c", "command -v cargo || command -v rustc"])
                .env("PATH", &no_rust)
                .output()
                .unwrap();
            assert!(!found.status.success(), "Rust is on {no_rust}: {found:?}");
            run(
                Command::new(fresh.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check"])
                    .args(["--no-index", "--no-deps"])
                    .args(&wheels)
                    .env("PATH", &no_rust),
                "installing the wheels",
            );
            let version = run(
                Command::new(fresh.join("bin/toolgate"))
                    .arg("--version")
                    .env("PATH", &no_rust),
                "the toolgate the wheel installed",
            );
            assert!(
                String::from_utf8_lossy(&version.stdout).starts_with("toolgate "),
                "{version:?}"
            );
            // `pip install toolgate-cli && toolgate hook install`: the hooks
            // name the binaries the wheel installed.
            let settings = wheels_dir.join("settings.json");
            run(
                Command::new(fresh.join("bin/toolgate"))
                    .args(["hook", "install", "--write"])
                    .arg(&settings)
                    .env("PATH", &no_rust)
                    .env("HOME", &wheels_dir),
                "toolgate hook install from the wheel",
            );
            let hooks = std::fs::read_to_string(&settings).unwrap();
            assert!(
                hooks.contains(&fresh.join("bin/toolgate-hook").display().to_string()),
                "{hooks}"
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
    let venv = python.parent().unwrap().parent().unwrap();
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp"])
        .arg(scratch.path().join("pytest"))
        .arg(Path::new(ROOT).join("host/python/tests").join(file))
        .env("PATH", path_without_rust(venv))
        .env("TOOLGATE_BIN", venv.join("bin/toolgate"))
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
