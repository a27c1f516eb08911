//! Where a command runs: through the store's daemon when one answers (the
//! daemon owns the store while it runs), else in this process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use toolgate::daemon::launch::Launcher;
use toolgate::daemon::{Client, DaemonRequest};
use toolgate::locations::StoreLocation;
use toolgate::route::Place;
pub use toolgate::route::Target;
use toolgate::{Config, Service, Toolgate};

/// What every command knows: the config and the store it names.
pub struct Ctx {
    pub config: Config,
    /// The --config file, if one was given.
    pub config_path: Option<PathBuf>,
    /// The --store location, if one was given.
    pub store_override: Option<StoreLocation>,
}

impl Ctx {
    pub fn store_location(&self) -> StoreLocation {
        self.place().store_location()
    }

    /// Load the policies and open the store in this process, for a daemon
    /// to serve.
    pub fn open(&self) -> anyhow::Result<Toolgate> {
        Toolgate::open(self.config.clone(), self.store_override.clone())
            .context("cannot start toolgate")
    }

    /// The service in this process (no daemon).
    pub fn service(&self) -> anyhow::Result<Service> {
        Service::open(self.config.clone(), self.store_override.clone())
            .context("cannot start toolgate")
    }

    /// Where requests go, by the library's rule (see [`toolgate::route`]).
    pub fn place(&self) -> Place<'_> {
        Place {
            config: &self.config,
            named: self.config_path.is_some(),
            store: self.store_override.clone(),
        }
    }

    /// The daemon socket: `socket` if given, else the config's
    /// (`[daemon] socket`), else the store's.
    pub fn socket(&self, socket: Option<&PathBuf>) -> PathBuf {
        self.place().socket(socket.map(PathBuf::as_path))
    }

    /// The user the daemon runs as: `[daemon] user`, else this one.
    pub fn daemon_uid(&self) -> anyhow::Result<u32> {
        Ok(self.place().daemon_uid()?)
    }

    /// A client for the daemon at `socket` (see [`Ctx::socket`]) that
    /// believes only the daemon's user.
    pub fn client(&self, socket: Option<&PathBuf>) -> anyhow::Result<Client> {
        Ok(self.place().client(socket.map(PathBuf::as_path))?)
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
        self.place()
            .check_serves(&client.call(&DaemonRequest::Health)?)?;
        Ok(Target::Daemon(client))
    }

    /// The running daemon when one answers at `socket` (default: the
    /// store's), else this process.
    pub fn target(&self, socket: Option<&PathBuf>) -> anyhow::Result<Target> {
        Ok(self.place().target(socket.map(PathBuf::as_path))?)
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

/// Stop the daemon `pid` that answers at `socket` (SIGTERM) and wait up to
/// 10 s until nothing answers there.
pub fn stop_daemon(socket: &Path, pid: u32) -> anyhow::Result<()> {
    // SAFETY: kill(2) with a pid the daemon reported and a plain signal.
    let sent = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    anyhow::ensure!(
        sent == 0,
        "cannot stop the daemon (pid {pid}): {}",
        std::io::Error::last_os_error()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while toolgate::daemon::Client::new(socket).is_up() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the daemon (pid {pid}) did not stop within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}
