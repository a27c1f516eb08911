//! The approvals inbox in a real browser: Debian's headless Chromium,
//! driven over WebDriver, against a daemon serving `/approvals` on
//! loopback, with pauses made by Claude Code hook events.

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;

use common::hooks::{Setup, event, permission};
use common::webdriver::{Browser, Driver, free_port};
use serde_json::{Value, json};

/// A store whose daemon serves the inbox; the daemon stops with the setup.
struct Inbox {
    setup: Setup,
    base: String,
    _daemon: Child,
}

fn inbox(gate_ttl_secs: u64) -> Inbox {
    let port = free_port();
    // Every shell command pauses, so any command can stand for a pause.
    let setup = Setup::new(&format!(
        "{}[daemon]\nhttp = \"127.0.0.1:{port}\"\n",
        common::agents::BASH_ALWAYS
    ));
    // The bundled config sets the TTL; shorten it where a test needs to.
    let config = setup.dir.path().join("toolgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "gate_ttl_secs = 1800",
        &format!("gate_ttl_secs = {gate_ttl_secs}"),
    );
    std::fs::write(&config, text).unwrap();
    let daemon = setup.serve(&[]);
    Inbox {
        setup,
        base: format!("http://127.0.0.1:{port}"),
        _daemon: daemon,
    }
}

impl Inbox {
    /// `toolgate approvals open` as a person at a terminal: the sign-in
    /// link it prints.
    fn sign_in_link(&self) -> String {
        let out = self
            .setup
            .at_a_terminal(&self.setup.command_line(&["approvals", "open"]), "");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shown}");
        shown
            .split_whitespace()
            .find(|word| word.contains("/approvals/login?code="))
            .unwrap_or_else(|| panic!("no link in: {shown}"))
            .to_string()
    }

    fn pause(&self, session: &str, command: &str, id: &str) -> String {
        let call = event(
            "PreToolUse",
            session,
            "Bash",
            json!({"command": command}),
            id,
        );
        assert_eq!(permission(&self.setup.hook(&call)), "ask");
        self.pending()
            .into_iter()
            .find(|g| g["arguments"].as_str().unwrap().contains(command))
            .map(|g| g["request_id"].as_str().unwrap().to_string())
            .unwrap()
    }

    fn pending(&self) -> Vec<Value> {
        self.setup.pending_gates()
    }
}

fn profile(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

fn wait_for_text(browser: &Browser, what: &str) {
    common::eventually_showing(&format!("the page to show {what:?}"), || {
        let text = browser.text();
        (text.contains(what), text)
    });
}

fn screenshots() -> PathBuf {
    Path::new(env!("TOOLGATE_GUEST_DIR"))
        .ancestors()
        .nth(3)
        .unwrap()
        .join("screenshots")
}

/// Requests a site on this host was sent: each one's path and `Cookie`
/// header line.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A site of its own on this host (another origin than the inbox's) that
/// answers every request with `page`: its URL, and what it was sent.
fn site(page: String) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Seen::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buffer = [0u8; 8192];
            let n = stream.read(&mut buffer).unwrap_or(0);
            let head = String::from_utf8_lossy(&buffer[..n]).into_owned();
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let cookie = head
                .lines()
                .find(|line| line.to_ascii_lowercase().starts_with("cookie:"))
                .unwrap_or("")
                .to_string();
            record.lock().unwrap().push(format!("{path} {cookie}"));
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    (url, seen)
}

/// A page on another origin that posts a forged approval to the inbox
/// session at `home` (as if it knew the session's secret path) as soon as
/// it loads.
fn forging_site(home: &str, request_id: &str) -> String {
    let page = format!(
        r#"<!doctype html><html><body onload="document.forms[0].submit()">
<form method="post" action="{home}resolve">
<input name="csrf" value="guessed"><input name="request_id" value="{request_id}">
<input name="decision" value="approve"></form></body></html>"#
    );
    format!("{}/", site(page).0)
}

/// Cookies are the host's, whatever the port: a browser signed in to the
/// inbox sends its cookies to any other server on `127.0.0.1` whose paths
/// match theirs. The session cookie's path is a secret of the session, so
/// another server (the agent's own, which could then answer its own pauses
/// with the person's session) never gets it.
#[test]
fn another_server_on_this_host_never_gets_the_session_cookie() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let inbox = inbox(1800);
    let (_keep, dir) = profile("cookie");
    let browser = driver.browser(&dir);
    browser.open(&inbox.sign_in_link());
    wait_for_text(&browser, "Nothing is waiting for you.");
    let signed_in = browser.url();

    let (site, seen) = site("<!doctype html><p>another site</p>".into());
    for path in [
        "/approvals",
        "/approvals/",
        "/approvals/resolve",
        "/approvals/events",
    ] {
        browser.open(&format!("{site}{path}"));
        wait_for_text(&browser, "another site");
    }
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(
        seen.iter()
            .all(|request| !request.contains("toolgate_session")),
        "another server got the session cookie: {seen:?}"
    );
    // The session still works where it belongs.
    browser.open(&signed_in);
    wait_for_text(&browser, "Nothing is waiting for you.");
}

#[test]
fn a_person_signs_in_sees_pauses_live_and_answers_them() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let inbox = inbox(1800);
    let (_keep, dir) = profile("person");
    let browser = driver.browser(&dir);

    // Signed out: the sign-in form, nothing else.
    browser.open(&format!("{}/approvals", inbox.base));
    wait_for_text(&browser, "Sign in with the one-time code");

    // Sign in with the code from the terminal.
    browser.open(&inbox.sign_in_link());
    let home = browser.url();
    assert!(
        home.starts_with(&format!("{}/approvals/s/", inbox.base)) && home.ends_with('/'),
        "the session's own pages: {home}"
    );
    wait_for_text(&browser, "Nothing is waiting for you.");

    // Pauses appear without a reload.
    let first = inbox.pause("s1", "rm -rf build", "t1");
    wait_for_text(&browser, "rm -rf build");
    wait_for_text(&browser, "shell");
    let second = inbox.pause("s2", "git push origin main", "t2");
    wait_for_text(&browser, "git push origin main");
    let shot = browser.screenshot(&screenshots().join("inbox-two-pending.png"));
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000);

    // A forged cross-site POST (same browser, cookie and all) is refused.
    browser.open(&forging_site(&home, &first));
    common::eventually("the forged post to be refused", || {
        let page = browser.text();
        browser.url().ends_with("/resolve")
            && (page.contains("cross-site requests are refused")
                || page.contains("stale or forged"))
    });
    assert_eq!(inbox.pending().len(), 2, "nothing was resolved");

    // Approve the first: the resubmitted call runs.
    browser.open(&home);
    browser.click(&format!("#gate-{first} button[value=approve]"));
    wait_for_text(&browser, "Done — approve: Bash");
    wait_for_text(&browser, "web (uid");
    let retry = event(
        "PreToolUse",
        "s1",
        "Bash",
        json!({"command": "rm -rf build"}),
        "t3",
    );
    assert_eq!(
        permission(&inbox.setup.hook(&retry)),
        "allow",
        "approved: it runs, and Claude Code does not ask the person again"
    );

    // Deny the second: a person's "no" is an answer, so the resubmitted
    // call is refused with it, and no new pause is raised.
    browser.click(&format!("#gate-{second} button[value=deny]"));
    wait_for_text(&browser, "Done — deny: Bash");
    let retry = event(
        "PreToolUse",
        "s2",
        "Bash",
        json!({"command": "git push origin main"}),
        "t4",
    );
    let refused = inbox.setup.hook(&retry);
    assert_eq!(permission(&refused), "deny");
    let reason = refused.unwrap()["hookSpecificOutput"]["permissionDecisionReason"].to_string();
    assert!(
        reason.contains("A person refused this call") && reason.contains("over `web`"),
        "{reason}"
    );
    assert!(inbox.pending().is_empty(), "no new pause");

    // A second browser without the cookie sees nothing and resolves nothing.
    let third = inbox.pause("s3", "curl -X POST https://example.com", "t5");
    let (_keep2, dir2) = profile("stranger");
    let stranger = driver.browser(&dir2);
    stranger.open(&home);
    wait_for_text(&stranger, "Sign in");
    let seen = stranger.text();
    assert!(!seen.contains("curl"), "{seen}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let posted = agent
        .post(&format!("{home}resolve"))
        .content_type("application/x-www-form-urlencoded")
        .send(format!("csrf=x&request_id={third}&decision=approve"))
        .unwrap();
    assert_eq!(posted.status(), 403);
    assert!(
        inbox
            .pending()
            .iter()
            .any(|g| g["request_id"] == third.as_str()),
        "still waiting"
    );
}

#[test]
fn expired_pauses_leave_the_page_and_the_agent_gets_no_code() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let inbox = inbox(3);
    // The agent's shell: no terminal, so no sign-in code.
    let refused = inbox.setup.without_a_terminal(&["approvals", "open"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("terminal"), "{said}");

    let (_keep, dir) = profile("person");
    let browser = driver.browser(&dir);
    browser.open(&inbox.sign_in_link());
    inbox.pause("s1", "rm -rf build", "t1");
    wait_for_text(&browser, "rm -rf build");
    // Past its TTL the gate is gone from the page, without a reload.
    wait_for_text(&browser, "Nothing is waiting for you.");
    // A used code does not sign in again.
    let link = inbox.sign_in_link();
    browser.open(&link);
    let (_keep2, dir2) = profile("replay");
    let replay = driver.browser(&dir2);
    replay.open(&link);
    wait_for_text(&replay, "wrong, used or expired");
}
