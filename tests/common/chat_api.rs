//! A scripted OpenAI-compatible chat-completions API on loopback, for
//! driving real agent CLIs offline through their "OpenAI-compatible"
//! provider (OpenCode): each `POST /v1/chat/completions` that offers tools
//! gets the next scripted list of items, streamed as chat-completion chunks.
//! A request that offers no tools (a session title, a summary) is answered
//! with a short text and does not move the script. Every request is kept.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::responses_api::Item;
use super::scripted_http::{Server, response};

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Value>>,
    script: Mutex<Vec<Vec<Item>>>,
    turns: Mutex<usize>,
}

/// The server; stops accepting when dropped.
pub struct ChatApi {
    pub base_url: String,
    shared: Arc<Shared>,
    _server: Server,
}

impl ChatApi {
    /// Serve `script`: the n-th request with tools gets the n-th list
    /// (past the end: a short closing text).
    pub fn start(script: Vec<Vec<Item>>) -> Self {
        let shared = Arc::new(Shared::default());
        *shared.script.lock().unwrap() = script;
        let serving = shared.clone();
        let server = Server::start(Arc::new(move |method: &str, path: &str, body: &[u8]| {
            answer(method, path, body, &serving)
        }));
        Self {
            base_url: format!("{}/v1", server.base_url),
            shared,
            _server: server,
        }
    }

    /// Serve `script` from its start again, forgetting the requests so far
    /// (one server for several runs).
    pub fn reset(&self, script: Vec<Vec<Item>>) {
        self.shared.requests.lock().unwrap().clear();
        *self.shared.turns.lock().unwrap() = 0;
        *self.shared.script.lock().unwrap() = script;
    }

    /// The request bodies so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Every tool result the model was sent: (call id, content).
    pub fn tool_outputs(&self) -> Vec<(String, String)> {
        let mut outputs: Vec<(String, String)> = Vec::new();
        for request in self.requests() {
            for message in request["messages"].as_array().into_iter().flatten() {
                if message["role"] != "tool" {
                    continue;
                }
                let content = match &message["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                if !outputs.iter().any(|(seen, _)| seen == id) {
                    outputs.push((id.to_string(), content));
                }
            }
        }
        outputs
    }
}

fn answer(method: &str, path: &str, body: &[u8], shared: &Shared) -> String {
    if (method, path.split('?').next().unwrap_or("")) != ("POST", "/v1/chat/completions") {
        return response(
            "404 Not Found",
            "application/json",
            &json!({"error": {"message": "not scripted"}}).to_string(),
        );
    }
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let offers_tools = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    shared.requests.lock().unwrap().push(request);
    let items = if offers_tools {
        let mut turns = shared.turns.lock().unwrap();
        let items = shared.script.lock().unwrap().get(*turns).cloned();
        *turns += 1;
        items.unwrap_or_else(|| vec![Item::Text("All done.".into())])
    } else {
        vec![Item::Text("Scripted session".into())]
    };
    response("200 OK", "text/event-stream", &stream(&items))
}

/// The chunks of one streamed completion.
fn stream(items: &[Item]) -> String {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let calls: Vec<Value> = items
        .iter()
        .filter_map(|item| match item {
            Item::Call(id, name, arguments) => Some((id, name.as_str(), arguments.to_string())),
            Item::Shell(id, command) => Some((id, "bash", json!({"command": command}).to_string())),
            Item::Text(_) => None,
        })
        .enumerate()
        .map(|(index, (id, name, arguments))| {
            json!({"index": index, "id": id, "type": "function",
                   "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    for item in items {
        if let Item::Text(text) = item {
            chunks.push(chunk(json!({"content": text}), None));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        chunks.push(chunk(json!({"tool_calls": calls}), None));
        "tool_calls"
    };
    chunks.push(chunk(json!({}), Some(finish)));
    let mut usage = chunk(json!({}), None);
    usage["choices"] = json!([]);
    usage["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20});
    chunks.push(usage);
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}
