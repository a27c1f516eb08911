//! `toolgate plugins`: what is loaded, and from where.

use std::process::ExitCode;

use anyhow::Context as _;
use toolgate::plugins::PluginStatus;
use toolgate::signing::Purpose;

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
    /// Make an ed25519 key pair for signing plugins: PREFIX.key (secret,
    /// owner-only) and PREFIX.pub; prints the public key for trusted_keys.
    Keygen {
        /// Where to write the keys (PREFIX.key, PREFIX.pub).
        #[arg(long, value_name = "PREFIX")]
        out: std::path::PathBuf,
    },
    /// Sign a plugin file: writes FILE.sig, which a host with the key in
    /// trusted_keys accepts for exactly these bytes.
    Sign {
        /// The secret key file (from `plugins keygen`).
        #[arg(long, value_name = "KEY")]
        key: std::path::PathBuf,
        /// The .wasm file.
        file: std::path::PathBuf,
    },
    /// Push a component to an OCI registry in the wasm artifact layout
    /// (what `wkg`, Spin and wasmCloud read), with its signature: prints
    /// the reference pinned to the pushed digest, for the config's `path`.
    ///
    /// Credentials: TOOLGATE_REGISTRY_USERNAME and
    /// TOOLGATE_REGISTRY_PASSWORD, else the Docker config file
    /// (~/.docker/config.json or $DOCKER_CONFIG). Plain HTTP only to a
    /// loopback registry.
    Push {
        /// The .wasm component.
        file: std::path::PathBuf,
        /// Where: oci://REGISTRY/REPO:TAG.
        reference: String,
        /// Its signature file (default: FILE.sig, when it exists).
        #[arg(long, value_name = "FILE")]
        signature: Option<std::path::PathBuf>,
    },
    /// Pull a plugin from an OCI registry into the store's cache of pulled
    /// plugins (so a host can start from it without the registry),
    /// verifying its digests; prints the reference pinned to its digest.
    Pull {
        /// oci://REGISTRY/REPO:TAG, or …@sha256:DIGEST.
        reference: String,
        /// Also write the component here, and its signature (if the
        /// artifact carries one) to FILE.sig.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Ask the store's running daemon to reload its config and plugins (as
    /// SIGHUP does). A plugin that fails keeps its previous version.
    Reload {
        /// The daemon's socket (default: the store's, STORE.sock).
        #[arg(long, value_name = "PATH")]
        socket: Option<std::path::PathBuf>,
    },
    /// List loaded plugins in decision order, with their status: what the
    /// store's daemon serves when one runs, else what the config loads.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask the daemon at this socket instead of the store's.
        #[arg(long, value_name = "PATH")]
        socket: Option<std::path::PathBuf>,
    },
}

/// `toolgate plugins …`.
pub fn run(ctx: &crate::target::Ctx, command: PluginsCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginsCommand::Reload { socket } => reload(&ctx.socket(socket.as_ref())),
        PluginsCommand::Keygen { out } => keygen(&out, |public| {
            format!("trust it with:\n  trusted_keys = [\"{public}\"]")
        }),
        PluginsCommand::Push {
            file,
            reference,
            signature,
        } => push(&file, &reference, signature.as_deref()),
        PluginsCommand::Pull { reference, out } => pull(ctx, &reference, out.as_deref()),
        PluginsCommand::Sign { key, file } => sign(Purpose::Plugin, &key, &file),
        PluginsCommand::Inspect { file, json } => inspect(&file, json),
        PluginsCommand::List { json, socket } => list_from(&ctx.target(socket.as_ref())?, json),
    }
}

pub fn push(
    file: &std::path::Path,
    reference: &str,
    signature: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let reference = toolgate::oci::Reference::parse(reference).map_err(anyhow::Error::msg)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let beside = sig_path(file);
    let signature_file = match signature {
        Some(path) => Some(path.to_path_buf()),
        None => beside.exists().then_some(beside),
    };
    let signature = match &signature_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the signature {}", path.display()))?;
            toolgate::signing::parse(&text)
                .and_then(|parsed| parsed.verify(Purpose::Plugin, &bytes))
                .map_err(|why| {
                    anyhow::anyhow!("{} does not sign {}: {why}", path.display(), file.display())
                })?;
            Some(text)
        }
        None => None,
    };
    let pinned = toolgate::oci::push(&bytes, signature.as_deref(), &reference)
        .map_err(|why| anyhow::anyhow!("cannot push {}: {why}", file.display()))?;
    println!("{pinned}");
    match &signature_file {
        Some(path) => eprintln!("pushed with the signature {}", path.display()),
        None => eprintln!(
            "pushed unsigned (no {}); a host with require_signatures refuses it",
            sig_path(file).display()
        ),
    }
    eprintln!("pin it in the config:  path = \"{pinned}\"");
    Ok(ExitCode::SUCCESS)
}

pub fn pull(
    ctx: &crate::target::Ctx,
    reference: &str,
    out: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let reference = toolgate::oci::Reference::parse(reference).map_err(anyhow::Error::msg)?;
    let cache = ctx.config.oci_cache_path(&ctx.store_location());
    let pulled = toolgate::oci::pull(&reference, &cache)
        .map_err(|why| anyhow::anyhow!("cannot pull {reference}: {why}"))?;
    if let Some(out) = out {
        std::fs::write(out, &pulled.bytes)
            .with_context(|| format!("cannot write {}", out.display()))?;
        let sig = sig_path(out);
        match &pulled.signature {
            Some(signature) => std::fs::write(&sig, signature)?,
            // An older FILE.sig must not pass for this file's.
            None => match std::fs::remove_file(&sig) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    return Err(err)
                        .with_context(|| format!("cannot remove the old {}", sig.display()));
                }
                _ => {}
            },
        }
    }
    println!("{}", pulled.origin.pinned);
    match &pulled.cache_problem {
        None => eprintln!("{}, kept in {}", pulled.origin, cache.display()),
        Some(problem) => eprintln!(
            "{}, but not kept in {} ({problem}): a host starting without the registry will not find it",
            pulled.origin,
            cache.display()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn sig_path(file: &std::path::Path) -> std::path::PathBuf {
    let mut path = file.as_os_str().to_owned();
    path.push(".sig");
    path.into()
}

pub fn reload(socket: &std::path::Path) -> anyhow::Result<ExitCode> {
    let client = toolgate::daemon::Client::new(socket);
    let report = client.call(&toolgate::daemon::DaemonRequest::Reload)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    let failed = report["failed"].as_array().is_some_and(|f| !f.is_empty());
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Print plugin statuses as a table or JSON.
pub fn list(statuses: &[PluginStatus], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(statuses)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<20} {:>8}  {:<7} {:<14} {:<24} STATUS",
        "NAME", "PRIORITY", "FAIL", "SHA256", "SOURCE"
    );
    for p in statuses {
        let mut status = match &p.problem {
            Some(problem) => format!("loaded; the last reload failed: {problem}"),
            None => "loaded".to_string(),
        };
        if let Some(origin) = &p.origin {
            status.push_str(&format!(" from {origin}"));
        }
        println!(
            "{:<20} {:>8}  {:<7} {:<14} {:<24} {status}",
            p.name,
            p.priority,
            format!("{:?}", p.fail_mode).to_lowercase(),
            &p.sha256[..12],
            p.source,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `plugins list`: what the daemon (or this process) serves.
pub fn list_from(target: &crate::target::Target, json: bool) -> anyhow::Result<ExitCode> {
    let answer = target.call(toolgate::daemon::DaemonRequest::Plugins)?;
    let statuses: Vec<PluginStatus> = serde_json::from_value(answer)?;
    list(&statuses, json)
}

/// A new key pair at PREFIX.key and PREFIX.pub; `how_to_use` says what the
/// public key is for.
pub fn keygen(
    out: &std::path::Path,
    how_to_use: impl Fn(&str) -> String,
) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (secret, public) = toolgate::signing::generate();
    let with = |suffix: &str| {
        let mut path = out.as_os_str().to_owned();
        path.push(suffix);
        std::path::PathBuf::from(path)
    };
    let secret_path = with(".key");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&secret_path)
        .with_context(|| {
            format!(
                "cannot create {} (it must not exist yet)",
                secret_path.display()
            )
        })?;
    writeln!(file, "{secret}")?;
    std::fs::write(with(".pub"), format!("{public}\n"))?;
    println!("{public}");
    eprintln!(
        "secret key in {} (keep it away from agents); {}",
        secret_path.display(),
        how_to_use(&public)
    );
    Ok(ExitCode::SUCCESS)
}

/// Sign `file` as `purpose` with the secret key in `key`: writes FILE.sig.
pub fn sign(
    purpose: Purpose,
    key: &std::path::Path,
    file: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let secret = std::fs::read_to_string(key)
        .with_context(|| format!("cannot read the key {}", key.display()))?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let signature =
        toolgate::signing::sign(purpose, &secret, &bytes).map_err(anyhow::Error::msg)?;
    let out = sig_path(file);
    std::fs::write(&out, signature)?;
    eprintln!("signed: {}", out.display());
    Ok(ExitCode::SUCCESS)
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
        if let Some(signature) = &report.signature {
            println!("signed by {signature}");
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
