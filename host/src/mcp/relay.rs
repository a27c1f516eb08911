//! What a server sends toward the client, through the gateway: its
//! requests (sampling, elicitation, roots), each decided by the policies
//! like a tool call and then relayed to the client, whose answer goes back;
//! and its notifications (logging, list changes, resource updates),
//! relayed as they come; progress goes with its call (see [`super::progress`]).
//!
//! One [`Relay`] serves one server connection of one client session, so
//! everything the server sends has exactly one client to go to.

// Sampling, roots and logging are deprecated in MCP's newest revision
// (SEP-2577) but are what servers on 2025-11-25 and earlier use.
#![expect(deprecated)]

use std::sync::{Arc, OnceLock};

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorData as McpError, Implementation,
    InitializeRequestParams, ListRootsRequest, ListRootsResult, LoggingMessageNotificationParam,
    ProtocolVersion, ResourceUpdatedNotificationParam, ServerRequest,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::progress::ProgressTokens;

use super::Session;

/// Server-to-client requests one server may have open at once.
const ASKING_AT_ONCE: usize = 4;
/// The prefix of toolgate's own questions to the person; a server's
/// question may not pass for one.
const TOOLGATE_ASKS: &str = "toolgate";

/// The client side of one server connection: what the gateway tells the
/// server about itself, and where what the server sends goes.
pub struct Relay {
    session: Arc<Session>,
    client: Peer<RoleServer>,
    /// What the gateway offers the server: the client's own protocol
    /// version (one with an `initialize` handshake), the capabilities the
    /// gateway relays that the client has, and toolgate's name.
    config: ClientConfig,
    /// The server's name in the origin: the operator's, or the one it
    /// reports once it has introduced itself.
    pub(super) server: Arc<OnceLock<String>>,
    /// Server-to-client requests being decided or relayed now, bounded so
    /// a server cannot flood the person with questions.
    asking: tokio::sync::Semaphore,
    /// The calls whose progress the client asked for.
    pub(super) progress: Arc<ProgressTokens>,
}

impl Relay {
    /// For the client that sent `initialize`, as `client`.
    pub(super) fn new(
        session: Arc<Session>,
        client: Peer<RoleServer>,
        initialize: &InitializeRequestParams,
        name: Option<&str>,
    ) -> Self {
        let server = Arc::new(OnceLock::new());
        if let Some(name) = name {
            let _ = server.set(name.to_string());
        }
        Self {
            session,
            client,
            config: upstream_config(initialize),
            server,
            asking: tokio::sync::Semaphore::new(ASKING_AT_ONCE),
            progress: Arc::default(),
        }
    }

    /// Decide on a request the server makes of the client (`method`, as
    /// the policies see it: `arguments`) and, if allowed, ask the client
    /// `request`; else the error the server gets. At most a few at a time
    /// per server, deciding and asking alike, and none before the server
    /// has a name to decide under. If the server cancels its request
    /// (`cancelled`), the decision stops there, or the client is told.
    async fn relay(
        &self,
        method: &str,
        arguments: serde_json::Value,
        request: ServerRequest,
        cancelled: &CancellationToken,
    ) -> Result<ClientResult, McpError> {
        let Some(server) = self.server.get() else {
            return Err(McpError::invalid_request(
                format!("`{method}` before the server finished initializing is not relayed"),
                None,
            ));
        };
        let _turn = self
            .asking
            .acquire()
            .await
            .map_err(|_| McpError::internal_error("the gateway session is closing", None))?;
        let gone = || McpError::internal_error(format!("`{method}` was cancelled"), None);
        tokio::select! {
            allowed = self.session.allow(&self.client, server, method, arguments) => allowed?,
            () = cancelled.cancelled() => return Err(gone()),
        }
        let mut asked = self
            .client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|err| relay_failed(method, err))?;
        tokio::select! {
            answer = &mut asked.rx => match answer {
                Ok(answer) => answer.map_err(|err| relay_failed(method, err)),
                Err(_) => Err(relay_failed(method, rmcp::ServiceError::TransportClosed)),
            },
            () = cancelled.cancelled() => {
                let _ = asked
                    .cancel(Some(format!("the MCP server cancelled `{method}`")))
                    .await;
                Err(gone())
            }
        }
    }
}

/// A server request's parameters as the policies see them; one that does
/// not serialize is not relayed.
fn arguments<T: serde::Serialize>(method: &str, params: &T) -> Result<serde_json::Value, McpError> {
    serde_json::to_value(params).map_err(|err| {
        McpError::invalid_params(
            format!("`{method}` is malformed ({err}); not relayed"),
            None,
        )
    })
}

/// What the gateway offers a server on behalf of the client that sent
/// `initialize`.
fn upstream_config(initialize: &InitializeRequestParams) -> ClientConfig {
    let theirs = &initialize.capabilities;
    let mut capabilities = ClientCapabilities::default();
    capabilities.roots = theirs.roots.clone();
    capabilities.sampling = theirs.sampling.clone();
    capabilities.elicitation = theirs.elicitation.clone();
    let mut config = ClientConfig::new(
        capabilities,
        Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
    );
    config.protocol_version = if initialize.protocol_version.has_initialize()
        && ProtocolVersion::KNOWN_VERSIONS.contains(&initialize.protocol_version)
    {
        initialize.protocol_version.clone()
    } else {
        ProtocolVersion::LATEST_WITH_INITIALIZE
    };
    config
}

/// The client answered with a result of another kind than asked.
fn unexpected(method: &str) -> McpError {
    McpError::internal_error(
        format!("the client answered `{method}` with something else"),
        None,
    )
}

/// A failed relay to the client, as the server's error.
fn relay_failed(method: &str, err: rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(error) => error,
        other => McpError::internal_error(
            format!("the client did not answer `{method}`: {other}"),
            None,
        ),
    }
}

impl ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        if self.config.capabilities.sampling.is_none() {
            return Err(McpError::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >());
        }
        let method = "sampling/createMessage";
        let decided_on = arguments(method, &params)?;
        // What rmcp's own `create_message` checks before sending.
        if (params.tools.is_some() || params.tool_choice.is_some())
            && !self.client.supports_sampling_tools()
        {
            return Err(McpError::invalid_params(
                "tools or toolChoice in a sampling request, and the client has no sampling tools",
                None,
            ));
        }
        params
            .validate()
            .map_err(|err| McpError::invalid_params(err, None))?;
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.relay(method, decided_on, request, &context.ct).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(unexpected(method)),
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if self.config.capabilities.elicitation.is_none() {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let method = "elicitation/create";
        let decided_on = arguments(method, &request)?;
        // The person sees whose question it is, and none passes for
        // toolgate's own.
        let server = self.server.get().map_or("", String::as_str);
        let request = match request {
            ElicitRequestParams::FormElicitationParams {
                meta,
                message,
                requested_schema,
            } if !message
                .trim_start()
                .to_lowercase()
                .starts_with(TOOLGATE_ASKS) =>
            {
                ElicitRequestParams::FormElicitationParams {
                    meta,
                    message: format!("The MCP server `{server}` asks: {message}"),
                    requested_schema,
                }
            }
            ElicitRequestParams::UrlElicitationParams {
                meta,
                message,
                url,
                elicitation_id,
            } if !message
                .trim_start()
                .to_lowercase()
                .starts_with(TOOLGATE_ASKS) =>
            {
                ElicitRequestParams::UrlElicitationParams {
                    meta,
                    message: format!("The MCP server `{server}` asks: {message}"),
                    url,
                    elicitation_id,
                }
            }
            _ => {
                return Err(McpError::invalid_params(
                    "an elicitation that reads as toolgate's own question is not relayed",
                    None,
                ));
            }
        };
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(request));
        match self.relay(method, decided_on, request, &context.ct).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(unexpected(method)),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        if self.config.capabilities.roots.is_none() {
            return Ok(ListRootsResult::default());
        }
        let method = "roots/list";
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.relay(method, json!({}), request, &context.ct).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(unexpected(method)),
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.client.notify_logging_message(params).await;
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.client.notify_resource_updated(params).await;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.client.notify_resource_list_changed().await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.client.notify_tool_list_changed().await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.client.notify_prompt_list_changed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_offered_the_clients_version_and_what_the_gateway_relays() {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        let mut initialize =
            InitializeRequestParams::new(capabilities, Implementation::new("a-client", "9"));
        initialize.protocol_version = ProtocolVersion::V_2025_06_18;
        let config = upstream_config(&initialize);
        assert_eq!(config.protocol_version, ProtocolVersion::V_2025_06_18);
        assert!(config.capabilities.sampling.is_some() && config.capabilities.roots.is_none());
        assert_eq!(config.client_info.name, "toolgate");

        // A client on the newest revision (no initialize handshake) or an
        // unknown one: the newest that has one.
        initialize.protocol_version = ProtocolVersion::LATEST;
        assert_eq!(
            upstream_config(&initialize).protocol_version,
            ProtocolVersion::LATEST_WITH_INITIALIZE
        );
    }
}
