//! The Debian package: `toolgate_VERSION-1_ARCH.deb`, built with
//! `dpkg-deb` from the release binaries.
//!
//! It installs `toolgate` and `toolgate-hook` in `/usr/bin`; its scripts
//! set up system mode with the binaries there (`toolgate setup system`:
//! the `toolgate` user, `/etc/toolgate`, the store's folder, the unit and
//! the runtimes' managed hooks, started where systemd runs), and undo it
//! from setup's journal: `apt remove` takes the hooks, unit and lock edits
//! out (left behind without the binaries, the hooks would block every
//! tool), `apt purge` also the config, the store and the user. Nothing it
//! did not add is touched.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::dist::{BINARIES, Release, run_tool};

/// `postinst`: system mode set up from the installed binaries.
const POSTINST: &str = r#"#!/bin/sh
# toolgate: set up system mode (see `toolgate setup system --help`). The
# person who approves pauses is the one who ran sudo; name others later in
# /etc/toolgate/toolgate.toml ([approvals] terminal_uids).
set -e
if [ "$1" = configure ]; then
    start=""
    if [ -d /run/systemd/system ]; then start="--start"; fi
    toolgate setup system --bin-dir /usr/bin $start
    if [ -n "$2" ] && [ -d /run/systemd/system ]; then
        systemctl try-restart toolgate || true
    fi
fi
"#;

/// `prerm`: on removal, what would leave the host relying on the binaries
/// undone, and the purge's steps written out for `postrm`.
const PRERM: &str = r#"#!/bin/sh
set -e
if [ "$1" = remove ]; then
    toolgate setup remove
    toolgate setup remove --purge-script /etc/toolgate/setup-purge.sh
fi
"#;

/// `postrm`: on purge, the rest (config, store, the daemon's user).
const POSTRM: &str = r#"#!/bin/sh
set -e
if [ "$1" = purge ] && [ -f /etc/toolgate/setup-purge.sh ]; then
    sh /etc/toolgate/setup-purge.sh
fi
"#;

/// Debian's architecture name for a Rust target.
pub fn architecture(target: &str) -> anyhow::Result<&'static str> {
    Ok(match target.split('-').next() {
        Some("x86_64") => "amd64",
        Some("aarch64") => "arm64",
        _ => bail!("no Debian architecture known for {target}"),
    })
}

impl Release {
    /// The .deb of the binaries in `bins` (built for `target`), in `out`.
    pub fn deb(&self, target: &str, bins: &Path) -> anyhow::Result<PathBuf> {
        let arch = architecture(target)?;
        let staging = self.out.join(format!(".deb-{target}"));
        let _ = std::fs::remove_dir_all(&staging);
        let file = |path: &str, bytes: &[u8], mode: u32| -> anyhow::Result<u64> {
            let path = staging.join(path);
            std::fs::create_dir_all(path.parent().expect("in a folder"))?;
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            Ok(bytes.len() as u64)
        };
        let mut size = 0;
        for bin in BINARIES {
            let bytes = std::fs::read(bins.join(bin))
                .with_context(|| format!("cannot read {}", bins.join(bin).display()))?;
            size += file(&format!("usr/bin/{bin}"), &bytes, 0o755)?;
        }
        let readme = std::fs::read(self.root.join("README.md"))?;
        size += file("usr/share/doc/toolgate/README.md", &readme, 0o644)?;
        size += file(
            "usr/share/doc/toolgate/copyright",
            COPYRIGHT.as_bytes(),
            0o644,
        )?;
        file("DEBIAN/control", self.control(arch, size).as_bytes(), 0o644)?;
        for (name, script) in [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)] {
            file(&format!("DEBIAN/{name}"), script.as_bytes(), 0o755)?;
        }

        let deb = self
            .out
            .join(format!("toolgate_{}-1_{arch}.deb", self.version));
        let built = run_tool(
            Command::new("dpkg-deb")
                .args(["--root-owner-group", "-Zxz", "--build"])
                .arg(&staging)
                .arg(&deb)
                .env("SOURCE_DATE_EPOCH", self.epoch.to_string()),
            "`apt-get install dpkg` (or --no-deb)",
        );
        std::fs::remove_dir_all(&staging)?;
        built?;
        Ok(deb)
    }

    fn control(&self, arch: &str, bytes: u64) -> String {
        format!(
            "Package: toolgate\n\
             Version: {version}-1\n\
             Architecture: {arch}\n\
             Maintainer: toolgate developers <toolgate@localhost>\n\
             Installed-Size: {kib}\n\
             Depends: libc6, passwd\n\
             Section: admin\n\
             Priority: optional\n\
             Description: policy gate for AI coding agents' tool calls\n \
             Before an agent runs a tool (a shell command, a file write, an MCP call),\n \
             its runtime asks toolgate, which runs sandboxed WebAssembly policies over\n \
             the call and answers allow, deny or pause for a person's approval.\n \
             .\n \
             This package sets toolgate up in system mode: the daemon runs as the\n \
             toolgate user and the runtimes' managed hook settings are root's, so an\n \
             agent cannot switch it off. Check it with `toolgate doctor`.\n",
            version = self.version,
            kib = bytes.div_ceil(1024),
        )
    }
}

const COPYRIGHT: &str = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
Upstream-Name: toolgate\n\n\
Files: *\n\
License: Apache-2.0\n \
On Debian systems, the full text of the Apache License 2.0 is in\n \
/usr/share/common-licenses/Apache-2.0.\n";
