//! Where a command runs: through the store's daemon when one answers (the
//! daemon owns the store while it runs), else in this process.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use toolgate::daemon::launch::Launcher;
use toolgate::daemon::{Client, ConfigIdentity, Daemon, DaemonOptions, DaemonRequest};
use toolgate::locations::StoreLocation;
use toolgate::{Config, Toolgate};

/// What every command knows: the config and the store it names.
pub struct Ctx {
    pub config: Config,
    /// The --config file, if one was given.
    pub config_path: Option<PathBuf>,
    /// The --store location, if one was given.
    pub store_override: Option<StoreLocation>,
}

/// A daemon's client, or a host in this process that answers the same
/// requests.
pub enum Target {
    Daemon(Client),
    Local(Arc<Daemon>),
}

impl Ctx {
    pub fn store_location(&self) -> StoreLocation {
        self.store_override
            .clone()
            .unwrap_or_else(|| self.config.store_location())
    }

    /// Load the policies and open the store in this process.
    pub fn open(&self) -> anyhow::Result<Toolgate> {
        Toolgate::open(self.config.clone(), self.store_override.clone())
            .context("cannot start toolgate")
    }

    /// The daemon socket: `socket` if given, else the config's
    /// (`[daemon] socket`), else the store's.
    pub fn socket(&self, socket: Option<&PathBuf>) -> PathBuf {
        socket
            .or(self.config.daemon.socket.as_ref())
            .cloned()
            .unwrap_or_else(|| self.store_location().socket())
    }

    /// The user the daemon runs as: `[daemon] user`, else this one.
    pub fn daemon_uid(&self) -> anyhow::Result<u32> {
        match &self.config.daemon.user {
            None => Ok(toolgate_wire::peer::own_uid()),
            Some(user) => toolgate_wire::peer::uid_of(user)
                .with_context(|| format!("[daemon] user = {user:?}, but there is no such user")),
        }
    }

    /// A client for the daemon at `socket` (see [`Ctx::socket`]) that
    /// believes only the daemon's user.
    pub fn client(&self, socket: Option<&PathBuf>) -> anyhow::Result<Client> {
        Ok(Client::new(self.socket(socket)).with_daemon_uid(self.daemon_uid()?))
    }

    /// How to start this store's daemon with this config.
    pub fn launcher(&self, socket: Option<&PathBuf>) -> anyhow::Result<Launcher> {
        let exe = std::env::current_exe().context("cannot find the toolgate binary's path")?;
        let mut args: Vec<OsString> = Vec::new();
        if let Some(config) = &self.config_path {
            args.extend(["--config".into(), absolute(config)?.into()]);
        }
        let store = absolute_store(self.store_location())?;
        args.extend(["--store".into(), store.as_argument()]);
        let launcher = Launcher::new(&store, exe, args)
            .with_socket(self.socket(socket))
            .with_daemon_uid(self.daemon_uid()?);
        Ok(launcher)
    }

    /// The store's daemon, started if it is not running: for what only the
    /// daemon may do (resolving pauses, admin commands).
    pub fn daemon(&self) -> anyhow::Result<Target> {
        let client = self.launcher(None)?.ensure_running()?;
        self.check_serves(&client.call(&DaemonRequest::Health)?)?;
        Ok(Target::Daemon(client))
    }

    /// Refuse a daemon (its `health`) that serves another config file than
    /// the one this command names with `--config`: its answers would be
    /// another config's. A command naming none takes the daemon's. (The
    /// same file with other bytes is the daemon's to reload; hooks, which
    /// always name theirs, are checked by the daemon itself.)
    fn check_serves(&self, health: &Value) -> anyhow::Result<()> {
        let serving: Option<ConfigIdentity> =
            serde_json::from_value(health["config_identity"].clone()).unwrap_or(None);
        let (Some(_), Some(named), Some(serving)) =
            (&self.config_path, &self.config.identity, serving)
        else {
            return Ok(());
        };
        let file = |identity: &ConfigIdentity| match identity {
            ConfigIdentity::File { path, .. } => Some(path.clone()),
            ConfigIdentity::Bundled => None,
        };
        if file(named) != file(&serving) {
            return Err(toolgate::Error::ConfigMismatch {
                serving: serving.describe(),
                named: named.describe(),
            }
            .into());
        }
        Ok(())
    }

    /// The running daemon when one answers at `socket` (default: the
    /// store's), else this process.
    pub fn target(&self, socket: Option<&PathBuf>) -> anyhow::Result<Target> {
        let client = self.client(socket)?;
        if let Ok(health) = client.call(&DaemonRequest::Health) {
            self.check_serves(&health)?;
            return Ok(Target::Daemon(client));
        }
        if let Some(socket) = socket {
            anyhow::bail!(
                "no toolgate daemon answers at {}; start one with `toolgate serve`",
                socket.display()
            );
        }
        let options = DaemonOptions::default();
        Ok(Target::Local(Daemon::new(Arc::new(self.open()?), options)))
    }
}

impl Target {
    pub fn call(&self, request: DaemonRequest) -> toolgate::Result<Value> {
        match self {
            Target::Daemon(client) => Ok(client.call(&request)?),
            Target::Local(daemon) => daemon.handle(request),
        }
    }
}

/// `path` made absolute against the current directory, for a daemon that
/// runs elsewhere.
fn absolute(path: &std::path::Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// How long an in-process fallback waits for the store.
pub fn store_wait(config: &Config) -> Duration {
    Duration::from_millis(config.store_wait_ms)
}

/// `store` with a redb file's path made absolute (a daemon or a hook runs
/// from another directory); a database's URL as it is.
pub fn absolute_store(store: StoreLocation) -> anyhow::Result<StoreLocation> {
    Ok(match store {
        StoreLocation::File(path) => StoreLocation::File(absolute(&path)?),
        database => database,
    })
}
