//! The sentinel's config table.

use serde::Deserialize;
use toolgate_guest::glob::Glob;

/// Configuration, with the defaults the bundled config ships.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SentinelConfig {
    /// `false` → every phase abstains and nothing is recorded.
    pub enabled: bool,
    /// Probes per session per turn, shared by shell, file-write and
    /// (one slot fewer) mcp-unclassified calls. Exfil-capable calls have their
    /// own cap of twice this.
    pub max_probes_per_turn: u32,
    /// Events given to the model as context: half this session's newest, half
    /// other sessions' newest for the same tool.
    pub max_context_events: u32,
    /// How long to wait for the model.
    pub probe_timeout_ms: u32,
    /// Deny when the probe cannot answer (timeout, error, no endpoint)
    /// instead of allowing.
    pub deny_on_timeout: bool,
    /// Glob patterns (`*` = any run of characters) over tool names. A match
    /// is classified by the pattern's own words: `shell`/`exec` → shell;
    /// `write`/`edit`/`delete`/`file` → file-write (exfil-capable for MCP
    /// tools); anything else → exfil-capable. Compiled once, at `open`.
    pub probe_patterns: Vec<Glob>,
    /// Redact secrets of well-known shapes (private keys, cloud and forge
    /// tokens) from tools' output before the model reads it (the `output`
    /// phase), where the runtime lets toolgate change what the model reads.
    pub redact_secrets: bool,
}

impl Default for SentinelConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_probes_per_turn: 3,
            max_context_events: 20,
            probe_timeout_ms: 2_000,
            deny_on_timeout: false,
            probe_patterns: [
                "*shell*", "*exec*", "*write*", "*edit*", "*delete*", "*file*", "*upload*",
                "*send*", "*post*",
            ]
            .map(Glob::new)
            .to_vec(),
            redact_secrets: true,
        }
    }
}
