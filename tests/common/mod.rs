//! Shared helpers: build a host over a temporary store from a config snippet
//! that names test policies built from `tests/plugins/` and bundled ones.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use toolgate::{Config, Service, ToolRequest};

/// A free loopback port (released for the caller to bind).
pub fn free_port() -> u16 {
    // Below Linux's ephemeral range (32768–60999): a port the kernel hands
    // another test's `bind(0)` server between this check and the caller's
    // own bind would make that caller's daemon fail to serve (seen).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    loop {
        let n = NEXT.fetch_add(7919, std::sync::atomic::Ordering::Relaxed);
        let port = 20_000 + (seed.wrapping_add(n) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A command's stdout then stderr, as text (for assertions' messages and
/// what they look for).
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `command` with `stdin` written and closed; its output (stdout and
/// stderr piped).
pub fn output_with_stdin(command: &mut std::process::Command, stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A program that exits without reading (a hook replaced by /bin/true)
    // closes the pipe: that is its answer, not the test's failure.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// The compiled component of a guest crate (package name, dashes ok).
pub fn guest(package: &str) -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR")).join(format!("{}.wasm", package.replace('-', "_")))
}

/// Tools of the `everything` MCP server named `names`, as `tools/list`
/// offers them, for the visibility phase.
pub fn mcp_tools(names: &[&str]) -> Vec<toolgate::output::ToolDescriptor> {
    names
        .iter()
        .map(|name| toolgate::output::ToolDescriptor {
            name: name.to_string(),
            origin: toolgate::request::Origin::Mcp("everything".into()),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        })
        .collect()
}

/// The build's `target/` directory (the guests are in
/// `target/guests/wasm32-wasip2/release`): where the tests keep what they
/// install and build.
pub fn target_dir() -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the guest dir is inside target/")
        .to_path_buf()
}

/// `command` (a nested `cargo`, or a tool that runs one) without what
/// `cargo test` set in this process for the test itself
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, `OUT_DIR`, …). Some build scripts
/// watch those variables (ring's watches five), so a nested build that saw
/// them rebuilt ring, rustls and everything above, and the next `cargo
/// test` rebuilt them back: about a minute of both cores each way.
pub fn without_test_env(command: &mut std::process::Command) -> &mut std::process::Command {
    const SET_FOR_THE_TEST: [&str; 9] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if SET_FOR_THE_TEST.contains(&name.as_ref())
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
        {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// One compiled-artifact cache for every test run, so each component is
/// compiled once per machine rather than once per test.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR")).join("../../test-cache")
}

/// A host and the temporary directory holding its store and config.
#[derive(Debug)]
pub struct TestHost {
    pub host: Service,
    pub dir: tempfile::TempDir,
}

impl std::ops::Deref for TestHost {
    type Target = Service;
    fn deref(&self) -> &Service {
        &self.host
    }
}

/// lease-gate alone (no auto-plan), with `echo` a local read: a call that
/// runs only under a lease, for the tests of leases under faults.
pub const ECHO_LEASES: &str = "[plugins.lease-gate]\npath = \"bundled:lease-gate\"\n\
     [plugins.lease-gate.config]\nauto_plan = false\n\
     [plugins.lease-gate.config.actions.echo]\neffects = [\"read-local\"]\n";

/// The config text for a host: `body` is TOML (plugin tables etc.).
pub fn config_text(body: &str) -> String {
    format!(
        "cache_dir = {:?}\n{body}",
        cache_dir().display().to_string()
    )
}

/// Parse a config in a fresh temporary directory.
pub fn config(body: &str) -> (Config, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = Config::parse(&config_text(body), "test config", dir.path().to_path_buf())
        .expect("test config parses");
    (config, dir)
}

/// Start a host from a config body; panics with the error if it fails.
pub fn host(body: &str) -> TestHost {
    try_host(body).unwrap_or_else(|err| panic!("host failed to start: {err}"))
}

/// Start a host from a config body.
pub fn try_host(body: &str) -> Result<TestHost, toolgate::Error> {
    let (config, dir) = config(body);
    let store = dir.path().join("toolgate.redb");
    Service::open(config, Some(store.into())).map(|host| TestHost { host, dir })
}

/// A `[plugins.NAME]` table for the scripted test policy.
pub fn scripted(name: &str, priority: i32, script: &str) -> String {
    format!(
        "[plugins.{name}]\npath = {path:?}\npriority = {priority}\n[plugins.{name}.config]\n{script}\n",
        path = guest("scripted-policy").display().to_string()
    )
}

/// Wait for a child to finish, killing it past `limit`: a bound, not a
/// timing assertion (a hung real client must not hang CI). Its output is
/// read while it runs (a full pipe cannot stall it), and its end is seen at
/// once (the hook-latency benchmark times these runs).
pub fn wait_bounded(
    child: std::process::Child,
    limit: std::time::Duration,
) -> std::process::Output {
    let pid = child.id() as libc::pid_t;
    let (finished, finishing) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finishing.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            // SAFETY: signals a process of ours that has not been reaped
            // (the waiting thread has not returned).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let output = child.wait_with_output().unwrap();
    let _ = finished.send(());
    let _ = watchdog.join();
    output
}

/// Wait (bounded, 60 s) for `check` to hold: for background work such as a
/// daemon starting or a watcher reloading. Not a timing assertion.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    eventually_showing(what, || (check(), String::new()));
}

/// [`eventually`], with what `probe` last saw in the message when it gives
/// up: `probe` answers whether the condition holds, and a description.
pub fn eventually_showing(what: &str, mut probe: impl FnMut() -> (bool, String)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (holds, seen) = probe();
        if holds {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for: {what}\nlast seen:\n{seen}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A plain call with default caller fields.
pub fn call(tool: &str, arguments: serde_json::Value) -> ToolRequest {
    ToolRequest::new(tool, arguments)
}
pub mod agents;
pub mod chat_api;
pub mod claude_code;
pub mod embed;
pub mod gemini_api;
pub mod hooks;
pub mod logs;
pub mod messages_api;
pub mod missing;
pub mod model_server;
pub mod namespace;
pub mod npm;
pub mod oci_registry;
pub mod pg_cluster;
pub mod polyglot;
pub mod python;
pub mod responses_api;
pub mod scripted_http;
pub mod tmux;
pub mod webdriver;

/// Approve the pause `decision` carries, once, from its own channel.
pub fn approve(host: &toolgate::Service, decision: &toolgate::Decision) {
    answer(
        host,
        decision,
        toolgate::gates::GateResolution::Approve { always: false },
    );
}

/// Answer the pause `decision` carries with `resolution`, from its own
/// channel.
pub fn answer(
    host: &toolgate::Service,
    decision: &toolgate::Decision,
    resolution: toolgate::gates::GateResolution,
) {
    let pause = decision.pause.as_ref().expect("a pause");
    let key = toolgate::gates::GateKey {
        user_id: pause.user_id.clone(),
        thread_id: pause.thread_id.clone(),
    };
    host.resolve_gate(&key, &pause.request_id, &pause.channel, resolution)
        .unwrap();
}
