//! The one TOML config file: where the store lives, the model endpoint, and
//! the plugins with their priorities, fail modes, limits and own tables.
//!
//! Unknown keys are errors (a typo must not silently disable a limit), and
//! every error names the file, the key and the fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The bundled default config, compiled into the binary.
pub const DEFAULT_CONFIG: &str = include_str!("../../examples/default.toml");

/// Where errors point the operator for the full reference.
const REFERENCE: &str = "see \"Configuration\" in README.md";

/// A parsed config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The redb file. Default: `$XDG_STATE_HOME/toolgate/toolgate.redb`
    /// (`~/.local/state/toolgate/toolgate.redb`). `--store` overrides it.
    pub store: Option<PathBuf>,
    /// Where compiled plugins are cached. Default:
    /// `$XDG_CACHE_HOME/toolgate` (`~/.cache/toolgate`).
    pub cache_dir: Option<PathBuf>,
    /// Set to false to compile every plugin on every start.
    #[serde(default = "yes")]
    pub cache: bool,
    /// Channels trusted to resolve a pending gate raised from any channel.
    #[serde(default = "default_trusted_channels")]
    pub trusted_channels: Vec<String>,
    /// How long a pending gate stays resolvable, in seconds.
    #[serde(default = "default_gate_ttl")]
    pub gate_ttl_secs: u64,
    /// The most of a transcript's tail the host reads for a policy.
    #[serde(default = "default_transcript_tail")]
    pub transcript_tail_max_bytes: u32,
    /// The language model behind the `probe` capability.
    #[serde(default)]
    pub probe: ProbeConfig,
    /// Plugins by name. The name identifies the plugin in decisions and
    /// names its private state namespace.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginConfig>,
    /// The directory relative plugin paths are resolved against (the config
    /// file's directory). Not a config key.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// An OpenAI-compatible chat-completions endpoint.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Full URL, e.g. `http://127.0.0.1:8080/v1/chat/completions`. Absent:
    /// probes answer `not-configured`.
    pub endpoint: Option<String>,
    /// The model name sent with each request.
    #[serde(default)]
    pub model: String,
    /// The environment variable holding the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    /// Ceiling on any probe's timeout, in milliseconds.
    #[serde(default = "default_probe_timeout")]
    pub max_timeout_ms: u32,
}

/// One plugin entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// A `.wasm` component file (relative to the config file), or
    /// `bundled:NAME` for a policy built into the binary.
    pub path: String,
    /// Lower numbers run first.
    pub priority: i32,
    /// Set to false to keep the entry but not load it.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `open` or `closed`; default: what the policy's `describe` says.
    pub fail_mode: Option<FailMode>,
    /// Refuse the file unless its sha256 (hex) matches.
    pub sha256: Option<String>,
    /// Sandbox limits.
    #[serde(default)]
    pub limits: Limits,
    /// The policy's own table, handed to its `configure` as JSON.
    #[serde(default)]
    pub config: toml::Table,
}

/// What a failing policy turns into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// The failure becomes an abstention, a note and a warning log.
    Open,
    /// The failure becomes a deny naming the policy and the cause.
    Closed,
}

/// Per-plugin sandbox limits.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory cap, MiB.
    pub memory_mib: u32,
    /// Wall-clock deadline per call into the policy, milliseconds.
    pub deadline_ms: u32,
    /// Cap on a reason plus notes returned by one decision, bytes.
    pub max_output_bytes: u32,
    /// Cap on the policy's state namespace, bytes.
    pub state_max_bytes: u64,
    /// Cap on stdout/stderr and log output per call, bytes.
    pub log_max_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 64,
            deadline_ms: 1_000,
            max_output_bytes: 16 * 1024,
            state_max_bytes: 64 * 1024 * 1024,
            log_max_bytes: 16 * 1024,
        }
    }
}

fn yes() -> bool {
    true
}
fn default_trusted_channels() -> Vec<String> {
    vec!["web".into(), "gateway".into()]
}
fn default_gate_ttl() -> u64 {
    30 * 60
}
fn default_transcript_tail() -> u32 {
    256 * 1024
}
fn default_probe_timeout() -> u32 {
    10_000
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|err| Error::Config {
            path: path.display().to_string(),
            message: format!("cannot read it: {err}"),
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Self::parse(&text, &path.display().to_string(), base_dir)
    }

    /// The bundled default config. Its relative paths resolve against the
    /// current directory.
    pub fn bundled_default() -> Result<Self> {
        Self::parse(DEFAULT_CONFIG, "<bundled default>", PathBuf::from("."))
    }

    /// Parse config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str, base_dir: PathBuf) -> Result<Self> {
        let err = |message: String| Error::Config {
            path: origin.to_string(),
            message,
        };
        let mut config: Config =
            toml::from_str(text).map_err(|e| err(format!("{}({REFERENCE})", e)))?;
        config.base_dir = base_dir;
        for (name, plugin) in &config.plugins {
            if let Some(pin) = &plugin.sha256
                && (pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(err(format!(
                    "plugins.{name}.sha256 must be 64 hex digits (the output of `sha256sum FILE`)"
                )));
            }
            let limits = &plugin.limits;
            for (key, value) in [
                ("memory_mib", u64::from(limits.memory_mib)),
                ("deadline_ms", u64::from(limits.deadline_ms)),
                ("max_output_bytes", u64::from(limits.max_output_bytes)),
            ] {
                if value == 0 {
                    return Err(err(format!(
                        "plugins.{name}.limits.{key} must be greater than 0 ({REFERENCE})"
                    )));
                }
            }
            if limits.memory_mib > 4096 {
                return Err(err(format!(
                    "plugins.{name}.limits.memory_mib is {}; the most a 32-bit wasm memory can use is 4096",
                    limits.memory_mib
                )));
            }
        }
        if config.gate_ttl_secs == 0 {
            return Err(err(format!(
                "gate_ttl_secs must be greater than 0 ({REFERENCE})"
            )));
        }
        Ok(config)
    }

    /// The store path: the config's, else the default location.
    pub fn store_path(&self) -> PathBuf {
        match &self.store {
            Some(path) => self.resolve(path),
            None => default_dir("XDG_STATE_HOME", ".local/state").join("toolgate.redb"),
        }
    }

    /// The compiled-artifact cache directory, unless caching is off.
    pub fn cache_path(&self) -> Option<PathBuf> {
        if !self.cache {
            return None;
        }
        Some(match &self.cache_dir {
            Some(path) => self.resolve(path),
            None => default_dir("XDG_CACHE_HOME", ".cache"),
        })
    }

    /// Resolve a path from the config against the config file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}

/// `$VAR/toolgate`, else `$HOME/<fallback>/toolgate`, else `./.toolgate`.
fn default_dir(var: &str, fallback: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir).join("toolgate");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(fallback).join("toolgate"),
        None => PathBuf::from(".toolgate"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, "test.toml", PathBuf::from("/etc/toolgate"))
    }

    #[test]
    fn bundled_default_parses() {
        let config = Config::bundled_default().expect("the bundled default must parse");
        assert!(!config.plugins.is_empty());
    }

    #[test]
    fn unknown_key_names_the_key_and_file() {
        let err = parse("stor = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("test.toml"), "{err}");
        assert!(err.contains("stor"), "{err}");
        assert!(err.contains("README"), "{err}");
    }

    #[test]
    fn unknown_plugin_key_is_an_error() {
        let err = parse("[plugins.a]\npath = \"a.wasm\"\npriority = 1\nfailmode = \"open\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("failmode"), "{err}");
    }

    #[test]
    fn bad_values_are_errors_naming_the_key() {
        let err = parse("[plugins.a]\npath = \"a.wasm\"\npriority = 1\nfail_mode = \"maybe\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("maybe"), "{err}");
        let err = parse("[plugins.a]\npath = \"a.wasm\"\npriority = 1\nsha256 = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("plugins.a.sha256"), "{err}");
        let err = parse(
            "[plugins.a]\npath = \"a.wasm\"\npriority = 1\n[plugins.a.limits]\ndeadline_ms = 0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("plugins.a.limits.deadline_ms"), "{err}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_dir() {
        let config = parse("store = \"data/t.redb\"\n").unwrap();
        assert_eq!(
            config.store_path(),
            PathBuf::from("/etc/toolgate/data/t.redb")
        );
    }

    #[test]
    fn defaults_fill_omitted_keys() {
        let config = parse("[plugins.a]\npath = \"a.wasm\"\npriority = 3\n").unwrap();
        let plugin = &config.plugins["a"];
        assert!(plugin.enabled);
        assert_eq!(plugin.limits, Limits::default());
        assert_eq!(config.trusted_channels, ["web", "gateway"]);
        assert_eq!(config.gate_ttl_secs, 1800);
    }
}
