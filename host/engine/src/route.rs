//! Where a request goes: to the store's daemon when one answers (the daemon
//! owns the store while it runs), else to a host opened in this process.
//! The command line and the Python and Node packages follow this one rule,
//! so a decision made from any of them sees the same gates, leases and
//! counters.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use toolgate_wire::client::Client;

use crate::locations::StoreLocation;
use crate::service::{ConfigIdentity, DaemonRequest, Service};
use crate::{Config, Error, Result};

/// A daemon's client, or a host in this process that answers the same
/// requests.
pub enum Target {
    /// The store's daemon.
    Daemon(Client),
    /// A host in this process, trusted as the code that links the library,
    /// under the same rules as the daemon's.
    Local(Arc<Service>),
}

/// What a request is sent with: the config, whether the caller named its
/// file, and the store and socket when given.
pub struct Place<'a> {
    /// The config.
    pub config: &'a Config,
    /// Whether the caller named the config's file (a daemon serving
    /// another file is then refused rather than used).
    pub named: bool,
    /// The store, when the caller overrides the config's.
    pub store: Option<StoreLocation>,
}

impl Place<'_> {
    /// The store: the override, else the config's.
    pub fn store_location(&self) -> StoreLocation {
        self.store
            .clone()
            .unwrap_or_else(|| self.config.store_location())
    }

    /// The daemon socket: `socket` if given, else the config's
    /// (`[daemon] socket`), else the store's.
    pub fn socket(&self, socket: Option<&Path>) -> PathBuf {
        socket
            .or(self.config.daemon.socket.as_deref())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.store_location().socket())
    }

    /// The user the daemon runs as: `[daemon] user`, else this one.
    pub fn daemon_uid(&self) -> Result<u32> {
        match &self.config.daemon.user {
            None => Ok(toolgate_wire::peer::own_uid()),
            Some(user) => toolgate_wire::peer::uid_of(user).ok_or_else(|| Error::Config {
                path: self.config.origin(),
                message: format!("[daemon] user = {user:?}, but there is no such user"),
            }),
        }
    }

    /// A client for the daemon at `socket` (see [`Place::socket`]) that
    /// believes only the daemon's user.
    pub fn client(&self, socket: Option<&Path>) -> Result<Client> {
        Ok(Client::new(self.socket(socket)).with_daemon_uid(self.daemon_uid()?))
    }

    /// The running daemon when one answers at `socket` (default: the
    /// store's), else a host opened in this process. A socket named
    /// explicitly must answer.
    pub fn target(&self, socket: Option<&Path>) -> Result<Target> {
        let client = self.client(socket)?;
        if let Ok(health) = client.call(&DaemonRequest::Health) {
            self.check_serves(&health)?;
            return Ok(Target::Daemon(client.keeping_connections()));
        }
        if let Some(socket) = socket {
            return Err(Error::DaemonUnreachable {
                socket: socket.to_path_buf(),
                message: "no toolgate daemon answers there; start one with `toolgate serve`".into(),
            });
        }
        let service = Service::open(self.config.clone(), self.store.clone())?;
        Ok(Target::Local(Arc::new(service)))
    }

    /// Refuse a daemon (its `health`) that serves another config file than
    /// the one named: its answers would be another config's. A caller
    /// naming none takes the daemon's. (The same file with other bytes is
    /// the daemon's to reload.)
    pub fn check_serves(&self, health: &Value) -> Result<()> {
        let serving: Option<ConfigIdentity> =
            serde_json::from_value(health["config_identity"].clone()).unwrap_or(None);
        let (true, Some(named), Some(serving)) = (self.named, &self.config.identity, serving)
        else {
            return Ok(());
        };
        let file = |identity: &ConfigIdentity| match identity {
            ConfigIdentity::File { path, .. } => Some(path.clone()),
            ConfigIdentity::Bundled => None,
        };
        if file(named) != file(&serving) {
            return Err(Error::ConfigMismatch {
                serving: serving.describe(),
                named: named.describe(),
            });
        }
        Ok(())
    }
}

impl Target {
    /// Send `request`.
    pub fn call(&self, request: DaemonRequest) -> Result<Value> {
        match self {
            Target::Daemon(client) => Ok(client.call(&request)?),
            Target::Local(service) => service.handle(request),
        }
    }
}

/// Refuse what an agent runtime that embeds toolgate (the Python and Node
/// packages) may not send. It may send decisions, outcomes, output checks,
/// tool lists, turns, and read the gates and plugins; never a resolution,
/// an admin command, a reload or an inbox login: those are a person's, over
/// the daemon's authenticated channels, and a process that embeds toolgate
/// is the agent's, not a person's.
pub fn admit_from_an_agent(request: &DaemonRequest) -> Result<()> {
    match request {
        DaemonRequest::Evaluate { .. }
        | DaemonRequest::Observe { .. }
        | DaemonRequest::CheckOutput { .. }
        | DaemonRequest::VisibleTools { .. }
        | DaemonRequest::NextTurn { .. }
        | DaemonRequest::Turn { .. }
        | DaemonRequest::Gates { .. }
        | DaemonRequest::Plugins
        | DaemonRequest::Health => Ok(()),
        _ => Err(Error::Unauthorized(
            "an agent runtime may ask for decisions and read the gates, not resolve them or run \
             admin commands: a person answers a pause with `toolgate gates resolve` on their own \
             terminal, or in the approvals inbox"
                .into(),
        )),
    }
}
