//! Who is on the other end of a Unix-socket connection, from the kernel
//! (`SO_PEERCRED`) rather than from anything the client says, and who may
//! therefore resolve a pause or run an admin command.
//!
//! A person approves from a terminal of their own. The daemon accepts such
//! a request only from a process that
//! - runs as an allowed user (`[approvals] terminal_uids`, default: the
//!   daemon's own user),
//! - has a controlling terminal (an agent's tool processes normally have
//!   none; a process that detaches with `setsid` loses it), and
//! - is not in a session or on a terminal that an agent's hook came from
//!   (every hook connection records its session and terminal in the
//!   store, so a restart does not forget them; see `store::terminals`).
//!
//! Channel adapters (a web inbox, a bot) authenticate instead with a token
//! whose sha256 is in `[approvals] tokens`; that works over HTTP too.
//! What same-user isolation cannot give, and the deployment that does, is
//! in the book's safety model, docs/src/safety/.

use std::os::unix::fs::MetadataExt as _;

use sha2::{Digest as _, Sha256};

use crate::config::ApprovalsConfig;
use crate::store::TerminalStore;
use crate::{Error, Result};

/// The channel name of a person approving at a terminal.
pub const TERMINAL: &str = "terminal";

/// The process on the other end of a socket connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its user.
    pub uid: u32,
    /// Its process id, when the kernel reports one.
    pub pid: Option<i32>,
    /// Its session id (0 if unknown).
    pub session: u32,
    /// When its session's leader started (clock ticks since boot; 0 if
    /// unknown): session ids are reused, a leader's start time is not.
    pub session_born: u64,
    /// Its controlling terminal's device number (0: none).
    pub tty: u32,
    /// When its terminal was allocated (the pseudo-terminal's device node's
    /// ctime, ns; 0 if unknown): `/dev/pts/N` numbers are reused, and a
    /// person's new terminal must not be taken for an agent's old one.
    pub tty_born: u64,
}

impl Peer {
    /// The peer of a connected socket.
    pub fn of(stream: &tokio::net::UnixStream) -> Option<Self> {
        let cred = stream.peer_cred().ok()?;
        let (session, tty) = cred.pid().and_then(session_and_tty).unwrap_or((0, 0));
        Some(Self {
            uid: cred.uid(),
            pid: cred.pid(),
            session,
            session_born: started(session),
            tty,
            tty_born: pts_born(tty),
        })
    }
}

/// Fields 6 and 7 of `/proc/PID/stat`: session id and controlling tty.
fn session_and_tty(pid: i32) -> Option<(u32, u32)> {
    parse_session_and_tty(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Session id and tty from the text of a `/proc/PID/stat` file. The
/// session id is 0 when the session's leader is outside our PID namespace
/// (as in many containers and CI runners).
fn parse_session_and_tty(stat: &str) -> Option<(u32, u32)> {
    // The command name (field 2) may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(3); // state, ppid, pgrp
    let session = fields.next()?.parse().ok()?;
    let tty: i64 = fields.next()?.parse().ok()?;
    Some((session, tty as u32))
}

/// When process `pid` started (field 22 of `/proc/PID/stat`), 0 if unknown.
fn started(pid: u32) -> u64 {
    if pid == 0 {
        return 0;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    parse_start_time(&stat).unwrap_or(0)
}

/// Field 22 (start time) from the text of a `/proc/PID/stat` file.
fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// When the pseudo-terminal with device number `tty` was allocated: its
/// `/dev/pts` node's ctime in ns (0 for other terminals, or if unknown).
fn pts_born(tty: u32) -> u64 {
    let (major, minor) = ((tty >> 8) & 0xfff, (tty & 0xff) | ((tty >> 12) & 0xfff00));
    if !(136..=143).contains(&major) {
        return 0;
    }
    let index = (major - 136) * 256 + minor;
    std::fs::metadata(format!("/dev/pts/{index}")).map_or(0, |m| {
        (m.ctime() as u64).saturating_mul(1_000_000_000) + m.ctime_nsec() as u64
    })
}

/// The daemon's own user.
fn own_uid() -> u32 {
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

impl Peer {
    /// The store keys of its session and terminal (none when unknown).
    pub fn terminal_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        if self.session != 0 {
            keys.push(format!("sid:{}:{}", self.session, self.session_born));
        }
        if self.tty != 0 {
            keys.push(format!("tty:{}:{}", self.tty, self.tty_born));
        }
        keys
    }
}

/// Whether `peer` is a person at a terminal of their own (see the module
/// docs) who may run `command` (named in the reason if not, e.g.
/// `toolgate gates resolve`).
pub fn authorize_person(
    approvals: &ApprovalsConfig,
    terminals: &dyn TerminalStore,
    peer: Option<&Peer>,
    command: &str,
) -> Result<()> {
    let refuse = |why: &str| Err(Error::Unauthorized(why.to_string()));
    let Some(peer) = peer else {
        return refuse(
            "only a person at a terminal (over the Unix socket) or a channel with a token may do this; \
             over HTTP, present a channel token",
        );
    };
    if !approvals.terminal {
        return refuse(
            "terminal approvals are off ([approvals] terminal = false); use a channel with a token",
        );
    }
    let allowed = if approvals.terminal_uids.is_empty() {
        vec![own_uid()]
    } else {
        approvals.terminal_uids.clone()
    };
    if !allowed.contains(&peer.uid) {
        return Err(Error::Unauthorized(format!(
            "user {} may not approve from a terminal ([approvals] terminal_uids)",
            peer.uid
        )));
    }
    if peer.tty == 0 {
        return Err(Error::Unauthorized(format!(
            "the requesting process has no terminal; run `{command}` yourself, in a terminal \
             (an agent's tools have none)"
        )));
    }
    if terminals.is_agent_terminal(&peer.terminal_keys())? {
        return refuse(
            "this terminal session is an agent's (it asked toolgate for decisions: a hook, the MCP \
             gateway or a runtime embedding toolgate); approve from a terminal \
             of your own",
        );
    }
    Ok(())
}

/// Whether `token` is the one configured for `channel`.
pub fn authorize_channel(
    approvals: &ApprovalsConfig,
    channel: &str,
    token: Option<&str>,
) -> Result<()> {
    let Some(expected) = approvals.tokens.get(channel) else {
        return Err(Error::Unauthorized(format!(
            "channel `{channel}` may not resolve pauses: it has no token in [approvals] tokens \
             (no channel is trusted by default)"
        )));
    };
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err(Error::Unauthorized(format!(
            "channel `{channel}` must present its token"
        )));
    };
    let actual = hex::encode(Sha256::digest(token.as_bytes()));
    if !constant_time_eq(actual.as_bytes(), expected.to_ascii_lowercase().as_bytes()) {
        return Err(Error::Unauthorized(format!(
            "wrong token for channel `{channel}`"
        )));
    }
    Ok(())
}

/// Whether two secrets are equal, in time that does not depend on where
/// they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let differs = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    differs == 0 && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_past_a_tricky_command_name() {
        let stat = "4242 (a) b (c) S 1 4242 4100 34817 4242 4194560 0 0";
        assert_eq!(parse_session_and_tty(stat), Some((4100, 34817)));
        assert_eq!(parse_session_and_tty("4242 (no closing"), None);
        // Our own entry parses, whatever namespace the tests run in.
        assert!(session_and_tty(std::process::id() as i32).is_some());
    }

    #[test]
    fn a_reused_session_id_or_terminal_number_is_another_key() {
        let agent = Peer {
            uid: 1000,
            pid: Some(10),
            session: 4100,
            session_born: 5_000,
            tty: 34817,
            tty_born: 1_700_000_000_000_000_000,
        };
        // The same numbers, given out again later to a person's terminal.
        let person = Peer {
            session_born: 9_000,
            tty_born: 1_700_000_050_000_000_000,
            ..agent
        };
        for key in person.terminal_keys() {
            assert!(!agent.terminal_keys().contains(&key), "{key}");
        }
        assert_eq!(agent.terminal_keys(), agent.terminal_keys());
        let stat =
            "4242 (a) b (c) S 1 4242 4100 34817 4242 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert!(started(std::process::id()) > 0);
    }

    #[test]
    fn only_the_configured_token_authenticates_a_channel() {
        let mut approvals = ApprovalsConfig::default();
        approvals
            .tokens
            .insert("web".into(), hex::encode(Sha256::digest(b"s3cret-token")));
        assert!(authorize_channel(&approvals, "web", Some("s3cret-token")).is_ok());
        for (channel, token) in [
            ("web", Some("wrong")),
            ("web", None),
            ("slack", Some("s3cret-token")),
        ] {
            let err = authorize_channel(&approvals, channel, token).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Unauthorized, "{channel}");
        }
    }
}
