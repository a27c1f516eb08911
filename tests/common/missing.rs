//! A real component a test needs (a browser, a database, a client from
//! npm) is missing: the test fails, naming it and the command that
//! installs it. It never passes by skipping, unless the person running the
//! tests says so: `TOOLGATE_TEST_SKIP=chromium,postgres` skips
//! what needs those, and says so where `cargo test` shows it. Under CI
//! (`CI` set) nothing is skipped.

/// `component` is missing (`why` says what is): panic with how to install
/// it, or, when `TOOLGATE_TEST_SKIP` names it outside CI, say so on the
/// terminal and return so that the caller's test can end.
pub fn missing(component: &str, why: &str, install: &str) {
    let listed = std::env::var("TOOLGATE_TEST_SKIP")
        .unwrap_or_default()
        .split(',')
        .any(|name| name.trim() == component);
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    if listed && !ci {
        say(&format!(
            "SKIPPED ({component}, as TOOLGATE_TEST_SKIP says): {why}\n"
        ));
        return;
    }
    panic!(
        "{why}. Install it with `{install}` (.ci/run does), or skip what needs it with \
         TOOLGATE_TEST_SKIP={component}"
    );
}

/// Write past the test harness's capture, to the real standard output, so
/// a skip shows in `cargo test`'s own output.
fn say(text: &str) {
    use std::io::Write as _;
    use std::os::fd::FromRawFd as _;
    // SAFETY: fd 1 is the process's standard output, open for its whole
    // life; `ManuallyDrop` keeps this handle from closing it.
    let mut stdout = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    let _ = stdout.write_all(text.as_bytes());
}
