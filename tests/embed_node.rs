//! The Node packages as a user installs them: the main `toolgate` package
//! and the addon's platform package (`@toolgate/linux-x64-gnu`, the addon
//! built from source), packed with `npm pack` as `cargo xtask dist` packs
//! them and installed from those tarballs into an empty project, offline;
//! then the package's own suite (node's test runner) runs there against the
//! real bundled policies and the real `toolgate` binary. Its test
//! dependencies (the Vercel AI SDK from npm for the integration) come from
//! `npm ci` of host/node's package-lock.json in the folder above, which
//! Node's resolution reaches.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::embed::{BIN, POLICIES, ROOT, library, run, suite_passed};

/// The package's tests, as they run from the installed package.
const TESTS: &[&str] = &[
    "test/setup.js",
    "test/toolgate.test.js",
    "test/ai-sdk.test.js",
];

/// host/node's test dependencies, `npm ci`'d from its lockfile into `dir`
/// (again only when the lockfile changed); `None` when npm cannot.
fn test_dependencies(dir: &Path) -> Option<()> {
    let source = Path::new(ROOT).join("host/node");
    std::fs::create_dir_all(dir).unwrap();
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), dir.join(file)).unwrap();
    }
    let lock = std::fs::read_to_string(dir.join("package-lock.json")).unwrap();
    let stamp = dir.join("node_modules/toolgate-lock.json");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == lock) {
        return Some(());
    }
    let installed = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
        .current_dir(dir)
        .output();
    match installed {
        Ok(out) if out.status.success() => {
            std::fs::write(&stamp, &lock).unwrap();
            Some(())
        }
        failed => {
            let why = match failed {
                Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                Err(err) => err.to_string(),
            };
            let install = format!("cd {} && npm ci", dir.display());
            common::missing::missing(
                "npm",
                &format!("npm could not install host/node's dependencies: {why}"),
                &install,
            );
            None
        }
    }
}

/// The project the packages are installed into, with the tests and the
/// example beside them; once per run.
fn package() -> Option<&'static Path> {
    static READY: OnceLock<Option<PathBuf>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let dir = common::target_dir().join("embed/node");
            test_dependencies(&dir)?;
            let (packs, project) = (dir.join("packs"), dir.join("installed"));
            for fresh in [&packs, &project] {
                let _ = std::fs::remove_dir_all(fresh);
                std::fs::create_dir_all(fresh).unwrap();
            }
            let release = xtask::dist::Release::new(Path::new(ROOT), &packs).unwrap();
            let target = xtask::dist::host_target().unwrap();
            let platform = release
                .npm_platform_package(&target, &library("toolgate-node"))
                .unwrap();
            let main = release
                .npm_package(&[xtask::npm::platform(&target).unwrap().0])
                .unwrap();

            std::fs::write(
                project.join("package.json"),
                "{\"name\": \"a-users-project\", \"private\": true, \"type\": \"module\"}\n",
            )
            .unwrap();
            run(
                Command::new("npm")
                    .args(["install", "--no-audit", "--no-fund", "--offline"])
                    .arg(&main)
                    .arg(&platform)
                    .current_dir(&project),
                "installing the packed packages",
            );
            std::fs::create_dir_all(project.join("test")).unwrap();
            std::fs::create_dir_all(project.join("examples")).unwrap();
            for test in TESTS {
                std::fs::copy(
                    Path::new(ROOT).join("host/node").join(test),
                    project.join(test),
                )
                .unwrap();
            }
            // The example imports `toolgate` as a user's code does.
            std::fs::copy(
                Path::new(ROOT).join("examples/node/agent_loop.mjs"),
                project.join("examples/agent_loop.mjs"),
            )
            .unwrap();
            Some(project)
        })
        .as_deref()
}

/// Run the package's test `file`: all `tests` must pass.
fn node_test(file: &str, tests: usize) {
    let Some(dir) = package() else {
        return;
    };
    let out = Command::new("node")
        .args(["--test", &format!("test/{file}")])
        .current_dir(dir)
        .env("TOOLGATE_BIN", BIN)
        .env("TOOLGATE_TEST_POLICIES", POLICIES)
        .env("TOOLGATE_EXAMPLE", dir.join("examples/agent_loop.mjs"))
        .output()
        .unwrap_or_else(|err| panic!("cannot run node: {err}"));
    let passed = format!("# pass {tests}\n");
    suite_passed(
        &out,
        &[&passed, "# fail 0\n", "# cancelled 0\n", "# skipped 0\n"],
    );
}

#[test]
fn the_node_package_passes_its_own_tests() {
    node_test("toolgate.test.js", 13);
}

#[test]
fn in_the_ai_sdk_a_refused_call_never_runs_and_a_pause_waits_for_a_person() {
    node_test("ai-sdk.test.js", 4);
}
