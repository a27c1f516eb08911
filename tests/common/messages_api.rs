//! A scripted Anthropic Messages API on loopback, for driving the real Claude
//! Code CLI offline: each turn of the conversation gets the next scripted
//! assistant message, streamed as server-sent events the way the API streams
//! them. Every request is recorded for the test to read.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::scripted_http::{Server, response};

/// One content block of a scripted assistant message.
#[derive(Clone, Debug)]
pub enum Block {
    /// Plain text.
    Text(String),
    /// A tool call: id, tool name, input.
    ToolUse(String, String, Value),
}

#[derive(Default)]
struct Shared {
    /// Bodies of the conversation's requests (those offering tools).
    turns: Mutex<Vec<Value>>,
    /// Every request line seen, for diagnosis.
    seen: Mutex<Vec<String>>,
    script: Mutex<Vec<Vec<Block>>>,
}

/// The server; stops accepting when dropped.
pub struct MessagesApi {
    pub base_url: String,
    shared: Arc<Shared>,
    _server: Server,
}

impl MessagesApi {
    /// Serve `script`: the n-th request that offers tools gets the n-th
    /// message (past the end: a short closing text).
    pub fn start(script: Vec<Vec<Block>>) -> Self {
        let shared = Arc::new(Shared::default());
        *shared.script.lock().unwrap() = script;
        let serving = shared.clone();
        let server = Server::start(Arc::new(move |method: &str, path: &str, body: &[u8]| {
            answer(method, path, body, &serving)
        }));
        Self {
            base_url: server.base_url.clone(),
            shared,
            _server: server,
        }
    }

    /// Serve `script` from its start again, forgetting the turns so far
    /// (one server for several runs).
    pub fn reset(&self, script: Vec<Vec<Block>>) {
        self.shared.turns.lock().unwrap().clear();
        *self.shared.script.lock().unwrap() = script;
    }

    /// The conversation's request bodies so far, in order.
    pub fn turns(&self) -> Vec<Value> {
        self.shared.turns.lock().unwrap().clone()
    }

    /// Every request line seen (method and path).
    pub fn seen(&self) -> Vec<String> {
        self.shared.seen.lock().unwrap().clone()
    }
}

fn answer(method: &str, path: &str, body: &[u8], shared: &Shared) -> String {
    shared.seen.lock().unwrap().push(format!("{method} {path}"));
    match (method, path.split('?').next().unwrap_or("")) {
        ("POST", "/v1/messages") => {
            let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            messages(&request, shared)
        }
        ("POST", "/v1/messages/count_tokens") => {
            response("200 OK", "application/json", &json!({"input_tokens": 100}).to_string())
        }
        ("HEAD", _) | ("GET", "/") => response("200 OK", "text/plain", ""),
        _ => response(
            "404 Not Found",
            "application/json",
            &json!({"type": "error", "error": {"type": "not_found_error", "message": "not scripted"}}).to_string(),
        ),
    }
}

/// Answer one `POST /v1/messages`.
fn messages(request: &Value, shared: &Shared) -> String {
    let blocks = if request
        .get("tools")
        .is_some_and(|t| !t.as_array().is_some_and(|a| a.is_empty()))
    {
        let mut turns = shared.turns.lock().unwrap();
        turns.push(request.clone());
        let n = turns.len() - 1;
        let script = shared.script.lock().unwrap();
        script
            .get(n)
            .cloned()
            .unwrap_or_else(|| vec![Block::Text("All done.".into())])
    } else {
        // A side request (a session title, a summary): short text.
        vec![Block::Text("Scripted session".into())]
    };
    if request["stream"] == json!(true) {
        response("200 OK", "text/event-stream", &stream(&blocks))
    } else {
        response("200 OK", "application/json", &whole(&blocks).to_string())
    }
}

fn stop_reason(blocks: &[Block]) -> &'static str {
    if blocks.iter().any(|b| matches!(b, Block::ToolUse(..))) {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn message_head() -> Value {
    json!({
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 1}
    })
}

/// The whole message, for a request without `stream`.
fn whole(blocks: &[Block]) -> Value {
    let mut message = message_head();
    message["content"] = blocks
        .iter()
        .map(|block| match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::ToolUse(id, name, input) => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        })
        .collect();
    message["stop_reason"] = json!(stop_reason(blocks));
    message
}

/// The message as the API streams it.
fn stream(blocks: &[Block]) -> String {
    let mut out = String::new();
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": message_head()}),
    );
    for (index, block) in blocks.iter().enumerate() {
        let (start, delta) = match block {
            Block::Text(text) => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            ),
            Block::ToolUse(id, name, input) => (
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            ),
        };
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(blocks), "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out
}
