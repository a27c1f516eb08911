//! The loopback HTTP server, on hyper: `GET /health`, `GET /metrics`
//! (Prometheus text), `POST /v1/rpc` (a [`DaemonRequest`] body, its
//! answer as the response body), `POST /v1/hooks/RUNTIME` (an agent
//! runtime's HTTP hook: the event as the body, the hook's answer as the
//! response) and the approvals inbox under `/approvals` (see
//! [`super::inbox`]).
//!
//! hyper parses the protocol (chunked bodies included); we bound what it
//! reads: headers within [`HEADER_TIMEOUT`] and [`MAX_HEADER_BYTES`], a body
//! within [`BODY_TIMEOUT`] and [`MAX_REQUEST_BYTES`].
//!
//! [`DaemonRequest`]: super::DaemonRequest

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::Daemon;
use super::inbox::{Body, form_value};
use super::protocol::{ConfigIdentity, DaemonRequest, HookRuntime, MAX_REQUEST_BYTES, OnError};
use crate::ErrorKind;

/// A client must send its headers within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// ... and its body within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The most header bytes read.
const MAX_HEADER_BYTES: usize = 64 * 1024;

pub(super) async fn serve_connection(daemon: Arc<Daemon>, stream: tokio::net::TcpStream) {
    let service = hyper::service::service_fn(move |request| {
        let daemon = Arc::clone(&daemon);
        async move { Ok::<_, Infallible>(daemon.route(request).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(err) = served {
        tracing::debug!(error = %err, "HTTP connection ended with an error");
    }
}

impl Daemon {
    async fn route(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        if path == "/approvals" || path.starts_with("/approvals/") {
            return self.inbox(request).await;
        }
        match (request.method(), request.uri().path()) {
            (&Method::GET, "/health") => {
                let answer = self
                    .respond(r#"{"op":"health"}"#, super::Caller::Http)
                    .await;
                // A store that cannot make state durable is not healthy.
                let healthy = super::protocol::decode_answer(&answer)
                    .is_ok_and(|health| health["status"] == "ok");
                let status = match healthy {
                    true => StatusCode::OK,
                    false => StatusCode::SERVICE_UNAVAILABLE,
                };
                json_response(status, answer)
            }
            (&Method::GET, "/metrics") => Response::builder()
                .header(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )
                .body(Full::from(self.metrics_text()).boxed())
                .expect("static headers are valid"),
            (&Method::POST, "/v1/rpc") => self.rpc(request.into_body()).await,
            (&Method::POST, path) if path.starts_with(HOOKS) => self.hook(request).await,
            (_, "/health" | "/metrics" | "/v1/rpc") => text_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET /health, GET /metrics, POST /v1/rpc, POST /v1/hooks/RUNTIME\n",
            ),
            _ => text_response(
                StatusCode::NOT_FOUND,
                "try GET /health, GET /metrics, POST /v1/rpc, POST /v1/hooks/RUNTIME or GET \
                 /approvals\n",
            ),
        }
    }

    async fn rpc(self: Arc<Self>, body: Incoming) -> Response<Body> {
        let text = match read_body(body).await {
            Ok(text) => text,
            Err(refusal) => return refusal,
        };
        let answer = self.respond(&text, super::Caller::Http).await;
        let status = match super::protocol::decode_answer(&answer) {
            Ok(_) => StatusCode::OK,
            Err(err) => status_of(err.kind()),
        };
        json_response(status, answer)
    }

    /// An agent runtime's HTTP hook (`POST /v1/hooks/claude-code?config=
    /// PATH&on_error=deny`): the event is the body, and the answer is what
    /// the command hook would print, always with `200`. A failure is the
    /// runtime's failure answer (a deny by default), so the model reads why;
    /// only a daemon that cannot answer at all leaves the runtime to its own
    /// `onFailure: "block"`. `config` names the config the hook was
    /// installed with, read here as the command hook reads it; without it,
    /// the bundled default.
    async fn hook(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let name = &request.uri().path()[HOOKS.len()..];
        let Some(runtime) = HookRuntime::from_name(name) else {
            let names: Vec<&str> = HookRuntime::ALL.iter().map(|r| r.name()).collect();
            let message = format!(
                "no hook adapter `{name}`; try one of {}\n",
                names.join(", ")
            );
            return text_response(StatusCode::NOT_FOUND, &message);
        };
        let query = request.uri().query().unwrap_or("").to_string();
        let on_error = match form_value(&query, "on_error").as_deref() {
            None | Some("deny") => OnError::Deny,
            Some("ask") => OnError::Ask,
            Some("allow") => OnError::Allow,
            Some(other) => {
                let message = format!("on_error must be deny, ask or allow, not `{other}`\n");
                return text_response(StatusCode::BAD_REQUEST, &message);
            }
        };
        let failed = |message: &str| {
            hook_response(crate::hooks::failure_answer(runtime, on_error, message).to_string())
        };
        let event = match read_body(request.into_body()).await {
            Ok(text) => text,
            Err(_) => return failed("the hook's request body could not be read"),
        };
        let config = match form_value(&query, "config") {
            None => ConfigIdentity::Bundled,
            Some(path) => {
                // Read off the async threads: a file system can be slow.
                let daemon = self.clone();
                let named = tokio::task::spawn_blocking(move || daemon.named_config(&path)).await;
                match named {
                    Ok(Ok(identity)) => identity,
                    Ok(Err(why)) => return failed(&why),
                    Err(_) => return failed("reading the hook's config failed"),
                }
            }
        };
        let request = DaemonRequest::Hook {
            runtime,
            event,
            on_error,
            config: Some(config),
        };
        let text = serde_json::to_string(&request).expect("requests serialise");
        let answer = self.respond(&text, super::Caller::Http).await;
        match super::protocol::decode_answer(&answer) {
            Ok(serde_json::Value::String(output)) => hook_response(output),
            Ok(_) => failed("the daemon gave no answer"),
            Err(err) => failed(&err.to_string()),
        }
    }
}

impl Daemon {
    /// The identity of the config a hook's URL names, read only if it is
    /// the file this daemon serves: another path is refused unread, so the
    /// URL is no oracle for files the daemon may read and the caller may
    /// not (the refusal would quote their digest).
    fn named_config(&self, path: &str) -> Result<ConfigIdentity, String> {
        let serving = self.service().with_config(|c| c.identity.clone());
        match &serving {
            None => Ok(ConfigIdentity::Bundled), // a config given as text
            Some(ConfigIdentity::File { path: served, .. }) if served == path => {
                ConfigIdentity::read(std::path::Path::new(path))
                    .map_err(|err| format!("its config {path} cannot be read: {err}"))
            }
            Some(serving) => Err(crate::Error::ConfigMismatch {
                serving: serving.describe(),
                named: path.to_string(),
            }
            .to_string()),
        }
    }
}

/// Where the HTTP hooks are served, before the runtime's name.
pub const HOOKS: &str = "/v1/hooks/";

/// A request body within [`BODY_TIMEOUT`] and [`MAX_REQUEST_BYTES`], as
/// UTF-8; else the response that refuses it.
async fn read_body(body: Incoming) -> Result<String, Response<Body>> {
    use hyper::body::Body as _;
    let too_large = || {
        let message = format!("request body larger than {MAX_REQUEST_BYTES} bytes\n");
        text_response(StatusCode::PAYLOAD_TOO_LARGE, &message)
    };
    // A declared length past the limit is refused before reading.
    if body.size_hint().lower() > MAX_REQUEST_BYTES as u64 {
        return Err(too_large());
    }
    let read = Limited::new(body, MAX_REQUEST_BYTES).collect();
    let body = match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Err(_) => {
            return Err(text_response(
                StatusCode::REQUEST_TIMEOUT,
                "body too slow\n",
            ));
        }
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(err)) => {
            return Err(text_response(
                StatusCode::BAD_REQUEST,
                &format!("bad body: {err}\n"),
            ));
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    String::from_utf8(body.to_vec())
        .map_err(|_| text_response(StatusCode::BAD_REQUEST, "the body must be UTF-8 JSON\n"))
}

fn hook_response(output: String) -> Response<Body> {
    json_response(StatusCode::OK, output)
}

/// The HTTP status for an error kind; the body carries the kind itself.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthorized => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Gate => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn json_response(status: StatusCode, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::from(body).boxed())
        .expect("static headers are valid")
}

fn text_response(status: StatusCode, body: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::from(body.to_string()).boxed())
        .expect("static headers are valid")
}
