//! Notifications of new pauses: signed webhooks to a loopback receiver,
//! retried, never delaying a decision; and `toolgate approvals watch`.

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use common::hooks::{Setup, event, permission};
use serde_json::{Value, json};
use toolgate::daemon::Client;

const KEY_ENV: &str = "TOOLGATE_TEST_WEBHOOK_KEY";
const KEY: &str = "webhook-signing-key";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    signature: String,
    body: String,
}

/// A loopback webhook receiver: answers each request with the next status
/// of its script (then 200), holding the first answer until released if
/// asked to.
struct WebhookReceiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
    arrivals: Receiver<()>,
}

fn receiver(statuses: Vec<u16>, hold_first: Option<Receiver<()>>) -> WebhookReceiver {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let (arrived, arrivals): (Sender<()>, _) = channel();
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        let mut hold = hold_first;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Some(request) = read_request(&stream) else {
                continue;
            };
            log.lock().unwrap().push(request);
            let _ = arrived.send(());
            if let Some(release) = hold.take() {
                let _ = release.recv();
            }
            let status = statuses.next().unwrap_or(200);
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    WebhookReceiver {
        url,
        received,
        arrivals,
    }
}

fn read_request(stream: &TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    let mut signature = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().ok()?,
                "x-toolgate-signature" => signature = value.trim().to_string(),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        signature,
        body: String::from_utf8(body).ok()?,
    })
}

/// A store whose daemon notifies `url`, started with the signing key.
fn notifying_daemon(url: &str) -> (Setup, Child) {
    let setup = Setup::new(&format!(
        "[notify]\nwebhooks = [{url:?}]\nsecret_env = \"{KEY_ENV}\"\nattempts = 3\n"
    ));
    let daemon = setup.serve(&[(KEY_ENV, KEY)]);
    (setup, daemon)
}

/// A call the bundled config pauses for a person (publishing).
fn publish(id: &str) -> Value {
    event(
        "PreToolUse",
        "s1",
        "Bash",
        json!({"command": "npm publish"}),
        id,
    )
}

#[test]
fn each_pause_is_announced_signed() {
    let receiver = receiver(vec![], None);
    let (setup, _daemon) = notifying_daemon(&receiver.url);
    assert_eq!(permission(&setup.hook(&publish("t1"))), "ask");
    receiver.arrivals.recv().unwrap();
    let gates = setup.pending_gates();
    assert_eq!(gates.len(), 1);
    // Another call in another session pauses anew and is announced too.
    let other = event(
        "PreToolUse",
        "s2",
        "Bash",
        json!({"command": "cargo publish"}),
        "t2",
    );
    assert_eq!(permission(&setup.hook(&other)), "ask");
    receiver.arrivals.recv().unwrap();
    let received = receiver.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2, "{received:?}");

    let first: Value = serde_json::from_str(&received[0].body).unwrap();
    assert_eq!(first["event"], "pause");
    assert_eq!(first["tool"], "Bash");
    assert_eq!(first["request_id"], gates[0]["request_id"]);
    assert!(
        first["approve_with"]
            .as_str()
            .unwrap()
            .contains("--request-id")
    );
    // The signature: t=SECONDS,v1=HMAC-SHA256(key, "SECONDS.BODY").
    let (t, mac) = received[0].signature.split_once(",v1=").unwrap();
    let seconds: u64 = t.strip_prefix("t=").unwrap().parse().unwrap();
    assert_eq!(
        received[0].signature,
        toolgate::notify::signature(KEY.as_bytes(), seconds, &received[0].body)
    );
    assert_ne!(
        mac,
        toolgate::notify::signature(b"another key", seconds, &received[0].body)
            .split_once(",v1=")
            .unwrap()
            .1
    );
}

#[test]
fn a_failing_receiver_is_retried_and_never_delays_a_decision() {
    let (release, held) = channel();
    // Held on the first attempt, then 500, then 200.
    let receiver = receiver(vec![500, 500], Some(held));
    let (setup, _daemon) = notifying_daemon(&receiver.url);
    assert_eq!(permission(&setup.hook(&publish("t1"))), "ask");
    receiver.arrivals.recv().unwrap();
    // The receiver holds its answer; decisions go on meanwhile.
    let read = event(
        "PreToolUse",
        "s1",
        "Read",
        json!({"file_path": "/home/dev/project/a.rs"}),
        "t2",
    );
    // Bounded (not timed): a decision that waited for the held webhook
    // would never come.
    let (answered, answer) = channel();
    let hook = setup.command_line(&["hook", "claude-code"]);
    std::thread::spawn(move || {
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &hook])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(read.to_string().as_bytes())?;
                child.wait_with_output()
            });
        let _ = answered.send(out);
    });
    let out = answer
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the decision did not wait for the webhook")
        .unwrap();
    assert!(
        out.status.success() && out.stdout == b"{}\n",
        "allowed: {out:?}"
    );
    release.send(()).unwrap();
    // Three attempts in all (500, 500, 200), all of the same notification.
    receiver.arrivals.recv().unwrap();
    receiver.arrivals.recv().unwrap();
    let received = receiver.received.lock().unwrap().clone();
    assert_eq!(received.len(), 3, "{received:?}");
    assert!(received.iter().all(|r| r.body == received[0].body));
}

#[test]
fn without_its_signing_key_the_daemon_refuses_to_start() {
    let setup = Setup::new(&format!(
        "[notify]\nwebhooks = [\"http://127.0.0.1:9/hook\"]\nsecret_env = \"{KEY_ENV}\"\n"
    ));
    let out = setup
        .command()
        .arg("serve")
        .env_remove(KEY_ENV)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(KEY_ENV), "{stderr}");
    // And a webhook without a key is a config error.
    let setup = Setup::new("[notify]\nwebhooks = [\"http://127.0.0.1:9/hook\"]\n");
    let out = setup.run(&["gates", "list"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("notify.secret_env"), "{stderr}");
}

#[test]
fn approvals_watch_prints_a_line_per_pause() {
    let setup = Setup::new("");
    // Killed when the test ends, pass or fail (it would poll forever).
    let mut watch = common::hooks::KillOnDrop(
        setup
            .command()
            .args(["approvals", "watch", "--interval", "50ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(watch.0.stdout.take().unwrap()).lines();
    common::eventually("the daemon to answer", || {
        Client::new(setup.socket()).is_up()
    });
    assert_eq!(permission(&setup.hook(&publish("t1"))), "ask");
    let line = lines.next().unwrap().unwrap();
    let id = setup.pending_gates()[0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(line.contains("PAUSED Bash"), "{line}");
    assert!(line.contains(&format!("--request-id {id}")), "{line}");
}
