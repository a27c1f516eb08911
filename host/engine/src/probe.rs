//! The model client that asks policies' `ask-model` questions: an OpenAI-compatible
//! chat-completions endpoint (llama.cpp server, vLLM, Ollama, hosted APIs).
//!
//! The host owns the endpoint, the model and the key; a policy supplies only
//! the text. Every request has a timeout, capped by the config.

use std::time::Duration;

use serde_json::json;

use crate::config::ProbeConfig;

/// Why a probe produced no reply.
#[derive(Debug, thiserror::Error)]
pub enum ProbeFailure {
    /// No endpoint is configured.
    #[error("no model endpoint is configured ([probe] endpoint)")]
    NotConfigured,
    /// No answer within the timeout.
    #[error("the model did not answer in time")]
    Timeout,
    /// The request could not be sent or answered.
    #[error("request failed: {0}")]
    Transport(String),
    /// The answer was not a chat completion.
    #[error("unexpected response: {0}")]
    BadResponse(String),
}

/// A chat-completions client. One connection pool for every probe.
#[derive(Debug)]
pub struct ProbeClient {
    endpoint: Option<String>,
    model: String,
    api_key: Option<String>,
    max_timeout_ms: u32,
    agent: ureq::Agent,
}

impl ProbeClient {
    /// Build the client from config; reads the API key from the named
    /// environment variable once, here.
    pub fn new(config: &ProbeConfig) -> Self {
        let api_key = config
            .api_key_env
            .as_ref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|key| !key.is_empty());
        Self {
            endpoint: config.endpoint.clone(),
            model: config.model.clone(),
            api_key,
            max_timeout_ms: config.max_timeout_ms,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into(),
        }
    }

    /// A client with no endpoint: every probe answers `NotConfigured`.
    pub fn disabled() -> Self {
        Self::new(&ProbeConfig::default())
    }

    /// Send a system and a user message; return the reply's text.
    pub fn ask(&self, system: &str, user: &str, timeout_ms: u32) -> Result<String, ProbeFailure> {
        let endpoint = self.endpoint.as_ref().ok_or(ProbeFailure::NotConfigured)?;
        let timeout = Duration::from_millis(u64::from(timeout_ms.min(self.max_timeout_ms).max(1)));
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        let mut request = self
            .agent
            .post(endpoint)
            .config()
            .timeout_global(Some(timeout))
            .build();
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", &format!("Bearer {key}"));
        }
        let mut response = request.send_json(&body).map_err(classify)?;
        let status = response.status();
        let reply: serde_json::Value = response.body_mut().read_json().map_err(classify)?;
        if !status.is_success() {
            return Err(ProbeFailure::Transport(format!("HTTP {status}: {reply}")));
        }
        reply
            .pointer("/choices/0/message/content")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ProbeFailure::BadResponse("no choices[0].message.content".into()))
    }
}

fn classify(err: ureq::Error) -> ProbeFailure {
    match err {
        ureq::Error::Timeout(_) => ProbeFailure::Timeout,
        ureq::Error::Json(err) => ProbeFailure::BadResponse(err.to_string()),
        other => ProbeFailure::Transport(other.to_string()),
    }
}
