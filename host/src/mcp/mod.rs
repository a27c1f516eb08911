//! The MCP gateway: toolgate between an MCP client and an MCP server.
//!
//! The client talks to the gateway as if it were the server; the gateway
//! talks to the real server as a client (both on `rmcp`), started when the
//! client initializes and offered what that client can do: its protocol
//! version (the newest with an `initialize` handshake, if it asks for a
//! newer one), its sampling, elicitation and roots capabilities, and
//! toolgate's own name and version. Every access is decided first, through
//! the store's daemon like every other adapter:
//!
//! - `tools/call`: **allow** forwards the call; the policies' notes are
//!   appended to the result as text, and the outcome is observed (the
//!   PostToolUse equivalent); **deny** answers a tool result with
//!   `isError: true` and the reason, so the model reads it, and the server
//!   never sees the call; **pause** asks the person through MCP
//!   elicitation when the client supports it and the gateway holds the
//!   `mcp` channel's token (accept approves, decline denies, cancel leaves
//!   the gate pending): the daemon checks the token like any channel's, and
//!   the call is decided again and runs only if that now allows it.
//!   Otherwise the result is an error that says how a person approves it.
//! - `resources/read`, `resources/subscribe`, `prompts/get` from the client,
//!   and `sampling/createMessage`, `elicitation/create`, `roots/list` from
//!   the server: decided the same way, under the method's name with its
//!   parameters as arguments; what is not allowed is answered with an
//!   error holding the reason (see [`server`], [`relay`]).
//! - `completion/complete` is decided too (what is typed reaches the
//!   server); listings, `logging/setLevel` and the server's notifications
//!   (a tool call's progress under the client's own token, log messages,
//!   list changes, resource updates) pass through.
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
//! ([`http`]) each client session is a session of its own, with its own
//! connections to the servers.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ErrorData as McpError,
};
use rmcp::service::{ElicitationMode, Peer, RoleServer};
use serde_json::{Value, json};

use crate::daemon::launch::Launcher;
use crate::daemon::{Client, ClientError, DaemonRequest};
use crate::decision::{Decision, Outcome, Verdict};
use crate::gates::GateResolution;
use crate::hooks::{how_to_approve, outcome_of};
use crate::request::{Mode, Origin, ToolRequest};
use crate::{Error, Result};

pub mod http;
mod listing;
mod progress;
mod relay;
mod server;
mod stdio;
mod upstream;

pub use relay::Relay;
pub use stdio::{LineTransport, MAX_LINE_BYTES, stdio};
pub use upstream::{ServerAt, Upstream, UpstreamServer, Upstreams};

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
    /// The daemon at `client`, never restarted; its connections are kept
    /// between calls.
    pub fn new(client: Client) -> Self {
        Self {
            client: client.keeping_connections(),
            launcher: None,
        }
    }

    /// Start the daemon again with `launcher` when it cannot be reached.
    pub fn restarting_with(mut self, launcher: Launcher) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// This link, waiting up to `wait` while the daemon is busy.
    fn patient(&self, wait: Duration) -> Self {
        Self {
            client: self.client.clone().with_busy_wait(wait),
            launcher: self.launcher.clone(),
        }
    }

    fn call(&self, request: &DaemonRequest) -> Result<Value> {
        match (self.client.call(request), &self.launcher) {
            (Err(ClientError::Unreachable { .. }), Some(launcher)) => {
                tracing::info!("the daemon is gone; starting it again");
                Ok(launcher.ensure_running()?.call(request)?)
            }
            (answer, _) => Ok(answer?),
        }
    }
}

/// What decides for one client session: the daemon, the operator's
/// options, the session (and thread) and its one turn. The client's side
/// ([`Gateway`]) and each server's ([`Relay`]) decide through it.
pub(crate) struct Session {
    daemon: DaemonLink,
    options: Arc<GatewayOptions>,
    id: String,
    turn: tokio::sync::OnceCell<u64>,
    /// The outcome of the session's last call, still being recorded: the
    /// client has its result without waiting for it, and the session's
    /// next decision waits for it, so policies always see the calls before.
    recording: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The session's calls being decided, run and checked now: a client
    /// sending a thousand at once has them run [`CALLS_AT_ONCE`] at a time
    /// (each holds its result, up to 16 MiB, until it is answered).
    calls: tokio::sync::Semaphore,
    /// Held for the session's life where sessions are counted (HTTP).
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How many of one session's tool calls the gateway handles at once; the
/// rest wait their turn.
pub const CALLS_AT_ONCE: usize = 16;

/// A decision on something one side asked of the other, and the request
/// it was made on.
pub(crate) struct Decided {
    pub request: ToolRequest,
    pub decision: Decision,
}

impl Session {
    /// The session's turn: started in the daemon at its first call.
    async fn turn(&self) -> Result<u64> {
        let started = self.turn.get_or_try_init(|| async {
            let session = self.id.clone();
            let turn = blocking(self.daemon.clone(), DaemonRequest::NextTurn { session }).await?;
            Ok::<_, Error>(turn.as_u64().unwrap_or(0))
        });
        started.await.copied()
    }

    fn request(&self, server: &str, tool: &str, arguments: Value, turn: u64) -> ToolRequest {
        let mut request = ToolRequest::new(tool.to_string(), arguments);
        request.origin = Origin::Mcp(server.to_string());
        request.call_id = Some(random_id());
        request.session_id = self.id.clone();
        request.channel = CHANNEL.into();
        request.turn = turn;
        request.mode = self.options.mode;
        if let Some(user) = &self.options.user {
            request.user_id = user.clone();
        }
        request
    }

    async fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        self.recorded().await;
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

    /// Decide on `tool` (a tool's name, or an MCP method such as
    /// `resources/read`) with `arguments`, from `server`: asked of the
    /// person in the client (`client`) when it pauses and the gateway may,
    /// then decided again.
    pub(crate) async fn decide(
        &self,
        client: &Peer<RoleServer>,
        server: &str,
        tool: &str,
        arguments: Value,
        input_schema: Option<Value>,
    ) -> Result<Decided> {
        let mut request = self.request(server, tool, arguments, self.turn().await?);
        request.input_schema = input_schema;
        let mut decision = self.evaluate(&request).await?;
        if decision.verdict == Verdict::Pause
            && self.elicit(client, server, tool, &decision).await?
        {
            decision = self.evaluate(&request).await?;
        }
        Ok(Decided { request, decision })
    }

    /// Decide on `method` with `arguments` from `server`: `Ok` to let it
    /// through, else the JSON-RPC error the asking side gets.
    pub(crate) async fn allow(
        &self,
        client: &Peer<RoleServer>,
        server: &str,
        method: &str,
        arguments: Value,
    ) -> std::result::Result<(), McpError> {
        let Decided { decision, .. } = self
            .decide(client, server, method, arguments, None)
            .await
            .map_err(|err| {
            McpError::internal_error(
                format!(
                    "toolgate failed, so `{method}` did not go through: {err}. Diagnose \
                         with TOOLGATE_LOG=debug."
                ),
                None,
            )
        })?;
        match decision.verdict {
            Verdict::Allow => Ok(()),
            _ => Err(McpError::invalid_request(refusal_text(&decision), None)),
        }
    }

    /// `result` as the model may read it: its text through the policies
    /// that check output; when they change it, one text block of what
    /// they left (the structured content goes with the text it mirrored).
    /// The outcome is recorded (with `summary`) in the same round trip,
    /// after the previous call's.
    async fn checked(
        &self,
        request: ToolRequest,
        outcome: Outcome,
        summary: String,
        mut result: CallToolResult,
    ) -> Result<CallToolResult> {
        self.recorded().await;
        let output = output_text(&result);
        let request = DaemonRequest::CheckOutput {
            request,
            outcome,
            output: crate::output::worth_checking(&output).to_string(),
            observe: Some(summary),
        };
        // The call ran: a busy daemon is waited for as long as a call may
        // take, not given up on.
        let daemon = self.daemon.patient(self.options.call_timeout);
        let answer = blocking(daemon, request).await?;
        let check: crate::output::OutputCheck = serde_json::from_value(answer)
            .map_err(|err| Error::Request(format!("the daemon's answer is malformed: {err}")))?;
        if let Some(text) = check.output {
            result.content = vec![ContentBlock::text(text)];
            result.structured_content = None;
            if check.withheld {
                result.is_error = Some(true);
            }
        }
        Ok(result)
    }

    /// Record what happened to a call that ran, off the call's path (see
    /// `recording`).
    async fn observe(&self, request: ToolRequest, outcome: Outcome, summary: String) {
        let observe = DaemonRequest::Observe {
            request,
            outcome,
            summary,
        };
        let daemon = self.daemon.clone();
        let mut recording = self.recording.lock().await;
        let before = recording.take();
        *recording = Some(tokio::spawn(async move {
            if let Some(before) = before {
                let _ = before.await;
            }
            if let Err(err) = blocking(daemon, observe).await {
                tracing::warn!(error = %err, "could not record the call's outcome");
            }
        }));
    }

    /// Wait until the outcomes of the session's calls so far are recorded.
    async fn recorded(&self) {
        let mut recording = self.recording.lock().await;
        if let Some(last) = recording.take() {
            let _ = last.await;
        }
    }

    /// Ask the person about a pause; whether the gate was resolved.
    async fn elicit(
        &self,
        peer: &Peer<RoleServer>,
        server: &str,
        tool: &str,
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
            "toolgate paused `{tool}` for the MCP server `{server}` (request {}): {}\nAccept to \
             approve it once, decline to deny it.",
            pause.request_id,
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
}

/// One client session of the gateway: the MCP server side the client
/// talks to. Its servers are started when the client initializes, so
/// each is offered what this client can do.
#[derive(Clone)]
pub struct Gateway {
    session: Arc<Session>,
    servers: Arc<[UpstreamServer]>,
    upstreams: Arc<tokio::sync::OnceCell<Arc<Upstreams>>>,
    /// Set by the session's one `initialize`.
    initializing: Arc<std::sync::atomic::AtomicBool>,
    /// Set once the session watches which tools may be offered.
    watching: Arc<std::sync::atomic::AtomicBool>,
}

impl Gateway {
    /// A client session `session` (also its thread) in front of `servers`.
    pub fn new(
        servers: Arc<[UpstreamServer]>,
        daemon: DaemonLink,
        options: Arc<GatewayOptions>,
        session: String,
    ) -> Self {
        Self::counted(servers, daemon, options, session, None)
    }

    /// [`Gateway::new`], holding `slot` (one of a bounded number of
    /// sessions) until the session and its servers are gone.
    pub(crate) fn counted(
        servers: Arc<[UpstreamServer]>,
        daemon: DaemonLink,
        options: Arc<GatewayOptions>,
        session: String,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        Self {
            session: Arc::new(Session {
                daemon,
                options,
                id: session,
                turn: tokio::sync::OnceCell::new(),
                recording: tokio::sync::Mutex::default(),
                calls: tokio::sync::Semaphore::new(CALLS_AT_ONCE),
                _slot: slot,
            }),
            servers,
            upstreams: Arc::default(),
            initializing: Arc::default(),
            watching: Arc::default(),
        }
    }

    /// Wait until what the session's calls did is recorded: before the
    /// process ends with its session.
    pub async fn finish(&self) {
        self.session.recorded().await;
    }

    /// The session's servers, once the client initialized.
    fn upstreams(&self) -> std::result::Result<&Arc<Upstreams>, McpError> {
        self.upstreams.get().ok_or_else(|| {
            McpError::invalid_request(
                "initialize first: the gateway starts its servers then",
                None,
            )
        })
    }

    async fn call(
        &self,
        mut params: CallToolRequestParams,
        peer: &Peer<RoleServer>,
        cancelled: &tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResponse> {
        let upstreams = self
            .upstreams()
            .map_err(|err| Error::Request(err.message.to_string()))?;
        let _turn = tokio::select! {
            permit = self.session.calls.acquire() => permit,
            () = cancelled.cancelled() => {
                return Err(Error::Request("the client cancelled the call before it ran".into()));
            }
        };
        let Some((upstream, tool)) = upstreams.route(&params.name) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "no server behind this gateway has a tool `{}`",
                params.name
            ))])
            .into());
        };
        let listing = self.session.options.call_timeout;
        let schema = tokio::select! {
            schema = upstreams.learn_schema(&params.name, listing) => schema,
            () = cancelled.cancelled() => {
                return Err(Error::Request("the client cancelled the call before it ran".into()));
            }
        };
        let unchecked_rewrite = schema.is_none();
        params.name = tool.clone().into();
        let arguments = params
            .arguments
            .clone()
            .map_or_else(|| json!({}), Value::Object);
        let Decided {
            mut request,
            decision,
        } = self
            .session
            .decide(peer, upstream.server_name(), &tool, arguments, schema)
            .await?;
        if decision.verdict != Verdict::Allow {
            return Ok(refusal(&decision).into());
        }
        // The call as the policies rewrote it is the one that runs, if its
        // schema checked the rewrite.
        if decision.arguments.is_some() && unchecked_rewrite {
            let why = format!(
                "the policies rewrote this call, but the MCP server `{}` does not list the tool \
                 `{tool}`, so toolgate cannot check the rewrite against its input schema; it was \
                 not run",
                upstream.server_name()
            );
            // What the allow reserved (a lease use) goes back.
            self.session
                .observe(request, Outcome::Denied, why.clone())
                .await;
            return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
        }
        if let Some(Value::Object(rewritten)) = &decision.arguments {
            params.arguments = Some(rewritten.clone());
            request.arguments = Value::Object(rewritten.clone());
        }
        let timeout = self.session.options.call_timeout;
        let response = upstream.call(params, timeout, peer, cancelled).await;
        Ok(self.session.ran(request, &decision, response).await)
    }
}

impl Session {
    /// What the client gets for a call that ran (or may have): its result
    /// as checked, the outcome recorded and the notes appended. From here
    /// nothing that fails may say the call did not run, or the model would
    /// run it again.
    async fn ran(
        &self,
        request: ToolRequest,
        decision: &Decision,
        response: std::result::Result<CallToolResponse, String>,
    ) -> CallToolResponse {
        let (outcome, summary) = match &response {
            Ok(CallToolResponse::Complete(result)) => {
                outcome_of(Some(&serde_json::to_value(result).unwrap_or_default()))
            }
            Ok(_) => (Outcome::Succeeded, String::new()),
            Err(err) => (Outcome::Failed, err.to_string()),
        };
        let response = match response {
            Ok(CallToolResponse::Complete(result)) if decision.output_checked => {
                let ran = request.clone();
                match self
                    .checked(request, outcome, summary.clone(), result)
                    .await
                {
                    Ok(result) => Ok(result.into()),
                    Err(err) => {
                        // The check (and the outcome with it) did not reach
                        // the daemon: record the outcome on its own.
                        self.observe(ran, outcome, summary).await;
                        return unchecked(&err).into();
                    }
                }
            }
            other => {
                self.observe(request, outcome, summary).await;
                other
            }
        };
        match response {
            Ok(CallToolResponse::Complete(mut result)) => {
                result
                    .content
                    .extend(notes(decision).map(ContentBlock::text));
                result.into()
            }
            Ok(other) => other,
            Err(err) => CallToolResult::error(vec![ContentBlock::text(err)]).into(),
        }
    }
}

/// A tool result as the model reads it: its text blocks, or, with none,
/// its structured content as JSON.
fn output_text(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if texts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        return structured.to_string();
    }
    texts.join("\n")
}

/// The policies' notes, one text block.
fn notes(decision: &Decision) -> Option<String> {
    (!decision.notes.is_empty()).then(|| {
        let texts: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
        format!("toolgate notes:\n{}", texts.join("\n\n"))
    })
}

/// Why a call or request did not go through, and how a person approves
/// it.
fn refusal_reason(decision: &Decision) -> String {
    let what = if decision.verdict == Verdict::Pause {
        "paused"
    } else {
        "denied"
    };
    let mut text = format!(
        "toolgate {what} this call: {}",
        decision.reason.as_deref().unwrap_or("no reason given")
    );
    text.push_str(&how_to_approve(decision));
    text
}

/// [`refusal_reason`] and the policies' notes, as one text (for an error
/// rather than a tool result).
pub(crate) fn refusal_text(decision: &Decision) -> String {
    let mut text = refusal_reason(decision);
    if let Some(notes) = notes(decision) {
        text.push_str("\n\n");
        text.push_str(&notes);
    }
    text
}

/// A tool result for a call that ran but whose output toolgate could not
/// check: withheld, and said to have run.
fn unchecked(err: &Error) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "this call ran, but toolgate could not check its output, so it is withheld: {err}. Do \
         not run it again unless running it twice is safe. Diagnose with TOOLGATE_LOG=debug."
    ))])
}

/// A tool result for a call that did not run.
fn refusal(decision: &Decision) -> CallToolResult {
    let mut content = vec![ContentBlock::text(refusal_reason(decision))];
    content.extend(notes(decision).map(ContentBlock::text));
    CallToolResult::error(content)
}

/// One daemon request, off the async threads.
async fn blocking(daemon: DaemonLink, request: DaemonRequest) -> Result<Value> {
    tokio::task::spawn_blocking(move || daemon.call(&request))
        .await
        .map_err(|err| Error::Request(format!("the daemon request was cancelled: {err}")))?
}
