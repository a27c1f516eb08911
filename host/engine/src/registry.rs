//! The plugin registry: which plugin versions serve decisions now, under
//! which config, and how a reload swaps them. Reloads run one at a time and
//! swap atomically; a call in flight finishes on the set it started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::config::Config;
use crate::error::Result;
use crate::guard::ControlPlane;
use crate::oci::Reference;
use crate::plugins::{self, LoadContext, PluginSet, PluginStatus};
use crate::runtime::Runtime;
use crate::store::{FleetPins, Store};

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReloadReport {
    /// New or changed plugins now serving.
    pub loaded: Vec<String>,
    /// Unchanged plugins kept as they were.
    pub kept: Vec<String>,
    /// Plugins no longer configured, now gone.
    pub removed: Vec<String>,
    /// Plugins that failed to (re)load, with why; their previous version (if
    /// any) keeps serving.
    pub failed: Vec<(String, String)>,
}

/// A reload's outcome: the config now in force and what changed.
pub(crate) struct Reloaded {
    pub config: Config,
    pub report: ReloadReport,
}

impl std::ops::Deref for Reloaded {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.config
    }
}

/// The plugins and config in force, and the control plane they protect.
pub(crate) struct Registry {
    plugins: RwLock<Arc<PluginSet>>,
    config: RwLock<Config>,
    /// One reload at a time.
    reloading: Mutex<()>,
    /// The last failed (re)load per plugin name, for `plugins list`.
    problems: Mutex<BTreeMap<String, String>>,
    /// What self-protection refuses to let a tool call touch.
    control_plane: RwLock<Arc<ControlPlane>>,
}

impl Registry {
    /// Load every plugin `config` names; any failure fails the start.
    pub fn open(config: Config, runtime: &Runtime, store: &Arc<Store>) -> Result<Self> {
        let registry = Self {
            plugins: RwLock::new(Arc::default()),
            control_plane: RwLock::new(Arc::new(ControlPlane::for_config(&config, store.path()))),
            config: RwLock::new(config.clone()),
            reloading: Mutex::new(()),
            problems: Mutex::new(BTreeMap::new()),
        };
        let (set, report) =
            registry.build_set(&config, &PluginSet::default(), true, runtime, store)?;
        tracing::info!(loaded = ?report.loaded, "plugins loaded");
        *registry.plugins.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(registry)
    }

    /// Re-read the config file (when there is one) and every plugin, and
    /// swap in what changed. A plugin that fails keeps its previous version;
    /// a config that fails to parse changes nothing.
    ///
    /// `pins` are another host's resolutions of registry plugins (name →
    /// digest-pinned reference): an entry that follows the same tag takes
    /// that digest rather than resolving the tag again, so the fleet runs
    /// one version. An entry pinned in its own config keeps its own pin.
    pub fn reload(
        &self,
        runtime: &Runtime,
        store: &Arc<Store>,
        pins: &FleetPins,
    ) -> Result<Reloaded> {
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.config();
        let config = match &current.source {
            Some(path) => Config::load(path)?,
            None => current,
        };
        // The pins choose what loads this time; the config kept in force
        // still follows its tags at the next reload.
        let previous = self.plugins();
        let followed = following(&config, pins);
        let (set, report) = self.build_set(&followed, &previous, false, runtime, store)?;
        *self.plugins.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        *self
            .control_plane
            .write()
            .unwrap_or_else(|p| p.into_inner()) =
            Arc::new(ControlPlane::for_config(&config, store.path()));
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config.clone();
        tracing::info!(?report, "plugins reloaded");
        Ok(Reloaded { config, report })
    }

    /// Build the plugin set `config` describes, reusing unchanged plugins of
    /// `previous`. Each new or changed plugin is compiled, linked,
    /// `describe`d and `open`ed before it can serve. `strict` (at start)
    /// makes any failure fatal; otherwise a failing plugin keeps its previous
    /// version and the failure is reported.
    fn build_set(
        &self,
        config: &Config,
        previous: &PluginSet,
        strict: bool,
        runtime: &Runtime,
        store: &Arc<Store>,
    ) -> Result<(PluginSet, ReloadReport)> {
        let oci_cache = config.oci_cache_path(&store.path().into());
        let ctx = LoadContext {
            runtime,
            store,
            base_dir: &config.base_dir,
            oci_cache: &oci_cache,
            config_text: config.text.as_deref(),
        };
        let mut report = ReloadReport::default();
        let mut set = Vec::new();
        let entries = config.effective_plugins()?;
        // Compiling is most of a cold start, and the plugins compile at once.
        let attempts: Vec<_> = std::thread::scope(|scope| {
            let loads: Vec<_> = entries
                .iter()
                .map(|(name, entry)| {
                    let (ctx, old) = (&ctx, previous.get(name));
                    scope.spawn(move || {
                        plugins::read(ctx, name, entry).and_then(|bytes| {
                            match old.filter(|old| old.is_same(entry, &bytes)) {
                                Some(old) => Ok((old.clone(), false)),
                                None => plugins::load(ctx, name, entry, bytes)
                                    .map(|p| (Arc::new(p), true)),
                            }
                        })
                    })
                })
                .collect();
            loads
                .into_iter()
                .map(|load| {
                    load.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        for ((name, _), attempt) in entries.into_iter().zip(attempts) {
            let old = previous.get(&name);
            match attempt {
                Ok((plugin, fresh)) => {
                    if fresh {
                        tracing::info!(plugin = %name, sha256 = %plugin.sha256, priority = plugin.priority, "plugin loaded");
                        report.loaded.push(name.clone());
                    } else {
                        report.kept.push(name.clone());
                    }
                    set.push(plugin);
                }
                Err(err) if strict => return Err(err),
                Err(err) => {
                    let why = err.report();
                    tracing::error!(plugin = %name, error = %why, "plugin failed to load; the previous version (if any) keeps serving");
                    report.failed.push((name.clone(), why));
                    set.extend(old.cloned());
                }
            }
        }
        report.removed = previous
            .iter()
            .filter(|p| !set.iter().any(|n| n.name == p.name))
            .map(|p| p.name.to_string())
            .collect();
        let mut problems = self.problems.lock().unwrap_or_else(|p| p.into_inner());
        problems.clear();
        problems.extend(report.failed.iter().cloned());
        Ok((PluginSet::new(set), report))
    }

    /// The digest each loaded registry plugin runs, for a fleet reload's
    /// announcement.
    pub fn pins(&self) -> FleetPins {
        self.plugins()
            .iter()
            .filter_map(|p| Some((p.name.to_string(), p.origin.as_ref()?.pinned.to_string())))
            .collect()
    }

    /// Every loaded plugin with its status, in decision order.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        let problems = self.problems();
        self.plugins()
            .iter()
            .map(|p| {
                let (instances_created, instances_from_spares) = p.pool.created();
                PluginStatus {
                    name: p.name.to_string(),
                    priority: p.priority,
                    source: p.source.clone(),
                    origin: p.origin.as_ref().map(ToString::to_string),
                    sha256: p.sha256.clone(),
                    fail_mode: p.fail_mode,
                    policy: p.description.clone(),
                    problem: problems.get(&*p.name).cloned(),
                    instances_created,
                    instances_from_spares,
                    spare_instances: p.pool.spare_count(),
                }
            })
            .collect()
    }

    /// The last (re)load failure of each plugin that has one.
    pub fn problems(&self) -> BTreeMap<String, String> {
        self.problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What a change to should reload: the config file, every plugin file,
    /// and `plugin_dir` (new, replaced and removed `.wasm` files in it).
    pub fn watched_paths(&self) -> Watched {
        let config = self.config();
        let mut files: Vec<PathBuf> = config.source.iter().cloned().collect();
        if let Ok(plugins) = config.effective_plugins() {
            files.extend(
                plugins
                    .values()
                    .filter_map(|p| p.local_file())
                    .map(|p| config.resolve(Path::new(p))),
            );
        }
        Watched {
            files,
            plugin_dir: config.plugin_dir.as_ref().map(|d| config.resolve(d)),
        }
    }

    /// The plugins serving decisions now.
    pub fn plugins(&self) -> Arc<PluginSet> {
        self.plugins
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The config now in force.
    pub fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Read the config in force without copying it (for the hot path).
    pub fn with_config<T>(&self, f: impl FnOnce(&Config) -> T) -> T {
        f(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The control plane self-protection guards now.
    pub fn control_plane(&self) -> Arc<ControlPlane> {
        Arc::clone(&self.control_plane.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// `config` with each unpinned registry entry pointed at the digest
/// `pins` names for it, when that pin is for the same repository and tag.
fn following(config: &Config, pins: &FleetPins) -> Config {
    let mut followed = config.clone();
    for (name, entry) in &mut followed.plugins {
        let (Some(pin), Some(path)) = (pins.get(name), entry.path.as_deref()) else {
            continue;
        };
        let (Ok(pinned), Ok(ours)) = (Reference::parse(pin), Reference::parse(path)) else {
            continue;
        };
        if ours.digest.is_none() && pinned.names_same_tag(&ours) {
            tracing::info!(plugin = %name, pinned = %pinned, "following the digest the fleet's reload resolved");
            entry.path = Some(pinned.to_string());
        } else {
            tracing::warn!(plugin = %name, announced = %pinned, configured = %ours,
                "the fleet announced a digest for another reference; this host's config decides");
        }
    }
    followed
}

/// What changes should reload (the watcher's part of the registry: what
/// it loaded from).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Watched {
    /// The config file and every plugin file.
    pub files: Vec<PathBuf>,
    /// The directory of drop-in plugins.
    pub plugin_dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_entry_following_the_same_tag_takes_the_fleets_digest() {
        let digest = |c: &str| format!("sha256:{}", c.repeat(64));
        let text = format!(
            "[plugins.follows]\npath = \"oci://r.example/p/a:live\"\nallow_unpinned = true\n\
             [plugins.pinned]\npath = \"oci://r.example/p/a:live@{}\"\n\
             [plugins.other-tag]\npath = \"oci://r.example/p/a:beta\"\nallow_unpinned = true\n\
             [plugins.file]\npath = \"a.wasm\"\n",
            digest("1")
        );
        let config = Config::parse(&text, "test", ".".into()).unwrap();
        let announced = format!("oci://r.example/p/a:live@{}", digest("2"));
        let pins: FleetPins = ["follows", "pinned", "other-tag", "file"]
            .into_iter()
            .map(|name| (name.to_string(), announced.clone()))
            .collect();
        let followed = following(&config, &pins);
        let path = |name: &str| followed.plugins[name].path.clone().unwrap();
        assert_eq!(path("follows"), announced);
        assert_eq!(
            path("pinned"),
            config.plugins["pinned"].path.clone().unwrap()
        );
        assert_eq!(path("other-tag"), "oci://r.example/p/a:beta");
        assert_eq!(path("file"), "a.wasm");
        assert_eq!(
            config.plugins["follows"].path.as_deref(),
            Some("oci://r.example/p/a:live"),
            "the config itself keeps following its tag"
        );
    }
}
