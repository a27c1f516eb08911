//! A scripted Gemini API (`v1beta` generateContent) on loopback, for
//! driving the real Gemini CLI offline (`GOOGLE_GEMINI_BASE_URL`): each
//! streamed turn of the conversation gets the next scripted answer; side
//! requests (the model router's classifier and the like) get an answer that
//! fits the JSON schema they ask for. Every conversation request is kept.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::scripted_http::{Server, response};

/// One part of a scripted model answer.
#[derive(Clone, Debug)]
pub enum Part {
    /// Plain text.
    Text(String),
    /// A function call: name, arguments.
    Call(String, Value),
}

#[derive(Default)]
struct Shared {
    turns: Mutex<Vec<Value>>,
    seen: Mutex<Vec<String>>,
    script: Vec<Vec<Part>>,
}

/// The server; stops accepting when dropped.
pub struct GeminiApi {
    pub base_url: String,
    shared: Arc<Shared>,
    _server: Server,
}

impl GeminiApi {
    /// Serve `script`: the n-th streamed request gets the n-th answer (past
    /// the end: a short closing text).
    pub fn start(script: Vec<Vec<Part>>) -> Self {
        let shared = Arc::new(Shared {
            script,
            ..Shared::default()
        });
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

    /// The conversation's request bodies so far, in order.
    pub fn turns(&self) -> Vec<Value> {
        self.shared.turns.lock().unwrap().clone()
    }

    /// Every request line seen.
    pub fn seen(&self) -> Vec<String> {
        self.shared.seen.lock().unwrap().clone()
    }
}

fn answer(method: &str, path: &str, body: &[u8], shared: &Shared) -> String {
    shared.seen.lock().unwrap().push(format!("{method} {path}"));
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if path.contains(":streamGenerateContent") {
        let parts = {
            let mut turns = shared.turns.lock().unwrap();
            turns.push(request);
            shared
                .script
                .get(turns.len() - 1)
                .cloned()
                .unwrap_or_else(|| vec![Part::Text("All done.".into())])
        };
        let chunk = candidate(&parts);
        return response(
            "200 OK",
            "text/event-stream",
            &format!("data: {chunk}\r\n\r\n"),
        );
    }
    if path.contains(":countTokens") {
        return response(
            "200 OK",
            "application/json",
            &json!({"totalTokens": 10}).to_string(),
        );
    }
    if path.contains(":generateContent") {
        let schema = &request["generationConfig"]["responseJsonSchema"];
        let text = fitting(schema).to_string();
        return response(
            "200 OK",
            "application/json",
            &candidate(&[Part::Text(text)]).to_string(),
        );
    }
    response(
        "404 Not Found",
        "application/json",
        &json!({"error": {"code": 404, "message": "not scripted"}}).to_string(),
    )
}

fn candidate(parts: &[Part]) -> Value {
    let parts: Vec<Value> = parts
        .iter()
        .map(|part| match part {
            Part::Text(text) => json!({"text": text}),
            Part::Call(name, args) => json!({"functionCall": {"name": name, "args": args}}),
        })
        .collect();
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
    })
}

/// A value that fits a (Gemini-style) JSON schema.
fn fitting(schema: &Value) -> Value {
    let kind = schema["type"].as_str().unwrap_or("").to_ascii_lowercase();
    match kind.as_str() {
        "object" => {
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            properties
                .iter()
                .map(|(name, property)| (name.clone(), fitting(property)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        }
        "array" => json!([]),
        "integer" | "number" => json!(1),
        "boolean" => json!(false),
        "string" => json!("scripted"),
        _ => json!({}),
    }
}
