//! Release artifacts as a person downloads them: `cargo xtask dist`'s
//! packaging run on the binaries under test (the release build differs only
//! in its profile), then checked the way the book tells a person to: with
//! `sha256sum -c`, `toolgate release verify`, `tar -x` and the unpacked
//! binary. A changed, re-listed, unlisted or foreign-signed artifact is
//! refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use xtask::dist::{self, Release};

use crate::common::hooks::BIN;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn bins() -> PathBuf {
    Path::new(BIN).parent().unwrap().to_path_buf()
}

fn toolgate(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

use crate::common::output_text as text;

/// A release of the binaries under test in `out`, signed with a new key:
/// (the release, the public key file).
fn signed_release(out: &Path, keys: &Path) -> (Release, PathBuf) {
    let made = toolgate(&["release", "keygen", "--out", "release"], keys);
    assert!(made.status.success(), "{}", text(&made));
    let mut release = Release::new(&workspace(), out).unwrap();
    release.epoch = 1_700_000_000;
    let target = dist::host_target().unwrap();
    release.package(&target, &bins(), false).unwrap();
    release
        .seal(Path::new(BIN), Some(&keys.join("release.key")))
        .unwrap();
    (release, keys.join("release.pub"))
}

fn archive_name(release: &Release) -> String {
    format!(
        "toolgate-{}-{}.tar.gz",
        release.version,
        dist::host_target().unwrap()
    )
}

#[test]
fn a_release_verifies_unpacks_and_runs_and_a_changed_artifact_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, keys) = (tmp.path().join("release"), tmp.path().join("keys"));
    std::fs::create_dir_all(&keys).unwrap();
    let (release, public) = signed_release(&out, &keys);
    let archive = archive_name(&release);
    let public = public.to_str().unwrap();

    // The checksum list is sha256sum's own format, and signed.
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert_eq!(sums.lines().count(), 2, "{sums}");
    assert!(sums.contains(&format!("  {archive}\n")), "{sums}");
    let checked = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", text(&checked));
    let verified = toolgate(&["release", "verify", "--key", public, "."], &out);
    assert!(verified.status.success(), "{}", text(&verified));
    assert_eq!(
        String::from_utf8_lossy(&verified.stdout)
            .matches("ok  ")
            .count(),
        2
    );

    // Unpacked with tar, owned by root at the release's time, it runs.
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let listing = Command::new("tar")
        .args(["-tvzf"])
        .arg(out.join(&archive))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    for entry in ["toolgate", "toolgate-hook", "README.md", "LICENSE"] {
        assert!(listing.contains(&format!("/{entry}\n")), "{listing}");
    }
    assert!(
        listing
            .lines()
            .all(|l| l.contains("root/root") && l.contains("2023-11-14")),
        "{listing}"
    );
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(out.join(&archive))
        .current_dir(&unpacked)
        .status()
        .unwrap();
    assert!(untar.success());
    let folder = unpacked.join(archive.trim_end_matches(".tar.gz"));
    let version = Command::new(folder.join("toolgate"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("toolgate {}", release.version)
    );
    let hook = Command::new(folder.join("toolgate-hook"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&hook.stdout).trim(),
        format!("toolgate-hook {}", release.version)
    );

    // The same binaries make the same archive.
    let again = tmp.path().join("again");
    let mut second = Release::new(&workspace(), &again).unwrap();
    second.epoch = release.epoch;
    second
        .package(&dist::host_target().unwrap(), &bins(), false)
        .unwrap();
    assert_eq!(
        std::fs::read(out.join(&archive)).unwrap(),
        std::fs::read(again.join(&archive)).unwrap(),
        "the archive is not reproducible"
    );

    // One byte changed in the archive: refused, naming it.
    let mut bytes = std::fs::read(out.join(&archive)).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(out.join(&archive), &bytes).unwrap();
    let refused = toolgate(&["release", "verify", "--key", public, &archive], &out);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains(&archive) && text(&refused).contains("changed after the release"),
        "{}",
        text(&refused)
    );
    // ... and its new sha256 written into the list: the signature refuses.
    let tampered_sum = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let listed = sums
        .lines()
        .map(|line| match line.ends_with(&archive) {
            true => format!("{tampered_sum}  {archive}"),
            false => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    std::fs::write(out.join("SHA256SUMS"), listed).unwrap();
    let refused = toolgate(&["release", "verify", "--key", public, &archive], &out);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("does not sign SHA256SUMS"),
        "{}",
        text(&refused)
    );
}

#[test]
fn a_release_signed_by_another_key_or_as_a_plugin_or_unlisted_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, keys) = (tmp.path().join("release"), tmp.path().join("keys"));
    std::fs::create_dir_all(&keys).unwrap();
    let (release, public) = signed_release(&out, &keys);
    let archive = archive_name(&release);
    let public = std::fs::read_to_string(public).unwrap();
    let public = public.trim();

    // Another key's signature, in place of the release's.
    let made = toolgate(&["release", "keygen", "--out", "other"], &keys);
    assert!(made.status.success(), "{}", text(&made));
    let signed = toolgate(
        &[
            "release",
            "sign",
            "--key",
            keys.join("other.key").to_str().unwrap(),
            "SHA256SUMS",
        ],
        &out,
    );
    assert!(signed.status.success(), "{}", text(&signed));
    let refused = toolgate(&["release", "verify", "--key", public, &archive], &out);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("not the key you trust"),
        "{}",
        text(&refused)
    );

    // The trusted key's signature of the list, made as a plugin's.
    let signed = toolgate(
        &[
            "plugins",
            "sign",
            "--key",
            keys.join("release.key").to_str().unwrap(),
            "SHA256SUMS",
        ],
        &out,
    );
    assert!(signed.status.success(), "{}", text(&signed));
    let refused = toolgate(&["release", "verify", "--key", public, "."], &out);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("made for another use"),
        "{}",
        text(&refused)
    );

    // Signed properly again; a file the list does not name is refused.
    release
        .seal(Path::new(BIN), Some(&keys.join("release.key")))
        .unwrap();
    std::fs::write(out.join("extra.tar.gz"), b"not in the release").unwrap();
    let refused = toolgate(
        &["release", "verify", "--key", public, "extra.tar.gz"],
        &out,
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("extra.tar.gz is not in the release's SHA256SUMS"),
        "{}",
        text(&refused)
    );
    let verified = toolgate(&["release", "verify", "--key", public, &archive], &out);
    assert!(verified.status.success(), "{}", text(&verified));
}

#[test]
fn the_sbom_lists_what_the_binary_links_and_embeds_with_the_locked_hashes() {
    let tmp = tempfile::tempdir().unwrap();
    let release = Release::new(&workspace(), tmp.path()).unwrap();
    let target = dist::host_target().unwrap();
    release.package(&target, &bins(), false).unwrap();
    let sbom: Value = serde_json::from_slice(
        &std::fs::read(
            tmp.path()
                .join(format!("toolgate-{}-{target}.cdx.json", release.version)),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["specVersion"], "1.5");
    assert!(
        sbom["serialNumber"]
            .as_str()
            .unwrap()
            .starts_with("urn:uuid:")
    );
    assert_eq!(sbom["metadata"]["component"]["name"], "toolgate");
    let components = sbom["components"].as_array().unwrap();
    let named = |name: &str| components.iter().find(|c| c["name"] == name);

    // wasmtime at the locked version, with Cargo.lock's sha256.
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(workspace().join("Cargo.lock")).unwrap()).unwrap();
    let locked = lock["package"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("wasmtime"))
        .unwrap();
    let wasmtime = named("wasmtime").expect("wasmtime is in the SBOM");
    assert_eq!(wasmtime["version"].as_str(), locked["version"].as_str());
    assert_eq!(
        wasmtime["purl"],
        format!("pkg:cargo/wasmtime@{}", locked["version"].as_str().unwrap())
    );
    assert_eq!(
        wasmtime["hashes"][0]["content"].as_str(),
        locked["checksum"].as_str()
    );
    // The engine, and the bundled policies the binary embeds with what they
    // link (built for wasm32-wasip2).
    for linked in [
        "toolgate-engine",
        "redb",
        "safeguards",
        "context-cost",
        "wit-bindgen",
        // Built in a batch of its own (`build-alone`), and what it links.
        "rules",
        "cedar-policy",
    ] {
        assert!(named(linked).is_some(), "{linked} is missing from the SBOM");
    }
    // Not what only tests or benches use.
    for unlinked in ["proptest", "bcrypt", "criterion", "xtask"] {
        assert!(named(unlinked).is_none(), "{unlinked} is not in the binary");
    }
    let root = sbom["metadata"]["component"]["bom-ref"].as_str().unwrap();
    let top = sbom["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["ref"] == root)
        .unwrap();
    let depends: Vec<&str> = top["dependsOn"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        depends
            .iter()
            .any(|d| d.starts_with("pkg:cargo/toolgate-engine@"))
            && depends
                .iter()
                .any(|d| d.starts_with("pkg:cargo/safeguards@")),
        "{depends:?}"
    );
}

#[test]
fn a_binary_over_its_size_budget_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (bin, budget) in dist::SIZE_BUDGET {
        std::fs::File::create(tmp.path().join(bin))
            .unwrap()
            .set_len(budget)
            .unwrap();
    }
    dist::check_budget(tmp.path()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(tmp.path().join("toolgate"))
        .unwrap()
        .set_len(dist::SIZE_BUDGET[0].1 + 1)
        .unwrap();
    let refused = dist::check_budget(tmp.path()).unwrap_err().to_string();
    assert!(
        refused.contains("toolgate is") && refused.contains("over its budget"),
        "{refused}"
    );
}
