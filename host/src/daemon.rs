//! The daemon: keeps policies warm behind a Unix socket (and optionally a
//! loopback HTTP port), for many concurrent clients.
//!
//! Protocol on the socket: one JSON request per line, one JSON response per
//! line, any number per connection. A request is `{"op": ..., ...}` (see
//! [`DaemonRequest`]); a response is `{"ok": true, "result": ...}` or
//! `{"ok": false, "error": "..."}`.
//!
//! HTTP (loopback only): `GET /health`, `GET /metrics` (Prometheus text) and
//! `POST /v1/rpc` with a [`DaemonRequest`] body.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};

use crate::Toolgate;
use crate::claude_code::HookBackend;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::gates::{GateKey, GateResolution};
use crate::host::Outcome;
use crate::metrics::Metrics;
use crate::request::ToolRequest;

/// The longest request line accepted.
const MAX_LINE: usize = 4 * 1024 * 1024;

/// One request to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum DaemonRequest {
    /// Decide on a call.
    Evaluate {
        /// The call.
        request: ToolRequest,
    },
    /// Report a call's outcome.
    Observe {
        /// The call.
        request: ToolRequest,
        /// What happened.
        outcome: Outcome,
        /// A short summary of the result.
        #[serde(default)]
        summary: String,
    },
    /// Start a session's next turn.
    NextTurn {
        /// The session.
        session: String,
    },
    /// A session's current turn.
    Turn {
        /// The session.
        session: String,
    },
    /// Resolve a pending gate.
    Resolve {
        /// The gate's user.
        user: String,
        /// The gate's thread.
        thread: String,
        /// The request id from the pause.
        request_id: String,
        /// The resolving channel.
        channel: String,
        /// What the person decided.
        resolution: GateResolution,
    },
    /// Pending gates.
    Gates {
        /// Only this user's.
        #[serde(default)]
        user: Option<String>,
    },
    /// A policy's admin command.
    Command {
        /// The plugin.
        plugin: String,
        /// The command.
        name: String,
        /// JSON arguments.
        #[serde(default)]
        args: Value,
    },
    /// Reload the config and plugins.
    Reload,
    /// Loaded plugins and their status.
    Plugins,
    /// Liveness and a summary.
    Health,
    /// Prometheus metrics text.
    Metrics,
}

/// Shared state of a running daemon.
pub struct Daemon {
    host: Arc<Toolgate>,
    metrics: Metrics,
}

impl Daemon {
    /// A daemon over `host`.
    pub fn new(host: Arc<Toolgate>) -> Arc<Self> {
        Arc::new(Self {
            host,
            metrics: Metrics::default(),
        })
    }

    /// The host.
    pub fn host(&self) -> &Arc<Toolgate> {
        &self.host
    }

    /// Reload and count it.
    pub fn reload(&self) -> Result<crate::ReloadReport> {
        let result = self.host.reload();
        self.metrics.record_reload(result.is_ok());
        result
    }

    /// Handle one request (blocking: run it off the async workers).
    pub fn handle(&self, request: DaemonRequest) -> Result<Value> {
        let host = &self.host;
        Ok(match request {
            DaemonRequest::Evaluate { request } => {
                let decision = host.evaluate(&request)?;
                self.metrics.record(&decision);
                to_json(decision)
            }
            DaemonRequest::Observe {
                request,
                outcome,
                summary,
            } => {
                host.observe(&request, outcome, &summary);
                Value::Null
            }
            DaemonRequest::NextTurn { session } => json!(host.store().next_turn(&session)?),
            DaemonRequest::Turn { session } => json!(host.store().turn(&session)?),
            DaemonRequest::Resolve {
                user,
                thread,
                request_id,
                channel,
                resolution,
            } => {
                let key = GateKey {
                    user_id: user,
                    thread_id: thread,
                };
                to_json(host.resolve_gate(&key, &request_id, &channel, resolution)?)
            }
            DaemonRequest::Gates { user } => to_json(host.gates(user.as_deref())?),
            DaemonRequest::Command { plugin, name, args } => {
                let args = if args.is_null() { json!({}) } else { args };
                let answer = host.command(&plugin, &name, &args.to_string())?;
                serde_json::from_str(&answer).unwrap_or(Value::String(answer))
            }
            DaemonRequest::Reload => to_json(self.reload()?),
            DaemonRequest::Plugins => to_json(host.plugin_statuses()),
            DaemonRequest::Health => json!({
                "status": "ok",
                "plugins": host.plugins().len(),
                "store": host.store().path(),
            }),
            DaemonRequest::Metrics => Value::String(self.metrics.render()),
        })
    }

    fn respond(self: &Arc<Self>, line: &str) -> impl std::future::Future<Output = String> + use<> {
        let daemon = Arc::clone(self);
        let parsed: std::result::Result<DaemonRequest, _> = serde_json::from_str(line);
        async move {
            let result = match parsed {
                Err(err) => Err(Error::Request(format!("bad daemon request: {err}"))),
                Ok(request) => tokio::task::spawn_blocking(move || daemon.handle(request))
                    .await
                    .unwrap_or_else(|err| {
                        Err(Error::Daemon(format!("request handler failed: {err}")))
                    }),
            };
            match result {
                Ok(value) => json!({"ok": true, "result": value}).to_string(),
                Err(err) => json!({"ok": false, "error": err.to_string()}).to_string(),
            }
        }
    }

    /// Serve the Unix socket at `socket` (and HTTP on `http`, which must be
    /// a loopback address) until `shutdown` completes; then stop accepting,
    /// let open requests finish, and remove the socket file.
    pub async fn serve(
        self: Arc<Self>,
        socket: &Path,
        http: Option<SocketAddr>,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        if socket.exists() {
            if UnixStream::connect(socket).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{} is served by a running daemon", socket.display()),
                ));
            }
            std::fs::remove_file(socket)?; // stale, from a crash
        }
        let listener = tokio::net::UnixListener::bind(socket)?;
        let http = match http {
            Some(addr) if !addr.ip().is_loopback() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--http {addr}: only loopback addresses are allowed"),
                ));
            }
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
            None => None,
        };
        tracing::info!(socket = %socket.display(), "toolgate daemon listening");
        let mut connections = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, _) = accepted?;
                    connections.spawn(Arc::clone(&self).socket_connection(stream));
                }
                accepted = accept_http(http.as_ref()) => {
                    let stream = accepted?;
                    connections.spawn(Arc::clone(&self).http_connection(stream));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        tracing::info!(
            open = connections.len(),
            "shutting down: finishing open requests"
        );
        let drain = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(10), drain)
            .await
            .is_err()
        {
            connections.abort_all();
        }
        let _ = std::fs::remove_file(socket);
        Ok(())
    }

    async fn socket_connection(self: Arc<Self>, stream: tokio::net::UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut lines = AsyncBufReader::new(read);
        let mut line = String::new();
        loop {
            line.clear();
            match (&mut lines)
                .take(MAX_LINE as u64)
                .read_line(&mut line)
                .await
            {
                Ok(0) | Err(_) => return,
                Ok(_) if !line.ends_with('\n') && line.len() >= MAX_LINE => {
                    let _ = write
                        .write_all(b"{\"ok\":false,\"error\":\"request line too long\"}\n")
                        .await;
                    return;
                }
                Ok(_) => {}
            }
            if line.trim().is_empty() {
                continue;
            }
            let mut response = self.respond(line.trim()).await;
            response.push('\n');
            if write.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    async fn http_connection(self: Arc<Self>, stream: tokio::net::TcpStream) {
        let mut stream = AsyncBufReader::new(stream);
        let mut request_line = String::new();
        if stream.read_line(&mut request_line).await.is_err() {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            match stream.read_line(&mut header).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0).min(MAX_LINE);
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let (status, content_type, text) = match (parts.next(), parts.next()) {
            (Some("GET"), Some("/health")) => (
                "200 OK",
                "application/json",
                self.respond(r#"{"op":"health"}"#).await,
            ),
            (Some("GET"), Some("/metrics")) => {
                ("200 OK", "text/plain; version=0.0.4", self.metrics.render())
            }
            (Some("POST"), Some("/v1/rpc")) => {
                let line = String::from_utf8_lossy(&body).into_owned();
                ("200 OK", "application/json", self.respond(&line).await)
            }
            _ => (
                "404 Not Found",
                "text/plain",
                "try GET /health, GET /metrics or POST /v1/rpc\n".into(),
            ),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = stream.get_mut().write_all(response.as_bytes()).await;
    }
}

async fn accept_http(
    listener: Option<&tokio::net::TcpListener>,
) -> std::io::Result<tokio::net::TcpStream> {
    match listener {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// A blocking client for the daemon's socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client for the daemon at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            timeout: Duration::from_secs(30),
        }
    }

    /// Whether a daemon answers at the socket.
    pub fn is_up(&self) -> bool {
        self.call(&DaemonRequest::Health).is_ok()
    }

    /// Send one request and wait for its answer.
    pub fn call(&self, request: &DaemonRequest) -> Result<Value> {
        let io = |err: std::io::Error| Error::Daemon(format!("{}: {err}", self.socket.display()));
        let mut stream = UnixStream::connect(&self.socket).map_err(io)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(io)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let mut line = serde_json::to_string(request).expect("requests serialise");
        line.push('\n');
        stream.write_all(line.as_bytes()).map_err(io)?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).map_err(io)?;
        let answer: Value = serde_json::from_str(&answer)
            .map_err(|err| Error::Daemon(format!("unreadable answer: {err}")))?;
        if answer["ok"] == json!(true) {
            Ok(answer["result"].clone())
        } else {
            Err(Error::Daemon(format!(
                "refused: {}",
                answer["error"].as_str().unwrap_or("no reason given")
            )))
        }
    }
}

impl HookBackend for Client {
    fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        let value = self.call(&DaemonRequest::Evaluate {
            request: request.clone(),
        })?;
        serde_json::from_value(value)
            .map_err(|err| Error::Daemon(format!("unreadable decision: {err}")))
    }
    fn observe(&self, request: &ToolRequest, outcome: Outcome, summary: &str) -> Result<()> {
        self.call(&DaemonRequest::Observe {
            request: request.clone(),
            outcome,
            summary: summary.to_string(),
        })
        .map(|_| ())
    }
    fn next_turn(&self, session: &str) -> Result<u64> {
        let value = self.call(&DaemonRequest::NextTurn {
            session: session.to_string(),
        })?;
        Ok(value.as_u64().unwrap_or(0))
    }
    fn turn(&self, session: &str) -> Result<u64> {
        let value = self.call(&DaemonRequest::Turn {
            session: session.to_string(),
        })?;
        Ok(value.as_u64().unwrap_or(0))
    }
}

fn to_json(value: impl Serialize) -> Value {
    serde_json::to_value(value).expect("daemon results always serialise")
}

/// The default socket: `$XDG_RUNTIME_DIR/toolgate.sock`, else
/// `/tmp/toolgate-$USER.sock`.
pub fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("toolgate.sock"),
        None => {
            let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
            std::env::temp_dir().join(format!("toolgate-{user}.sock"))
        }
    }
}
