//! A real OCI registry for the tests that need one: Debian's
//! `docker-registry` (the CNCF distribution registry) serving a temporary
//! directory on a loopback port, optionally behind htpasswd basic auth.
//! Dropping it stops the server and removes the directory, also when the
//! test panics.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BINARY: &str = "docker-registry";

/// A running registry.
pub struct Registry {
    server: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub address: String,
    dir: tempfile::TempDir,
}

impl Registry {
    /// An anonymous registry. Without `docker-registry` the test fails,
    /// naming the install command (`None` only when `TOOLGATE_TEST_SKIP`
    /// says `registry`).
    pub fn start() -> Option<Self> {
        Self::start_with(None)
    }

    /// A registry that lets only `user` with `password` in.
    pub fn start_with_login(user: &str, password: &str) -> Option<Self> {
        Self::start_with(Some((user, password)))
    }

    fn start_with(login: Option<(&str, &str)>) -> Option<Self> {
        if Command::new(BINARY).arg("--version").output().is_err() {
            super::missing::missing(
                "registry",
                "the OCI tests need a real registry: `docker-registry` (Debian's CNCF distribution) is not on PATH",
                "apt-get install docker-registry",
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let address = format!("127.0.0.1:{}", super::free_port());
        let auth = match login {
            None => String::new(),
            Some((user, password)) => {
                let hash = bcrypt::hash(password, 4).unwrap();
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{user}:{hash}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: toolgate-tests\n    path: {}\n",
                    file.display()
                )
            }
        };
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n{auth}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let server = Command::new(BINARY)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let registry = Self {
            server: Some(server),
            address,
            dir,
        };
        registry.wait_until_up();
        Some(registry)
    }

    fn wait_until_up(&self) {
        let what = format!("the registry to listen on {}", self.address);
        super::eventually_showing(&what, || {
            let up = std::net::TcpStream::connect(&self.address).is_ok();
            let log = std::fs::read_to_string(self.dir.path().join("registry.log"));
            (up, log.unwrap_or_default())
        });
    }

    /// `oci://ADDRESS/REPOSITORY`.
    pub fn reference(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.address)
    }

    /// The file the registry keeps the blob `sha256:HEX` in.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The manifest `oci://…@DIGEST` names, as the registry stores it.
    pub fn manifest(&self, digest: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.blob_file(digest)).unwrap()).unwrap()
    }

    /// Stop serving (the data stays until drop).
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }

    /// Where the registry keeps its data.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
