//! The real MCP servers behind a gateway session. Each client session
//! starts its own connections when it initializes, offering each server
//! what that client can do (see [`Relay`]), so whatever a server sends
//! toward the client has exactly one client to go to.
//!
//! One server: its tools and prompts keep their names. Several: each is
//! offered as `SERVER__NAME` and routed back by that prefix, and each call
//! keeps its own server as origin, so one gateway can front many servers
//! without their tools (or their approvals) mixing. Resources keep their
//! URIs and go to the server that listed them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientRequest, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    ServerPeerInfo, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RoleServer, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

use super::progress::{Ordered, ProgressTokens};
use super::relay::Relay;
use crate::request::Origin;
use crate::{Error, Result};

/// Between a server's name and its tool's, when a gateway fronts several.
pub const SEPARATOR: &str = "__";

/// One server behind the gateway: its name in the origin (None: the name
/// it reports) and where it is.
#[derive(Debug, Clone)]
pub struct UpstreamServer {
    /// The origin's server name, if the operator gave one.
    pub name: Option<String>,
    /// How to reach it.
    pub at: ServerAt,
}

/// Where a server is.
#[derive(Debug, Clone)]
pub enum ServerAt {
    /// A command that speaks MCP on stdio, started for each client session.
    Command {
        /// The program and its arguments.
        words: Vec<OsString>,
        /// Environment variables the server must not inherit (the
        /// gateway's own tokens).
        withheld: Vec<String>,
    },
    /// A streamable-HTTP endpoint (`http://…` or `https://…`), where each
    /// client session opens a session of its own.
    Url(String),
}

impl UpstreamServer {
    /// Reach the server and introduce the gateway to it through `relay`.
    pub(super) async fn connect(&self, relay: Relay) -> Result<Arc<Upstream>> {
        let (server_name, progress) = (relay.server.clone(), relay.progress.clone());
        let service = match &self.at {
            ServerAt::Command { words, withheld } => {
                let program = words[0].to_string_lossy().into_owned();
                let mut command = tokio::process::Command::new(&words[0]);
                // The server ends with its session, even one that ignores EOF.
                command.args(&words[1..]).kill_on_drop(true);
                for name in withheld {
                    command.env_remove(name);
                }
                let transport = TokioChildProcess::new(command).map_err(|err| {
                    Error::Request(format!("cannot start the MCP server {program:?}: {err}"))
                })?;
                let transport = Ordered::new(transport, progress.clone());
                relay.serve(transport).await.map_err(|err| {
                    self.no_session(
                        &format!("{program:?}"),
                        err,
                        "check that its command runs an MCP server on stdio",
                    )
                })?
            }
            ServerAt::Url(url) => {
                // reqwest is built without a default TLS provider.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                let transport = Ordered::new(transport, progress.clone());
                relay.serve(transport).await.map_err(|err| {
                    // A URL's query may hold a token.
                    self.no_session(
                        url.split('?').next().unwrap_or(url),
                        err,
                        "check that the URL is a streamable-HTTP MCP endpoint and that it is up",
                    )
                })?
            }
        };
        let reported = service.peer().peer_info();
        let server = self
            .name
            .clone()
            .or_else(|| {
                let reported = reported.as_ref()?.server_info.as_ref()?;
                match Origin::mcp_named(&reported.name) {
                    Origin::Mcp(name) => Some(name),
                    _ => None,
                }
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "mcp".into());
        let _ = server_name.set(server.clone());
        Ok(Arc::new(Upstream {
            service,
            server,
            progress,
        }))
    }

    fn no_session(&self, what: &str, err: impl std::fmt::Display, fix: &str) -> Error {
        let which = self
            .name
            .as_deref()
            .map_or(String::new(), |n| format!(" `{n}`"));
        let err = crate::redact::redact(&err.to_string());
        Error::Request(format!(
            "the MCP server{which} ({what}) did not start a session: {err}; {fix}"
        ))
    }
}

/// A connection to one real server.
pub struct Upstream {
    service: RunningService<RoleClient, Relay>,
    server: String,
    progress: Arc<ProgressTokens>,
}

impl Upstream {
    /// The server name used as the calls' origin.
    pub fn server_name(&self) -> &str {
        &self.server
    }

    /// The server's side of the connection.
    pub(super) fn peer(&self) -> &rmcp::Peer<RoleClient> {
        self.service.peer()
    }

    fn reported(&self) -> Option<Arc<ServerPeerInfo>> {
        self.service.peer().peer_info()
    }

    /// Forward a call, its progress (if the client asked for it) relayed
    /// to `client` under the client's own token, all of it before the
    /// answer; a failure as a message for the model.
    pub(super) async fn call(
        &self,
        mut params: CallToolRequestParams,
        timeout: Duration,
        client: &rmcp::Peer<RoleServer>,
        cancelled: &tokio_util::sync::CancellationToken,
    ) -> std::result::Result<CallToolResponse, String> {
        let name = params.name.clone();
        let server = &self.server;
        let clients_token = params.meta.as_ref().and_then(|m| m.get_progress_token());
        if let Some(meta) = params.meta.as_mut() {
            meta.0.remove("progressToken");
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = self
            .peer()
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await;
        let handle = match sent {
            Ok(handle) => handle,
            Err(err) => return Err(self.failed(&name, err)),
        };
        let ours = handle.progress_token.clone();
        let progress = self.progress.relay(ours, clients_token, client.clone());
        let id = handle.id.clone();
        let answer = tokio::select! {
            answer = tokio::time::timeout(timeout, handle.await_response()) => answer,
            () = cancelled.cancelled() => {
                // The client cancelled its call: so does the gateway, upstream.
                drop(progress);
                let reason = Some("the client cancelled the call".to_string());
                let notice = CancelledNotificationParam::new(Some(id), reason);
                let _ = self.peer().notify_cancelled(notice).await;
                return Err(format!("the client cancelled `{name}`; the server was told"));
            }
        };
        progress.finish().await;
        match answer {
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(CallToolResponse::Complete(result)),
            // What a task or a request for more input would ask of the
            // client has not been decided: it goes no further.
            Ok(Ok(_)) => Err(format!(
                "the MCP server `{server}` answered `{name}` with something other than a tool \
                 result (a task, or a request for more input), which the gateway does not relay"
            )),
            Ok(Err(err)) => Err(self.failed(&name, err)),
            Err(_) => Err(format!(
                "the MCP server `{server}` did not answer `{name}` within {} s (a reply over 16 \
                 MiB is discarded unread); the call may have run",
                timeout.as_secs()
            )),
        }
    }

    fn failed(&self, name: &str, err: rmcp::ServiceError) -> String {
        let server = &self.server;
        match err {
            rmcp::ServiceError::TransportClosed => format!(
                "the MCP server `{server}` closed its connection (it exited, crashed or went \
                 away) during or before `{name}`; a command's log is on the gateway's stderr. A \
                 new client session connects again"
            ),
            // A transport's error may name a URL whose query holds a token.
            err => crate::redact::redact(&format!(
                "the MCP server `{server}` failed on `{name}`: {err}"
            )),
        }
    }
}

/// The servers behind one gateway session.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    info: ServerConfig,
    /// Which server listed each resource, when there are several.
    resources: Mutex<HashMap<String, usize>>,
    /// The tools the servers listed last, by the name clients call them:
    /// their input schemas check the policies' rewrites, and the gateway
    /// asks again which of them may be offered.
    tools: Mutex<Vec<rmcp::model::Tool>>,
}

impl Upstreams {
    /// The session's servers; their names must differ.
    pub fn new(servers: Vec<Arc<Upstream>>) -> Result<Arc<Self>> {
        if servers.is_empty() {
            return Err(Error::Request(
                "the gateway needs a server: `toolgate mcp -- COMMAND…` or --server NAME=COMMAND"
                    .into(),
            ));
        }
        for (index, upstream) in servers.iter().enumerate() {
            if servers[..index]
                .iter()
                .any(|earlier| earlier.server == upstream.server)
            {
                return Err(Error::Request(format!(
                    "two servers are named `{}`; give each its own name (--server NAME=COMMAND)",
                    upstream.server
                )));
            }
        }
        let reported: Vec<_> = servers.iter().map(|s| s.reported()).collect();
        let offered = |pick: fn(&ServerCapabilities) -> bool| {
            reported
                .iter()
                .flatten()
                .any(|info| pick(&info.capabilities))
        };
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = reported
            .iter()
            .flatten()
            .find_map(|info| info.capabilities.tools.clone());
        capabilities.resources = reported
            .iter()
            .flatten()
            .find_map(|info| info.capabilities.resources.clone());
        capabilities.prompts = reported
            .iter()
            .flatten()
            .find_map(|info| info.capabilities.prompts.clone());
        capabilities.completions = offered(|c| c.completions.is_some()).then(Default::default);
        capabilities.logging = offered(|c| c.logging.is_some()).then(Default::default);
        let mut info = ServerConfig::new(capabilities);
        // The newest version every server speaks, so the client agrees to
        // one each of them does.
        if let Some(version) = reported
            .iter()
            .flatten()
            .map(|info| info.protocol_version.clone())
            .min_by(|a, b| a.as_str().cmp(b.as_str()))
        {
            info.protocol_version = version;
        }
        let names: Vec<&str> = servers.iter().map(|s| s.server.as_str()).collect();
        info.server_info = Implementation::new(
            format!("toolgate({})", names.join("+")),
            env!("CARGO_PKG_VERSION"),
        );
        let instructions: Vec<String> = servers
            .iter()
            .zip(&reported)
            .filter_map(|(upstream, info)| {
                let text = info.as_ref()?.instructions.clone()?;
                Some(if servers.len() == 1 {
                    text
                } else {
                    format!("[{}] {text}", upstream.server)
                })
            })
            .collect();
        info.instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
        Ok(Arc::new(Self {
            servers,
            info,
            resources: Mutex::default(),
            tools: Mutex::default(),
        }))
    }

    /// What the gateway tells its client about itself.
    pub fn info(&self) -> &ServerConfig {
        &self.info
    }

    fn prefixed(&self) -> bool {
        self.servers.len() > 1
    }

    /// The server and its own name for a tool or prompt the client named.
    pub fn route(&self, name: &str) -> Option<(&Arc<Upstream>, String)> {
        if !self.prefixed() {
            return Some((&self.servers[0], name.to_string()));
        }
        self.servers.iter().find_map(|upstream| {
            let tool = name
                .strip_prefix(upstream.server.as_str())?
                .strip_prefix(SEPARATOR)?;
            (!tool.is_empty()).then(|| (upstream, tool.to_string()))
        })
    }

    /// The server a resource URI belongs to: the only one, or the one that
    /// listed it.
    pub(super) fn route_uri(&self, uri: &str) -> std::result::Result<&Arc<Upstream>, String> {
        if !self.prefixed() {
            return Ok(&self.servers[0]);
        }
        let listed = self
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uri)
            .copied();
        listed.map(|index| &self.servers[index]).ok_or_else(|| {
            format!(
                "this gateway fronts several servers and none of them listed `{uri}`; list the \
                 resources first (resources/list)"
            )
        })
    }

    fn prefix(&self, upstream: &Upstream, name: &str) -> String {
        format!("{}{SEPARATOR}{name}", upstream.server)
    }

    /// The tools clients see: one server's page as it is; several servers'
    /// lists in full, prefixed.
    pub async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListToolsResult, String> {
        if !self.prefixed() {
            let upstream = &self.servers[0];
            let listed = upstream.peer().list_tools(request).await;
            return listed.map_err(|err| list_failed(upstream, "tools", err));
        }
        Ok(ListToolsResult::with_all_items(self.all_tools().await?))
    }

    /// Every server's tools, gathered (see [`gather`]), under the names
    /// clients call them.
    async fn all_tools(&self) -> std::result::Result<Vec<rmcp::model::Tool>, String> {
        let mut tools = Vec::new();
        for upstream in &self.servers {
            let listed = gather(upstream, "tools", |page| async move {
                let page = upstream.peer().list_tools(page).await?;
                Ok((page.tools, page.next_cursor))
            });
            for mut tool in listed.await? {
                if self.prefixed() {
                    tool.name = self.prefix(upstream, &tool.name).into();
                }
                tools.push(tool);
            }
        }
        Ok(tools)
    }

    /// The input schema of the tool a client calls `name`, listing the
    /// servers' tools first (for at most `within`) if the client has not,
    /// so a policy's rewrite of it can be checked.
    pub(super) async fn learn_schema(
        &self,
        name: &str,
        within: Duration,
    ) -> Option<serde_json::Value> {
        if let Some(schema) = self.schema_of(name) {
            return Some(schema);
        }
        match tokio::time::timeout(within, self.all_tools()).await {
            Ok(Ok(tools)) => self.remember_tools(&tools),
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot list the tools to learn a schema"),
            Err(_) => {
                tracing::warn!("the servers did not list their tools in time to learn a schema")
            }
        }
        self.schema_of(name)
    }

    /// Remember `tools`, as listed to a client (a page replaces the tools
    /// of the same names).
    pub(super) fn remember_tools(&self, tools: &[rmcp::model::Tool]) {
        let mut known = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|tool| !tools.iter().any(|t| t.name == tool.name));
        known.extend(tools.iter().cloned());
    }

    /// The tools listed so far.
    pub(super) fn listed_tools(&self) -> Vec<rmcp::model::Tool> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The input schema of the tool a client calls `name`, if it was listed.
    pub(super) fn schema_of(&self, name: &str) -> Option<serde_json::Value> {
        let known = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        known
            .iter()
            .find(|tool| tool.name == name)
            .map(|tool| serde_json::Value::Object(tool.input_schema.as_ref().clone()))
    }

    /// The prompts, as the tools are.
    pub(super) async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListPromptsResult, String> {
        if !self.prefixed() {
            let upstream = &self.servers[0];
            let listed = upstream.peer().list_prompts(request).await;
            return listed.map_err(|err| list_failed(upstream, "prompts", err));
        }
        let mut prompts = Vec::new();
        for upstream in self.with(|c| c.prompts.is_some()) {
            let listed = gather(upstream, "prompts", |page| async move {
                let page = upstream.peer().list_prompts(page).await?;
                Ok((page.prompts, page.next_cursor))
            });
            for mut prompt in listed.await? {
                prompt.name = self.prefix(upstream, &prompt.name);
                prompts.push(prompt);
            }
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    /// The resources, under their own URIs; with several servers, each
    /// remembered as its server's.
    pub(super) async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListResourcesResult, String> {
        if !self.prefixed() {
            let upstream = &self.servers[0];
            let listed = upstream.peer().list_resources(request).await;
            return listed.map_err(|err| list_failed(upstream, "resources", err));
        }
        let mut resources = Vec::new();
        for (index, upstream) in self.servers.iter().enumerate() {
            if !upstream.offers(|c| c.resources.is_some()) {
                continue;
            }
            let listed = gather(upstream, "resources", |page| async move {
                let page = upstream.peer().list_resources(page).await?;
                Ok((page.resources, page.next_cursor))
            });
            let listed = listed.await?;
            let mut owners = self.resources.lock().unwrap_or_else(|p| p.into_inner());
            for resource in &listed {
                // The first server to list a URI keeps it: a later one
                // cannot take another's reads over.
                let owner = *owners.entry(resource.uri.clone()).or_insert(index);
                if owner != index {
                    tracing::warn!(uri = %resource.uri, server = %upstream.server,
                        "two servers list one resource; reads go to the first");
                }
            }
            resources.extend(listed);
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    /// The resource templates (of the one server; with several, all).
    pub(super) async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListResourceTemplatesResult, String> {
        if !self.prefixed() {
            let upstream = &self.servers[0];
            let listed = upstream.peer().list_resource_templates(request).await;
            return listed.map_err(|err| list_failed(upstream, "resource templates", err));
        }
        let mut templates = Vec::new();
        for upstream in self.with(|c| c.resources.is_some()) {
            let listed = gather(upstream, "resource templates", |page| async move {
                let page = upstream.peer().list_resource_templates(page).await?;
                Ok((page.resource_templates, page.next_cursor))
            });
            templates.extend(listed.await?);
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    /// The servers that offer what `pick` says.
    pub(super) fn with(
        &self,
        pick: fn(&ServerCapabilities) -> bool,
    ) -> impl Iterator<Item = &Arc<Upstream>> {
        self.servers
            .iter()
            .filter(move |upstream| upstream.offers(pick))
    }
}

impl Upstream {
    fn offers(&self, pick: fn(&ServerCapabilities) -> bool) -> bool {
        self.reported().is_some_and(|info| pick(&info.capabilities))
    }
}

/// The most pages of one server's listing the gateway gathers for a
/// client when it fronts several servers (one server's pages pass as
/// they are, cursor and all).
const MAX_PAGES: usize = 100;
/// The most bytes of one server's listing the gateway gathers.
const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// `what` of `upstream`, page after page from `page`, up to
/// [`MAX_PAGES`] pages and [`MAX_LISTED_BYTES`]: a server whose listing
/// never ends is cut there (and the cut logged), not gathered until
/// memory runs out.
async fn gather<T, F, Fut>(upstream: &Upstream, what: &str, mut page: F) -> ListedItems<T>
where
    T: serde::Serialize,
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = std::result::Result<(Vec<T>, Option<String>), rmcp::ServiceError>>,
{
    let (mut items, mut bytes, mut cursor) = (Vec::new(), 0, None);
    for _ in 0..MAX_PAGES {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let (listed, next) = page(params)
            .await
            .map_err(|err| list_failed(upstream, what, err))?;
        bytes += listed
            .iter()
            .map(|item| serde_json::to_vec(item).map_or(0, |text| text.len()))
            .sum::<usize>();
        items.extend(listed);
        match next {
            None => return Ok(items),
            Some(_) if bytes > MAX_LISTED_BYTES => break,
            next => cursor = next,
        }
    }
    tracing::warn!(server = %upstream.server, what, listed = items.len(),
        "the server's listing goes on past what the gateway gathers ({MAX_PAGES} pages, \
         {MAX_LISTED_BYTES} bytes); the rest is not offered");
    Ok(items)
}

type ListedItems<T> = std::result::Result<Vec<T>, String>;

fn list_failed(upstream: &Upstream, what: &str, err: rmcp::ServiceError) -> String {
    crate::redact::redact(&format!(
        "the MCP server `{}` failed to list its {what}: {err}",
        upstream.server
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_server_names_fit_catalogue_keys() {
        let named = |reported| Origin::mcp_named(reported);
        assert_eq!(
            named("mcp-servers/everything"),
            Origin::Mcp("mcp-servers-everything".into())
        );
        assert_eq!(named("hostile"), Origin::Mcp("hostile".into()));
        assert_eq!(named("a b:c"), Origin::Mcp("a-b-c".into()));
    }
}
