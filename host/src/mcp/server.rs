//! The gateway as the client sees it: an MCP server that starts the real
//! servers when the client initializes, and forwards what the client asks
//! of them. Tools, resource reads and subscriptions and prompts are decided
//! by the policies first (a `resources/read` of `file:///etc/passwd` is as
//! much an access as a `Read`), and so are completions; listings and the
//! logging level go straight through. Each forward ends when the client
//! cancels it or at `--call-timeout`.

// resources/subscribe and logging/setLevel are legacy-only in MCP's newest
// revision, and what clients on 2025-11-25 and earlier use.
#![expect(deprecated)]

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, DiscoverRequestMethod, DiscoverResult, ErrorData as McpError,
    GetPromptRequestParams, GetPromptResponse, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, Reference,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::json;

use super::{Gateway, Relay, Upstream, Upstreams};

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
        self.session
            .allow(peer, upstream.server_name(), method, arguments)
            .await
    }

    /// Forward one request to a server: given up when the client cancels
    /// it or the server takes longer than `--call-timeout`.
    async fn forward<T>(
        &self,
        context: &RequestContext<RoleServer>,
        upstream: &Upstream,
        method: &str,
        work: impl std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        let timeout = self.session.options.call_timeout;
        tokio::select! {
            () = context.ct.cancelled() => Err(internal(format!("`{method}` was cancelled"))),
            answer = tokio::time::timeout(timeout, work) => match answer {
                Ok(answer) => answer.map_err(|err| forwarded(upstream, method, err)),
                Err(_) => Err(internal(format!(
                    "the MCP server `{}` did not answer `{method}` within {} s",
                    upstream.server_name(),
                    timeout.as_secs()
                ))),
            },
        }
    }

    /// A listing of the servers' tools, resources or prompts: given up, as
    /// a forward is, when the client cancels it or it takes longer than
    /// `--call-timeout` (a server that went quiet must not hang the client).
    async fn listed<T>(
        &self,
        context: &RequestContext<RoleServer>,
        method: &str,
        work: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, McpError> {
        let timeout = self.session.options.call_timeout;
        tokio::select! {
            () = context.ct.cancelled() => Err(internal(format!("`{method}` was cancelled"))),
            answer = tokio::time::timeout(timeout, work) => match answer {
                Ok(answer) => answer.map_err(internal),
                Err(_) => Err(internal(format!(
                    "the servers did not answer `{method}` within {} s",
                    timeout.as_secs()
                ))),
            },
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
        // One initialize per session: a second could change what the
        // client is recorded to support (and so whether it is asked).
        if self
            .initializing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Err(McpError::invalid_request(
                "this session is initialized already",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        let timeout = self.session.options.call_timeout;
        self.upstreams
            .get_or_try_init(|| async {
                let mut servers = Vec::new();
                for server in self.servers.iter() {
                    let relay = Relay::new(
                        self.session.clone(),
                        context.peer.clone(),
                        &request,
                        server.name.as_deref(),
                    );
                    let connected = tokio::time::timeout(timeout, server.connect(relay))
                        .await
                        .unwrap_or_else(|_| {
                            Err(crate::Error::Request(format!(
                                "an MCP server did not start a session within {} s",
                                timeout.as_secs()
                            )))
                        })
                        .map_err(|err| {
                            tracing::error!(error = %err, "an MCP server did not start");
                            internal(err.to_string())
                        })?;
                    servers.push(connected);
                }
                Upstreams::new(servers).map_err(|err| internal(err.to_string()))
            })
            .await?;
        self.negotiate_initialize(&request)
    }

    /// MCP 2026-07-28's opener, answered as a server without it answers
    /// (`Method not found`), so the client falls back to `initialize`: the
    /// gateway starts the real servers only then, and until then it has
    /// no capabilities to report. (Answered with none, Claude Code 2.1.332
    /// saw no tools through the gateway at all.)
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        Err(McpError::method_not_found::<DiscoverRequestMethod>())
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let upstreams = self.upstreams()?;
        let paged = request.as_ref().is_some_and(|r| r.cursor.is_some());
        let listed = self
            .listed(&context, "tools/list", upstreams.list_tools(request))
            .await?;
        self.offered(&context.peer, listed, paged).await
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        request.meta = client_meta(&context);
        // toolgate failing must not run the call: answer with the error.
        Ok(self
            .call(request, &context.peer, &context.ct)
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let upstreams = self.upstreams()?;
        self.listed(
            &context,
            "resources/list",
            upstreams.list_resources(request),
        )
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let upstreams = self.upstreams()?;
        let listing = upstreams.list_resource_templates(request);
        self.listed(&context, "resources/templates/list", listing)
            .await
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
        let read = upstream.peer().read_resource_once(request);
        match self
            .forward(&context, upstream, "resources/read", read)
            .await?
        {
            ReadResourceResponse::Complete(result) => Ok(result.into()),
            _ => Err(not_relayed(upstream, "resources/read")),
        }
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
        let subscribed = upstream.peer().subscribe(request);
        self.forward(&context, upstream, "resources/subscribe", subscribed)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let upstream = self
            .upstreams()?
            .route_uri(&request.uri)
            .map_err(|why| McpError::invalid_params(why, None))?;
        let unsubscribed = upstream.peer().unsubscribe(request);
        self.forward(&context, upstream, "resources/unsubscribe", unsubscribed)
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let upstreams = self.upstreams()?;
        self.listed(&context, "prompts/list", upstreams.list_prompts(request))
            .await
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
        let got = upstream.peer().get_prompt_once(request);
        match self.forward(&context, upstream, "prompts/get", got).await? {
            GetPromptResponse::Complete(result) => Ok(result.into()),
            _ => Err(not_relayed(upstream, "prompts/get")),
        }
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let upstream = Self::route_completion(self.upstreams()?, &mut request)?;
        // What is completed (a prompt's or a resource's argument, and the
        // text so far) reaches the server: decided like a read.
        let arguments = serde_json::to_value(&request)
            .map_err(|err| McpError::invalid_params(err.to_string(), None))?;
        self.allowed(&context.peer, upstream, "completion/complete", arguments)
            .await?;
        let completed = upstream.peer().complete(request);
        self.forward(&context, upstream, "completion/complete", completed)
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let upstreams = self.upstreams()?;
        for upstream in upstreams.with(|c| c.logging.is_some()) {
            let set = upstream.peer().set_level(request.clone());
            self.forward(&context, upstream, "logging/setLevel", set)
                .await?;
        }
        Ok(())
    }
}

/// The client's `_meta` of a request (its progress token included), to go
/// on to the server; rmcp hands it over in the context, not the params.
fn client_meta(context: &RequestContext<RoleServer>) -> Option<rmcp::model::RequestMetaObject> {
    (!context.meta.0.is_empty()).then(|| context.meta.clone())
}

/// A result asking the client for more input (multi-round-trip, or a
/// task): what it would ask has not been decided, so it goes no further.
fn not_relayed(upstream: &Upstream, method: &str) -> McpError {
    internal(format!(
        "the MCP server `{}` answered `{method}` with a request for more input or a task, which \
         the gateway does not relay",
        upstream.server_name()
    ))
}

/// A forwarded request's failure, as the client's error: the server's own
/// error as it is, anything else named.
fn forwarded(upstream: &Upstream, method: &str, err: rmcp::ServiceError) -> McpError {
    match err {
        rmcp::ServiceError::McpError(error) => error,
        other => internal(crate::redact::redact(&format!(
            "the MCP server `{}` failed on `{method}`: {other}",
            upstream.server_name()
        ))),
    }
}
