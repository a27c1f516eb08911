//! A store, config and hook command as an agent runtime would use them,
//! for tests of the daemon and of the trust boundary.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};
use toolgate::daemon::{Client, DaemonRequest, socket_for_store};

/// The toolgate binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

/// A store and config in a temporary directory, as a hook would use them;
/// stops the store's daemon (if one was started) when dropped.
pub struct Setup {
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// The bundled default policies, plus `extra` config.
    pub fn new(extra: &str) -> Self {
        Self::with_config(&format!("{}\n{extra}", toolgate::config::DEFAULT_CONFIG))
    }

    /// `config` alone (with the tests' compiled-component cache).
    pub fn with_config(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("toolgate.toml"), super::config_text(config)).unwrap();
        Self { dir }
    }

    /// A host in this process on the setup's config and store (no daemon
    /// may hold the store).
    pub fn in_process(&self) -> toolgate::Service {
        let config = toolgate::Config::load(&self.dir.path().join("toolgate.toml")).unwrap();
        toolgate::Service::open(config, Some(self.store().into())).unwrap()
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("state").join("toolgate.redb")
    }

    pub fn socket(&self) -> PathBuf {
        socket_for_store(self.store())
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(self.dir.path().join("toolgate.toml"))
            .arg("--store")
            .arg(self.store());
        command
    }

    /// Start `toolgate ARGS`, its stdin written and closed.
    pub fn spawn(&self, args: &[&str], stdin: &str) -> Child {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child
    }

    /// Run `toolgate ARGS` with `stdin`.
    pub fn run(&self, args: &[&str], stdin: &str) -> Output {
        self.spawn(args, stdin).wait_with_output().unwrap()
    }

    /// Run the installed hook command on one event; its stdout parsed.
    pub fn hook(&self, payload: &Value) -> Option<Value> {
        let output = self.run(&["hook", "claude-code"], &payload.to_string());
        assert_eq!(output.status.code(), Some(0), "the hook always exits 0");
        parse_answer(&output.stdout)
    }

    /// Run `toolgate hook RUNTIME` (extra flags first) on `stdin`: its JSON
    /// answer (runtimes that always answer: Gemini CLI, Cursor).
    pub fn hook_json(&self, runtime: &str, extra: &[&str], stdin: &str) -> Value {
        let mut args = vec!["hook", runtime];
        args.extend_from_slice(extra);
        let out = self.run(&args, stdin);
        assert_eq!(out.status.code(), Some(0), "the hook always exits 0");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("not JSON: {out:?}"))
    }

    /// The full command line of `toolgate ARGS` for this setup.
    pub fn command_line(&self, args: &[&str]) -> String {
        let config = self.dir.path().join("toolgate.toml");
        let store = self.store();
        let mut words = vec![
            BIN,
            "--config",
            config.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ];
        words.extend_from_slice(args);
        shlex::try_join(words).unwrap()
    }

    /// Run shell `script_text` as a person at a terminal of their own: in a
    /// new session on a fresh pseudo-terminal (util-linux `script`), with
    /// `typed` typed into it. Stdout holds everything the terminal showed.
    pub fn at_a_terminal(&self, script_text: &str, typed: &str) -> Output {
        let mut child = Command::new("script")
            .args(["-q", "-e", "-c", script_text, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("util-linux `script` runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(typed.as_bytes()).unwrap();
        // Keep stdin open until the command is done: closing it early ends
        // the terminal session.
        let output = child.wait_with_output().unwrap();
        drop(stdin);
        output
    }

    /// Run `toolgate ARGS` as an agent's tool would without a terminal: in
    /// a new session with no controlling terminal (`setsid`).
    pub fn without_a_terminal(&self, args: &[&str]) -> Output {
        Command::new("setsid")
            .arg("-w")
            .arg("sh")
            .arg("-c")
            .arg(self.command_line(args))
            .stdin(Stdio::null())
            .output()
            .expect("util-linux `setsid` runs")
    }

    /// Start `toolgate serve` with `env` and wait until it answers; it
    /// stops with the setup.
    pub fn serve(&self, env: &[(&str, &str)]) -> Child {
        let daemon = self
            .command()
            .arg("serve")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        super::eventually("the daemon to answer", || {
            Client::new(self.socket()).is_up()
        });
        daemon
    }

    /// A daemon on this store with the bundled default config (no
    /// `--config`), as a hook installed without one would start it; it
    /// stops with the returned guard.
    pub fn serve_bundled(&self) -> KillOnDrop {
        serve_bundled(&self.store())
    }

    /// The pending gates, from the daemon.
    pub fn pending_gates(&self) -> Vec<Value> {
        let gates = Client::new(self.socket())
            .call(&DaemonRequest::Gates { user: None })
            .unwrap();
        gates.as_array().unwrap().clone()
    }

    pub fn daemon_pid(&self) -> Option<u32> {
        let health = Client::new(self.socket())
            .call(&DaemonRequest::Health)
            .ok()?;
        health["pid"].as_u64().map(|p| p as u32)
    }

    /// Processes serving this store's socket.
    pub fn daemons(&self) -> usize {
        let socket = self.socket().display().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
            .filter(|cmdline| cmdline.contains(" serve ") && cmdline.contains(&socket))
            .count()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(pid) = self.daemon_pid() {
            signal(pid, "TERM");
            super::eventually("the daemon to stop", || !self.socket().exists());
        }
    }
}

/// A daemon on `store` with the bundled default config (no `--config`);
/// it stops with the returned guard.
pub fn serve_bundled(store: &std::path::Path) -> KillOnDrop {
    let daemon = Command::new(BIN)
        .arg("--store")
        .arg(store)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    super::eventually("the daemon to answer", || {
        Client::new(socket_for_store(store)).is_up()
    });
    KillOnDrop(daemon)
}

/// A child process killed when a test ends, pass or fail.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Stops a store's daemon when a test ends, pass or fail.
pub struct StopDaemon(pub PathBuf);

impl Drop for StopDaemon {
    fn drop(&mut self) {
        let client = Client::new(socket_for_store(&self.0));
        if let Ok(health) = client.call(&DaemonRequest::Health) {
            let pid = health["pid"].to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
    }
}

pub fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

pub fn parse_answer(stdout: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(stdout);
    (!text.trim().is_empty()).then(|| serde_json::from_str(text.trim()).unwrap())
}

/// A hook event as Claude Code 2.1 sends it, keys the docs do not list
/// included.
pub fn event(name: &str, session: &str, tool: &str, input: Value, id: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/nonexistent/transcript.jsonl",
        "cwd": "/home/dev/project",
        "prompt_id": "prompt-1",
        "permission_mode": "default",
        "effort": {"level": "high"},
        "hook_event_name": name,
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": id,
        "duration_ms": 12
    })
}

/// The agent's `Write` of a notes file, in bypassPermissions mode.
pub fn bypassed_write() -> Value {
    let mut call = event(
        "PreToolUse",
        "s1",
        "Write",
        json!({"file_path": "/home/dev/project/notes.md", "content": "hi"}),
        "toolu_w",
    );
    call["permission_mode"] = json!("bypassPermissions");
    call
}

/// Claude Code's decision and its reason in a hook answer.
pub fn decision(answer: &Value) -> (&str, &str) {
    let out = &answer["hookSpecificOutput"];
    (
        out["permissionDecision"].as_str().unwrap_or(""),
        out["permissionDecisionReason"].as_str().unwrap_or(""),
    )
}

pub fn permission(answer: &Option<Value>) -> &str {
    answer
        .as_ref()
        .and_then(|a| a["hookSpecificOutput"]["permissionDecision"].as_str())
        .unwrap_or("")
}

/// What a person types to resolve a pause under `config`.
pub fn resolve_command(config: &std::path::Path, request_id: &str, decision: &str) -> String {
    shlex::try_join([
        BIN,
        "--config",
        config.to_str().unwrap(),
        "gates",
        "resolve",
        "--request-id",
        request_id,
        "--decision",
        decision,
    ])
    .unwrap()
}

/// A person resolves a pause from a terminal of their own (util-linux
/// `script`), answering `yes` to the confirmation.
pub fn resolve_at_a_terminal(config: &std::path::Path, request_id: &str, decision: &str) {
    let line = resolve_command(config, request_id, decision);
    let resolved = super::output_with_stdin(
        Command::new("script").args(["-q", "-e", "-c", &line, "/dev/null"]),
        "yes\n",
    );
    assert!(resolved.status.success(), "{resolved:?}");
}

/// The pending gates, as `toolgate gates list` prints them.
pub fn pending_gates(config: &std::path::Path) -> Vec<Value> {
    let listed = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(["gates", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "gates list: {listed:?}");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}
