//! `toolgate mcp`: the MCP gateway between a client and one server.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use rmcp::ServiceExt as _;
use rmcp::transport::TokioChildProcess;
use toolgate::mcp::{Gateway, GatewayOptions};

use crate::target::Ctx;

/// The environment variable holding the `mcp` channel's token.
const TOKEN_ENV: &str = "TOOLGATE_MCP_TOKEN";

#[derive(clap::Args)]
#[command(after_help = "\
Example, in an MCP client's server list (the client launches the gateway in place of the server):
  toolgate --config toolgate.toml mcp --name everything -- npx -y @modelcontextprotocol/server-everything

Pauses: with the `mcp` channel's token in TOOLGATE_MCP_TOKEN (its sha256 in [approvals] tokens) and a
client that supports elicitation, the person is asked in the client; otherwise the tool result says
how to approve with `toolgate gates resolve`.")]
pub struct McpArgs {
    /// The server's name in the calls' origin, mcp(NAME). Default: the
    /// name the server reports.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The session (and thread) of the calls. Default: mcp- and a random id.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The user of the calls.
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// How long a call to the server may take.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    call_timeout: Duration,
    /// How long to wait for a person to answer a pause in the client.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    elicitation_timeout: Duration,
    /// The MCP server's command and its arguments (it speaks MCP on stdio).
    #[arg(last = true, required = true, value_name = "SERVER-COMMAND")]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, args: McpArgs) -> anyhow::Result<ExitCode> {
    let daemon = ctx.launcher(None)?.ensure_running()?;
    let mut options = GatewayOptions {
        server_name: args.name,
        user: args.user,
        approval_token: std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()),
        call_timeout: args.call_timeout,
        elicitation_timeout: args.elicitation_timeout,
        ..GatewayOptions::default()
    };
    if let Some(session) = args.session {
        options.session = session;
    }
    let mut command = tokio::process::Command::new(&args.command[0]);
    // The token is the gateway's, never the server's.
    // The token is the gateway's, never the server's.
    command.args(&args.command[1..]).env_remove(TOKEN_ENV);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let server = TokioChildProcess::new(command).with_context(|| {
            format!(
                "cannot start the MCP server {:?}",
                args.command[0].to_string_lossy()
            )
        })?;
        let gateway = Gateway::connect(daemon, server, options).await?;
        tracing::info!(server = gateway.server_name(), "MCP gateway ready");
        let service = gateway
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not start a session")?;
        service.waiting().await.context("the gateway stopped")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
