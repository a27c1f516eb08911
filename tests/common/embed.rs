//! The Python and Node packages as their users get them: built from this
//! tree, installed beside their test dependencies at exact versions, and
//! tested by their own suites (pytest; node's test runner) against the real
//! bundled policies and the real `toolgate` binary.

use std::path::Path;
use std::process::{Command, Output};

/// The `toolgate` binary the packages' suites drive (its daemon, and a
/// person's `toolgate gates resolve`), in `TOOLGATE_BIN`.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// The policies the packages' suites run against.
pub const POLICIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/embed/policies.toml");

/// The repository.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Run `command`; its output, or a panic with all of it.
pub fn run(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("{what}: cannot run {command:?}: {err}"));
    assert!(
        out.status.success(),
        "{what}: {command:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A package's suite passed, its report showing each of `shows` (how
/// many passed, and that none was skipped).
pub fn suite_passed(output: &Output, shows: &[&str]) {
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in shows {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
}

/// The cdylib named `package` (`lib{name}.so`: a crate's, or the library
/// name its `[lib]` sets, as host/python's `_native`), built in the
/// dev profile with the features the test build resolved: every member's
/// library and tests at once, as `cargo test --workspace` selects them, so
/// only the binding's own crates compile. (`cargo build -p {package}` alone
/// resolves other features for shared dependencies — serde, tokio — and
/// rebuilt the engine and wasmtime above them: three to five minutes.)
pub fn library(package: &str) -> std::path::PathBuf {
    run(
        super::without_test_env(&mut Command::new(env!("CARGO")))
            .args(["build", "--quiet", "--workspace", "--lib", "--tests"])
            .current_dir(ROOT),
        &format!("building {package}"),
    );
    let name = format!("lib{}.so", package.replace('-', "_"));
    let built = super::target_dir().join("debug").join(name);
    assert!(
        Path::new(&built).exists(),
        "cargo built {}",
        built.display()
    );
    built
}
