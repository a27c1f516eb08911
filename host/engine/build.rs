//! Builds every guest component in the workspace from source for
//! `wasm32-wasip2`, once, into `target/guests` (shared by every host profile so
//! `cargo run` and `cargo test` never build them twice), then:
//! - embeds the bundled policies (`guest-plugins/*`) into the binary, so the
//!   default config works from a fresh clone with no manual step;
//! - exports `TOOLGATE_GUEST_DIR` so tests can load the test policies
//!   (`tests/plugins/*`) by file, and hands it on (as `links` metadata) to
//!   the `toolgate` crate's build, whose integration tests load them too.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
/// Names the rustup toolchain the guests build on, if not this build's.
const GUEST_TOOLCHAIN: &str = "TOOLGATE_GUEST_TOOLCHAIN";

struct Guest {
    package: String,
    dir: PathBuf,
    bundled: bool,
    /// Built in a cargo invocation of its own (`[package.metadata.toolgate]
    /// build-alone = true`): cargo unifies the features of every package
    /// one invocation builds, so a guest whose dependencies turn on
    /// features (Cedar turns on serde_json's `preserve_order`: an IndexMap
    /// hashed with SipHash in every JSON object) would otherwise give them
    /// to every guest, and every decision would parse its call slower.
    alone: bool,
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    // `host/engine` → the workspace root.
    let root = manifest_dir.ancestors().nth(2).unwrap().to_path_buf();
    for watched in ["guest-plugins", "tests/plugins", "wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }

    let guests: Vec<Guest> = [("guest-plugins", true), ("tests/plugins", false)]
        .into_iter()
        .flat_map(|(dir, bundled)| find_guests(&root.join(dir), bundled))
        .collect();

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("guests");
    // The guests may build on a toolchain of their own
    // (`TOOLGATE_GUEST_TOOLCHAIN=stable`): the fuzz targets build the host
    // on nightly, whose wasm target is not always published.
    println!("cargo:rerun-if-env-changed={GUEST_TOOLCHAIN}");
    let toolchain = env::var(GUEST_TOOLCHAIN).ok().filter(|t| !t.is_empty());
    ensure_target_installed(toolchain.as_deref());

    let (alone, together): (Vec<&Guest>, Vec<&Guest>) = guests.iter().partition(|g| g.alone);
    let batches = std::iter::once(together).chain(alone.into_iter().map(|g| vec![g]));
    for batch in batches.filter(|batch| !batch.is_empty()) {
        build_guests(&root, &target_dir, toolchain.as_deref(), &batch);
    }

    let wasm_dir = target_dir.join(TARGET).join("release");
    let mut bundled = String::from(
        "/// Policies built from `guest-plugins/`, by name: `bundled:NAME` in a config.\n\
         pub const BUNDLED: &[(&str, &[u8])] = &[\n",
    );
    for guest in &guests {
        let wasm = wasm_dir.join(format!("{}.wasm", guest.package.replace('-', "_")));
        if guest.bundled && wasm.exists() {
            let name = guest.dir.file_name().unwrap().to_string_lossy();
            writeln!(
                bundled,
                "    ({name:?}, include_bytes!({:?})),",
                wasm.display()
            )
            .unwrap();
        }
    }
    bundled.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bundled.rs");
    fs::write(out, bundled).unwrap();
    println!("cargo:rustc-env=TOOLGATE_GUEST_DIR={}", wasm_dir.display());
    println!("cargo::metadata=guest_dir={}", wasm_dir.display());
}

/// Build `guests` in one cargo invocation, into `target_dir`.
fn build_guests(root: &Path, target_dir: &Path, toolchain: Option<&str>, guests: &[&Guest]) {
    let mut cargo = match toolchain {
        Some(toolchain) => {
            let mut cargo = Command::new("cargo");
            cargo
                .env("RUSTUP_TOOLCHAIN", toolchain)
                .env_remove("RUSTC")
                .env_remove("RUSTDOC");
            cargo
        }
        None => Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into())),
    };
    cargo
        .current_dir(root)
        .args(["build", "--release", "--target", TARGET])
        .arg("--target-dir")
        .arg(target_dir)
        // Whole-program optimisation: smaller components that instantiate
        // faster and run faster, for ~a minute more of building, once.
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    for guest in guests {
        cargo.args(["-p", &guest.package]);
    }
    // The outer build's flags and wrappers (e.g. clippy's) are for the host,
    // not for the guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cargo.env_remove(var);
    }
    let status = cargo
        .status()
        .expect("failed to run cargo for the guest components");
    assert!(
        status.success(),
        "building the guest components for {TARGET} failed (see the errors above)"
    );
}

/// Every crate directly under `dir` that builds a component (`cdylib`).
fn find_guests(dir: &Path, bundled: bool) -> Vec<Guest> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut guests: Vec<Guest> = entries
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let manifest: toml::Table = fs::read_to_string(dir.join("Cargo.toml"))
                .ok()?
                .parse()
                .ok()?;
            let crate_types = manifest.get("lib")?.get("crate-type")?.as_array()?;
            if !crate_types.iter().any(|t| t.as_str() == Some("cdylib")) {
                return None;
            }
            let package = manifest.get("package")?;
            let alone = package
                .get("metadata")
                .and_then(|m| m.get("toolgate"))
                .and_then(|t| t.get("build-alone"))
                .and_then(toml::Value::as_bool)
                .unwrap_or(false);
            Some(Guest {
                package: package.get("name")?.as_str()?.to_string(),
                dir,
                bundled,
                alone,
            })
        })
        .collect();
    guests.sort_by(|a, b| a.package.cmp(&b.package));
    guests
}

/// Fail with the fix rather than a wall of "can't find crate for `std`".
fn ensure_target_installed(toolchain: Option<&str>) {
    let mut rustc = match toolchain {
        Some(toolchain) => {
            let mut rustc = Command::new("rustc");
            rustc.env("RUSTUP_TOOLCHAIN", toolchain);
            rustc
        }
        None => Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into())),
    };
    let sysroot = rustc
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(sysroot) = sysroot {
        let lib = sysroot.join("lib/rustlib").join(TARGET);
        assert!(
            lib.exists(),
            "the Rust target {TARGET} is not installed; toolgate builds its policies for it. \
             Install it with: rustup target add {TARGET}"
        );
    }
}
