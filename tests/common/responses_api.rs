//! A scripted OpenAI Responses API on loopback, for driving the real Codex
//! CLI offline: each `POST /v1/responses` gets the next scripted list of
//! output items, streamed as server-sent events (`response.output_item.done`
//! per item, then `response.completed`). Every request body is recorded.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::scripted_http::{Server, response};

/// One output item of a scripted response.
#[derive(Clone, Debug)]
pub enum Item {
    /// An assistant message.
    Text(String),
    /// A shell command through Codex's `exec_command`: call id, command.
    Shell(String, String),
    /// A call of any tool: call id, tool name, arguments.
    Call(String, String, Value),
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Value>>,
    script: Mutex<Vec<Vec<Item>>>,
}

/// The server; stops accepting when dropped.
pub struct ResponsesApi {
    pub base_url: String,
    shared: Arc<Shared>,
    _server: Server,
}

impl ResponsesApi {
    /// Serve `script`: the n-th request gets the n-th response (past the
    /// end: a short closing text).
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
        *self.shared.script.lock().unwrap() = script;
    }

    /// The request bodies so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Every `function_call_output` the model was sent: (call id, output).
    pub fn tool_outputs(&self) -> Vec<(String, String)> {
        let mut outputs = Vec::new();
        for request in self.requests() {
            for item in request["input"].as_array().into_iter().flatten() {
                if item["type"] == "function_call_output" {
                    let output = match &item["output"] {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    let id = item["call_id"].as_str().unwrap_or_default().to_string();
                    if !outputs.iter().any(|(seen, _)| *seen == id) {
                        outputs.push((id, output));
                    }
                }
            }
        }
        outputs
    }
}

fn answer(method: &str, path: &str, body: &[u8], shared: &Shared) -> String {
    match (method, path.split('?').next().unwrap_or("")) {
        ("POST", "/v1/responses") => {
            let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let n = {
                let mut requests = shared.requests.lock().unwrap();
                requests.push(request);
                requests.len() - 1
            };
            let items = shared.script.lock().unwrap().get(n).cloned();
            let items = items.unwrap_or_else(|| vec![Item::Text("All done.".into())]);
            response("200 OK", "text/event-stream", &stream(n, &items))
        }
        _ => response(
            "404 Not Found",
            "application/json",
            &json!({"error": {"message": "not scripted"}}).to_string(),
        ),
    }
}

/// The response as the API streams it: `response.created`, each item
/// added and done (Codex reads the done items; Copilot CLI the added ones
/// and the completed response's `output`), then `response.completed`.
fn stream(n: usize, items: &[Item]) -> String {
    let id = format!("resp_{n}");
    let items: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Item::Text(text) => json!({
                "type": "message", "role": "assistant", "id": format!("msg_{n}_{i}"),
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }),
            Item::Shell(call_id, command) => json!({
                "type": "function_call", "id": format!("fc_{n}_{i}"), "call_id": call_id,
                "status": "completed",
                "name": "exec_command", "arguments": json!({"cmd": command}).to_string(),
            }),
            Item::Call(call_id, name, arguments) => json!({
                "type": "function_call", "id": format!("fc_{n}_{i}"), "call_id": call_id,
                "status": "completed", "name": name, "arguments": arguments.to_string(),
            }),
        })
        .collect();
    let mut events = vec![json!({
        "type": "response.created",
        "response": {"id": id, "object": "response", "status": "in_progress", "output": []},
    })];
    for (i, item) in items.iter().enumerate() {
        events.push(json!({"type": "response.output_item.added", "output_index": i, "item": item}));
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": {
        "id": id, "object": "response", "status": "completed", "output": items,
        "usage": {"input_tokens": 10, "output_tokens": 10, "total_tokens": 20},
    }}));
    events
        .iter()
        .enumerate()
        .map(|(seq, event)| {
            let mut event = event.clone();
            event["sequence_number"] = json!(seq);
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or_default()
            )
        })
        .collect()
}
