//! A real OpenAI-compatible chat-completions server on loopback, for testing
//! the probe over HTTP: it records every request body and answers as told.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::scripted_http::{Server, response};

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
}

/// The server; stops when dropped.
pub struct ModelServer {
    pub url: String,
    shared: Arc<Shared>,
    _server: Server,
}

impl ModelServer {
    pub fn start(reply: Reply) -> Self {
        let shared = Arc::new(Shared::default());
        *shared.reply.lock().unwrap() = Some(reply);
        let serving = shared.clone();
        let server = Server::start(Arc::new(move |_: &str, _: &str, body: &[u8]| {
            answer(body, &serving)
        }));
        Self {
            url: format!("{}/v1/chat/completions", server.base_url),
            shared,
            _server: server,
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

/// A loopback URL on which nothing listens.
pub fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1/chat/completions")
}

fn answer(body: &[u8], shared: &Shared) -> String {
    if let Ok(json) = serde_json::from_slice(body) {
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
    });
    response("200 OK", "application/json", &answer.to_string())
}
