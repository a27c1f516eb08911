//! Tests that must run with nothing beside them, in a binary of their own
//! (cargo runs test binaries one after another), one at a time: system
//! mode installs machine-wide settings every agent on the machine reads,
//! and runs a system daemon found by its command line; a bound under load
//! holds only for the load its test makes; the Debian package installs
//! system mode as its scripts do.

mod common;

mod debian;
mod system_mode;
mod under_load;

/// Taken by every test here, so they run one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
