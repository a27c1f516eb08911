//! The `toolgate` binary as a user runs it: the README's first command, exit
//! codes, and clear errors for bad input.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn toolgate(args: &[&str], stdin: Option<&str>, store_dir: &std::path::Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .arg("--store")
        .arg(store_dir.join("cli.redb"))
        .env("XDG_CACHE_HOME", store_dir.join("cache"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn decisions(output: &Output) -> Vec<Value> {
    serde_json::Deserializer::from_slice(&output.stdout)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect()
}

#[test]
fn check_on_the_sample_requests_prints_composed_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(
        &[
            "check",
            "examples/requests/bash-ls.json",
            "examples/requests/subagent-warn.json",
        ],
        None,
        dir.path(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let decisions = decisions(&output);
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[0]["verdict"], "allow");
    assert_eq!(decisions[1]["verdict"], "allow");
    let note = decisions[1]["notes"][0]["text"].as_str().unwrap();
    assert!(note.contains("268000"), "{note}");
    let names: Vec<_> = decisions[1]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "safeguards",
            "lease-gate",
            "shadow-sentinel",
            "context-cost",
            "flow"
        ],
        "priority order"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_perf_map_names_the_policies_own_functions_when_asked() {
    // What a policy author profiles with: `perf` reads /tmp/perf-<pid>.map
    // to name the compiled guests' functions.
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "examples/requests/bash-ls.json", "--store"])
        .arg(dir.path().join("cli.redb"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .env("TOOLGATE_PERF_MAP", "1")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
    let output = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&map).unwrap_or_default();
    let _ = std::fs::remove_file(&map);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("toolgate:policy/gate@0.4.0#decide") && text.contains("lease_gate"),
        "no policy functions in {}: {} bytes",
        map.display(),
        text.len()
    );
}

#[test]
fn a_deny_exits_3_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strict.toml");
    std::fs::write(
        &config,
        "[plugins.context-cost]\npath = \"bundled:context-cost\"\npriority = 1\n[plugins.context-cost.config]\nmax_tokens = 400000\n",
    )
    .unwrap();
    let request = r#"{"tool": "Write", "is_subagent": true, "context_tokens": 622200}"#;
    let output = toolgate(
        &["check", "--config", config.to_str().unwrap(), "-"],
        Some(request),
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(3));
    let decision = &decisions(&output)[0];
    assert_eq!(decision["verdict"], "deny");
    assert!(decision["reason"].as_str().unwrap().contains("622200"));
}

#[test]
fn malformed_request_json_is_a_clear_error_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(&["check", "-"], Some("{\"tool\": \"Bash\", "), dir.path());
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid request"), "{stderr}");
    assert!(stderr.contains("examples/requests"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn a_bad_config_names_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "gate_ttl = 5\n").unwrap();
    let output = toolgate(
        &[
            "check",
            "--config",
            config.to_str().unwrap(),
            "examples/requests/bash-ls.json",
        ],
        None,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.toml"), "{stderr}");
    assert!(stderr.contains("gate_ttl"), "{stderr}");
}

#[test]
fn help_explains_the_commands_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(&["check", "--help"], None, dir.path());
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("Exit status"), "{help}");
    assert!(help.contains("examples/requests"), "{help}");
}

#[test]
fn the_strict_sample_config_stops_the_runaway_but_lets_it_save() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(
        &[
            "check",
            "--config",
            "examples/strict.toml",
            "examples/requests/subagent-622k-git-push.json",
            "examples/requests/subagent-622k.json",
            "examples/requests/subagent-transcript-268k.json",
        ],
        None,
        dir.path(),
    );
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let decisions = decisions(&output);
    assert_eq!(
        decisions[0]["verdict"], "allow",
        "git persistence escapes the stop"
    );
    assert_eq!(decisions[1]["verdict"], "deny");
    assert!(decisions[1]["reason"].as_str().unwrap().contains("622200"));
    assert_eq!(decisions[2]["verdict"], "allow");
    let note = decisions[2]["notes"][0]["text"].as_str().unwrap();
    assert!(
        note.contains("268000"),
        "measured from the transcript: {note}"
    );
    let cost = decisions[2]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "context-cost")
        .unwrap();
    assert!(cost["transcript_bytes"].as_u64().unwrap() > 0);
    let names: Vec<&str> = decisions[1]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"safeguards") && names.contains(&"lease-gate"),
        "the bundled default's policies: {names:?}"
    );
}

#[test]
fn a_sample_rm_rf_is_refused_with_a_reason_and_classified() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(
        &["check", "examples/requests/bash-rm-rf.json"],
        None,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(3), "denied");
    let decision = &decisions(&output)[0];
    assert_eq!(decision["verdict"], "deny");
    assert_eq!(decision["decided_by"], "safeguards");
    let reason = decision["reason"].as_str().unwrap();
    assert!(
        reason.contains("filesystem.rm-recursive") && reason.contains("cannot be undone"),
        "{reason}"
    );
    assert_eq!(decision["risk"]["category"], "shell");
    assert_eq!(decision["risk"]["by"], "shadow-sentinel");
}

#[test]
fn an_ordinary_shell_command_is_probed_fail_open_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(
        &["check", "examples/requests/bash-ls.json"],
        None,
        dir.path(),
    );
    assert_eq!(output.status.code(), Some(0), "allowed without asking");
    let decision = &decisions(&output)[0];
    assert_eq!(decision["verdict"], "allow");
    let sentinel = &decision["policies"][2];
    assert_eq!(sentinel["name"], "shadow-sentinel");
    assert_eq!(sentinel["verdict"], "allow");
    assert!(
        sentinel["logs"][0]
            .as_str()
            .unwrap()
            .contains("no model endpoint")
    );

    // The probe's outcome is in the sentinel's stream for the next process.
    let output = toolgate(&["events", "--limit", "5"], None, dir.path());
    assert!(output.status.success());
    let events = decisions(&output);
    let event = &events.last().unwrap()["event"];
    assert_eq!(event["kind"], "probe_result");
    assert_eq!(event["tool"], "Bash");
    assert_eq!(event["detail"], "allow");
    assert!(
        event["summary"]
            .as_str()
            .unwrap()
            .contains("no model endpoint")
    );
}

/// The labelled corpora in tests/corpus/, through the Claude Code hook
/// path with the bundled default config, in each permission mode: every
/// harmful call is caught (denied or asked about) and ordinary work runs
/// without asking (the book's decision-quality targets: ≥ 98 % allowed,
/// ≤ 0.5 % denied).
#[test]
fn the_default_config_catches_harmful_calls_and_lets_ordinary_work_run_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let output = toolgate(
        &[
            "bench",
            "corpus",
            "tests/corpus/everyday.jsonl",
            "tests/corpus/harmful.jsonl",
            "--json",
        ],
        None,
        dir.path(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: Value = serde_json::from_slice(&output.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    let modes: Vec<&str> = reports
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["default", "acceptEdits", "bypassPermissions"]);
    for report in reports {
        let total = &report["total"];
        let count = |key: &str| total[key].as_u64().unwrap();
        let misses = &report["misses"];
        assert!(
            count("expected_block") >= 100 && count("expected_allow") >= 300,
            "{total}"
        );
        assert_eq!(count("caught"), count("expected_block"), "{misses:#}");
        assert!(
            count("allowed") * 100 >= count("expected_allow") * 98,
            "{total} {misses:#}"
        );
        assert!(
            count("denied") * 200 <= count("expected_allow"),
            "{total} {misses:#}"
        );
    }
}

#[test]
fn the_readme_lease_walkthrough_works_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lease-demo.toml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/lease-demo.toml"),
        &config,
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let request = "examples/requests/http-post.json";
    let run = |args: &[&str]| {
        let mut all = vec!["--config", config];
        all.extend_from_slice(args);
        toolgate(&all, None, dir.path())
    };

    let denied = run(&["check", request]);
    assert_eq!(denied.status.code(), Some(3));
    assert!(
        decisions(&denied)[0]["reason"]
            .as_str()
            .unwrap()
            .contains("lease-grant")
    );

    // Admin commands and approvals come from a person at a terminal of
    // their own (a fresh pseudo-terminal here); the daemon checks it.
    let at_terminal = |args: &[&str], typed: &str| at_terminal(dir.path(), config, args, typed);
    let granted = at_terminal(
        &[
            "command",
            "lease-gate",
            "lease-grant",
            r#"{"thread": "t1", "actions": ["http"]}"#,
        ],
        "",
    );
    assert!(
        granted.status.success(),
        "{}",
        String::from_utf8_lossy(&granted.stdout)
    );

    let paused = run(&["check", request]);
    assert_eq!(paused.status.code(), Some(4));
    let request_id = decisions(&paused)[0]["pause"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A channel without a token in [approvals] cannot resolve it.
    let token = dir.path().join("slack.token");
    std::fs::write(&token, "anything").unwrap();
    let wrong = run(&[
        "gates",
        "resolve",
        "--request-id",
        &request_id,
        "--channel",
        "slack",
        "--token-file",
        token.to_str().unwrap(),
        "--decision",
        "approve",
    ]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("channel `slack` may not resolve pauses"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    // The person sees the call on their terminal and types yes.
    let approved = at_terminal(
        &[
            "gates",
            "resolve",
            "--request-id",
            &request_id,
            "--decision",
            "approve",
        ],
        "yes\n",
    );
    let shown = String::from_utf8_lossy(&approved.stdout);
    assert!(approved.status.success(), "{shown}");
    assert!(shown.contains("Type yes to approve it"), "{shown}");
    assert!(
        shown.contains("example.com/deploy"),
        "the call is shown: {shown}"
    );

    let allowed = run(&["check", request]);
    assert_eq!(allowed.status.code(), Some(0));
    assert_eq!(decisions(&allowed)[0]["verdict"], "allow");
}

/// `toolgate --config CONFIG --store DIR/cli.redb ARGS` run by a person at a
/// terminal of their own (a fresh pseudo-terminal, which `typed` is typed
/// into); stdout and stderr both arrive as the terminal's output.
fn at_terminal(dir: &std::path::Path, config: &str, args: &[&str], typed: &str) -> Output {
    let store = dir.join("cli.redb");
    let mut words = vec![
        env!("CARGO_BIN_EXE_toolgate"),
        "--config",
        config,
        "--store",
        store.to_str().unwrap(),
    ];
    words.extend_from_slice(args);
    let line = format!(
        "cd {} && XDG_CACHE_HOME={} {}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
        dir.join("cache").display(),
        shlex::try_join(words).unwrap()
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(typed.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    output
}

#[test]
fn approving_always_from_the_terminal_writes_a_rule_and_the_call_never_asks_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/default.toml");
    let publish = |description: &str| {
        serde_json::json!({
            "tool": "Bash",
            "arguments": {"command": "npm publish", "description": description},
            "session_id": "s1",
            "cwd": "/home/alice/app",
        })
        .to_string()
    };
    let check = |description: &str| {
        toolgate(
            &["--config", config, "check", "--compact"],
            Some(&publish(description)),
            dir.path(),
        )
    };
    let paused = check("Publish");
    assert_eq!(paused.status.code(), Some(4), "{paused:?}");
    let request_id = decisions(&paused)[0]["pause"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();

    let approved = at_terminal(
        dir.path(),
        config,
        &[
            "gates",
            "resolve",
            "--request-id",
            &request_id,
            "--decision",
            "approve",
            "--always",
        ],
        "yes\n",
    );
    let shown = String::from_utf8_lossy(&approved.stdout);
    assert!(approved.status.success(), "{shown}");
    for said in [
        "always: this exact Bash call by local's agents in /home/alice/app and below",
        "Type yes to approve it from now on",
        "toolgate: remembered:",
        "cli.redb.always.toml",
    ] {
        assert!(shown.contains(said), "{said} in {shown}");
    }

    // Described otherwise, the same call runs without asking, and again.
    for description in ["Publish the package", "Publish again"] {
        let allowed = check(description);
        assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
    }
    let listed = toolgate(&["--config", config, "gates", "always"], None, dir.path());
    let rules: Vec<Value> = decisions(&listed);
    assert_eq!(rules.len(), 1, "{listed:?}");
    assert_eq!(rules[0]["policy"], "safeguards");
    assert_eq!(rules[0]["project"], "/home/alice/app");
}

#[test]
fn hook_install_refuses_a_store_url_holding_a_password() {
    // The installed line goes into the agent's own settings file (which it
    // can read) and onto every hook's command line (which `ps` shows): a
    // database password there hands the agent the store itself.
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "postgres://toolgate:s3cret@127.0.0.1:1/toolgate",
        "postgresql://127.0.0.1:1/toolgate?user=toolgate&password=s3cret",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["--store", url, "hook", "install", "--for", "claude-code"])
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{url}: installed\n{stdout}");
        assert!(!stdout.contains("s3cret"), "{url}: {stdout}");
        assert!(!stderr.contains("s3cret"), "{url}: {stderr}");
        assert!(stderr.contains("PGPASSWORD"), "{url}: {stderr}");
    }
    // Without a password, the URL is installed as it is.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["--store", "postgres://toolgate@127.0.0.1:1/toolgate"])
        .args(["hook", "install", "--for", "claude-code"])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let settings = String::from_utf8_lossy(&out.stdout);
    assert!(
        settings.contains("--store postgres://toolgate@127.0.0.1:1/toolgate"),
        "{settings}"
    );
}

/// `toolgate check … | head -1`: a reader that stops early ends toolgate
/// quietly, as it ends `grep` or `ls`, never with a panic.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let samples: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/requests"))
            .unwrap()
            .map(|e| e.unwrap().path().display().to_string())
            .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("check")
        .args(&samples)
        .arg("--store")
        .arg(dir.path().join("cli.redb"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before toolgate prints anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && out.status.code() != Some(101),
        "{:?}: {stderr}",
        out.status
    );
}
