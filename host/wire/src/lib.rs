//! toolgate's wire types as plain data: the requests an agent runtime sends,
//! the decisions it gets back, pending gates, the decision log and the
//! daemon protocol, and [`client`], the one client for a daemon's socket.
//! No wasmtime and no store: the thin hook client (`toolgate-hook`), the MCP
//! gateway, the CLI and embedders that only talk to a daemon use this crate;
//! the engine re-exports its data modules under the same names.

#![deny(missing_docs)]

pub mod client;
pub mod decision;
pub mod decision_log;
pub mod gates;
pub mod locations;
pub mod output;
pub mod peer;
pub mod protocol;
pub mod redact;
pub mod request;

pub use decision::{Decision, Verdict};
pub use request::ToolRequest;

/// A request that cannot be understood; the message says why and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid request: {0}")]
pub struct InvalidRequest(pub String);

/// The time since the Unix epoch as toolgate reads it (every expiry, TTL
/// and lease, the policies' wall clock included): the system's wall clock,
/// but never behind the wall clock this process first read plus the time
/// since on the boot clock, which no one sets and which counts suspend. A
/// clock stepped back (`date -s`, a bad NTP source, a restored VM
/// snapshot) extends nothing; a step forward is taken at once, so an
/// expiry comes sooner, never later. Nor is it behind a moment an earlier
/// process recorded ([`never_before`]), so a restart after a step back
/// extends nothing either.
pub fn now() -> std::time::Duration {
    use std::sync::atomic::Ordering::Relaxed;
    static START: std::sync::OnceLock<(std::time::Duration, std::time::Duration)> =
        std::sync::OnceLock::new();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let boot = boot_clock();
    let (wall_then, boot_then) = *START.get_or_init(|| (wall, boot));
    // A moment recorded by an earlier process (see `never_before`): on the
    // same boot, plus the time since on the boot clock.
    let floor_at = std::time::Duration::from_millis(FLOOR_AT_MS.load(Relaxed));
    let recorded = match FLOOR_BOOT_MS.load(Relaxed) {
        u64::MAX => floor_at,
        at_boot => floor_at + boot.saturating_sub(std::time::Duration::from_millis(at_boot)),
    };
    wall.max(wall_then + boot.saturating_sub(boot_then))
        .max(recorded)
}

/// The floor [`never_before`] set: the moment, in ms since the epoch (0:
/// none), and the boot clock it goes on from (`u64::MAX`: none set).
/// Atomics, not a lock: [`now`] is read on every path.
static FLOOR_AT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FLOOR_BOOT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// A moment [`now`] showed, as a later process reads it back: the time,
/// the boot clock then, and which boot that was.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Moment {
    /// What [`now`] showed, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The boot clock then, in milliseconds.
    pub boot_ms: u64,
    /// The kernel's id of that boot (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
}

/// Keep [`now`] from ever showing less than `moment` (one it showed, in
/// this process or an earlier one) plus the time since on the boot clock:
/// since the moment on the same boot, since this call on another.
pub fn never_before(moment: &Moment) {
    use std::sync::atomic::Ordering::Relaxed;
    if moment.at_ms <= FLOOR_AT_MS.load(Relaxed) {
        return;
    }
    // On another boot the time between is unknown: from now on the floor
    // moves with this boot's clock, so it never stands still.
    let same_boot = !moment.boot_id.is_empty() && moment.boot_id == boot_id();
    let at_boot = match same_boot {
        true => moment.boot_ms,
        false => boot_clock().as_millis() as u64,
    };
    FLOOR_BOOT_MS.store(at_boot, Relaxed);
    FLOOR_AT_MS.store(moment.at_ms, Relaxed);
}

/// This moment, for a later process's [`never_before`].
pub fn moment() -> Moment {
    Moment {
        at_ms: now_ms(),
        boot_ms: boot_clock().as_millis() as u64,
        boot_id: boot_id().to_string(),
    }
}

/// This boot's id, read once (empty where the kernel does not say).
fn boot_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|id| id.trim().to_string())
            .unwrap_or_default()
    })
}

/// [`now`] in milliseconds.
pub fn now_ms() -> u64 {
    now().as_millis() as u64
}

/// `CLOCK_BOOTTIME`: time since boot, suspend included (zero where the
/// system has no such clock: then [`now`] never goes back, but stands
/// still until the wall clock catches up).
fn boot_clock() -> std::time::Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut time) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}
