//! `toolgate plugins`: what is loaded, and from where.

use std::process::ExitCode;

use toolgate::Toolgate;

#[derive(clap::Subcommand)]
pub enum PluginsCommand {
    /// Describe a component: name, version, WIT package, exports, imports,
    /// size, sha256, and whether this host can load it (and why not).
    Inspect {
        /// A .wasm file or bundled:NAME.
        file: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ask the running daemon to reload its config and plugins (as SIGHUP
    /// does). A plugin that fails keeps its previous version.
    Reload {
        /// The daemon's socket (default: as `toolgate serve`).
        #[arg(long, value_name = "PATH")]
        socket: Option<std::path::PathBuf>,
    },
    /// List loaded plugins in decision order.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn reload(socket: Option<std::path::PathBuf>) -> anyhow::Result<ExitCode> {
    let socket = socket.unwrap_or_else(toolgate::daemon::default_socket);
    let client = toolgate::daemon::Client::new(&socket);
    let report = client.call(&toolgate::daemon::DaemonRequest::Reload)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let failed = report["failed"].as_array().is_some_and(|f| !f.is_empty());
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub fn run(host: &Toolgate, command: PluginsCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginsCommand::Reload { .. } | PluginsCommand::Inspect { .. } => {
            unreachable!("handled without a local host")
        }
        PluginsCommand::List { json } => {
            let plugins = host.plugins();
            let problems = host.plugin_problems();
            let status = |name: &str| match problems.get(name) {
                Some(problem) => format!("loaded; the last reload failed: {problem}"),
                None => "loaded".to_string(),
            };
            if json {
                let rows: Vec<_> = plugins
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "name": &*p.name,
                            "priority": p.priority,
                            "source": p.source,
                            "sha256": p.sha256,
                            "fail_mode": p.fail_mode,
                            "status": status(&p.name),
                            "policy": p.description,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:<20} {:>8}  {:<7} {:<14} {:<24} STATUS",
                    "NAME", "PRIORITY", "FAIL", "SHA256", "SOURCE"
                );
                for p in plugins.iter() {
                    println!(
                        "{:<20} {:>8}  {:<7} {:<14} {:<24} {}",
                        p.name,
                        p.priority,
                        format!("{:?}", p.fail_mode).to_lowercase(),
                        &p.sha256[..12],
                        p.source,
                        status(&p.name),
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub fn inspect(file: &str, json: bool) -> anyhow::Result<ExitCode> {
    let report = toolgate::inspect::inspect(file)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("source    {}", report.source);
        println!("size      {} bytes", report.size_bytes);
        println!("sha256    {}", report.sha256);
        println!(
            "wit       {}",
            report.wit.as_deref().unwrap_or("(not a toolgate policy)")
        );
        if let Some(policy) = &report.policy {
            println!(
                "policy    {} {} — {}",
                policy.name, policy.version, policy.description
            );
            println!("fail mode {:?}", policy.default_fail_mode);
        }
        println!("exports   {}", report.exports.join(", "));
        println!("imports   {}", report.imports.join(", "));
        match &report.problem {
            None => println!("loadable  yes"),
            Some(problem) => println!("loadable  no: {problem}"),
        }
    }
    Ok(if report.loadable {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
