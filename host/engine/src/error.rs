//! The host library's typed errors. Each message names the problem and, where
//! there is one, the fix.

use std::path::PathBuf;

pub use toolgate_wire::gates::GateError;
pub use toolgate_wire::protocol::ErrorKind;

/// What made a store operation fail, below toolgate's own words.
pub type StoreCause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong at the host library's boundary.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file could not be read or is invalid.
    #[error("config {path}: {message}")]
    Config {
        /// The file (or `<bundled default>`).
        path: String,
        /// What is wrong, with the key and the fix.
        message: String,
    },

    /// A plugin could not be loaded; the previous version (if any) stays.
    #[error("plugin `{plugin}` ({source_name}): {problem}")]
    Plugin {
        /// The plugin's name in the config.
        plugin: String,
        /// Where its bytes came from.
        source_name: String,
        /// Why it was refused.
        problem: PluginProblem,
    },

    /// The store could not be opened or used.
    #[error("store {path}: {message}")]
    Store {
        /// The store's local name (the redb file, or the path standing for
        /// a database), the database's URL without its password, or the
        /// file or table toolgate was reading.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
        /// The engine's or the OS's own error, when there is one: its text
        /// follows `message` in [`Error::report`] (and in `{:#}`), and a
        /// caller can look at it (an [`std::io::Error`]'s kind).
        #[source]
        cause: Option<StoreCause>,
    },

    /// Another process holds the store (redb allows one owner at a time),
    /// and it stayed held for as long as the caller was willing to wait.
    #[error(
        "store {path}: another process has it open (a running `toolgate serve`?); toolgate waited \
         {waited_ms} ms for it. Let commands go through the daemon, or point --store at another file"
    )]
    StoreBusy {
        /// The redb file.
        path: PathBuf,
        /// How long the caller waited before giving up.
        waited_ms: u64,
    },

    /// A request could not be understood.
    #[error("invalid request: {0}")]
    Request(String),

    /// No daemon answers at the socket (not running, or it could not start).
    #[error("toolgate daemon at {socket}: {message}")]
    DaemonUnreachable {
        /// The daemon's socket.
        socket: PathBuf,
        /// Why it could not be reached.
        message: String,
    },

    /// The daemon is at its limit of requests in flight; try again shortly.
    #[error("toolgate daemon is busy: {0}")]
    Busy(String),

    /// The caller may not do this (see docs/src/safety/ in the book).
    #[error("not allowed: {0}")]
    Unauthorized(String),

    /// The daemon serves another config than the one the caller names.
    #[error(
        "the toolgate daemon serves {serving}, not {named}: stop it (it restarts with the \
         right config at the next hook) or name the config it serves"
    )]
    ConfigMismatch {
        /// What the daemon serves.
        serving: String,
        /// What the caller named.
        named: String,
    },

    /// The daemon answered with an error; `kind` says what sort.
    #[error("toolgate daemon: {message}")]
    Remote {
        /// What sort of failure the daemon reported.
        kind: ErrorKind,
        /// The daemon's message.
        message: String,
    },

    /// A pending gate could not be resolved.
    #[error(transparent)]
    Gate(#[from] GateError),

    /// An admin command failed.
    #[error("command `{command}` on plugin `{plugin}` failed: {message}")]
    Command {
        /// The plugin addressed.
        plugin: String,
        /// The command name.
        command: String,
        /// The policy's (or host's) message.
        message: String,
    },
}

/// A daemon client's failure, as the variant it has always been.
impl From<toolgate_wire::client::ClientError> for Error {
    fn from(err: toolgate_wire::client::ClientError) -> Self {
        use toolgate_wire::client::ClientError as C;
        match err {
            C::Unreachable { socket, message } => Error::DaemonUnreachable { socket, message },
            C::NotTheDaemon(why) | C::Unauthorized(why) => Error::Unauthorized(why),
            C::Busy(why) => Error::Busy(why),
            C::Request(why) => Error::Request(why),
            C::Remote { kind, message } => Error::Remote { kind, message },
        }
    }
}

impl From<toolgate_wire::InvalidRequest> for Error {
    fn from(err: toolgate_wire::InvalidRequest) -> Self {
        Error::Request(err.0)
    }
}

impl Error {
    /// A store error with nothing below it.
    pub(crate) fn store(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Store {
            path: path.into(),
            message: message.into(),
            cause: None,
        }
    }

    /// A store error saying what toolgate was doing (`context`), caused by
    /// `cause`.
    pub(crate) fn store_caused(
        path: impl Into<PathBuf>,
        context: impl Into<String>,
        cause: impl Into<StoreCause>,
    ) -> Self {
        Error::Store {
            path: path.into(),
            message: context.into(),
            cause: Some(cause.into()),
        }
    }

    /// This error and every cause below it, joined by `: ` (what a person
    /// reads; `Display` is this error's own words only).
    pub fn report(&self) -> String {
        with_causes(self)
    }

    /// The message the daemon sends for this error: the errors that a
    /// client decodes back into the same variant ([`decode_answer`]) send
    /// only their own message, so the variant's prefix is not said twice.
    ///
    /// [`decode_answer`]: toolgate_wire::client::decode_answer
    pub fn wire_message(&self) -> String {
        match self {
            Error::Busy(message) | Error::Request(message) | Error::Unauthorized(message) => {
                message.clone()
            }
            other => other.report(),
        }
    }

    /// The class of this error, the same whether it happened here or in the
    /// daemon.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. } | Error::ConfigMismatch { .. } => ErrorKind::Config,
            Error::Plugin { .. } => ErrorKind::Plugin,
            Error::Store { .. } => ErrorKind::Store,
            Error::StoreBusy { .. } | Error::Busy(_) => ErrorKind::Busy,
            Error::Request(_) => ErrorKind::InvalidRequest,
            Error::DaemonUnreachable { .. } => ErrorKind::Unreachable,
            Error::Unauthorized(_) => ErrorKind::Unauthorized,
            Error::Remote { kind, .. } => *kind,
            Error::Gate(GateError::NotFound { .. }) => ErrorKind::NotFound,
            Error::Gate(_) => ErrorKind::Gate,
            Error::Command { .. } => ErrorKind::PolicyFailure,
        }
    }
}

/// Why a plugin was refused at load time.
#[derive(Debug, thiserror::Error)]
pub enum PluginProblem {
    /// The bytes could not be read.
    #[error("cannot read it: {0}")]
    Unreadable(String),
    /// The file is a core wasm module or not wasm at all.
    #[error(
        "not a WebAssembly component ({0}); build policies with `cargo build --target wasm32-wasip2`"
    )]
    NotAComponent(&'static str),
    /// The file's sha256 differs from the pinned digest.
    #[error("sha256 is {actual}, but the config pins {expected}; update the pin or the file")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// Built against an incompatible version of the WIT contract.
    #[error(
        "built against toolgate:policy@{found}, but this host speaks toolgate:policy@{supported}; rebuild it against this host's wit/ (migration notes: wit/CHANGELOG.md)"
    )]
    IncompatibleVersion {
        /// The version the component was built against.
        found: String,
        /// The version this host implements.
        supported: &'static str,
    },
    /// A required export is absent.
    #[error(
        "does not export `{0}`; a policy must target the `toolgate:policy/policy` world (see wit/world.wit)"
    )]
    MissingExport(String),
    /// The component imports something the host does not provide.
    #[error(
        "imports `{0}`, which this host does not provide; policies may import only toolgate:policy/* and WASI"
    )]
    UnknownImport(String),
    /// Compilation or linking failed.
    #[error("cannot compile or link it: {0}")]
    Invalid(String),
    /// `describe` or `open` failed.
    #[error("{0}")]
    Rejected(String),
    /// A required signature is missing, malformed, untrusted or invalid.
    #[error("refused: {0}")]
    Signature(String),
}

/// Result alias for the host library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `err` and every cause below it, joined by `: `.
pub(crate) fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
