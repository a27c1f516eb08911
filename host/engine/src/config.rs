//! The one TOML config file: where the store lives, the model endpoint, and
//! the plugins with their priorities, fail modes, limits and own tables.
//!
//! Unknown keys are errors (a typo must not silently disable a limit), and
//! every error names the file, the key and the fix.

use crate::locations::{StoreLocation, default_dir};
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use toolgate_wire::protocol::ConfigIdentity;

/// The bundled default config, compiled into the binary.
pub const DEFAULT_CONFIG: &str = include_str!("../../../examples/default.toml");

/// Where errors point the operator for the full reference.
const REFERENCE: &str = "see the configuration reference, docs/src/reference/configuration.md";

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
    /// Where plugins pulled from OCI registries are kept, verified on every
    /// load, so a host starts without its registry. Default: `STORE.oci/`
    /// beside the store.
    pub oci_dir: Option<PathBuf>,
    /// Set to false to compile every plugin on every start.
    #[serde(default = "yes")]
    pub cache: bool,
    /// Policy instances that may be live at once in this process, over
    /// every policy (each reserves its memory's address space). Default:
    /// sized from the policies at start, enough for each to keep its warm
    /// instances, its spares and a call per daemon slot, twice over for a
    /// reload (at least 1 000; see [`Config::instance_slots`]).
    pub instance_slots: Option<std::num::NonZeroU32>,
    /// For embedders calling `Service::resolve_gate` directly: channels the
    /// embedder has authenticated itself, which may resolve a gate raised
    /// from any channel. None by default. The daemon ignores it and accepts
    /// only the channels in `[approvals]`.
    #[serde(default = "default_trusted_channels")]
    pub trusted_channels: Vec<String>,
    /// How long a pending gate stays resolvable, in seconds.
    #[serde(default = "default_gate_ttl")]
    pub gate_ttl_secs: u64,
    /// The most of a transcript's tail the host reads for a policy.
    #[serde(default = "default_transcript_tail")]
    pub transcript_tail_max_bytes: u32,
    /// The language model the host asks a policy's `ask-model` questions.
    #[serde(default)]
    pub probe: ProbeConfig,
    /// The decision log.
    #[serde(default)]
    pub log: LogConfig,
    /// How long a process waits on the store, in milliseconds: while
    /// another process (the daemon, or another command) holds a redb file,
    /// or for a PostgreSQL store to connect or answer one round trip.
    #[serde(default = "default_store_wait")]
    pub store_wait_ms: u64,
    /// Keys trusted to sign plugins (hex ed25519 public keys, as
    /// `toolgate plugins keygen` prints them).
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// Load a plugin file only if a trusted key signed it (each plugin may
    /// say otherwise with `require_signature`). Bundled plugins are part of
    /// the binary and need no signature.
    #[serde(default)]
    pub require_signatures: bool,
    /// The daemon (`toolgate serve`).
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// Who may resolve a pause through the daemon.
    #[serde(default)]
    pub approvals: ApprovalsConfig,
    /// Who hears about new pauses.
    #[serde(default)]
    pub notify: NotifyConfig,
    /// How long the store keeps events, expired gates and idle sessions,
    /// and compiled components.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// The audit trail: a hash chain signed by this host's key.
    #[serde(default)]
    pub audit: AuditConfig,
    /// A directory of `.wasm` policies: each `NAME.wasm` there is loaded as
    /// plugin `NAME` (with its `[plugins.NAME]` table if there is one, else
    /// defaults and priority 100), and the directory is watched for changes.
    pub plugin_dir: Option<PathBuf>,
    /// Plugins by name. The name identifies the plugin in decisions and
    /// names its private state namespace.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginConfig>,
    /// The directory relative plugin paths are resolved against (the config
    /// file's directory). Not a config key.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file this config was read from, so a reload can read it again.
    /// Not a config key.
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// Which config this is (file and digest, or the bundled default), for
    /// a daemon to refuse a hook installed with another. `None` for a
    /// config given as text. Not a config key.
    #[serde(skip)]
    pub identity: Option<ConfigIdentity>,
    /// The text this config was parsed from, so a refusal can name the
    /// line of the key at fault. Not a config key.
    #[serde(skip)]
    pub text: Option<std::sync::Arc<str>>,
}

/// Store hygiene: nothing grows without bound (see `hygiene.rs`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Events older than this are swept, seconds.
    pub events_max_age_secs: u64,
    /// Turn counters of sessions idle this long are swept, seconds.
    pub sessions_max_idle_secs: u64,
    /// How often the sweep runs, seconds.
    pub sweep_interval_secs: u64,
    /// Compiled components not used for this long leave the cache, days.
    pub cache_max_age_days: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            events_max_age_secs: 30 * 24 * 3600,
            sessions_max_idle_secs: 7 * 24 * 3600,
            sweep_interval_secs: 60,
            cache_max_age_days: 30,
        }
    }
}

/// The audit trail (see `crate::audit`): every decision, approval,
/// refusal and reload chained by hash, signed by this host's key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Keep the chain.
    pub enabled: bool,
    /// The signing key (64 hex digits, readable by the daemon's user only;
    /// made on first start with its public half in `KEY.pub`). Default:
    /// `STORE.audit-key` beside the store.
    pub key: Option<PathBuf>,
    /// This host's name in a shared store's chains. Default: the machine's
    /// host name.
    pub host: Option<String>,
    /// Keep at most this many links (the oldest go, with a signed prune).
    pub max_entries: u64,
    /// Remove links older than this, days.
    pub max_age_days: u64,
    /// A signed checkpoint after this many links.
    pub checkpoint_every: u64,
    /// Send the trail as it is written to this OpenTelemetry collector
    /// (OTLP over HTTP, protobuf): `http://127.0.0.1:4318`. A span per
    /// decision (a child per policy) and a log record per link.
    pub otlp_endpoint: Option<String>,
    /// Send the trail as it is written to this syslog receiver (RFC 5424,
    /// CEF payload): `udp://HOST:PORT` or `tcp://HOST:PORT`.
    pub syslog: Option<String>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            key: None,
            host: None,
            max_entries: 1_000_000,
            max_age_days: 365,
            checkpoint_every: 1000,
            otlp_endpoint: None,
            syslog: None,
        }
    }
}

/// Who may resolve pauses (and run admin commands) through the daemon. The
/// agent's own channel never can: see the book's safety model, docs/src/safety/.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Whether a person may approve from a terminal of their own with
    /// `toolgate gates resolve` (peer credentials on the Unix socket; never
    /// from a process without a terminal or from an agent's terminal).
    #[serde(default = "yes")]
    pub terminal: bool,
    /// The OS users who may approve from a terminal. Empty: the daemon's
    /// own user.
    #[serde(default)]
    pub terminal_uids: Vec<u32>,
    /// Channel adapters (a web inbox, a chat bot) that authenticate with a
    /// token: channel name → the token's sha256 (hex). The token itself
    /// lives with the adapter, never in this file.
    #[serde(default)]
    pub tokens: BTreeMap<String, String>,
    /// How long a person's "no" holds for the identical call: `session`
    /// (default: every retry in the thread is refused with the person's
    /// answer, for a day) or `once` (the next retry only).
    #[serde(default)]
    pub refusal_scope: RefusalScope,
    /// Where a person's "always" is kept, as reviewed rules (see
    /// [`crate::standing`]); default `STORE.always.toml` beside the store.
    #[serde(default)]
    pub always_file: Option<PathBuf>,
    /// Let the runtime's own permission rules settle a call the policies
    /// would only ask a person about, where the runtime enforces them and
    /// asks a person itself for what they do not allow (Claude Code in its
    /// `default`, `acceptEdits` and `plan` modes): a call its allow rules
    /// (or `--allowedTools`) cover runs, any other is asked by the runtime.
    /// Never for a call a policy denies, one a policy rewrote, a credential
    /// pause, or a runtime in a mode that asks no one. Default off.
    #[serde(default)]
    pub follow_client_rules: bool,
    /// When a runtime reports a call as run with input other than toolgate
    /// judged for it (another hook or a mod rewrote it after toolgate's
    /// answer), every further call of that thread is refused until a
    /// person looks and resolves the question raised for it. Off: the
    /// question is raised and logged, and calls go on. Default on.
    #[serde(default = "yes")]
    pub stop_on_unjudged_runs: bool,
}

/// How long a person's refusal holds (`[approvals] refusal_scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalScope {
    /// Every identical retry in the thread, for a day.
    #[default]
    Session,
    /// The next identical retry only.
    Once,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            terminal: true,
            terminal_uids: Vec::new(),
            tokens: BTreeMap::new(),
            refusal_scope: RefusalScope::default(),
            always_file: None,
            follow_client_rules: false,
            stop_on_unjudged_runs: true,
        }
    }
}

/// Notifications of new pauses, sent by the daemon (never delaying a
/// decision).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// URLs that receive a signed JSON POST for each new pause.
    #[serde(default)]
    pub webhooks: Vec<String>,
    /// The environment variable holding the key that signs each
    /// notification (HMAC-SHA256, header `X-Toolgate-Signature`); required
    /// with webhooks. The key itself never goes in this file.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Attempts per notification and webhook, with backoff doubling from
    /// 250 ms.
    #[serde(default = "default_notify_attempts")]
    pub attempts: u32,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            secret_env: None,
            attempts: default_notify_attempts(),
        }
    }
}

fn default_notify_attempts() -> u32 {
    5
}

/// The daemon: its limits, where it listens, and as whom it runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Requests handled at once; past it a request is answered `busy` at
    /// once (clients retry briefly) rather than queued on a new thread. One
    /// OS user's share is bounded too (see the daemon's `share` module).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: std::num::NonZeroU32,
    /// Exit after this many seconds without a request (0 = never); the next
    /// hook starts it again.
    #[serde(default = "default_idle_exit")]
    pub idle_exit_secs: u64,
    /// Also serve HTTP on this loopback address: health, metrics, RPC and
    /// the approvals inbox (`toolgate serve --http` overrides it).
    #[serde(default)]
    pub http: Option<std::net::SocketAddr>,
    /// The Unix socket (default: `STORE.sock` beside the store). System
    /// mode puts it in `/run/toolgate`, where the agents' users can reach
    /// it but not replace it.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The socket's permissions (default `0o600`: the daemon's user only).
    /// System mode uses `0o666`: any user may ask for decisions, each a
    /// tenant of its own (see [`crate::tenant`]), while resolving a pause
    /// or running an admin command is still authorized per connection
    /// (`[approvals]`).
    #[serde(default = "default_socket_mode")]
    pub socket_mode: u32,
    /// Socket connections one OS user (by `SO_PEERCRED`) may hold open at
    /// once; past it a new one is refused with a reason: an agent's user
    /// opening hundreds cannot exhaust the daemon for the others.
    #[serde(default = "default_max_connections_per_user")]
    pub max_connections_per_user: std::num::NonZeroU32,
    /// The OS user the daemon runs as. Clients then believe only a socket
    /// served by that user (`SO_PEERCRED`), and `toolgate serve` refuses
    /// to run as anyone else. Default: whoever runs it (per-user mode).
    #[serde(default)]
    pub user: Option<String>,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            max_in_flight: default_max_in_flight(),
            idle_exit_secs: default_idle_exit(),
            http: None,
            socket: None,
            socket_mode: default_socket_mode(),
            max_connections_per_user: default_max_connections_per_user(),
            user: None,
        }
    }
}

fn default_socket_mode() -> u32 {
    0o600
}

fn default_max_connections_per_user() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(256).expect("256 is not zero")
}

fn default_max_in_flight() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(64).expect("64 is not zero")
}
fn default_idle_exit() -> u64 {
    0
}
fn default_store_wait() -> u64 {
    5_000
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

/// The priority of a plugin found in `plugin_dir` without a table.
pub const DEFAULT_PRIORITY: i32 = 100;

/// The decision log's contents and retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Log every decision.
    pub enabled: bool,
    /// How arguments are kept: `digest` (sha256), `redacted` (shape only),
    /// `full`, or `none`.
    pub arguments: ArgumentsView,
    /// Keep at most this many entries (oldest go first).
    pub max_entries: u64,
    /// Drop entries older than this.
    pub max_age_secs: u64,
    /// Whether an answer waits for its own log entry to reach the disk.
    /// Off (the default), what the answer depends on — policy state such
    /// as a consumed lease use, a pause, a resolution — is durable before
    /// the answer, and the entry within 100 ms (one commit for many
    /// answers); on, every answer also waits for a commit of its entry,
    /// for an audit trail that loses no acknowledged decision to a crash.
    pub durable_before_answer: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            arguments: ArgumentsView::Digest,
            max_entries: 100_000,
            max_age_secs: 30 * 24 * 3600,
            durable_before_answer: false,
        }
    }
}

pub use crate::decision_log::ArgumentsView;

/// One plugin entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// A `.wasm` component file (relative to the config file),
    /// `bundled:NAME` for a policy built into the binary, or
    /// `oci://REGISTRY/REPO:TAG@sha256:DIGEST` for one in an OCI registry
    /// (pinned to a manifest digest unless `allow_unpinned`). Default:
    /// `NAME.wasm` in `plugin_dir`.
    #[serde(default)]
    pub path: Option<String>,
    /// Lower numbers run first.
    #[serde(default = "default_priority")]
    pub priority: i32,
    /// Set to false to keep the entry but not load it.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `open` or `closed`; default: what the policy's `describe` says.
    pub fail_mode: Option<FailMode>,
    /// Refuse the file unless its sha256 (hex) matches.
    pub sha256: Option<String>,
    /// Let an `oci://` path name a tag without a digest: every (re)load
    /// then loads whatever the tag names at the time. Off by default, so
    /// a fleet runs the digest its config names.
    #[serde(default)]
    pub allow_unpinned: bool,
    /// `live` (the default: it decides) or `shadow` (it runs on every call
    /// beside the live plugins, its verdict recorded, never deciding).
    #[serde(default)]
    pub mode: PluginMode,
    /// Take part only in some calls, for a staged rollout:
    /// `{ percent = 10 }` (by session id, deterministically), `{ users =
    /// [...] }`, `{ threads = [...] }`; the union of what is given.
    pub rollout: Option<Rollout>,
    /// Load it only if a trusted key signed exactly its bytes
    /// (`PATH.sig`). Default: the top-level `require_signatures`.
    pub require_signature: Option<bool>,
    /// The keys trusted to sign this plugin (hex ed25519 public keys).
    /// Default: the top-level `trusted_keys`.
    pub trusted_keys: Option<Vec<String>>,
    /// Sandbox limits.
    #[serde(default)]
    pub limits: Limits,
    /// What a person's "always" answer to this policy's pause holds for.
    #[serde(default)]
    pub always: AlwaysScope,
    /// The policy's own table, served to it through `wasi:config/store`.
    #[serde(default)]
    pub config: toml::Table,
}

/// What a person's "always" answer to a policy's pause holds for
/// (`[plugins.NAME] always`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlwaysScope {
    /// What the policy itself remembers of it (the rules policy: the
    /// session; lease-gate: the thread).
    #[default]
    Policy,
    /// Also that exact call in that project, for good: the host keeps it
    /// as a standing approval in the operator's file (see
    /// [`crate::standing`]).
    Project,
}

impl PluginConfig {
    /// The path, when it names a file on this machine (not `bundled:…`,
    /// not `oci://…`): what the watcher and self-protection look after.
    pub fn local_file(&self) -> Option<&str> {
        self.path
            .as_deref()
            .filter(|p| !p.starts_with("bundled:") && !crate::oci::Reference::is_oci(p))
    }

    /// An entry for the component at `path` with every other key at its
    /// default.
    pub fn for_path(path: impl Into<String>, priority: i32) -> Self {
        Self {
            path: Some(path.into()),
            priority,
            enabled: true,
            fail_mode: None,
            sha256: None,
            allow_unpinned: false,
            mode: PluginMode::Live,
            rollout: None,
            require_signature: None,
            trusted_keys: None,
            limits: Limits::default(),
            always: AlwaysScope::default(),
            config: toml::Table::new(),
        }
    }
}

/// Whether a plugin decides or only shadows the live ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginMode {
    /// It decides.
    #[default]
    Live,
    /// It runs beside the live plugins; its verdict is recorded, never used.
    Shadow,
}

/// Which calls a plugin takes part in (the union of what is given).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rollout {
    /// This share of sessions, chosen by a hash of the plugin's name and
    /// the session id: the same sessions every time.
    pub percent: Option<u8>,
    /// These users.
    pub users: Vec<String>,
    /// These threads.
    pub threads: Vec<String>,
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
    pub memory_mib: NonZeroU32,
    /// Wall-clock deadline per call into the policy, milliseconds.
    pub deadline_ms: NonZeroU32,
    /// Cap on a reason plus notes returned by one decision, bytes.
    pub max_output_bytes: NonZeroU32,
    /// Cap on the policy's state namespace, bytes.
    pub state_max_bytes: u64,
    /// Cap on stdout/stderr and log output per call, bytes.
    pub log_max_bytes: u32,
    /// Keep instances warm between evaluations (never one that failed).
    /// `false`: a fresh instance for every evaluation.
    pub reuse_instances: bool,
    /// Who may share a warm instance: `session` (the default: one user's
    /// one session) or `user` (one user's sessions). Never two users.
    pub isolation: Isolation,
    /// Opened instances that have served no call, kept ready (made off the
    /// decision path) for calls with no warm instance; 0 turns them off.
    pub spare_instances: u32,
    /// Model questions per evaluation. A policy asks at most one per
    /// decision, so 0 forbids asking and any other value allows it.
    pub probe_max_calls: u32,
    /// The longest the host waits for the model on this policy's behalf per
    /// evaluation, ms.
    pub probe_max_wait_ms: u32,
    /// Hard wall-clock ceiling on one call into the policy, time blocked in
    /// host calls (store I/O) included, ms. Default (0): `deadline_ms + probe_max_wait_ms`.
    pub wall_clock_ms: u32,
    /// Events a policy may append in one evaluation; more are dropped.
    pub events_per_call: u32,
    /// Events kept in the policy's stream; the oldest go first.
    pub events_max: u64,
}

/// Who may share a warm policy instance (and so its memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Only calls of the same user and session.
    #[default]
    Session,
    /// Only calls of the same user.
    User,
}

/// The fewest instance slots a process has (a handful of policies).
pub const MIN_INSTANCE_SLOTS: u32 = 1_000;
/// The most: each slot reserves two memories' address space (4 GiB and
/// guards each), and 8 000 of them take half of x86-64's 128 TiB.
pub const MAX_INSTANCE_SLOTS: u32 = 8_000;

/// Host ceilings no plugin's limits may exceed.
pub const MAX_PROBE_CALLS: u32 = 32;
/// See [`MAX_PROBE_CALLS`].
pub const MAX_PROBE_WAIT_MS: u32 = 120_000;
/// See [`MAX_PROBE_CALLS`].
pub const MAX_SPARE_INSTANCES: u32 = 16;

impl Limits {
    /// The hard wall-clock ceiling on one call into the policy.
    pub fn wall_clock(&self) -> std::time::Duration {
        let ms = if self.wall_clock_ms > 0 {
            self.wall_clock_ms
        } else {
            self.deadline_ms
                .get()
                .saturating_add(self.probe_max_wait_ms)
        };
        std::time::Duration::from_millis(u64::from(ms))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: NonZeroU32::new(64).expect("not zero"),
            deadline_ms: NonZeroU32::new(1_000).expect("not zero"),
            max_output_bytes: NonZeroU32::new(16 * 1024).expect("not zero"),
            state_max_bytes: 64 * 1024 * 1024,
            log_max_bytes: 16 * 1024,
            reuse_instances: true,
            isolation: Isolation::Session,
            spare_instances: 2,
            probe_max_calls: 3,
            probe_max_wait_ms: 10_000,
            wall_clock_ms: 0,
            events_per_call: 256,
            events_max: 100_000,
        }
    }
}

fn yes() -> bool {
    true
}
fn default_priority() -> i32 {
    DEFAULT_PRIORITY
}
fn default_trusted_channels() -> Vec<String> {
    Vec::new()
}
fn default_gate_ttl() -> u64 {
    30 * 60
}

impl PluginConfig {
    /// The `[plugins.NAME]` table's own rules.
    fn validate(&self, name: &str) -> Result<(), String> {
        // A plugin's name is its state namespace; the host keeps its own
        // (the flow labels, `crate::flows`) under names with `:`.
        if name.contains(':') {
            return Err(format!(
                "plugins.\"{name}\": a plugin's name may not contain `:` (names with `:` are \
                 the host's own state); rename it, e.g. `{}`",
                name.replace(':', "-")
            ));
        }
        if let Some(pin) = &self.sha256
            && !is_hex64(pin)
        {
            return Err(format!(
                "plugins.{name}.sha256 must be 64 hex digits (the output of `sha256sum FILE`)"
            ));
        }
        check_registry_path(name, self)?;
        if self
            .rollout
            .as_ref()
            .and_then(|r| r.percent)
            .is_some_and(|p| p > 100)
        {
            return Err(format!(
                "plugins.{name}.rollout.percent must be between 0 and 100"
            ));
        }
        self.limits.validate(name)
    }
}

impl Limits {
    /// A plugin's limits within the host's ceilings.
    fn validate(&self, name: &str) -> Result<(), String> {
        if self.probe_max_calls > MAX_PROBE_CALLS || self.probe_max_wait_ms > MAX_PROBE_WAIT_MS {
            return Err(format!(
                "plugins.{name}.limits: probe_max_calls is at most {MAX_PROBE_CALLS} and \
                 probe_max_wait_ms at most {MAX_PROBE_WAIT_MS} (the host's ceilings)"
            ));
        }
        if self.spare_instances > MAX_SPARE_INSTANCES {
            return Err(format!(
                "plugins.{name}.limits.spare_instances is {}; at most {MAX_SPARE_INSTANCES} \
                 (each holds an instance's memory while it waits)",
                self.spare_instances
            ));
        }
        if self.memory_mib.get() > 4096 {
            return Err(format!(
                "plugins.{name}.limits.memory_mib is {}; the most a 32-bit wasm memory can use is 4096",
                self.memory_mib
            ));
        }
        Ok(())
    }
}

impl ProbeConfig {
    fn validate(&self) -> Result<(), String> {
        match &self.endpoint {
            Some(endpoint) if !is_http_url(endpoint) => Err(format!(
                "probe.endpoint = {endpoint:?} is not an http(s) URL; write the full URL, e.g. \
                 \"http://127.0.0.1:8080/v1/chat/completions\""
            )),
            _ => Ok(()),
        }
    }
}

impl NotifyConfig {
    fn validate(&self) -> Result<(), String> {
        if let Some(url) = self.webhooks.iter().find(|url| !is_http_url(url)) {
            return Err(format!(
                "notify.webhooks: {url:?} is not an http(s) URL; write the full URL"
            ));
        }
        if !self.webhooks.is_empty() && self.secret_env.is_none() {
            return Err(
                "notify.webhooks needs notify.secret_env: the environment variable \
                        holding the key that signs each notification"
                    .into(),
            );
        }
        if self.attempts == 0 {
            return Err("notify.attempts must be at least 1".into());
        }
        Ok(())
    }
}

impl ApprovalsConfig {
    fn validate(&self) -> Result<(), String> {
        match self.tokens.iter().find(|(_, digest)| !is_hex64(digest)) {
            Some((channel, _)) => Err(format!(
                "approvals.tokens.{channel} must be the token's sha256 in hex (64 digits, from \
                 `printf %s TOKEN | sha256sum`), never the token itself"
            )),
            None => Ok(()),
        }
    }
}

fn is_http_url(text: &str) -> bool {
    text.starts_with("http://") || text.starts_with("https://")
}

/// An `oci://` path must parse and name a digest, unless the entry says
/// `allow_unpinned` (which means nothing anywhere else).
fn check_registry_path(name: &str, plugin: &PluginConfig) -> Result<(), String> {
    let path = plugin.path.as_deref().unwrap_or_default();
    let reference = if crate::oci::Reference::is_oci(path) {
        Some(
            crate::oci::Reference::parse(path)
                .map_err(|why| format!("plugins.{name}.path: {why}"))?,
        )
    } else {
        None
    };
    match (reference, plugin.allow_unpinned) {
        (Some(reference), false) if reference.digest.is_none() => Err(format!(
            "plugins.{name}.path names {reference} without a digest, so each host could load \
             something else; pin it (`{reference}@sha256:…`, as `toolgate plugins push` prints \
             it) or set allow_unpinned = true to follow the tag"
        )),
        (Some(reference), true) if reference.digest.is_some() => Err(format!(
            "plugins.{name}: allow_unpinned is set, but the path is pinned to a digest; remove one"
        )),
        (None, true) => Err(format!(
            "plugins.{name}: allow_unpinned is for an oci:// path that names a tag; this path is not one"
        )),
        _ => Ok(()),
    }
}

/// 64 hex digits: a sha256, or an ed25519 public key.
fn is_hex64(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
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
        let mut config = Self::parse(&text, &path.display().to_string(), base_dir)?;
        config.source = Some(path.to_path_buf());
        config.identity = Some(ConfigIdentity::of_file(path, text.as_bytes()));
        Ok(config)
    }

    /// The bundled default config. Its relative paths resolve against the
    /// current directory.
    pub fn bundled_default() -> Result<Self> {
        let mut config = Self::parse(DEFAULT_CONFIG, "<bundled default>", PathBuf::from("."))?;
        config.identity = Some(ConfigIdentity::Bundled);
        Ok(config)
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
        config.text = Some(text.into());
        config.validate().map_err(err)?;
        Ok(config)
    }

    /// Every rule the types cannot say, section by section; the message
    /// names the key and the fix.
    fn validate(&self) -> Result<(), String> {
        for (name, plugin) in &self.plugins {
            if name == crate::decision::HOST {
                return Err(format!(
                    "[plugins.{name}]: the name `{name}` is toolgate's own (its state and the \
                     questions it raises itself); give the plugin another name"
                ));
            }
            plugin.validate(name)?;
        }
        self.probe.validate()?;
        self.notify.validate()?;
        self.approvals.validate()?;
        let keys = self
            .plugins
            .values()
            .flat_map(|p| p.trusted_keys.iter().flatten());
        for key in self.trusted_keys.iter().chain(keys) {
            if !is_hex64(key) {
                return Err(format!(
                    "trusted key {key:?} must be an ed25519 public key as 64 hex digits (what \
                     `toolgate plugins keygen` prints)"
                ));
            }
        }
        if self.gate_ttl_secs == 0 {
            return Err(format!(
                "gate_ttl_secs must be greater than 0 ({REFERENCE})"
            ));
        }
        Ok(())
    }

    /// Every plugin to load, by name: the `[plugins]` tables (with `path`
    /// defaulting to `plugin_dir/NAME.wasm`) plus each `.wasm` file in
    /// `plugin_dir` that has no table. Disabled entries are left out.
    pub fn effective_plugins(&self) -> Result<BTreeMap<String, PluginConfig>> {
        let dir = self.plugin_dir.as_ref().map(|d| self.resolve(d));
        let mut plugins = BTreeMap::new();
        if let Some(dir) = &dir {
            let entries = std::fs::read_dir(dir).map_err(|err| Error::Config {
                path: self.origin(),
                message: format!("plugin_dir {} cannot be read: {err}", dir.display()),
            })?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "wasm")
                    && let Some(name) = path.file_stem().and_then(|s| s.to_str())
                {
                    plugins.insert(
                        name.to_string(),
                        PluginConfig::for_path(path.display().to_string(), DEFAULT_PRIORITY),
                    );
                }
            }
        }
        for (name, entry) in &self.plugins {
            let mut entry = entry.clone();
            if entry.path.is_none() {
                let Some(dir) = &dir else {
                    return Err(Error::Config {
                        path: self.origin(),
                        message: format!(
                            "plugins.{name} has no `path` and there is no `plugin_dir` to find \
                             {name}.wasm in; add one of them"
                        ),
                    });
                };
                entry.path = Some(dir.join(format!("{name}.wasm")).display().to_string());
            }
            plugins.insert(name.clone(), entry);
        }
        plugins.retain(|_, entry| entry.enabled);
        for entry in plugins.values_mut() {
            entry
                .require_signature
                .get_or_insert(self.require_signatures);
            entry
                .trusted_keys
                .get_or_insert_with(|| self.trusted_keys.clone());
        }
        Ok(plugins)
    }

    /// Where this config came from: its file, or `<bundled default>`.
    pub fn origin(&self) -> String {
        self.source
            .as_ref()
            .map_or_else(|| "<bundled default>".into(), |p| p.display().to_string())
    }

    /// The store: the config's (a redb path resolved against the config's
    /// directory, or a `postgres://` URL as it is), else the default redb
    /// file.
    pub fn store_location(&self) -> StoreLocation {
        match self.store.as_deref().map(StoreLocation::from) {
            Some(StoreLocation::File(path)) => StoreLocation::File(self.resolve(&path)),
            Some(database) => database,
            None => StoreLocation::File(
                default_dir("XDG_STATE_HOME", ".local/state").join("toolgate.redb"),
            ),
        }
    }

    /// Instance slots for this config: `instance_slots`, else per policy
    /// (each enabled `[plugins]` table and each `.wasm` in `plugin_dir` at
    /// start) twice its warm instances, spares and daemon calls in flight,
    /// at least [`MIN_INSTANCE_SLOTS`] and at most [`MAX_INSTANCE_SLOTS`].
    pub fn instance_slots(&self, warm_per_policy: u32) -> u32 {
        if let Some(slots) = self.instance_slots {
            return slots.get();
        }
        let in_flight = self.daemon.max_in_flight.get();
        let tables = self.plugins.values().filter(|p| p.enabled);
        let per_table =
            tables.map(|p| 2 * (warm_per_policy + p.limits.spare_instances + in_flight));
        let in_dir = self.plugin_dir_files()
            * 2
            * (warm_per_policy + Limits::default().spare_instances + in_flight);
        per_table
            .fold(in_dir, u32::saturating_add)
            .clamp(MIN_INSTANCE_SLOTS, MAX_INSTANCE_SLOTS)
    }

    /// How many `.wasm` files `plugin_dir` holds now (0 without one).
    fn plugin_dir_files(&self) -> u32 {
        let Some(dir) = &self.plugin_dir else {
            return 0;
        };
        let files = std::fs::read_dir(self.resolve(dir)).into_iter().flatten();
        let wasm = files.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        });
        u32::try_from(wasm.count()).unwrap_or(u32::MAX)
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

    /// Where plugins pulled from OCI registries are kept for the store
    /// at `store`: `oci_dir`, else `STORE.oci/` beside it (owned as the
    /// store is, so whoever may not touch the store may not touch these).
    pub fn oci_cache_path(&self, store: &StoreLocation) -> PathBuf {
        match &self.oci_dir {
            Some(dir) => self.resolve(dir),
            None => {
                let mut beside = store.local_name().into_os_string();
                beside.push(".oci");
                beside.into()
            }
        }
    }

    /// Whether a person's "always" for `policy`'s pause becomes a standing
    /// approval (`[plugins.NAME] always = "project"`).
    pub fn keeps_always(&self, policy: &str) -> bool {
        self.effective_plugins()
            .ok()
            .and_then(|plugins| plugins.get(policy).map(|p| p.always))
            == Some(AlwaysScope::Project)
    }

    /// Where the standing approvals of the store at `store` are kept:
    /// `[approvals] always_file`, else `STORE.always.toml` beside it (owned
    /// as the store is, and in the control plane with it).
    pub fn always_path(&self, store: &StoreLocation) -> PathBuf {
        match &self.approvals.always_file {
            Some(file) => self.resolve(file),
            None => beside(&store.local_name(), ".always.toml"),
        }
    }

    /// The audit key of the store whose local name is `store`: `[audit]
    /// key`, else `STORE.audit-key` beside it.
    pub fn audit_key_path(&self, store: &Path) -> PathBuf {
        match &self.audit.key {
            Some(key) => self.resolve(key),
            None => beside(store, ".audit-key"),
        }
    }

    /// Where the daemon remembers how far it has sent the audit trail to
    /// each `[audit]` export: `STORE.audit-sent` beside the store.
    pub fn audit_sent_path(&self, store: &Path) -> PathBuf {
        beside(store, ".audit-sent")
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

/// `STORE.suffix`: a file kept beside the store (and in the control plane
/// with it).
fn beside(store: &Path, suffix: &str) -> PathBuf {
    let mut path = store.as_os_str().to_owned();
    path.push(suffix);
    path.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, "test.toml", PathBuf::from("/etc/toolgate"))
    }

    #[test]
    fn instance_slots_grow_with_the_policies_within_bounds() {
        let tables = |n: usize, extra: &str| {
            let plugins: String = (0..n)
                .map(|i| format!("[plugins.p{i}]\npath = \"p{i}.wasm\"\npriority = {i}\n{extra}"))
                .collect();
            parse(&plugins).unwrap()
        };
        // Twice (96 warm + 2 spares + 64 in flight) = 324 a policy.
        assert_eq!(tables(1, "").instance_slots(96), MIN_INSTANCE_SLOTS);
        assert_eq!(tables(7, "").instance_slots(96), 7 * 324);
        let disabled = tables(7, "enabled = false\n");
        assert_eq!(disabled.instance_slots(96), MIN_INSTANCE_SLOTS);
        assert_eq!(tables(40, "").instance_slots(96), MAX_INSTANCE_SLOTS);
        let mut set = tables(40, "");
        set.instance_slots = std::num::NonZeroU32::new(50);
        assert_eq!(set.instance_slots(96), 50);
    }

    #[test]
    fn a_registry_path_is_pinned_unless_the_entry_opts_out() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let entry = |path: &str, extra: &str| format!("[plugins.p]\npath = \"{path}\"\n{extra}\n");
        let cases = [
            (entry("oci://r.example/p:1", ""), Some("without a digest")),
            (entry("oci://r.example/p:1", "allow_unpinned = true"), None),
            (entry(&format!("oci://r.example/p:1@{digest}"), ""), None),
            (
                entry(
                    &format!("oci://r.example/p:1@{digest}"),
                    "allow_unpinned = true",
                ),
                Some("pinned to a digest"),
            ),
            (entry("p.wasm", "allow_unpinned = true"), Some("is not one")),
            (
                entry("oci://R.example/p:1", ""),
                Some("not a registry host"),
            ),
        ];
        for (text, refused) in cases {
            match (parse(&text), refused) {
                (Ok(_), None) => {}
                (Err(err), Some(says)) => assert!(err.to_string().contains(says), "{err}"),
                (result, _) => panic!("{text}: {result:?}"),
            }
        }
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
        assert!(err.contains("docs/src/reference/configuration.md"), "{err}");
    }

    #[test]
    fn a_plugin_may_not_take_toolgates_own_name() {
        let err = parse("[plugins.toolgate]\npath = \"a.wasm\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("toolgate's own"), "{err}");
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
        // The type says it: the error quotes the line and wants a nonzero value.
        assert!(
            err.contains("deadline_ms = 0") && err.contains("nonzero"),
            "{err}"
        );
        let err = parse(
            "[plugins.a]\npath = \"a.wasm\"\npriority = 1\n[plugins.a.limits]\nspare_instances = 17\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("plugins.a.limits.spare_instances is 17; at most 16"),
            "{err}"
        );
    }

    #[test]
    fn relative_paths_resolve_against_the_config_dir() {
        let config = parse("store = \"data/t.redb\"\n").unwrap();
        assert_eq!(
            config.store_location(),
            StoreLocation::File("/etc/toolgate/data/t.redb".into())
        );
    }

    #[test]
    fn a_plugin_dir_adds_its_wasm_files_and_supplies_missing_paths() {
        let dir = tempfile_dir();
        std::fs::write(dir.join("found.wasm"), b"").unwrap();
        std::fs::write(dir.join("tuned.wasm"), b"").unwrap();
        std::fs::write(dir.join("notes.txt"), b"").unwrap();
        let text = format!(
            "plugin_dir = {:?}\n[plugins.tuned]\npriority = 7\n",
            dir.display().to_string()
        );
        let config = parse(&text).unwrap();
        let plugins = config.effective_plugins().unwrap();
        assert_eq!(plugins.keys().collect::<Vec<_>>(), ["found", "tuned"]);
        assert_eq!(plugins["found"].priority, DEFAULT_PRIORITY);
        assert_eq!(plugins["tuned"].priority, 7);
        assert!(
            plugins["tuned"]
                .path
                .as_ref()
                .unwrap()
                .ends_with("tuned.wasm")
        );

        let err = parse("[plugins.lost]\npriority = 1\n")
            .unwrap()
            .effective_plugins()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("plugins.lost") && err.contains("plugin_dir"),
            "{err}"
        );
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("toolgate-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn defaults_fill_omitted_keys() {
        let config = parse("[plugins.a]\npath = \"a.wasm\"\npriority = 3\n").unwrap();
        let plugin = &config.plugins["a"];
        assert!(plugin.enabled);
        assert_eq!(plugin.path.as_deref(), Some("a.wasm"));
        assert_eq!(plugin.limits, Limits::default());
        assert!(
            config.trusted_channels.is_empty(),
            "no channel is trusted by default"
        );
        assert!(config.approvals.terminal && config.approvals.tokens.is_empty());
        assert_eq!(config.gate_ttl_secs, 1800);
    }
}
