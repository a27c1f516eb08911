//! A private mount namespace for tests that install machine-wide (system
//! mode, the Debian package): copy-on-write overlays over the host's
//! folders, so whatever they write lands in a tmpfs of the namespace's and
//! the host stays as it was.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The user the agent's tools run as in these tests.
pub const AGENT: &str = "tgagent";

/// The config system mode writes.
pub const SYSTEM_CONFIG: &str = "/etc/toolgate/toolgate.toml";

/// A private mount namespace, held open by a sleeping process; commands
/// enter it with `nsenter`. Its overlays' changes live in `scratch`, a
/// tmpfs of its own over a temporary directory removed with it.
pub struct Namespace {
    holder: Child,
    _scratch: tempfile::TempDir,
    _switches: KernelSwitches,
}

/// The kernel's user-namespace switches as they were, put back on drop:
/// `setup system --restrict-userns` sets one for the whole host (procfs is
/// not the namespace's).
struct KernelSwitches(Vec<(&'static str, String)>);

impl KernelSwitches {
    fn save() -> Self {
        let files = [
            "/proc/sys/user/max_user_namespaces",
            "/proc/sys/kernel/unprivileged_userns_clone",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ];
        Self(
            files
                .into_iter()
                .filter_map(|f| Some((f, std::fs::read_to_string(f).ok()?)))
                .collect(),
        )
    }
}

impl Drop for KernelSwitches {
    fn drop(&mut self) {
        for (file, value) in &self.0 {
            let _ = std::fs::write(file, value);
        }
    }
}

impl Namespace {
    /// With copy-on-write overlays over `overlaid`, `bind` (a host folder,
    /// where) bound in, and a fresh tmpfs at each of `fresh`.
    pub fn new(overlaid: &[&str], bind: Option<(&Path, &str)>, fresh: &[&str]) -> Self {
        let scratch = tempfile::tempdir().unwrap();
        let overlays = overlaid.join(" ");
        let script = format!(
            "scratch=$1; src=$2; dst=$3; shift 3; \
             mount -t tmpfs -o mode=0700 tmpfs \"$scratch\" || exit 1; \
             for d in {overlays}; do mkdir -p \"$scratch/upper$d\" \"$scratch/work$d\" && \
               mount -t overlay overlay -o \"lowerdir=$d,upperdir=$scratch/upper$d,workdir=$scratch/work$d\" \"$d\" || exit 1; done; \
             if [ -n \"$dst\" ]; then mkdir -p \"$dst\" && mount --bind \"$src\" \"$dst\" || exit 1; fi; \
             for d in \"$@\"; do mkdir -p \"$d\" && mount -t tmpfs -o mode=0755 tmpfs \"$d\" || exit 1; done; \
             echo ready; exec sleep 900"
        );
        let (src, dst) = bind.unwrap_or((Path::new(""), ""));
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&script)
            .arg("sh")
            .arg(scratch.path())
            .arg(src)
            .arg(dst)
            .args(fresh)
            .stdout(Stdio::piped())
            .spawn()
            .expect("util-linux unshare runs");
        let mut line = String::new();
        BufReader::new(holder.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the namespace's mounts failed");
        Self {
            holder,
            _scratch: scratch,
            _switches: KernelSwitches::save(),
        }
    }

    /// The uid of `user` as the namespace's users know it.
    pub fn uid_of(&self, user: &str) -> Option<u32> {
        let out = self.command("id").args(["-u", user]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }

    /// The agent's user, made inside the namespace (its `/etc/passwd` is
    /// the overlay's, so the host's never gains it).
    pub fn agent_user(&self) -> u32 {
        self.user(AGENT)
    }

    /// The user `name`, made inside the namespace if it is not there.
    pub fn user(&self, name: &str) -> u32 {
        if let Some(uid) = self.uid_of(name) {
            return uid;
        }
        let made = self
            .command("useradd")
            .args(["--no-create-home", "--shell", "/bin/sh", name])
            .status()
            .unwrap();
        assert!(made.success(), "useradd {name}");
        self.uid_of(name).expect("the user exists")
    }

    /// The pid of the process holding the namespace (for `nsenter -t`).
    pub fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// `program args…` inside the namespace, as root.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["-t", &self.holder.id().to_string(), "-m", "--"])
            .arg(program);
        command
    }

    /// Shell `line` inside the namespace as `user`.
    pub fn sh_as(&self, user: &str, line: &str) -> Output {
        self.command("runuser")
            .args(["-u", user, "--", "sh", "-c", line])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // The daemon runs inside: stop it, then the holder.
        for pid in daemon_pids() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The processes serving the system config.
pub fn daemon_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let entry = e.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains(&format!("--config {SYSTEM_CONFIG} serve"))
                && !cmdline.contains("runuser"))
            .then_some(pid)
        })
        .collect()
}
