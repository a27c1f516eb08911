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
//! boundary, so a gateway session starts one turn and stays in it. Nor does
//! MCP say whether the client asks its person before a call: the
//! execution mode is the operator's (`--client-mode`, default interactive).
//!
//! Over stdio one gateway process serves one client; over streamable HTTP
//! ([`http`]) each client session is a session of its own, and they share
//! the one connection to the server.
//!
//! Only tools are forwarded: the server's resources and prompts are not
//! offered to the client, because no policy checks them.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ErrorData as McpError, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer};
use serde_json::{Value, json};

use crate::daemon::launch::Launcher;
use crate::daemon::{Client, DaemonRequest};
use crate::decision::{Decision, Outcome, Verdict};
use crate::error::{Error, Result};
use crate::gates::GateResolution;
use crate::hooks::{how_to_approve, outcome_of};
use crate::request::{Mode, Origin, ToolRequest};

pub mod http;
mod upstream;

pub use upstream::{Upstream, Upstreams};

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
    /// How the client runs: whether a person there wants to be asked. MCP
    /// does not say, so the operator does (a client told not to ask, such
    /// as Claude Code in `bypassPermissions`, is `InteractiveAutoApprove`).
    pub mode: Mode,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            user: None,
            approval_token: None,
            call_timeout: Duration::from_secs(120),
            elicitation_timeout: Duration::from_secs(300),
            mode: Mode::Interactive,
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

/// The gateway's way to the store's daemon: a client, and how to start the
/// daemon again when it stopped while the gateway ran (`idle_exit_secs`, a
/// crash) — a gateway lives as long as its client, a daemon need not.
#[derive(Debug, Clone)]
pub struct DaemonLink {
    client: Client,
    launcher: Option<Launcher>,
}

impl DaemonLink {
    /// The daemon at `client`, never restarted.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            launcher: None,
        }
    }

    /// Start the daemon again with `launcher` when it cannot be reached.
    pub fn restarting_with(mut self, launcher: Launcher) -> Self {
        self.launcher = Some(launcher);
        self
    }

    fn call(&self, request: &DaemonRequest) -> Result<Value> {
        match (self.client.call(request), &self.launcher) {
            (Err(Error::DaemonUnreachable { .. }), Some(launcher)) => {
                tracing::info!("the daemon is gone; starting it again");
                launcher.ensure_running()?.call(request)
            }
            (answer, _) => answer,
        }
    }
}

/// One client session of the gateway: the MCP server side the client
/// talks to.
#[derive(Clone)]
pub struct Gateway {
    upstreams: Arc<Upstreams>,
    daemon: DaemonLink,
    options: Arc<GatewayOptions>,
    session: String,
    turn: Arc<tokio::sync::OnceCell<u64>>,
}

impl Gateway {
    /// A client session `session` (also its thread) in front of the servers.
    pub fn new(
        upstreams: Arc<Upstreams>,
        daemon: DaemonLink,
        options: Arc<GatewayOptions>,
        session: String,
    ) -> Self {
        Self {
            upstreams,
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

    fn request(&self, server: &str, params: &CallToolRequestParams, turn: u64) -> ToolRequest {
        let arguments = params
            .arguments
            .clone()
            .map_or_else(|| json!({}), Value::Object);
        let mut request = ToolRequest::new(params.name.to_string(), arguments);
        request.origin = Origin::Mcp(server.to_string());
        request.call_id = Some(random_id());
        request.session_id = self.session.clone();
        request.channel = CHANNEL.into();
        request.turn = turn;
        request.mode = self.options.mode;
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
    async fn elicit(
        &self,
        peer: &Peer<RoleServer>,
        server: &str,
        decision: &Decision,
    ) -> Result<bool> {
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
            "toolgate paused a call to `{server}`: {}\nAccept to approve it once, decline to deny \
             it.",
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
        mut params: CallToolRequestParams,
        peer: &Peer<RoleServer>,
    ) -> Result<CallToolResponse> {
        let Some((upstream, tool)) = self.upstreams.route(&params.name) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "no server behind this gateway has a tool `{}`",
                params.name
            ))])
            .into());
        };
        params.name = tool.into();
        let request = self.request(upstream.server_name(), &params, self.turn().await?);
        let mut decision = self.evaluate(&request).await?;
        if decision.verdict == Verdict::Pause
            && self.elicit(peer, upstream.server_name(), &decision).await?
        {
            decision = self.evaluate(&request).await?;
        }
        match decision.verdict {
            Verdict::Deny => Ok(refusal(&decision, "denied").into()),
            Verdict::Pause => Ok(refusal(&decision, "paused").into()),
            Verdict::Allow => {
                let response = upstream.call(params, self.options.call_timeout).await;
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
    text.push_str(&how_to_approve(decision));
    let mut content = vec![ContentBlock::text(text)];
    content.extend(notes(decision).map(ContentBlock::text));
    CallToolResult::error(content)
}

/// One daemon request, off the async threads.
async fn blocking(daemon: DaemonLink, request: DaemonRequest) -> Result<Value> {
    tokio::task::spawn_blocking(move || daemon.call(&request))
        .await
        .map_err(|err| Error::Request(format!("the daemon request was cancelled: {err}")))?
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        self.upstreams.info().clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        let listed = self.upstreams.list_tools(request).await;
        listed.map_err(|message| McpError::internal_error(message, None))
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
