//! A throwaway PostgreSQL cluster for the tests that need one: `initdb` into
//! a temp directory, `postgres` listening only on a Unix socket there (no
//! TCP port to collide on), run as `nobody` when the tests run as root
//! (PostgreSQL refuses root). Dropping it stops the server and removes the
//! directory, also when the test panics (drop runs while unwinding).
//!
//! A machine without PostgreSQL's server binaries gets `None` from
//! [`Cluster::start`], with a line saying the test was skipped and why; CI
//! installs them (`.ci/run`), so there they always run.

#![allow(dead_code)]

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The superuser the cluster is created with (trust auth, socket only).
const SUPERUSER: &str = "toolgate";

/// A running throwaway cluster.
pub struct Cluster {
    server: Option<Child>,
    socket_dir: PathBuf,
    /// With [`Cluster::start_tls`]: the TCP port it also listens on, with
    /// TLS, and the CA that signed its certificate.
    pub tls: Option<(u16, PathBuf)>,
    databases: std::sync::atomic::AtomicU32,
    _dir: tempfile::TempDir,
}

/// Where `initdb` and `postgres` are: on `PATH`, else Debian's versioned
/// directory.
fn server_binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file() && bin.join("postgres").is_file())
            .collect();
        versions.sort();
        versions.pop()
    })
}

/// The uid and gid to run the server as: ours, or `nobody`'s when we are root.
fn server_user() -> Option<(u32, u32)> {
    let me = std::fs::metadata("/proc/self").ok()?;
    if me.uid() != 0 {
        return Some((me.uid(), me.gid()));
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, "nobody"]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

impl Cluster {
    /// Start a cluster. Without PostgreSQL's server binaries the test
    /// fails, naming the install command (`None` only when
    /// `TOOLGATE_TEST_SKIP` says `postgres`).
    pub fn start(test: &str) -> Option<Self> {
        Self::start_with(test, false)
    }

    /// A cluster that also listens on 127.0.0.1 with TLS, its certificate
    /// (for `localhost`) signed by a CA made for it.
    pub fn start_tls(test: &str) -> Option<Self> {
        Self::start_with(test, true)
    }

    fn start_with(test: &str, tls: bool) -> Option<Self> {
        let Some(bin) = server_binaries() else {
            super::missing::missing(
                "postgres",
                &format!(
                    "{test} needs PostgreSQL's server binaries (initdb, postgres), on PATH or \
                     under /usr/lib/postgresql"
                ),
                "apt-get install postgresql",
            );
            return None;
        };
        let (uid, gid) = server_user().expect("cannot tell which user to run postgres as");
        let dir = tempfile::Builder::new().prefix("tg-pg").tempdir().unwrap();
        // The server's user must reach its directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
        let as_server = |program: &str| {
            let mut command = Command::new(bin.join(program));
            command.uid(uid).gid(gid).env_remove("PGDATA");
            command
        };
        let init = as_server("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .expect("cannot run initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        std::os::unix::fs::chown(dir.path().join("server.log"), Some(uid), Some(gid)).unwrap();
        let mut settings: Vec<String> = vec![
            "listen_addresses=".into(),
            "fsync=off".into(),
            "max_connections=200".into(),
        ];
        let tls = tls.then(|| {
            let ca = make_certificates(dir.path(), &data, uid, gid);
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            settings = vec![
                "listen_addresses=127.0.0.1".into(),
                format!("port={port}"),
                "fsync=off".into(),
                "ssl=on".into(),
                "ssl_cert_file=server.crt".into(),
                "ssl_key_file=server.key".into(),
            ];
            (port, ca)
        });
        let server = as_server("postgres")
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&data)
            .args(settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start postgres");
        let cluster = Self {
            server: Some(server),
            socket_dir: data,
            tls,
            databases: Default::default(),
            _dir: dir,
        };
        cluster.wait_ready();
        Some(cluster)
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            if postgres::Client::connect(&self.url("postgres"), postgres::NoTls).is_ok() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "postgres did not accept connections; its log: {}",
                std::fs::read_to_string(self._dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of database `name` on this cluster's socket.
    pub fn url(&self, name: &str) -> String {
        let host: String = self
            .socket_dir
            .to_string_lossy()
            .replace('%', "%25")
            .replace('/', "%2F");
        let port = self
            .tls
            .as_ref()
            .map_or(String::new(), |(p, _)| format!(":{p}"));
        format!("postgres://{SUPERUSER}@{host}{port}/{name}")
    }

    /// A fresh, empty database; its URL.
    pub fn database(&self) -> String {
        let n = self
            .databases
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("t{n}");
        let mut admin = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        self.url(&name)
    }

    /// The directory holding the server's socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }
}

/// A CA, and a certificate for `localhost` signed by it in the data
/// directory (owned by the server's user, the key 0600 as PostgreSQL
/// requires). Returns the CA's certificate.
fn make_certificates(dir: &Path, data: &Path, uid: u32, gid: u32) -> PathBuf {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl is needed for the TLS test");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=toolgate test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    for (name, mode) in [("server.crt", 0o644), ("server.key", 0o600)] {
        let to = data.join(name);
        std::fs::copy(dir.join(name), &to).unwrap();
        std::os::unix::fs::chown(&to, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    dir.join("ca.crt")
}

/// What a test's store waits for one round trip (the default config's
/// `store_wait_ms`).
pub const STORE_DEADLINE: Duration = Duration::from_secs(5);

/// The cluster's processes stopped (SIGSTOP): a database that stalls, as
/// a hung host's does. They go on (SIGCONT) when this is dropped.
pub struct Stalled(Vec<String>);

impl Cluster {
    /// Stop the server and every backend until the result is dropped.
    pub fn stall(&self) -> Stalled {
        let postmaster = self.server.as_ref().expect("running").id().to_string();
        let children = Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .unwrap();
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .split_whitespace()
                .map(String::from),
        );
        let stopped = Command::new("kill")
            .arg("-STOP")
            .args(&pids)
            .status()
            .unwrap();
        assert!(stopped.success(), "could not stop {pids:?}");
        Stalled(pids)
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-CONT").args(&self.0).status();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        // Fast shutdown (SIGINT): disconnect clients, stop cleanly.
        let _ = Command::new("kill")
            .args(["-INT", &server.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = server.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// A store on every backend this machine can run, for one parameterised
/// test: redb always, PostgreSQL when its binaries are here (else a line
/// saying it was skipped). Each comes with what keeps it alive (its temp
/// dir, its cluster), dropped after the store.
pub fn every_backend(
    test: &str,
) -> Vec<(
    &'static str,
    std::sync::Arc<toolgate::store::Store>,
    Box<dyn std::any::Any>,
)> {
    let dir = tempfile::tempdir().unwrap();
    let redb = toolgate::store::Store::open(&dir.path().join("t.redb")).unwrap();
    let mut backends: Vec<(&'static str, _, Box<dyn std::any::Any>)> =
        vec![("redb", std::sync::Arc::new(redb), Box::new(dir))];
    if let Some(cluster) = Cluster::start(test) {
        let store = cluster.store();
        backends.push(("postgres", std::sync::Arc::new(store), Box::new(cluster)));
    }
    backends
}

impl Cluster {
    /// A store on a fresh database of this cluster (one "host" of a fleet;
    /// call again on the same URL for another).
    pub fn store(&self) -> toolgate::store::Store {
        self.store_at(&self.database())
    }

    /// Another host's store on the database at `url`.
    pub fn store_at(&self, url: &str) -> toolgate::store::Store {
        let local = self._dir.path().join(format!(
            "host-{}",
            self.databases
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        toolgate::store::Store::connect(url, &local, STORE_DEADLINE).unwrap()
    }
}
