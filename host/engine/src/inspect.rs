//! `plugins inspect`: what a component is and whether this host can load it.

use std::sync::Arc;

use serde::Serialize;

use crate::config::PluginConfig;
use crate::error::{Error, Result};
use crate::plugins::{self, LoadContext, PolicyDescription};
use crate::runtime::{Runtime, digest};
use crate::store::Store;

/// A component, described.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// Where it came from.
    pub source: String,
    /// Its size.
    pub size_bytes: usize,
    /// Its sha256 (what `sha256 = ...` pins).
    pub sha256: String,
    /// The `toolgate:policy` version its gate targets, if any.
    pub wit: Option<String>,
    /// What it exports.
    pub exports: Vec<String>,
    /// What it imports.
    pub imports: Vec<String>,
    /// Whether this host can load it (with an empty config).
    pub loadable: bool,
    /// Why not, if it cannot.
    pub problem: Option<String>,
    /// What it says about itself (when loadable).
    pub policy: Option<PolicyDescription>,
    /// Who signed it (`FILE.sig`), and whether the signature holds.
    pub signature: Option<String>,
}

/// Instance slots for inspecting one policy (its describe call, and spares).
const INSPECT_SLOTS: u32 = 16;

/// Inspect a `.wasm` file or `bundled:NAME`.
pub fn inspect(source: &str) -> Result<Inspection> {
    let scratch = tempfile::tempdir().map_err(|err| {
        Error::store_caused(std::env::temp_dir(), "cannot make a scratch directory", err)
    })?;
    let store = Arc::new(Store::open(&scratch.path().join("inspect.redb"))?);
    let runtime = Runtime::new(INSPECT_SLOTS, None, std::time::Duration::MAX).map_err(|err| {
        Error::Config {
            path: "<engine>".into(),
            message: format!("cannot create the wasm engine: {err:#}"),
        }
    })?;
    let default = crate::Config::bundled_default()?;
    let oci_cache = default.oci_cache_path(&default.store_location());
    let ctx = LoadContext {
        runtime: &runtime,
        store: &store,
        base_dir: std::path::Path::new("."),
        oci_cache: &oci_cache,
        config_text: None,
    };
    let entry = PluginConfig::for_path(source, 0);
    let bytes = plugins::read(&ctx, "inspected", &entry)?;
    let mut inspection = Inspection {
        source: source.to_string(),
        size_bytes: bytes.bytes.len(),
        sha256: digest(&bytes.bytes),
        wit: None,
        exports: Vec::new(),
        imports: Vec::new(),
        loadable: false,
        problem: None,
        policy: None,
        signature: signature_of(source, &bytes.bytes),
    };
    match runtime.interface_names(&bytes.bytes, &bytes.sha256) {
        Ok((exports, imports)) => {
            let gate = format!("{}/gate@", crate::WIT_PACKAGE);
            inspection.wit = exports
                .iter()
                .find_map(|e| e.strip_prefix(&gate))
                .map(|version| format!("{}@{version}", crate::WIT_PACKAGE));
            inspection.exports = exports;
            inspection.imports = imports;
            match plugins::load(&ctx, "inspected", &entry, bytes) {
                Ok(plugin) => {
                    inspection.loadable = true;
                    inspection.policy = Some(plugin.description.clone());
                }
                Err(err) => inspection.problem = Some(plugin_problem(err)),
            }
        }
        Err(problem) => inspection.problem = Some(problem.to_string()),
    }
    drop(store);
    Ok(inspection)
}

/// The signer of `source` per `source.sig`, and whether it verifies.
fn signature_of(source: &str, bytes: &[u8]) -> Option<String> {
    let text = std::fs::read_to_string(format!("{source}.sig")).ok()?;
    Some(match crate::signing::parse(&text) {
        Err(why) => format!("malformed signature file: {why}"),
        Ok(signature) => match signature.verify(crate::signing::Purpose::Plugin, bytes) {
            Ok(()) => format!("{} (valid)", signature.key),
            Err(why) => format!("{} (invalid: {why})", signature.key),
        },
    })
}

fn plugin_problem(err: Error) -> String {
    match err {
        Error::Plugin { problem, .. } => problem.to_string(),
        other => other.to_string(),
    }
}
