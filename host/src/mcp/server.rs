//! The gateway as the client sees it: an MCP server that starts the real
//! servers when the client initializes, and forwards what the client asks
//! of them. Tools, resource reads and subscriptions and prompts are decided
//! by the policies first (a `resources/read` of `file:///etc/passwd` is as
//! much an access as a `Read`); listings, completions and the logging level
//! go straight through.

// resources/subscribe and logging/setLevel are legacy-only in MCP's newest
// revision, and what clients on 2025-11-25 and earlier use.
#![expect(deprecated)]

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, ErrorData as McpError, GetPromptRequestParams, GetPromptResponse,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::json;

use super::{Decided, Gateway, Relay, Upstream, Upstreams, refusal_text};
use crate::decision::Verdict;

fn internal(message: impl Into<String>) -> McpError {
    McpError::internal_error(message.into(), None)
}

impl Gateway {
    /// Decide on `method` with `arguments` for `upstream`: `Ok` to forward
    /// it, else the error the client gets.
    async fn allowed(
        &self,
        peer: &Peer<RoleServer>,
        upstream: &Upstream,
        method: &str,
        arguments: serde_json::Value,
    ) -> Result<(), McpError> {
        let Decided { decision, .. } = self
            .session
            .decide(peer, upstream.server_name(), method, arguments)
            .await
            .map_err(|err| {
                internal(format!(
                    "toolgate failed, so `{method}` was not forwarded: {err}. Diagnose with \
                     TOOLGATE_LOG=debug."
                ))
            })?;
        match decision.verdict {
            Verdict::Allow => Ok(()),
            _ => Err(McpError::invalid_request(refusal_text(&decision), None)),
        }
    }

    /// The server a completion is about.
    fn route_completion<'u>(
        upstreams: &'u Upstreams,
        request: &mut CompleteRequestParams,
    ) -> Result<&'u Arc<Upstream>, McpError> {
        match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (upstream, name) = upstreams
                    .route(&prompt.name)
                    .ok_or_else(|| McpError::invalid_params("no server has that prompt", None))?;
                prompt.name = name;
                Ok(upstream)
            }
            Reference::Resource(resource) => upstreams
                .route_uri(&resource.uri)
                .map_err(|why| McpError::invalid_params(why, None)),
            _ => Err(McpError::invalid_params(
                "a completion for something other than a prompt or resource",
                None,
            )),
        }
    }
}

impl ServerHandler for Gateway {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let upstreams = self
            .upstreams
            .get_or_try_init(|| async {
                let mut servers = Vec::new();
                for server in self.servers.iter() {
                    let relay = Relay::new(self.session.clone(), context.peer.clone(), &request);
                    let connected = server.connect(relay).await.map_err(|err| {
                        tracing::error!(error = %err, "an MCP server did not start");
                        internal(err.to_string())
                    })?;
                    servers.push(connected);
                }
                Upstreams::new(servers).map_err(|err| internal(err.to_string()))
            })
            .await?;
        let _ = upstreams;
        self.negotiate_initialize(&request)
    }

    fn get_info(&self) -> ServerConfig {
        self.upstreams
            .get()
            .map(|upstreams| upstreams.info().clone())
            .unwrap_or_default()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.upstreams()?
            .list_tools(request)
            .await
            .map_err(internal)
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        request.meta = client_meta(&context);
        // toolgate failing must not run the call: answer with the error.
        Ok(self
            .call(request, &context.peer)
            .await
            .unwrap_or_else(|err| {
                CallToolResult::error(vec![ContentBlock::text(format!(
                    "toolgate failed, so this call was not run: {err}. Diagnose with `toolgate \
                     check` on the same call, or rerun the gateway with TOOLGATE_LOG=debug."
                ))])
                .into()
            }))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.upstreams()?
            .list_resources(request)
            .await
            .map_err(internal)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let upstreams = self.upstreams()?;
        upstreams
            .list_resource_templates(request)
            .await
            .map_err(internal)
    }

    async fn read_resource(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        request.meta = client_meta(&context);
        let upstream = self
            .upstreams()?
            .route_uri(&request.uri)
            .map_err(|why| McpError::invalid_params(why, None))?;
        let arguments = json!({"uri": request.uri});
        self.allowed(&context.peer, upstream, "resources/read", arguments)
            .await?;
        upstream
            .peer()
            .read_resource_once(request)
            .await
            .map_err(|err| forwarded(upstream, "resources/read", err))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let upstream = self
            .upstreams()?
            .route_uri(&request.uri)
            .map_err(|why| McpError::invalid_params(why, None))?;
        let arguments = json!({"uri": request.uri});
        self.allowed(&context.peer, upstream, "resources/subscribe", arguments)
            .await?;
        upstream
            .peer()
            .subscribe(request)
            .await
            .map_err(|err| forwarded(upstream, "resources/subscribe", err))
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let upstream = self
            .upstreams()?
            .route_uri(&request.uri)
            .map_err(|why| McpError::invalid_params(why, None))?;
        upstream
            .peer()
            .unsubscribe(request)
            .await
            .map_err(|err| forwarded(upstream, "resources/unsubscribe", err))
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.upstreams()?
            .list_prompts(request)
            .await
            .map_err(internal)
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        request.meta = client_meta(&context);
        let (upstream, name) = self.upstreams()?.route(&request.name).ok_or_else(|| {
            McpError::invalid_params("no server behind this gateway has that prompt", None)
        })?;
        request.name = name;
        let arguments = json!({"name": request.name, "arguments": request.arguments});
        self.allowed(&context.peer, upstream, "prompts/get", arguments)
            .await?;
        upstream
            .peer()
            .get_prompt_once(request)
            .await
            .map_err(|err| forwarded(upstream, "prompts/get", err))
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let upstream = Self::route_completion(self.upstreams()?, &mut request)?;
        upstream
            .peer()
            .complete(request)
            .await
            .map_err(|err| forwarded(upstream, "completion/complete", err))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let upstreams = self.upstreams()?;
        for upstream in upstreams.with(|c| c.logging.is_some()) {
            upstream
                .peer()
                .set_level(request.clone())
                .await
                .map_err(|err| forwarded(upstream, "logging/setLevel", err))?;
        }
        Ok(())
    }
}

/// The client's `_meta` of a request (its progress token included), to go
/// on to the server; rmcp hands it over in the context, not the params.
fn client_meta(context: &RequestContext<RoleServer>) -> Option<rmcp::model::RequestMetaObject> {
    (!context.meta.0.is_empty()).then(|| context.meta.clone())
}

/// A forwarded request's failure, as the client's error: the server's own
/// error as it is, anything else named.
fn forwarded(upstream: &Upstream, method: &str, err: rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(error) => error,
        other => internal(format!(
            "the MCP server `{}` failed on `{method}`: {other}",
            upstream.server_name()
        )),
    }
}
