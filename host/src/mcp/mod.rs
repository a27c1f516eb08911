//! The MCP gateway: toolgate between an MCP client and an MCP server.
//!
//! The client talks to the gateway as if it were the server; the gateway
//! talks to the real server as a client (both on `rmcp`). Every
//! `tools/call` is decided first, through the store's daemon like every
//! other adapter:
//!
//! - **allow** forwards the call; the policies' notes are appended to the
//!   result as text, and the outcome is observed (the PostToolUse
//!   equivalent);
//! - **deny** answers a tool result with `isError: true` and the reason, so
//!   the model reads it; the server never sees the call;
//! - **pause** asks the person through MCP elicitation when the client
//!   supports it and the gateway holds the `mcp` channel's token
//!   (accept approves, decline denies, cancel leaves the gate pending): the
//!   daemon checks the token like any channel's, and the call is decided
//!   again and runs only if that now allows it. Otherwise the result is an
//!   error that says how a person approves it.
//!
//! Mapping: the tool keeps its name, with the origin `mcp(SERVER)`
//! (`SERVER` from `--name`, else the server's own `serverInfo.name` with
//! anything but letters, digits, `-` and `_` turned into `-`); a client
//! session is one session and one thread (over stdio `--session`, default
//! `mcp-` and a random id); the user is `--user` (default: the request's
//! default user); the requesting channel is `mcp`. MCP has no user-prompt
//! boundary, so a gateway session starts one turn and stays in it.
//!
//! Over stdio one gateway process serves one client; over streamable HTTP
//! ([`http`]) each client session is a session of its own, and they share
//! the one connection to the server.
//!
//! Only tools are forwarded: the server's resources and prompts are not
//! offered to the client, because no policy checks them.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ErrorData as McpError, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{
    ElicitationMode, Peer, RequestContext, RoleClient, RoleServer, RunningService,
};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

use crate::claude_code::outcome_of;
use crate::daemon::{Client, DaemonRequest};
use crate::decision::{Decision, Outcome, Verdict};
use crate::error::{Error, Result};
use crate::gates::GateResolution;
use crate::request::{Origin, ToolRequest};

pub mod http;

/// The channel name of pauses raised and resolved through MCP.
pub const CHANNEL: &str = "mcp";

/// How the gateway maps MCP onto toolgate's requests.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The user of every call, if not the default.
    pub user: Option<String>,
    /// The `mcp` channel's token (see `[approvals] tokens`); without it a
    /// pause is never resolved through elicitation.
    pub approval_token: Option<String>,
    /// How long a call to the server may take.
    pub call_timeout: Duration,
    /// How long to wait for the person to answer an elicitation.
    pub elicitation_timeout: Duration,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            user: None,
            approval_token: None,
            call_timeout: Duration::from_secs(120),
            elicitation_timeout: Duration::from_secs(300),
        }
    }
}

/// A new session id: `mcp-` and 16 random hex digits.
pub fn new_session_id() -> String {
    format!("mcp-{}", random_id())
}

fn random_id() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS has randomness");
    hex::encode(bytes)
}

/// The connection to the real server, shared by every client session.
pub struct Upstream {
    service: RunningService<RoleClient, ()>,
    server: String,
    info: ServerConfig,
}

impl Upstream {
    /// Start an MCP session with the real server over `transport` (e.g. a
    /// child process). `name` is the origin's server name; default: the
    /// name the server reports.
    pub async fn connect<T, E, A>(transport: T, name: Option<String>) -> Result<Arc<Self>>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let service = ().serve(transport).await.map_err(|err| {
            Error::Request(format!(
                "the MCP server did not start a session: {err}; check that the command after \
                 `--` runs an MCP server on stdio"
            ))
        })?;
        let peer_info = service.peer().peer_info();
        let server = name
            .or_else(|| {
                let reported = peer_info.as_ref()?.server_info.as_ref()?;
                Some(server_name_from(&reported.name))
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "mcp".into());
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = peer_info
            .as_ref()
            .and_then(|i| i.capabilities.tools.clone());
        let mut info = ServerConfig::new(capabilities);
        info.server_info.name = format!("toolgate({server})");
        info.instructions = peer_info.as_ref().and_then(|i| i.instructions.clone());
        Ok(Arc::new(Self {
            service,
            server,
            info,
        }))
    }

    /// The server name used as the calls' origin.
    pub fn server_name(&self) -> &str {
        &self.server
    }
}

/// One client session of the gateway: the MCP server side the client
/// talks to.
#[derive(Clone)]
pub struct Gateway {
    upstream: Arc<Upstream>,
    daemon: Client,
    options: Arc<GatewayOptions>,
    session: String,
    turn: Arc<tokio::sync::OnceCell<u64>>,
}

impl Gateway {
    /// A client session `session` (also its thread) in front of `upstream`.
    pub fn new(
        upstream: Arc<Upstream>,
        daemon: Client,
        options: Arc<GatewayOptions>,
        session: String,
    ) -> Self {
        Self {
            upstream,
            daemon,
            options,
            session,
            turn: Arc::default(),
        }
    }

    /// The session's turn: started in the daemon at its first call.
    async fn turn(&self) -> Result<u64> {
        let started = self.turn.get_or_try_init(|| async {
            let session = self.session.clone();
            let turn = blocking(self.daemon.clone(), DaemonRequest::NextTurn { session }).await?;
            Ok::<_, Error>(turn.as_u64().unwrap_or(0))
        });
        started.await.copied()
    }

    fn request(&self, params: &CallToolRequestParams, turn: u64) -> ToolRequest {
        let arguments = params
            .arguments
            .clone()
            .map_or_else(|| json!({}), Value::Object);
        let mut request = ToolRequest::new(params.name.to_string(), arguments);
        request.origin = Origin::Mcp(self.upstream.server.clone());
        request.call_id = Some(random_id());
        request.session_id = self.session.clone();
        request.channel = CHANNEL.into();
        request.turn = turn;
        if let Some(user) = &self.options.user {
            request.user_id = user.clone();
        }
        request
    }

    async fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        let answer = blocking(
            self.daemon.clone(),
            DaemonRequest::Evaluate {
                request: request.clone(),
            },
        )
        .await?;
        serde_json::from_value(answer)
            .map_err(|err| Error::Request(format!("the daemon's decision is malformed: {err}")))
    }

    /// Ask the person about a pause; whether the gate was resolved.
    async fn elicit(&self, peer: &Peer<RoleServer>, decision: &Decision) -> Result<bool> {
        let (Some(token), Some(pause)) = (&self.options.approval_token, &decision.pause) else {
            return Ok(false);
        };
        if !peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return Ok(false);
        }
        let message = format!(
            "toolgate paused a call to `{}`: {}\nAccept to approve it once, decline to deny it.",
            self.upstream.server,
            decision
                .reason
                .as_deref()
                .unwrap_or("a policy asks for approval"),
        );
        let asked = peer
            .create_elicitation_with_timeout(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message,
                    requested_schema: ElicitationSchema::new(Default::default()),
                },
                Some(self.options.elicitation_timeout),
            )
            .await;
        let resolution = match asked {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => GateResolution::Approve { always: false },
                ElicitationAction::Decline => GateResolution::Deny,
                // Cancelled (or an action this version does not know): still paused.
                _ => return Ok(false),
            },
            Err(err) => {
                tracing::warn!(error = %err, "elicitation failed; the call stays paused");
                return Ok(false);
            }
        };
        blocking(
            self.daemon.clone(),
            DaemonRequest::Resolve {
                user: pause.user_id.clone(),
                thread: pause.thread_id.clone(),
                request_id: pause.request_id.clone(),
                channel: CHANNEL.into(),
                token: Some(token.clone()),
                resolution,
            },
        )
        .await?;
        Ok(true)
    }

    async fn call(
        &self,
        params: CallToolRequestParams,
        peer: &Peer<RoleServer>,
    ) -> Result<CallToolResponse> {
        let request = self.request(&params, self.turn().await?);
        let mut decision = self.evaluate(&request).await?;
        if decision.verdict == Verdict::Pause && self.elicit(peer, &decision).await? {
            decision = self.evaluate(&request).await?;
        }
        match decision.verdict {
            Verdict::Deny => Ok(refusal(&decision, "denied").into()),
            Verdict::Pause => Ok(refusal(&decision, "paused").into()),
            Verdict::Allow => {
                let response = self.forward(params).await;
                let (outcome, summary) = match &response {
                    Ok(CallToolResponse::Complete(result)) => {
                        outcome_of(Some(&serde_json::to_value(result).unwrap_or_default()))
                    }
                    Ok(_) => (Outcome::Succeeded, String::new()),
                    Err(err) => (Outcome::Failed, err.to_string()),
                };
                let observe = DaemonRequest::Observe {
                    request,
                    outcome,
                    summary,
                };
                if let Err(err) = blocking(self.daemon.clone(), observe).await {
                    tracing::warn!(error = %err, "could not record the call's outcome");
                }
                Ok(match response {
                    Ok(CallToolResponse::Complete(mut result)) => {
                        result
                            .content
                            .extend(notes(&decision).map(ContentBlock::text));
                        result.into()
                    }
                    Ok(other) => other,
                    Err(err) => CallToolResult::error(vec![ContentBlock::text(err)]).into(),
                })
            }
        }
    }

    /// The call, forwarded to the server; a failure as a message for the
    /// model.
    async fn forward(
        &self,
        params: CallToolRequestParams,
    ) -> std::result::Result<CallToolResponse, String> {
        let name = params.name.clone();
        let timeout = self.options.call_timeout;
        let server = &self.upstream.server;
        let call = self.upstream.service.peer().call_tool_once(params);
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(rmcp::ServiceError::TransportClosed)) => Err(format!(
                "the MCP server `{server}` closed its connection (it exited or crashed) during \
                 or before `{name}`; its log is on the gateway's stderr. Restart the gateway to \
                 start it again"
            )),
            Ok(Err(err)) => Err(format!(
                "the MCP server `{server}` failed on `{name}`: {err}"
            )),
            Err(_) => Err(format!(
                "the MCP server `{server}` did not answer `{name}` within {} s (a reply over 16 \
                 MiB is discarded unread); the call may have run",
                timeout.as_secs()
            )),
        }
    }
}

/// A server's reported name as an origin: what is not a letter, digit,
/// `-` or `_` becomes `-` (`mcp-servers/everything` →
/// `mcp-servers-everything`), so it fits catalogue keys (`mcp:SERVER/TOOL`).
pub(crate) fn server_name_from(reported: &str) -> String {
    reported
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The policies' notes, one text block.
fn notes(decision: &Decision) -> Option<String> {
    (!decision.notes.is_empty()).then(|| {
        let texts: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
        format!("toolgate notes:\n{}", texts.join("\n\n"))
    })
}

/// A tool result for a call that did not run.
fn refusal(decision: &Decision, what: &str) -> CallToolResult {
    let mut text = format!(
        "toolgate {what} this call: {}",
        decision.reason.as_deref().unwrap_or("no reason given")
    );
    if let Some(pause) = &decision.pause {
        text.push_str(&format!(
            "\nA person can approve it from a terminal of their own with `toolgate gates resolve \
             --user {} --thread {} --request-id {}`; then retry the same call.",
            pause.user_id, pause.thread_id, pause.request_id
        ));
    }
    let mut content = vec![ContentBlock::text(text)];
    content.extend(notes(decision).map(ContentBlock::text));
    CallToolResult::error(content)
}

/// One daemon request, off the async threads.
async fn blocking(daemon: Client, request: DaemonRequest) -> Result<Value> {
    tokio::task::spawn_blocking(move || daemon.call(&request))
        .await
        .map_err(|err| Error::Request(format!("the daemon request was cancelled: {err}")))?
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        self.upstream.info.clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        let listed = self.upstream.service.peer().list_tools(request).await;
        listed.map_err(|err| {
            let server = &self.upstream.server;
            McpError::internal_error(
                format!("the MCP server `{server}` failed to list its tools: {err}"),
                None,
            )
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        // toolgate failing must not run the call: answer with the error.
        Ok(self
            .call(request, &context.peer)
            .await
            .unwrap_or_else(|err| {
                CallToolResult::error(vec![ContentBlock::text(format!(
                "toolgate failed, so this call was not run: {err}. Diagnose with `toolgate check` \
                 on the same call, or rerun the gateway with TOOLGATE_LOG=debug."
            ))])
            .into()
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_server_names_fit_catalogue_keys() {
        assert_eq!(
            server_name_from("mcp-servers/everything"),
            "mcp-servers-everything"
        );
        assert_eq!(server_name_from("hostile"), "hostile");
        assert_eq!(server_name_from("a b:c"), "a-b-c");
    }
}
