//! The host library's typed errors. Each message names the problem and, where
//! there is one, the fix.

use std::path::PathBuf;

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

    /// The store file could not be opened or used.
    #[error("store {path}: {message}")]
    Store {
        /// The redb file.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },

    /// A request could not be understood.
    #[error("invalid request: {0}")]
    Request(String),

    /// The daemon could not be reached or refused a request.
    #[error("toolgate daemon: {0}")]
    Daemon(String),

    /// A pending gate could not be resolved.
    #[error(transparent)]
    Gate(#[from] crate::gates::GateError),

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
        "built against toolgate:policy@{found}, but this host speaks toolgate:policy@{supported}; rebuild it against this host's wit/"
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
    /// `describe` or `configure` failed.
    #[error("{0}")]
    Rejected(String),
}

/// Result alias for the host library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
