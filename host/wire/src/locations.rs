//! Where a store's companions live: its daemon's socket. A leaf module, so
//! anything (the guard, the CLI, the daemon) can name them.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// The longest Unix socket path we create (the OS limit is 107 bytes).
const MAX_SOCKET_PATH: usize = 100;

/// Where a store lives, read once from what the operator wrote (`--store`,
/// the config's `store`): a redb file, or a PostgreSQL database named by a
/// `postgres://` or `postgresql://` URL. Everything that needs to know which
/// asks this type, not the spelling.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A redb file.
    File(PathBuf),
    /// A PostgreSQL database's URL. It may hold a password: [`Display`]
    /// and [`Debug`] leave it out.
    ///
    /// [`Display`]: std::fmt::Display
    Database(String),
}

impl StoreLocation {
    /// `text` as the operator wrote it.
    pub fn parse(text: &std::ffi::OsStr) -> Self {
        match text.to_str() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Self::Database(url.to_string())
            }
            _ => Self::File(PathBuf::from(text)),
        }
    }

    /// The redb file, if this is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Database(_) => None,
        }
    }

    /// The local path that stands for this store on this machine: a redb
    /// file is itself; a database gets a name in the state directory
    /// derived from its URL (without the password), beside which this
    /// machine's daemon keeps its socket, log and lock. So every host of a
    /// fleet has its own daemon.
    pub fn local_name(&self) -> PathBuf {
        match self {
            Self::File(path) => path.clone(),
            Self::Database(url) => {
                let digest = hex::encode(Sha256::digest(redacted_url(url).as_bytes()));
                default_dir("XDG_STATE_HOME", ".local/state")
                    .join(format!("postgres-{}", &digest[..16]))
            }
        }
    }

    /// The socket of the daemon that owns this store: `STORE.sock` beside
    /// its local name, so one store has one daemon and every client finds
    /// it from the store alone. Where that path would be too long for a
    /// Unix socket, a name derived from it in `$XDG_RUNTIME_DIR` (else the
    /// temporary directory).
    pub fn socket(&self) -> PathBuf {
        let store = canonical(&self.local_name());
        let mut beside = store.clone().into_os_string();
        beside.push(".sock");
        if beside.len() <= MAX_SOCKET_PATH {
            return beside.into();
        }
        let digest = hex::encode(Sha256::digest(store.as_os_str().as_encoded_bytes()));
        let dir = std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map_or_else(std::env::temp_dir, PathBuf::from);
        dir.join(format!("toolgate-{}.sock", &digest[..16]))
    }

    /// Whether this is a database URL that holds a password (in its
    /// userinfo or as `password=`). Such a URL must not be written where
    /// others read it (an agent's settings, a command line `ps` shows): the
    /// password belongs in `PGPASSWORD` or a `PGPASSFILE`.
    pub fn holds_password(&self) -> bool {
        matches!(self, Self::Database(url) if redacted_url(url) != *url)
    }

    /// What to pass as `--store` to another toolgate process: the URL as
    /// it is, or the file. It lands on a command line, which every local
    /// user can read: see [`StoreLocation::holds_password`].
    pub fn as_argument(&self) -> std::ffi::OsString {
        match self {
            Self::File(path) => path.clone().into_os_string(),
            Self::Database(url) => url.into(),
        }
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Database(url) => f.write_str(&redacted_url(url)),
        }
    }
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Database(url) => f.debug_tuple("Database").field(&redacted_url(url)).finish(),
        }
    }
}

impl From<PathBuf> for StoreLocation {
    fn from(path: PathBuf) -> Self {
        Self::parse(path.as_os_str())
    }
}

impl From<&Path> for StoreLocation {
    fn from(path: &Path) -> Self {
        Self::parse(path.as_os_str())
    }
}

impl From<&PathBuf> for StoreLocation {
    fn from(path: &PathBuf) -> Self {
        Self::parse(path.as_os_str())
    }
}

impl From<String> for StoreLocation {
    fn from(text: String) -> Self {
        Self::parse(text.as_ref())
    }
}

impl From<&str> for StoreLocation {
    fn from(text: &str) -> Self {
        Self::parse(text.as_ref())
    }
}

/// The socket of the daemon that owns `store` ([`StoreLocation::socket`]).
pub fn socket_for_store(store: impl Into<StoreLocation>) -> PathBuf {
    store.into().socket()
}

/// `url` without its password, for messages, logs and names: the
/// userinfo's password (everything of the userinfo after its first `:`, up
/// to the last `@` before the query, so an unescaped `/` or `@` in it is
/// covered as well) and a `password=` query parameter. Nothing else
/// changes, so a URL that comes back different held a password.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let mut text = match before_query.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => format!("{scheme}://{before_query}"),
    };
    if let Some(query) = query {
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or_default();
                !key.eq_ignore_ascii_case("password")
            })
            .collect();
        if query.is_empty() || !kept.is_empty() {
            text.push('?');
            text.push_str(&kept.join("&"));
        }
    }
    text
}

/// `$VAR/toolgate`, else `$HOME/<fallback>/toolgate`, else `./.toolgate`.
pub fn default_dir(var: &str, fallback: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("toolgate");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(fallback).join("toolgate"),
        None => PathBuf::from(".toolgate"),
    }
}

/// `path` with its directory resolved (the file itself may not exist yet),
/// so two spellings of one store find one daemon.
fn canonical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|dir| dir.join(name))
            .unwrap_or(absolute),
        _ => absolute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_read_once_from_its_spelling() {
        let url = "postgres://toolgate:hunter2@db.example/toolgate";
        let database = StoreLocation::from(url);
        assert_eq!(database, StoreLocation::Database(url.into()));
        assert_eq!(
            StoreLocation::from("postgresql://db/x"),
            StoreLocation::Database("postgresql://db/x".into())
        );
        // A file that merely contains the word is a file.
        let file = StoreLocation::from(PathBuf::from("./postgres:/x.redb"));
        assert_eq!(file.file(), Some(Path::new("./postgres:/x.redb")));
        assert_eq!(database.file(), None);
        // What is shown leaves the password out, whatever the format.
        for shown in [database.to_string(), format!("{database:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("toolgate@db.example/toolgate"), "{shown}");
        }
        // What another process is given keeps it.
        assert_eq!(database.as_argument(), std::ffi::OsString::from(url));
        assert!(database.holds_password());
        assert!(!StoreLocation::from("postgres://toolgate@db/x").holds_password());
        assert!(!StoreLocation::from("postgres://db/x?sslmode=require&").holds_password());
        assert!(!StoreLocation::from("postgres://db/x?").holds_password());
        assert!(!file.holds_password());
    }

    #[test]
    fn every_spelling_of_a_password_is_redacted() {
        for (url, shown) in [
            ("postgres://u:pw@h/db", "postgres://u@h/db"),
            // tokio-postgres reads the userinfo to an `@`: a `/` is in it.
            ("postgres://u:pa/ss@h/db", "postgres://u@h/db"),
            ("postgres://u:p@ss@h:5432/db", "postgres://u@h:5432/db"),
            ("postgres://h/db?password=pw", "postgres://h/db"),
            (
                "postgres://h/db?user=u&PASSWORD=pw&sslmode=require",
                "postgres://h/db?user=u&sslmode=require",
            ),
            (
                "postgres://u@h/db?sslmode=require",
                "postgres://u@h/db?sslmode=require",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
            let location = StoreLocation::from(url);
            assert!(!location.to_string().contains("pw"), "{url}");
            assert!(!format!("{location:?}").contains("pw"), "{url}");
            assert_eq!(location.holds_password(), url != shown, "{url}");
        }
    }

    #[test]
    fn a_database_has_a_local_name_without_its_password_and_a_file_is_its_own() {
        let with = StoreLocation::from("postgres://u:one@db/x").local_name();
        let other_password = StoreLocation::from("postgres://u:two@db/x").local_name();
        assert_eq!(with, other_password, "one database, one local daemon");
        let name = with.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("postgres-") && !name.contains("one"),
            "{name}"
        );
        let file = StoreLocation::from(Path::new("/var/lib/toolgate/t.redb"));
        assert_eq!(file.local_name(), PathBuf::from("/var/lib/toolgate/t.redb"));
        assert_eq!(
            file.socket(),
            PathBuf::from("/var/lib/toolgate/t.redb.sock")
        );
    }
}
