//! Loading plugins: read the bytes (file or bundled), verify the pin, compile
//! and pre-link, find its exports, then `describe` and `open` in a sandbox so
//! a broken plugin or config is refused at load time, never at decision time.

use std::sync::Arc;

use crate::bindings::Phases;
use crate::bindings::toolgate::policy::types as wit;
use crate::config::{FailMode, Limits, PluginConfig};
use crate::error::{Error, PluginProblem, Result};
use crate::pool::{Pool, Pooled, instance_key};
use crate::runtime::{self, PolicyFailure, Prepared, Runtime, digest};
use crate::sandbox::CallContext;
use crate::store::Store;

mod bundled {
    include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
}

/// The prefix that names a policy built into the binary.
pub const BUNDLED_PREFIX: &str = "bundled:";

/// Names of the policies built into this binary.
pub fn bundled_names() -> impl Iterator<Item = &'static str> {
    bundled::BUNDLED.iter().map(|(name, _)| *name)
}

/// What a policy says about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicyDescription {
    /// The policy's own name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// One line on what it does.
    pub description: String,
    /// Whether it classifies risk.
    pub classifies: bool,
    /// Whether it accounts a budget.
    pub accounts: bool,
    /// Whether it parses model verdicts.
    pub parses_verdicts: bool,
    /// Whether it observes what happened to calls.
    #[serde(default)]
    pub observes: bool,
    /// Whether it checks tools' output before the model reads it.
    #[serde(default)]
    pub checks_output: bool,
    /// Whether it says which tools may be offered at all.
    #[serde(default)]
    pub filters_tools: bool,
    /// Its default fail mode.
    pub default_fail_mode: FailMode,
    /// Its admin commands.
    pub commands: Vec<String>,
}

impl PolicyDescription {
    /// What `describe` said, and the phases its exports show.
    pub(crate) fn new(info: wit::PolicyInfo, phases: Phases) -> Self {
        Self {
            name: info.name,
            version: info.version,
            description: info.description,
            classifies: phases.classify,
            accounts: phases.account,
            parses_verdicts: phases.parse,
            observes: phases.observe,
            checks_output: phases.check_output,
            filters_tools: phases.visibility,
            default_fail_mode: match info.default_fail_mode {
                wit::FailMode::Open => FailMode::Open,
                wit::FailMode::Closed => FailMode::Closed,
            },
            commands: info.commands,
        }
    }
}

/// A loaded, ready-to-run plugin.
pub struct Plugin {
    /// The name from the config: identity in decisions and state namespace.
    pub name: Arc<str>,
    /// Where it was loaded from (a path, `bundled:NAME` or `oci://…`).
    pub source: String,
    /// For a plugin from a registry: the digest-pinned reference its
    /// bytes came from, and whether they were pulled or cached.
    pub origin: Option<crate::oci::Origin>,
    /// The sha256 of its bytes.
    pub sha256: String,
    /// Lower runs first.
    pub priority: i32,
    /// Live (decides) or shadow (recorded beside the live decision).
    pub mode: crate::config::PluginMode,
    /// The calls it takes part in, when it is being rolled out.
    pub rollout: Option<crate::config::Rollout>,
    /// What its failures turn into.
    pub fail_mode: FailMode,
    /// Its sandbox limits.
    pub limits: Limits,
    /// What it says about itself.
    pub description: PolicyDescription,
    /// Its config table, as `wasi:config/store` serves it to every instance.
    pub(crate) config: Arc<[(String, String)]>,
    pub(crate) prepared: Prepared,
    /// The optional phases it exports.
    pub(crate) phases: Phases,
    /// Configured instances of this version kept warm for reuse.
    pub(crate) pool: Pool,
    /// The flow labels its evaluations read, kept between them.
    labels: Arc<crate::flows::LabelCache>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

/// What a load needs from the host besides the plugin's own entry.
pub(crate) struct LoadContext<'a> {
    pub runtime: &'a Runtime,
    pub store: &'a Arc<Store>,
    pub base_dir: &'a std::path::Path,
    /// Where plugins pulled from registries are cached.
    pub oci_cache: &'a std::path::Path,
    /// The config file's text, for the line of a key a plugin refuses.
    pub config_text: Option<&'a str>,
}

/// A plugin's bytes and their digest, read once per (re)load.
pub(crate) struct PluginBytes {
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// For a plugin from a registry: the pinned reference it came from.
    pub origin: Option<crate::oci::Origin>,
}

/// Read an entry's bytes (file, bundled or OCI registry) and, under
/// `require_signature`, check its signature.
pub(crate) fn read(ctx: &LoadContext<'_>, name: &str, entry: &PluginConfig) -> Result<PluginBytes> {
    let source = entry.path.as_deref().unwrap_or_default();
    let fail = |problem| Error::Plugin {
        plugin: name.to_string(),
        source_name: source.to_string(),
        problem,
    };
    // From a registry: also the signature its manifest carries, the
    // pinned reference and where the bytes came from.
    let (bytes, pulled) = if crate::oci::Reference::is_oci(source) {
        let pulled = pull(ctx, source).map_err(|why| fail(PluginProblem::Unreadable(why)))?;
        (pulled.bytes, Some((pulled.signature, pulled.origin)))
    } else {
        (read_bytes(ctx, source).map_err(fail)?, None)
    };
    if entry.require_signature == Some(true) && !source.starts_with(BUNDLED_PREFIX) {
        // A registry's artifact carries its signature; a file has it beside.
        let (text, label) = match &pulled {
            Some((None, crate::oci::Origin { pinned, .. })) => {
                return Err(fail(PluginProblem::Signature(format!(
                    "it must be signed, but {pinned} carries no `{}` annotation; sign the file \
                     (`toolgate plugins sign --key KEY FILE`) and push it again (`toolgate \
                     plugins push FILE oci://…` attaches FILE.sig)",
                    crate::oci::SIGNATURE_ANNOTATION
                ))));
            }
            Some((Some(signature), crate::oci::Origin { pinned, .. })) => (
                Some(signature.clone()),
                format!(
                    "the `{}` annotation of {pinned}",
                    crate::oci::SIGNATURE_ANNOTATION
                ),
            ),
            None => {
                let sig_path = format!("{}.sig", ctx.base_dir.join(source).display());
                (std::fs::read_to_string(&sig_path).ok(), sig_path)
            }
        };
        let trusted = entry.trusted_keys.as_deref().unwrap_or_default();
        let signer = crate::signing::check(&bytes, text.as_deref(), trusted, &label)
            .map_err(|why| fail(PluginProblem::Signature(why)))?;
        tracing::info!(plugin = source, signer = %signer, "signature verified");
    }
    let origin = pulled.map(|(_, origin)| origin);
    let sha256 = digest(&bytes);
    Ok(PluginBytes {
        bytes,
        sha256,
        origin,
    })
}

/// Pull an `oci://` plugin (or take it from the verified cache).
fn pull(ctx: &LoadContext<'_>, source: &str) -> Result<crate::oci::Pulled, String> {
    let reference = crate::oci::Reference::parse(source)?;
    let pulled = crate::oci::pull(&reference, ctx.oci_cache)?;
    tracing::info!(origin = %pulled.origin, "plugin from an OCI registry");
    Ok(pulled)
}

/// A plugin's config table as `wasi:config/store` entries: one per
/// top-level key, the value JSON-encoded (so a policy gets its types back).
pub(crate) fn config_entries(entry: &PluginConfig) -> Arc<[(String, String)]> {
    entry
        .config
        .iter()
        .map(|(key, value)| {
            let json = serde_json::to_string(value).expect("TOML values convert to JSON");
            (key.clone(), json)
        })
        .collect()
}

impl Plugin {
    /// Whether it takes part in `request` (its rollout, if it has one).
    pub fn takes_part(&self, request: &crate::ToolRequest) -> bool {
        self.rollout
            .as_ref()
            .is_none_or(|rollout| in_rollout(rollout, &self.name, request))
    }

    /// A configured sandbox of this plugin for `request` (none: an
    /// operator's command), on loan for one evaluation: a warm one of the
    /// same user (and session) when the plugin allows reuse and one is
    /// idle, else a spare, else a fresh instance. It goes back when
    /// dropped.
    pub(crate) fn checkout<'p>(
        self: &'p Arc<Self>,
        runtime: &Runtime,
        store: &Arc<Store>,
        request: Option<&crate::ToolRequest>,
        transcript_cap: u32,
    ) -> Result<Pooled<'p>, PolicyFailure> {
        let key = instance_key(self.limits.isolation, request);
        let reuse = self.limits.reuse_instances;
        let warm = if reuse { self.pool.take(&key) } else { None };
        let mut call = CallContext::new(
            self.name.clone(),
            &self.limits,
            store,
            self.config.clone(),
            request.and_then(|r| {
                let owner = crate::tenant::owner_of_user(&r.user_id);
                r.transcript_path.clone().map(|path| (path, owner))
            }),
            transcript_cap,
        );
        call.flow = request.map(|r| crate::flows::FlowScope::of(r, &self.labels));
        if let Some(mut sandbox) = warm {
            sandbox.reset(call);
            return Ok(Pooled::new(&self.pool, reuse, key, sandbox));
        }
        let spare = self.pool.take_spare();
        let from_spare = spare.is_some();
        self.make_spares(runtime, store);
        let sandbox = match spare {
            Some(mut sandbox) => {
                sandbox.reset(call);
                sandbox
            }
            None => {
                let mut sandbox =
                    runtime
                        .instantiator()
                        .instantiate(&self.prepared, &self.limits, call)?;
                sandbox.open()?;
                sandbox
            }
        };
        self.pool.created_one(from_spare);
        Ok(Pooled::new(&self.pool, reuse, key, sandbox))
    }

    /// Top the spares up on the chores thread, unless that is queued
    /// already, or spares are off or failed for this version. A spare is
    /// opened as a fresh instance is, with no caller: no transcript,
    /// nothing of anyone's call.
    fn make_spares(self: &Arc<Self>, runtime: &Runtime, store: &Arc<Store>) {
        if !self.pool.wants_spares() {
            return;
        }
        let (weak_plugin, weak_store) = (Arc::downgrade(self), Arc::downgrade(store));
        let instantiator = runtime.instantiator().clone();
        let refill = move || {
            let (Some(plugin), Some(store)) = (weak_plugin.upgrade(), weak_store.upgrade()) else {
                return;
            };
            let made = plugin.pool.refill(|| {
                let call = CallContext::new(
                    plugin.name.clone(),
                    &plugin.limits,
                    &store,
                    plugin.config.clone(),
                    None,
                    0,
                );
                let mut sandbox =
                    instantiator.instantiate(&plugin.prepared, &plugin.limits, call)?;
                sandbox.open()?;
                Ok(sandbox)
            });
            if let Err(failure) = made {
                tracing::warn!(
                    policy = %plugin.name,
                    cause = %failure,
                    "making a spare instance failed; this version makes no more, calls make their own"
                );
            }
        };
        if runtime.chores().offer(Box::new(refill), true).is_err() {
            self.pool.refill_dropped();
        }
    }

    /// Whether this loaded plugin is exactly what `entry` with these bytes
    /// would load, so a reload can keep it instead of rebuilding it.
    pub(crate) fn is_same(&self, entry: &PluginConfig, bytes: &PluginBytes) -> bool {
        self.sha256 == bytes.sha256
            && self.origin.as_ref().map(|o| &o.pinned) == bytes.origin.as_ref().map(|o| &o.pinned)
            && self.priority == entry.priority
            && self.mode == entry.mode
            && self.rollout == entry.rollout
            && self.limits == entry.limits
            && entry.fail_mode.is_none_or(|mode| mode == self.fail_mode)
            && self.config == config_entries(entry)
    }
}

/// Load one plugin entry from its bytes.
pub(crate) fn load(
    ctx: &LoadContext<'_>,
    name: &str,
    entry: &PluginConfig,
    plugin: PluginBytes,
) -> Result<Plugin> {
    let source = entry.path.clone().unwrap_or_default();
    let fail = |problem: PluginProblem| Error::Plugin {
        plugin: name.to_string(),
        source_name: source.clone(),
        problem,
    };
    let PluginBytes {
        bytes,
        sha256,
        origin,
    } = plugin;
    if let Some(expected) = &entry.sha256
        && !expected.eq_ignore_ascii_case(&sha256)
    {
        return Err(fail(PluginProblem::DigestMismatch {
            expected: expected.to_lowercase(),
            actual: sha256,
        }));
    }
    let prepared = ctx.runtime.prepare(&bytes, &sha256).map_err(fail)?;
    let config = config_entries(entry);

    let name: Arc<str> = Arc::from(name);
    // `describe` must not depend on the config (the contract says so), so
    // it gets none; `open` gets it next.
    let call = CallContext::new(
        name.clone(),
        &entry.limits,
        ctx.store,
        Arc::from([]),
        None,
        0,
    );
    let mut sandbox = ctx
        .runtime
        .instantiator()
        .instantiate(&prepared, &entry.limits, call)
        .map_err(|failure| fail(PluginProblem::Rejected(format!("instantiation {failure}"))))?;
    let info = sandbox
        .call("describe", |p, s| p.gate.call_describe(s))
        .map_err(|failure| fail(PluginProblem::Rejected(format!("describe {failure}"))))?;
    sandbox.store.data_mut().call.config = config.clone();
    sandbox.open().map_err(|failure| {
        fail(PluginProblem::Rejected(match failure {
            PolicyFailure::Config { key, message } => config_refusal(ctx, &name, key, &message),
            other => format!("open {other}"),
        }))
    })?;
    let phases = prepared.exports.phases();
    let description = PolicyDescription::new(info, phases);
    Ok(Plugin {
        fail_mode: entry.fail_mode.unwrap_or(description.default_fail_mode),
        name,
        source,
        origin,
        sha256,
        priority: entry.priority,
        mode: entry.mode,
        rollout: entry.rollout.clone(),
        limits: entry.limits,
        description,
        config,
        prepared,
        phases,
        pool: Pool::new(
            entry.limits.spare_instances as usize,
            ctx.runtime.chores().clone(),
        ),
        labels: Arc::default(),
    })
}

/// A plugin's refusal of its table, pointed at the config file's line
/// when the plugin named a key (or a path into its table) that is there.
fn config_refusal(ctx: &LoadContext<'_>, name: &str, key: Option<String>, message: &str) -> String {
    let table = format!("plugins.{name}.config");
    let line = key.as_deref().zip(ctx.config_text).and_then(|(key, text)| {
        crate::source_lines::line_of(text, &["plugins", name, "config"], key)
    });
    let at = line
        .map(|line| format!(", line {line}"))
        .unwrap_or_default();
    format!(
        "rejected its config ({table}{at}): {}",
        runtime::refusal(key.as_deref(), message)
    )
}

fn read_bytes(ctx: &LoadContext<'_>, path: &str) -> Result<Vec<u8>, PluginProblem> {
    if let Some(name) = path.strip_prefix(BUNDLED_PREFIX) {
        return bundled::BUNDLED
            .iter()
            .find(|(bundled, _)| *bundled == name)
            .map(|(_, bytes)| bytes.to_vec())
            .ok_or_else(|| {
                PluginProblem::Unreadable(format!(
                    "no bundled policy named `{name}`; this binary bundles: {}",
                    bundled_names().collect::<Vec<_>>().join(", ")
                ))
            });
    }
    let resolved = if std::path::Path::new(path).is_absolute() {
        std::path::PathBuf::from(path)
    } else {
        ctx.base_dir.join(path)
    };
    std::fs::read(&resolved)
        .map_err(|err| PluginProblem::Unreadable(format!("{} ({err})", resolved.display())))
}

/// Whether `request` is in `rollout` of plugin `plugin` (the union of what
/// it names): its user, its thread, or its session's bucket of a stable
/// hash of the plugin's name and the session id, so the same sessions take
/// part every time and each plugin draws its own.
pub fn in_rollout(
    rollout: &crate::config::Rollout,
    plugin: &str,
    request: &crate::ToolRequest,
) -> bool {
    use sha2::{Digest as _, Sha256};
    if rollout.users.contains(&request.user_id)
        || rollout.threads.iter().any(|t| t == request.thread())
    {
        return true;
    }
    rollout.percent.is_some_and(|percent| {
        let digest = Sha256::digest(format!("{plugin}\0{}", request.session_id));
        let bucket = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) % 100;
        bucket < u64::from(percent)
    })
}

/// A loaded plugin as `plugins list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// Its priority.
    pub priority: i32,
    /// Where it was loaded from.
    pub source: String,
    /// For a plugin from a registry: the pinned reference its bytes came
    /// from, pulled or from the cache.
    #[serde(default)]
    pub origin: Option<String>,
    /// Its component's sha256.
    pub sha256: String,
    /// Its fail mode.
    pub fail_mode: FailMode,
    /// What it says about itself.
    pub policy: PolicyDescription,
    /// Why its last reload failed, if it did (this version keeps serving).
    pub problem: Option<String>,
    /// Instances of this version that have served calls so far (made for
    /// a call, or a spare taken); warm reuse keeps it low.
    #[serde(default)]
    pub instances_created: u64,
    /// Of those, spares: made ahead of need, off the decision path.
    #[serde(default)]
    pub instances_from_spares: u64,
    /// Spares waiting now.
    #[serde(default)]
    pub spare_instances: usize,
}

/// The plugins that serve decisions, sorted by priority (then name).
#[derive(Debug, Default)]
pub struct PluginSet {
    plugins: Vec<Arc<Plugin>>,
}

impl PluginSet {
    /// Sort the plugins into decision order.
    pub fn new(mut plugins: Vec<Arc<Plugin>>) -> Self {
        plugins.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.name.cmp(&b.name)));
        Self { plugins }
    }

    /// In decision order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins.iter()
    }

    /// The plugins that take part in `request` in `mode`, in decision
    /// order.
    pub fn for_call(
        &self,
        mode: crate::config::PluginMode,
        request: &crate::ToolRequest,
    ) -> Vec<Arc<Plugin>> {
        self.plugins
            .iter()
            .filter(|p| p.mode == mode && p.takes_part(request))
            .cloned()
            .collect()
    }

    /// By config name.
    pub fn get(&self, name: &str) -> Option<&Arc<Plugin>> {
        self.plugins.iter().find(|p| &*p.name == name)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.plugins.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}
