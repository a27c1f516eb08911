//! [`Toolgate`]: the host library's entry point. Build it from a config,
//! then evaluate calls, report outcomes, resolve pauses and run admin
//! commands. Every method is blocking (wasmtime and redb both are); async
//! callers use `spawn_blocking`.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::bindings::toolgate::policy::types as wit;
use crate::config::Config;
use crate::decision::{Decision, ModelVerdict};
use crate::error::{Error, Result};
use crate::gates::{GateKey, GateResolution, PendingGate};
use crate::pipeline::{self, Env};
use crate::plugins::{self, LoadContext, Plugin, PluginSet};
use crate::probe::ProbeClient;
use crate::request::ToolRequest;
use crate::runtime::{Runtime, Sandbox};
use crate::store::Store;

/// What happened when a tool ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It ran and succeeded.
    Succeeded,
    /// It ran and failed.
    Failed,
    /// It did not run because it was denied.
    Denied,
}

/// A toolgate host: loaded policies over one store.
pub struct Toolgate {
    runtime: Runtime,
    store: Arc<Store>,
    probe: Arc<ProbeClient>,
    plugins: RwLock<Arc<PluginSet>>,
    config: Config,
}

impl std::fmt::Debug for Toolgate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolgate")
            .field("store", &self.store.path())
            .field("plugins", &self.plugins().len())
            .finish()
    }
}

impl Toolgate {
    /// Open the store and load every enabled plugin. `store` overrides the
    /// config's store path. Any plugin that fails to load fails the whole
    /// start, with a message naming it.
    pub fn open(config: Config, store: Option<PathBuf>) -> Result<Self> {
        let store_path = store.unwrap_or_else(|| config.store_path());
        let store = Arc::new(Store::open(&store_path)?);
        let runtime = Runtime::new(config.cache_path()).map_err(|err| Error::Config {
            path: "<engine>".into(),
            message: format!("cannot create the wasm engine: {err:#}"),
        })?;
        let probe = Arc::new(ProbeClient::new(&config.probe));
        let host = Self {
            runtime,
            store,
            probe,
            plugins: RwLock::new(Arc::default()),
            config,
        };
        let set = host.load_plugins()?;
        *host.plugins.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(host)
    }

    fn load_plugins(&self) -> Result<PluginSet> {
        let ctx = LoadContext {
            runtime: &self.runtime,
            store: &self.store,
            base_dir: &self.config.base_dir,
        };
        let mut loaded = Vec::new();
        for (name, entry) in self.config.plugins.iter().filter(|(_, e)| e.enabled) {
            let plugin = plugins::load(&ctx, name, entry)?;
            tracing::info!(plugin = %name, sha256 = %plugin.sha256, priority = plugin.priority, "plugin loaded");
            loaded.push(Arc::new(plugin));
        }
        Ok(PluginSet::new(loaded))
    }

    /// The plugins serving decisions now.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.plugins
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The config this host was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn env(&self) -> Env<'_> {
        Env {
            runtime: &self.runtime,
            store: &self.store,
            probe: &self.probe,
            gate_ttl: Duration::from_secs(self.config.gate_ttl_secs),
            transcript_cap: self.config.transcript_tail_max_bytes,
        }
    }

    /// Decide on one proposed call. A pause is stored as a pending gate.
    pub fn evaluate(&self, request: &ToolRequest) -> Result<Decision> {
        // Hold this version of the plugin set for the whole evaluation.
        let plugins = self.plugins();
        pipeline::evaluate(&self.env(), &plugins, request)
    }

    /// Tell every policy what happened to a call. Policy failures are logged,
    /// never returned: observing must not disturb the runtime.
    pub fn observe(&self, request: &ToolRequest, outcome: Outcome, summary: &str) {
        let plugins = self.plugins();
        let env = self.env();
        let event = wit::ToolEvent {
            call: request.to_wit(request.call_id.as_deref().unwrap_or(""), &[]),
            outcome: match outcome {
                Outcome::Succeeded => wit::ToolOutcome::Succeeded,
                Outcome::Failed => wit::ToolOutcome::Failed,
                Outcome::Denied => wit::ToolOutcome::Denied,
            },
            summary: summary.to_string(),
        };
        for plugin in plugins.iter() {
            let result = env.sandbox(plugin, Some(request)).and_then(|mut sandbox| {
                sandbox.call("observe", |p, s| {
                    p.toolgate_policy_gate().call_observe(s, &event)
                })
            });
            if let Err(failure) = result {
                tracing::warn!(policy = %plugin.name, cause = %failure, "observe failed");
            }
        }
    }

    /// Resolve a pending gate from `channel`. On success the resolution is
    /// remembered so the resubmitted call does not pause again.
    pub fn resolve_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        resolution: GateResolution,
    ) -> Result<PendingGate> {
        let gate = self.store.take_gate(
            key,
            request_id,
            channel,
            &self.config.trusted_channels,
            crate::now_ms(),
        )?;
        if resolution != GateResolution::Deny {
            self.store.record_resolution(&gate, resolution)?;
        }
        Ok(gate)
    }

    /// Pending (unexpired) gates, optionally of one user.
    pub fn gates(&self, user_id: Option<&str>) -> Result<Vec<PendingGate>> {
        self.store.list_gates(user_id, crate::now_ms())
    }

    /// Run an admin command on one plugin.
    pub fn command(&self, plugin: &str, name: &str, args: &str) -> Result<String> {
        let error = command_error(plugin, name);
        let (_, mut sandbox) = self.plugin_sandbox(plugin, name)?;
        sandbox
            .call("command", |p, s| {
                p.toolgate_policy_gate().call_command(s, name, args)
            })
            .map_err(|f| error(f.to_string()))?
            .map_err(error)
    }

    /// Parse a model's reply with a policy's own `verdict.parse` (for
    /// policies that declare the parse-verdict phase).
    pub fn parse_model_reply(&self, plugin: &str, raw: &str) -> Result<ModelVerdict> {
        let error = command_error(plugin, "parse-verdict");
        let (target, mut sandbox) = self.plugin_sandbox(plugin, "parse-verdict")?;
        if !target.description.parses_verdicts {
            return Err(error("this policy does not parse model verdicts".into()));
        }
        let verdict = sandbox
            .call("parse", |p, s| {
                p.toolgate_policy_verdict().call_parse(s, raw)
            })
            .map_err(|f| error(f.to_string()))?;
        Ok(match verdict {
            wit::ModelVerdict::Allow => ModelVerdict::Allow,
            wit::ModelVerdict::Deny(reason) => ModelVerdict::Deny(reason),
        })
    }

    /// A configured sandbox of the named plugin, for an operator request.
    fn plugin_sandbox(&self, plugin: &str, what: &str) -> Result<(Arc<Plugin>, Sandbox)> {
        let error = command_error(plugin, what);
        let plugins = self.plugins();
        let target = plugins.get(plugin).cloned().ok_or_else(|| {
            error(format!(
                "no plugin named `{plugin}` is loaded (loaded: {})",
                plugins
                    .iter()
                    .map(|p| p.name.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let sandbox = self
            .env()
            .sandbox(&target, None)
            .map_err(|f| error(f.to_string()))?;
        Ok((target, sandbox))
    }
}

fn command_error(plugin: &str, command: &str) -> impl Fn(String) -> Error {
    let (plugin, command) = (plugin.to_string(), command.to_string());
    move |message| Error::Command {
        plugin: plugin.clone(),
        command: command.clone(),
        message,
    }
}
