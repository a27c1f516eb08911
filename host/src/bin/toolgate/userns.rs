//! Unprivileged user namespaces: a door in system mode's wall. A user who
//! may make one (`unshare -r -m`) holds every capability inside it, so it
//! can mount over `/etc/claude-code` or `/etc/codex` there and start a
//! runtime that finds no managed hooks. `setup system --restrict-userns`
//! closes the door with the kernel's own switch, and `doctor` (run as the
//! agent's user) tries the door and says whether system mode holds.

use std::path::{Path, PathBuf};

/// The kernel's switches, narrowest first: Ubuntu's AppArmor restriction
/// (a namespace gets no capabilities unless a profile allows them),
/// Debian's (no unprivileged namespaces), and the general limit (no new
/// user namespace at all, root's and containers' included).
const SWITCHES: [(&str, &str, &str); 3] = [
    (
        "kernel.apparmor_restrict_unprivileged_userns",
        "1",
        "namespaces an unprivileged user makes get no capabilities",
    ),
    (
        "kernel.unprivileged_userns_clone",
        "0",
        "unprivileged users may not make user namespaces",
    ),
    (
        "user.max_user_namespaces",
        "0",
        "no process may make a user namespace (rootless containers and sandboxes that need one \
         stop working too)",
    ),
];

/// Where a switch is read and written now.
fn proc_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

/// The switch in force that keeps unprivileged users from mounting in a
/// namespace of their own, as `key = value`, if any.
pub fn restriction() -> Option<String> {
    SWITCHES.iter().find_map(|(key, closed, _)| {
        let now = std::fs::read_to_string(proc_path(key)).ok()?;
        (now.trim() == *closed).then(|| format!("{key} = {closed}"))
    })
}

/// Whether this process's user can make a user namespace and mount in it
/// (what an agent would do to hide the managed settings): tried in a child
/// process, which exits right after.
pub fn can_mount_in_a_namespace() -> std::io::Result<bool> {
    use std::os::unix::process::CommandExt as _;
    let mut probe = std::process::Command::new("/proc/self/exe");
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe calls (unshare, mount, _exit); it never execs.
    unsafe {
        probe.pre_exec(|| {
            let none = std::ptr::null();
            let failed = libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0
                || libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    none.cast(),
                ) != 0
                || libc::mount(
                    c"none".as_ptr(),
                    c"/tmp".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    none.cast(),
                ) != 0;
            if failed {
                return Err(std::io::Error::last_os_error());
            }
            libc::_exit(0)
        });
    }
    let status = probe
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match status {
        Ok(status) => Ok(status.success()),
        Err(err)
            if matches!(
                err.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSPC | libc::EINVAL | libc::EUSERS)
            ) =>
        {
            Ok(false)
        }
        Err(err) => Err(err),
    }
}

/// The switch [`restrict`] sets on this kernel, if it has one.
fn narrowest_switch() -> anyhow::Result<&'static (&'static str, &'static str, &'static str)> {
    use anyhow::Context as _;
    SWITCHES
        .iter()
        .find(|(key, ..)| Path::new(&proc_path(key)).exists())
        .context("this kernel has no switch for user namespaces")
}

/// The files [`restrict`] writes: the switch now, and at boot.
pub fn restrict_writes(sysctl_dir: &Path) -> anyhow::Result<[PathBuf; 2]> {
    let (key, ..) = narrowest_switch()?;
    Ok([proc_path(key).into(), sysctl_dir.join(SYSCTL_FILE)])
}

/// The file in `/etc/sysctl.d` that keeps the switch at boot.
const SYSCTL_FILE: &str = "60-toolgate-userns.conf";

/// Close the door now and at boot (a file in `sysctl_dir`): the narrowest
/// switch this kernel has. What was set, for the operator.
pub fn restrict(sysctl_dir: &Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let (key, closed, meaning) = narrowest_switch()?;
    std::fs::write(proc_path(key), closed).with_context(|| {
        format!(
            "cannot set {key} = {closed}: this machine does not let even root change it (a \
             container's root lacks CAP_SYS_RESOURCE): set it where the kernel runs, or leave \
             out --restrict-userns and know that system mode does not hold (`toolgate doctor`)"
        )
    })?;
    std::fs::create_dir_all(sysctl_dir)?;
    let file = sysctl_dir.join(SYSCTL_FILE);
    std::fs::write(
        &file,
        format!(
            "# Written by `toolgate setup system --restrict-userns`: {meaning}, so an agent's\n\
             # user cannot mount over the runtimes' managed settings in a namespace of its own.\n\
             {key} = {closed}\n"
        ),
    )
    .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(format!(
        "{key} = {closed} ({meaning}), kept in {}",
        file.display()
    ))
}
