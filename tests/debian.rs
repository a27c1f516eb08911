//! The Debian package, installed as an operator installs it: `cargo xtask
//! dist`'s `.deb` of the binaries under test, `dpkg -i` in a private mount
//! namespace whose `/etc`, `/usr`, `/var`, `/opt` and `/run` are
//! copy-on-write overlays (the host never sees it). Its scripts set up
//! system mode; `toolgate doctor` as an agent's user says so; `dpkg -r`
//! takes the hooks out and puts back what an admin had in the managed
//! settings; `dpkg -P` leaves every file as it was before the install.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::hooks::BIN;
use common::namespace::{AGENT, Namespace, SYSTEM_CONFIG, daemon_pids};
use xtask::dist::{self, Release};

/// Claude Code's managed settings, which the admin had before toolgate.
const MANAGED: &str = "/etc/claude-code/managed-settings.json";
const ADMINS_SETTINGS: &str = "{\n  \"permissions\": {\"deny\": [\"Bash(curl:*)\"]}\n}\n";

/// Every file, folder and link under the folders a package and `setup
/// system` may touch, with its type, mode, owner and (files) sha256:
/// dpkg's own records and the account files' `-` backups aside.
const SNAPSHOT: &str = "find /etc /usr/bin /usr/share/doc /usr/local /opt /var/lib \
    -path /var/lib/dpkg -prune -o \\! -name '*-' -printf '%y %m %u:%g %p\\n' | sort; \
    find /etc /usr/bin /usr/local /opt /var/lib -path /var/lib/dpkg -prune -o -type f \\! -name '*-' \
    -exec sha256sum {} + | sort";

fn sh(ns: &Namespace, line: &str) -> Output {
    ns.command("sh")
        .args(["-c", line])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(ns: &Namespace, line: &str) -> String {
    let out = sh(ns, line);
    let said = common::output_text(&out);
    assert!(out.status.success(), "`{line}` failed:\n{said}");
    said
}

fn package(out: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let release = Release::new(workspace, out).unwrap();
    let bins = Path::new(BIN).parent().unwrap();
    release
        .deb(&dist::host_target().unwrap(), bins)
        .expect("dpkg-deb builds the package (apt-get install dpkg)")
}

#[test]
fn the_debian_package_sets_up_system_mode_and_purge_leaves_every_file_as_it_was() {
    let _one = crate::one_at_a_time();
    assert_eq!(
        toolgate_wire::peer::own_uid(),
        0,
        "the package test installs a package and makes users: run the suite as root (CI does)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let deb = package(tmp.path());
    let deb = deb.to_str().unwrap();

    let contents = String::from_utf8(
        std::process::Command::new("dpkg-deb")
            .args(["--contents", deb])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for file in [
        "./usr/bin/toolgate",
        "./usr/bin/toolgate-hook",
        "./usr/share/doc/toolgate/copyright",
    ] {
        assert!(contents.contains(file), "{file} is not in:\n{contents}");
    }
    assert!(
        contents
            .lines()
            .all(|line| line.contains("root/root") && !line.contains("./etc/")),
        "root's files, and no config the package would own:\n{contents}"
    );

    let ns = Namespace::new(&["/etc", "/usr", "/var", "/opt", "/run"], None, &[]);
    ok(
        &ns,
        &format!("mkdir -p /etc/claude-code && printf '%s' '{ADMINS_SETTINGS}' > {MANAGED}"),
    );
    // The agent's user, the test's own (not the package's).
    ns.agent_user();
    let before = ok(&ns, SNAPSHOT);

    // Installed: system mode, from the binaries in /usr/bin.
    let installed = ok(&ns, &format!("dpkg -i {deb}"));
    assert!(
        installed.contains("created the system user toolgate"),
        "{installed}"
    );
    ok(&ns, "id -u toolgate && test -f /etc/toolgate/toolgate.toml");
    let managed = ok(&ns, &format!("cat {MANAGED}"));
    assert!(
        managed.contains("/usr/bin/toolgate-hook") && managed.contains("Bash(curl:*)"),
        "toolgate's hooks beside the admin's settings: {managed}"
    );
    let version = ok(&ns, "toolgate --version");
    assert!(version.starts_with("toolgate "), "{version}");

    // The daemon, as the unit starts it (no systemd in the namespace); the
    // agent's doctor finds system mode.
    let daemon = ns
        .command("setsid")
        .args(["runuser", "-u", "toolgate", "--", "/usr/bin/toolgate"])
        .args(["--config", SYSTEM_CONFIG, "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ok(
        &ns,
        "for i in $(seq 100); do [ -S /run/toolgate/toolgate.sock ] && exit 0; sleep 0.1; done; exit 1",
    );
    let doctor = ns
        .command("runuser")
        .args([
            "-u",
            AGENT,
            "--",
            "env",
            "-i",
            "HOME=/tmp",
            "/usr/bin/toolgate",
            "doctor",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.contains("system mode: this user owns nothing toolgate relies on")
            && said.contains("ok  claude-code: allowManagedHooksOnly"),
        "{said}"
    );

    // Removed: the daemon stopped, the hooks out, the admin's settings as
    // they were; the config, store and user kept for a reinstall.
    let removed = ok(&ns, "dpkg -r toolgate");
    assert!(daemon_pids().is_empty(), "the daemon still runs: {removed}");
    drop(daemon);
    assert_eq!(
        ok(&ns, &format!("cat {MANAGED}")),
        ADMINS_SETTINGS,
        "{removed}"
    );
    ok(
        &ns,
        "! test -e /usr/bin/toolgate && ! test -e /etc/codex/hooks.json",
    );
    ok(&ns, "id -u toolgate && test -f /etc/toolgate/toolgate.toml");

    // Purged: every file as it was (and the socket's folder gone).
    let purged = ok(&ns, "dpkg -P toolgate");
    ok(&ns, "! test -e /run/toolgate");
    assert!(
        sh(&ns, "id -u toolgate").status.code() != Some(0),
        "{purged}"
    );
    let after = ok(&ns, SNAPSHOT);
    let (was, is): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    let gone: Vec<&&str> = was.iter().filter(|l| !is.contains(l)).collect();
    let left: Vec<&&str> = is.iter().filter(|l| !was.contains(l)).collect();
    assert!(
        gone.is_empty() && left.is_empty(),
        "purge left the host changed:\nwas, now gone: {gone:#?}\nnew: {left:#?}\n{purged}"
    );
}
