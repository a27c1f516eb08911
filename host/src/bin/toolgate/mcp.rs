//! `toolgate mcp`: the MCP gateway between a client and one server.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rmcp::ServiceExt as _;
use toolgate::mcp::{
    DaemonLink, Gateway, GatewayOptions, ServerAt, UpstreamServer, http, new_session_id,
};
use toolgate::request::Mode;

use crate::target::Ctx;

/// The environment variable holding the `mcp` channel's token.
const TOKEN_ENV: &str = "TOOLGATE_MCP_TOKEN";
/// ... and the token HTTP clients must present.
const CLIENT_TOKEN_ENV: &str = "TOOLGATE_MCP_CLIENT_TOKEN";

#[derive(clap::Args)]
#[command(after_help = "\
Example, in an MCP client's server list (the client launches the gateway in place of the server):
  toolgate --config toolgate.toml mcp --name everything -- npx -y @modelcontextprotocol/server-everything

Over HTTP (many client sessions, each with its own server process; at most 32 at once):
  TOOLGATE_MCP_CLIENT_TOKEN=... toolgate mcp --listen 127.0.0.1:8765 -- npx -y @modelcontextprotocol/server-everything

In front of a server that is itself on streamable HTTP (each client session opens its own session there):
  toolgate mcp --name docs -- https://mcp.example.com/mcp

Pauses: with the `mcp` channel's token in TOOLGATE_MCP_TOKEN (its sha256 in [approvals] tokens) and a
client that supports elicitation, the person is asked in the client; otherwise the tool result says
how to approve with `toolgate gates resolve`.")]
pub struct McpArgs {
    /// The server's name in the calls' origin, mcp(NAME), for the server
    /// after `--`. Default: the name a command's server reports; a URL's
    /// must be given.
    #[arg(long, value_name = "NAME", value_parser = parse_name)]
    name: Option<String>,
    /// The session (and thread) of the calls, over stdio. Default: mcp- and
    /// a random id.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Serve MCP's streamable HTTP at http://ADDRESS/mcp (loopback only)
    /// instead of stdio; prints the URL. Clients must present
    /// TOOLGATE_MCP_CLIENT_TOKEN as a bearer token when it is set, and it
    /// must be set when TOOLGATE_MCP_TOKEN is.
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<String>,
    /// The user of the calls.
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// How long a call to the server may take.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    call_timeout: Duration,
    /// How long to wait for a person to answer a pause in the client.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    elicitation_timeout: Duration,
    /// How the client runs, which MCP does not say: `interactive` (a
    /// person is asked before sensitive calls), `auto-approve` (a person is
    /// there but told the client not to ask, e.g. Claude Code's
    /// bypassPermissions: only what always needs approval pauses) or
    /// `autonomous` (nobody to ask).
    #[arg(long, value_enum, default_value_t = ClientMode::Interactive)]
    client_mode: ClientMode,
    /// One more server, as NAME=COMMAND (a shell-quoted command line) or
    /// NAME=URL (a streamable-HTTP endpoint, http:// or https://); may be
    /// repeated. With several servers, each tool is offered as NAME__TOOL.
    #[arg(long = "server", value_name = "NAME=COMMAND", value_parser = parse_server)]
    servers: Vec<(String, Vec<String>)>,
    /// The MCP server's command and its arguments (it speaks MCP on stdio),
    /// or its URL (streamable HTTP), named by --name.
    #[arg(last = true, value_name = "SERVER-COMMAND")]
    command: Vec<OsString>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ClientMode {
    Interactive,
    AutoApprove,
    Autonomous,
}

impl From<ClientMode> for Mode {
    fn from(mode: ClientMode) -> Self {
        match mode {
            ClientMode::Interactive => Mode::Interactive,
            ClientMode::AutoApprove => Mode::InteractiveAutoApprove,
            ClientMode::Autonomous => Mode::Autonomous,
        }
    }
}

pub fn run(ctx: &Ctx, args: McpArgs) -> anyhow::Result<ExitCode> {
    let options = Arc::new(GatewayOptions {
        user: args.user,
        approval_token: secret_from_env(TOKEN_ENV),
        call_timeout: args.call_timeout,
        elicitation_timeout: args.elicitation_timeout,
        mode: args.client_mode.into(),
    });
    let servers = upstream_servers(args.servers, args.name, args.command)?;
    let launcher = ctx.launcher(None)?;
    let daemon = DaemonLink::new(launcher.ensure_running()?).restarting_with(launcher);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let Some(address) = args.listen else {
            let session = args.session.unwrap_or_else(new_session_id);
            let gateway = Gateway::new(servers, daemon, options, session);
            let service = gateway
                .clone()
                .serve(toolgate::mcp::stdio())
                .await
                .context("the MCP client did not start a session")?;
            let stopped = service.waiting().await;
            gateway.finish().await;
            stopped.context("the gateway stopped")?;
            return anyhow::Ok(());
        };
        anyhow::ensure!(
            args.session.is_none(),
            "--session is for stdio; over HTTP every client session gets its own"
        );
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let client_token = secret_from_env(CLIENT_TOKEN_ENV);
        let server = http::HttpServer::new(listener, servers, daemon, options, client_token)?;
        // The URL on stdout, for whoever started the gateway (port 0 picks
        // a free one).
        println!("{}", server.url());
        server.run().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The servers to front (`--server NAME=COMMAND`, and the one after `--`,
/// named `name`), refused when one could not be told apart by its name.
fn upstream_servers(
    named_servers: Vec<(String, Vec<String>)>,
    name: Option<String>,
    command: Vec<OsString>,
) -> anyhow::Result<Arc<[UpstreamServer]>> {
    let mut servers: Vec<(Option<String>, Vec<OsString>)> = named_servers
        .into_iter()
        .map(|(name, words)| (Some(name), words.into_iter().map(OsString::from).collect()))
        .collect();
    if !command.is_empty() {
        servers.push((name, command));
    }
    anyhow::ensure!(
        !servers.is_empty(),
        "name the MCP server to front: `toolgate mcp -- COMMAND…` or --server NAME=COMMAND"
    );
    // The servers start when a client initializes, each offered what that
    // client can do; the tokens are the gateway's, never the servers'.
    let servers: Arc<[UpstreamServer]> = servers
        .into_iter()
        .map(|(name, words)| UpstreamServer {
            name,
            at: server_at(words),
        })
        .collect();
    // The origin a server's calls are decided under is the operator's to
    // choose: a remote server's own report could name a more trusted one.
    if let Some(unnamed) = servers
        .iter()
        .find(|s| s.name.is_none() && matches!(s.at, ServerAt::Url(_)))
    {
        let ServerAt::Url(url) = &unnamed.at else {
            unreachable!()
        };
        anyhow::bail!(
            "name the server at {}: `--name NAME` (its calls are decided as mcp(NAME); a \
             remote server's own name is not trusted for that)",
            toolgate::redact::redact(url)
        );
    }
    let named: Vec<&str> = servers.iter().filter_map(|s| s.name.as_deref()).collect();
    if let Some(twice) = named
        .iter()
        .enumerate()
        .find_map(|(i, name)| named[..i].contains(name).then_some(name))
    {
        anyhow::bail!(
            "two servers are named `{twice}`; give each its own name (--server NAME=COMMAND)"
        );
    }
    Ok(servers)
}

/// A single word that is an HTTP(S) URL names a streamable-HTTP server;
/// anything else is a command.
fn server_at(words: Vec<OsString>) -> ServerAt {
    if let [word] = words.as_slice()
        && let Some(url) = word.to_str()
        && (url.starts_with("http://") || url.starts_with("https://"))
    {
        return ServerAt::Url(url.to_string());
    }
    ServerAt::Command {
        words,
        withheld: vec![TOKEN_ENV.into(), CLIENT_TOKEN_ENV.into()],
    }
}

fn secret_from_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// A server's name: letters, digits, `-` and `_`, without the `__` that
/// joins a server's name to its tools' when a gateway fronts several.
fn parse_name(name: &str) -> Result<String, String> {
    check_server_name(name).map(|()| name.to_string())
}

fn check_server_name(name: &str) -> Result<(), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(valid) || name.contains("__") {
        return Err(format!(
            "server name `{name}` must be letters, digits, `-` and `_` (not `__`)"
        ));
    }
    Ok(())
}

/// `NAME=COMMAND` → the name and the command's words.
fn parse_server(text: &str) -> Result<(String, Vec<String>), String> {
    let (name, command) = text
        .split_once('=')
        .ok_or("expected NAME=COMMAND, e.g. github='npx -y @modelcontextprotocol/server-github'")?;
    check_server_name(name)?;
    let words = shlex::split(command)
        .filter(|words| !words.is_empty())
        .ok_or_else(|| format!("cannot read the command of `{name}`: {command:?}"))?;
    Ok((name.to_string(), words))
}
