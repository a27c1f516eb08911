//! Policies written in Python and TypeScript, built from source with the
//! real toolchains at the exact versions the helper layers pin
//! (`guest-plugins/toolgate-guest-python/requirements.txt`,
//! `guest-plugins/toolgate-guest-typescript/package-lock.json`), on top of the
//! project `toolgate new policy --lang …` creates: what a policy author
//! gets is what the tests build with.
//!
//! The toolchains live in `target/policy-toolchains/` (`.ci/setup`
//! installs them up front); each built component is kept in
//! `target/polyglot/`, named by a digest of every file it was built from,
//! so a test run builds each policy once and later runs not at all.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// A language with a toolchain of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    Python,
    TypeScript,
}

impl Language {
    /// Its name on `toolgate new policy --lang`.
    pub fn flag(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::TypeScript => "typescript",
        }
    }

    /// The files the toolchain is pinned in.
    fn pins(self) -> Vec<PathBuf> {
        let files: &[&str] = match self {
            Language::Python => &["guest-plugins/toolgate-guest-python/requirements.txt"],
            Language::TypeScript => &[
                "guest-plugins/toolgate-guest-typescript/package.json",
                "guest-plugins/toolgate-guest-typescript/package-lock.json",
            ],
        };
        files.iter().map(|f| Path::new(ROOT).join(f)).collect()
    }

    /// Their contents, one after the other.
    fn pinned(self) -> String {
        self.pins()
            .iter()
            .map(|file| std::fs::read_to_string(file).unwrap())
            .collect()
    }
}

/// The build's `target/` (as `super::target_dir`; this file is also
/// included alone, by `host/benches/polyglot.rs`).
fn target() -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the guest dir is inside target/")
        .to_path_buf()
}

/// One toolchain install at a time, and one build.
static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where `language`'s toolchain is installed (made or brought up to date
/// first). When it cannot be installed the test fails, naming the command
/// (`None` only when `TOOLGATE_TEST_SKIP` names it: `python`, `npm`).
pub fn toolchain(language: Language) -> Option<PathBuf> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = target().join("policy-toolchains").join(language.flag());
    let pins = language.pinned();
    // The pins this install was made from, kept inside it.
    let stamp = dir.join("toolgate-pins");
    let ready = match language {
        Language::Python => dir.join("bin/componentize-py"),
        Language::TypeScript => dir.join("node_modules/.bin/jco"),
    };
    if ready.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == pins) {
        return Some(dir);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let (skip, install, out) = match language {
        Language::Python => {
            let requirements = &language.pins()[0];
            let install = format!(
                "python3 -m venv {0} && {0}/bin/pip install -r {1}",
                dir.display(),
                requirements.display()
            );
            let venv = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&dir)
                .output();
            let out = match venv {
                Ok(made) if made.status.success() => Command::new(dir.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
                    .arg(requirements)
                    .output(),
                other => other,
            };
            ("python", install, out)
        }
        Language::TypeScript => {
            for file in language.pins() {
                std::fs::copy(&file, dir.join(file.file_name().unwrap())).unwrap();
            }
            let install = format!(
                "cp guest-plugins/toolgate-guest-typescript/package*.json {0}/ && npm ci --no-audit --no-fund --prefix {0}",
                dir.display()
            );
            let out = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .output();
            ("npm", install, out)
        }
    };
    match out {
        Ok(out) if out.status.success() && ready.exists() => {
            std::fs::write(&stamp, pins).unwrap();
            Some(dir)
        }
        Ok(out) => {
            super::missing::missing(
                skip,
                &format!(
                    "the {} policy toolchain did not install: {}",
                    language.flag(),
                    String::from_utf8_lossy(&out.stderr)
                ),
                &install,
            );
            None
        }
        Err(err) => {
            super::missing::missing(
                skip,
                &format!(
                    "cannot run the {} toolchain's installer: {err}",
                    language.flag()
                ),
                &install,
            );
            None
        }
    }
}

/// Create a project as `toolgate new policy NAME --lang … --phases …`
/// does, in `dir`.
pub fn scaffold(language: Language, name: &str, phases: &[&str], dir: &Path) {
    let mut new = Command::new(BIN);
    new.args(["new", "policy", name, "--lang", language.flag(), "--dir"])
        .arg(dir);
    if !phases.is_empty() {
        new.arg("--phases").arg(phases.join(","));
    }
    let out = new.output().unwrap();
    assert!(
        out.status.success(),
        "toolgate new policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build the project in `dir` with the command its README gives, using
/// `toolchain`; the component's path.
pub fn build_project(language: Language, toolchain: &Path, name: &str, dir: &Path) -> PathBuf {
    let mut build = match language {
        Language::Python => {
            // The README's `.venv`, made by pip from the same pins.
            let venv = dir.join(".venv");
            if !venv.exists() {
                std::os::unix::fs::symlink(toolchain, &venv).unwrap();
            }
            let mut build = Command::new(venv.join("bin/componentize-py"));
            build.args(["-d", "wit", "-w", "policy", "componentize", "app", "-o"]);
            build.arg(format!("{name}.wasm"));
            build
        }
        Language::TypeScript => {
            // What `npm install` puts there, from the same pins.
            let modules = dir.join("node_modules");
            if !modules.exists() {
                std::os::unix::fs::symlink(toolchain.join("node_modules"), &modules).unwrap();
            }
            let mut build = Command::new("npm");
            build.args(["run", "--silent", "build"]);
            build
        }
    };
    let out = build.current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "building the {} policy {name} failed:\n{}\n{}",
        language.flag(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("{name}.wasm"))
}

/// The component built from the policy source files in `source` (e.g.
/// `tests/polyglot/python`: its files replace the scaffold's), with the
/// optional `phases`; `None` only when the toolchain is skipped on purpose.
pub fn build(language: Language, name: &str, source: &Path, phases: &[&str]) -> Option<PathBuf> {
    let toolchain = toolchain(language)?;
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path().join(name);
    scaffold(language, name, phases, &project);
    for entry in std::fs::read_dir(source).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, project.join(path.file_name().unwrap())).unwrap();
    }
    let mut digest = Sha256::new();
    digest.update(language.pinned());
    for file in files_under(&project) {
        digest.update(
            file.strip_prefix(&project)
                .unwrap()
                .to_string_lossy()
                .as_bytes(),
        );
        digest.update(std::fs::read(&file).unwrap());
    }
    let built = target().join("polyglot").join(format!(
        "{name}-{}.wasm",
        &hex::encode(digest.finalize())[..16]
    ));
    if !built.exists() {
        let wasm = build_project(language, &toolchain, name, &project);
        let dir = built.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        // Whole or not at all, whoever else builds the same policy at once.
        let mut partial = tempfile::NamedTempFile::new_in(dir).unwrap();
        std::io::copy(&mut std::fs::File::open(wasm).unwrap(), &mut partial).unwrap();
        partial.persist(&built).unwrap();
    }
    Some(built)
}

/// Every file under `dir`, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}
