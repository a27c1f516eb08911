//! A real terminal for interactive clients: a private tmux server (its own
//! socket, so nothing of the machine's is touched) whose windows run
//! programs on pseudo-terminals; the test types keys and reads the screen
//! as a person would see it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A tmux server with one window per program; killed when dropped.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// A server whose first window (`name`) runs `program` with exactly
    /// `env` in `cwd`, on a 160×50 terminal. Without tmux the test fails,
    /// naming the install command (`None` only when `TOOLGATE_TEST_SKIP`
    /// says `tmux`).
    pub fn start(
        dir: &Path,
        name: &str,
        cwd: &Path,
        env: &[(&str, String)],
        program: &[String],
    ) -> Option<Self> {
        let tmux = Self {
            socket: dir.join("tmux.sock"),
        };
        let started = tmux
            .command()
            .args(["new-session", "-d", "-x", "160", "-y", "50", "-s", "test"])
            .args(["-n", name, "-c"])
            .arg(cwd)
            .arg(env_line(env, program))
            .output();
        match started {
            Err(err) => {
                let why = format!("the interactive tests need tmux, which cannot run ({err})");
                super::missing::missing("tmux", &why, "apt-get install tmux");
                None
            }
            Ok(out) => {
                assert!(out.status.success(), "tmux new-session: {out:?}");
                Some(tmux)
            }
        }
    }

    /// Another window (`name`), running `program` with `env` in `cwd`: a
    /// second terminal, such as the person's own.
    pub fn open(&self, name: &str, cwd: &Path, env: &[(&str, String)], program: &[String]) {
        let out = self
            .command()
            .args(["new-window", "-d", "-t", "test", "-n", name, "-c"])
            .arg(cwd)
            .arg(env_line(env, program))
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux new-window: {out:?}");
    }

    /// Type `text` literally into window `name`.
    pub fn type_text(&self, name: &str, text: &str) {
        self.send(name, &["-l", text]);
    }

    /// Press keys (tmux names: `Enter`, `Escape`, `1`, …) in window `name`.
    pub fn press(&self, name: &str, keys: &[&str]) {
        self.send(name, keys);
    }

    /// What window `name` shows now (with the scrollback), blank lines
    /// dropped.
    pub fn screen(&self, name: &str) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-J", "-S", "-200", "-t"])
            .arg(format!("test:{name}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux capture-pane: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Keep what window `name` shows now (its visible screen, as a person
    /// sees it) in `target/screens/FILE.txt`, where the book's captures of
    /// the real clients come from (docs/src/approving.md).
    pub fn keep(&self, name: &str, file: &str) {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-J", "-t"])
            .arg(format!("test:{name}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux capture-pane: {out:?}");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screens");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{file}.txt")), &out.stdout).unwrap();
    }

    /// Wait (bounded) until window `name` shows `text`; the screen then.
    pub fn wait_for(&self, name: &str, text: &str) -> String {
        self.wait_until(name, &format!("the screen shows {text:?}"), |s| {
            s.contains(text)
        })
    }

    /// Wait (bounded) until window `name`'s screen satisfies `check`.
    pub fn wait_until(&self, name: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        super::eventually_showing(what, || {
            screen = self.screen(name);
            (check(&screen), screen.clone())
        });
        screen
    }

    fn send(&self, name: &str, keys: &[&str]) {
        let out: Output = self
            .command()
            .args(["send-keys", "-t"])
            .arg(format!("test:{name}"))
            .args(keys)
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux send-keys: {out:?}");
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null");
        command
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

/// `env -i K=V … PROGRAM ARGS` as one shell line: the window's program
/// sees exactly `env`, not the test's environment.
fn env_line(env: &[(&str, String)], program: &[String]) -> String {
    let mut words = vec!["env".to_string(), "-i".to_string()];
    words.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    words.extend(program.iter().cloned());
    shlex::try_join(words.iter().map(String::as_str)).unwrap()
}

/// The person resolves the one pending gate of `config` with `decision`
/// from their own terminal (window `person` of `tmux`), typing the command
/// and `yes` as they would; the terminal shows that `tool` was paused.
pub fn resolve_at_the_person_terminal(
    tmux: &Tmux,
    person: &str,
    config: &Path,
    decision: &str,
    tool: &str,
) {
    let gates = super::hooks::pending_gates(config);
    assert_eq!(gates.len(), 1, "{gates:?}");
    let request_id = gates[0]["request_id"].as_str().unwrap();
    let line = super::hooks::resolve_command(config, request_id, decision);
    tmux.type_text(person, &format!("clear; {line}"));
    tmux.press(person, &["Enter"]);
    let screen = tmux.wait_for(person, "Type yes to");
    assert!(
        screen.contains("paused by lease-gate") && screen.contains(&format!("tool: {tool}")),
        "the person's terminal shows what is asked:\n{screen}"
    );
    tmux.type_text(person, "yes");
    tmux.press(person, &["Enter"]);
    tmux.wait_for(person, "request_id");
    super::eventually_showing("the resolved gate leaves the list", || {
        let gates = super::hooks::pending_gates(config);
        (gates.is_empty(), format!("{gates:?}"))
    });
}
