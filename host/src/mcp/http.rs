//! The gateway over MCP's streamable HTTP transport, at `/mcp` on a
//! loopback address: each client session is a gateway session of its own
//! (its own toolgate session and thread, and its own connections to the
//! real servers, started when it initializes).
//!
//! Any local process can connect to a loopback port, the agent included.
//! Calls through it are decided like any other, but answering an
//! elicitation resolves a pause: so when the gateway holds the `mcp`
//! channel's token, clients must present a token of their own
//! (`Authorization: Bearer …`), or the agent could connect and approve its
//! own calls. An `Origin` header other than the gateway's own loopback
//! origin is refused (a web page elsewhere), and the `Host` header must
//! name a loopback host (DNS rebinding).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::{DaemonLink, Gateway, GatewayOptions, UpstreamServer, new_session_id};
use crate::daemon::peer::constant_time_eq;
use crate::{Error, Result};

/// The path the gateway serves.
pub const PATH: &str = "/mcp";

/// Client sessions open at once (each with its own server processes).
const MAX_SESSIONS: usize = 32;

/// A client must send its headers within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

type Body = BoxBody<Bytes, Infallible>;

/// The gateway's HTTP server, bound and checked, not yet serving.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    address: std::net::SocketAddr,
    service: Arc<StreamableHttpService<Gateway, LocalSessionManager>>,
    client_token: Option<Arc<str>>,
}

impl HttpServer {
    /// A server on `listener`. `client_token`: what clients must present as
    /// a bearer token; required when `options` holds the `mcp` channel's
    /// token (see the module docs). Refuses non-loopback addresses.
    pub fn new(
        listener: tokio::net::TcpListener,
        servers: Arc<[UpstreamServer]>,
        daemon: DaemonLink,
        options: Arc<GatewayOptions>,
        client_token: Option<String>,
    ) -> Result<Self> {
        let address = listener
            .local_addr()
            .map_err(|err| Error::Request(format!("the gateway's listener failed: {err}")))?;
        if !address.ip().is_loopback() {
            return Err(Error::Request(format!(
                "the MCP gateway serves plain HTTP on loopback addresses only, not {address}; \
                 put a TLS proxy in front of a loopback gateway to reach it from elsewhere"
            )));
        }
        if options.approval_token.is_some() && client_token.is_none() {
            return Err(Error::Request(
                "over HTTP, any local process could answer the gateway's approval questions; \
                 set a client token (TOOLGATE_MCP_CLIENT_TOKEN) that only the MCP client knows"
                    .into(),
            ));
        }
        // Origin as the transport spec says: a browser page may talk to the
        // gateway only from the gateway's own origin (which serves no page),
        // never from another site (DNS rebinding, a drive-by page).
        let port = address.port();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_origins([
                format!("http://127.0.0.1:{port}"),
                format!("http://localhost:{port}"),
                format!("http://[::1]:{port}"),
            ])
            .enforce_origin_validation();
        // Each session starts its own servers: a local process opening
        // sessions without end must not start processes without end.
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SESSIONS));
        let service = StreamableHttpService::new(
            move || {
                let slot = slots.clone().try_acquire_owned().map_err(|_| {
                    std::io::Error::other(format!(
                        "the gateway serves at most {MAX_SESSIONS} sessions at once; close one first"
                    ))
                })?;
                let session = new_session_id();
                Ok(Gateway::counted(
                    servers.clone(),
                    daemon.clone(),
                    options.clone(),
                    session,
                    Some(slot),
                ))
            },
            Arc::new(LocalSessionManager::default()),
            config,
        );
        Ok(Self {
            listener,
            address,
            service: Arc::new(service),
            client_token: client_token.map(Arc::from),
        })
    }

    /// Where clients connect.
    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.address)
    }

    /// Serve until the task is dropped.
    pub async fn run(self) {
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let service = Arc::clone(&self.service);
            let client_token = self.client_token.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |request| {
                    let service = Arc::clone(&service);
                    let client_token = client_token.clone();
                    async move {
                        let response = route(&service, client_token.as_deref(), request).await;
                        Ok::<_, Infallible>(response)
                    }
                });
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
                if let Err(err) = served {
                    tracing::debug!(error = %err, "MCP HTTP connection ended with an error");
                }
            });
        }
    }
}

async fn route(
    service: &StreamableHttpService<Gateway, LocalSessionManager>,
    client_token: Option<&str>,
    request: Request<Incoming>,
) -> Response<Body> {
    if request.uri().path() != PATH {
        return plain(StatusCode::NOT_FOUND, "the MCP endpoint is /mcp\n");
    }
    if let Some(expected) = client_token {
        let presented = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if !presented.is_some_and(|token| constant_time_eq(token.as_bytes(), expected.as_bytes())) {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "present the gateway's client token: Authorization: Bearer <token>\n",
            );
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
    }
    service.handle(request).await
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}
