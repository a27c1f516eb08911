//! A real OpenAI-compatible chat-completions server on loopback, for testing
//! the probe over HTTP: it records every request body and answers as told.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this text as the assistant message.
    Content(String),
    /// The same, after waiting.
    Delayed(Duration, String),
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<serde_json::Value>>,
    reply: Mutex<Option<Reply>>,
    stop: AtomicBool,
}

/// The server; stops when dropped.
pub struct ModelServer {
    pub url: String,
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
}

impl ModelServer {
    pub fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.reply.lock().unwrap() = Some(reply);
        let accept = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let shared = accept.clone();
                    std::thread::spawn(move || handle(stream, &shared));
                }
            }
        });
        Self {
            url: format!("http://{addr}/v1/chat/completions"),
            addr,
            shared,
        }
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The user message of every request so far.
    pub fn user_prompts(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| {
                r["messages"][1]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    pub fn set_reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = Some(reply);
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop
    }
}

/// A loopback URL on which nothing listens.
pub fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1/chat/completions")
}

fn handle(stream: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if let Ok(json) = serde_json::from_slice(&body) {
        shared.requests.lock().unwrap().push(json);
    }
    let reply = shared.reply.lock().unwrap().clone();
    let content = match reply {
        Some(Reply::Content(text)) => text,
        Some(Reply::Delayed(wait, text)) => {
            std::thread::sleep(wait);
            text
        }
        None => String::new(),
    };
    let answer = serde_json::json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]
    })
    .to_string();
    let mut stream = reader.into_inner();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
}
