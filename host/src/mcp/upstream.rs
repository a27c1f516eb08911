//! The real MCP servers behind a gateway, shared by every client session.
//!
//! One server: its tools keep their names. Several: each tool is offered
//! as `SERVER__TOOL` and routed back by that prefix, and each call keeps
//! its own server as origin, so one gateway can front many servers without
//! their tools (or their approvals) mixing.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, ServerPeerInfo,
};
use rmcp::service::{RoleClient, RunningService};

use crate::error::{Error, Result};
use crate::request::Origin;

/// Between a server's name and its tool's, when a gateway fronts several.
pub const SEPARATOR: &str = "__";

/// A connection to one real server.
pub struct Upstream {
    service: RunningService<RoleClient, ()>,
    server: String,
}

impl Upstream {
    /// Start an MCP session with a server over `transport` (e.g. a child
    /// process). `name` is the origin's server name; default: the name the
    /// server reports (see [`Origin::mcp_named`]).
    pub async fn connect<T, E, A>(transport: T, name: Option<String>) -> Result<Arc<Self>>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let service = ().serve(transport).await.map_err(|err| {
            let which = name.as_deref().map_or(String::new(), |n| format!(" `{n}`"));
            Error::Request(format!(
                "the MCP server{which} did not start a session: {err}; check that its command \
                 runs an MCP server on stdio"
            ))
        })?;
        let reported = service.peer().peer_info();
        let server = name
            .or_else(|| {
                let reported = reported.as_ref()?.server_info.as_ref()?;
                match Origin::mcp_named(&reported.name) {
                    Origin::Mcp(name) => Some(name),
                    _ => None,
                }
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "mcp".into());
        Ok(Arc::new(Self { service, server }))
    }

    /// The server name used as the calls' origin.
    pub fn server_name(&self) -> &str {
        &self.server
    }

    fn reported(&self) -> Option<Arc<ServerPeerInfo>> {
        self.service.peer().peer_info()
    }

    /// Forward a call; a failure as a message for the model.
    pub(super) async fn call(
        &self,
        params: CallToolRequestParams,
        timeout: Duration,
    ) -> std::result::Result<CallToolResponse, String> {
        let name = params.name.clone();
        let server = &self.server;
        let call = self.service.peer().call_tool_once(params);
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

/// The servers behind one gateway.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    info: ServerConfig,
}

impl Upstreams {
    /// The gateway's servers; their names must differ.
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
        let mut capabilities = ServerCapabilities::default();
        capabilities.tools = reported
            .iter()
            .flatten()
            .find_map(|info| info.capabilities.tools.clone());
        let mut info = ServerConfig::new(capabilities);
        let names: Vec<&str> = servers.iter().map(|s| s.server.as_str()).collect();
        info.server_info.name = format!("toolgate({})", names.join("+"));
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
        Ok(Arc::new(Self { servers, info }))
    }

    /// What the gateway tells clients about itself.
    pub fn info(&self) -> &ServerConfig {
        &self.info
    }

    fn prefixed(&self) -> bool {
        self.servers.len() > 1
    }

    /// The server and its own tool name for the name a client called.
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

    /// The tools clients see: one server's page as it is; several servers'
    /// lists in full, prefixed.
    pub async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> std::result::Result<ListToolsResult, String> {
        let failed = |server: &str, err| {
            format!("the MCP server `{server}` failed to list its tools: {err}")
        };
        if !self.prefixed() {
            let upstream = &self.servers[0];
            let listed = upstream.service.peer().list_tools(request).await;
            return listed.map_err(|err| failed(&upstream.server, err));
        }
        let mut tools = Vec::new();
        for upstream in &self.servers {
            let listed = upstream.service.peer().list_all_tools().await;
            for mut tool in listed.map_err(|err| failed(&upstream.server, err))? {
                tool.name = format!("{}{SEPARATOR}{}", upstream.server, tool.name).into();
                tools.push(tool);
            }
        }
        Ok(ListToolsResult::with_all_items(tools))
    }
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
