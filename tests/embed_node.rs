//! The Node package (`host/node`), as a user installs it: the addon built
//! from source (napi-rs), the package and its test dependencies installed
//! with `npm ci` at the exact versions its package-lock.json pins (the
//! Vercel AI SDK from npm for the integration), then the package's own
//! suite (node's test runner) run against the real bundled policies and the
//! real `toolgate` binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::embed::{BIN, POLICIES, ROOT, library, suite_passed};

/// What the package is made of (`files` in its package.json), and its tests.
const FILES: &[&str] = &[
    "package.json",
    "package-lock.json",
    "index.js",
    "index.d.ts",
    "ai-sdk.js",
    "ai-sdk.d.ts",
    "test/setup.js",
    "test/toolgate.test.js",
    "test/ai-sdk.test.js",
];

/// The package, built from this tree, with its dependencies installed, in
/// `target/embed/node`; once per run.
fn package() -> Option<&'static Path> {
    static READY: OnceLock<Option<PathBuf>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let source = Path::new(ROOT).join("host/node");
            let dir = common::target_dir().join("embed/node");
            std::fs::create_dir_all(dir.join("test")).unwrap();
            std::fs::create_dir_all(dir.join("native")).unwrap();
            for file in FILES {
                std::fs::copy(source.join(file), dir.join(file)).unwrap();
            }
            // npm ci again only when the lockfile changed.
            let lock = std::fs::read_to_string(dir.join("package-lock.json")).unwrap();
            let stamp = dir.join("node_modules/toolgate-lock.json");
            if !std::fs::read_to_string(&stamp).is_ok_and(|s| s == lock) {
                let installed = Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
                    .current_dir(&dir)
                    .output();
                match installed {
                    Ok(out) if out.status.success() => std::fs::write(&stamp, &lock).unwrap(),
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
                        return None;
                    }
                }
            }
            // The example, inside the package: it imports `toolgate` as a
            // user's code does (a package may import itself by name).
            std::fs::create_dir_all(dir.join("examples")).unwrap();
            std::fs::copy(
                Path::new(ROOT).join("examples/node/agent_loop.mjs"),
                dir.join("examples/agent_loop.mjs"),
            )
            .unwrap();
            // The addon under the name `npm run build` gives it here.
            std::fs::copy(
                library("toolgate-node"),
                dir.join("native/toolgate.linux-x64-gnu.node"),
            )
            .unwrap();
            Some(dir)
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
