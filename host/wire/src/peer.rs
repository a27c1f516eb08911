//! Who answers on a daemon's socket, from the kernel (`SO_PEERCRED`), so a
//! client talks only to the daemon it expects. Anything the agent can run
//! can also listen on a Unix socket: a substitute at the daemon's path that
//! answers "allow" to everything must be refused, and only the kernel's
//! word on the peer's user tells it apart (in system mode the daemon runs
//! as a user of its own; in per-user mode as the person's, which an agent
//! shares, so there the check stops only other users).

use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;

/// The user running the process on the other end of `stream`.
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and
    // the fd is open for the lifetime of `stream`.
    let status = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if status != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// This process's effective user: whom a per-user daemon runs as.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The uid of the user `name`, from the user database (`/etc/passwd`,
/// where system users such as the daemon's live).
pub fn uid_of(name: &str) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name))
            .then(|| fields.nth(1)?.parse().ok())
            .flatten()
    })
}

/// Refuse a peer that is not `expected`, saying who it is.
pub fn expect_daemon(stream: &UnixStream, expected: u32) -> Result<(), String> {
    let uid =
        peer_uid(stream).map_err(|err| format!("cannot tell who serves the socket: {err}"))?;
    if uid == expected {
        return Ok(());
    }
    Err(format!(
        "the socket is served by user {uid}, not by toolgate's daemon (user {expected}): \
         something else took its place, so nothing it says is trusted"
    ))
}
