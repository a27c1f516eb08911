//! A CycloneDX 1.5 SBOM of what a target's binaries hold: the `toolgate`
//! package's normal dependencies for that target, and the bundled policy
//! components (built for `wasm32-wasip2` and embedded in the binary) with
//! theirs. The graph is `cargo tree`'s, run on the policies in the batches
//! the build makes, which resolves features as the build does (`cargo
//! metadata` unifies them with tests' and would list
//! what only tests link); each package's license and source come from
//! `cargo metadata`, and each registry crate's sha256 from `Cargo.lock`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The target the bundled policies are built for (see host/engine/build.rs).
const POLICY_TARGET: &str = "wasm32-wasip2";

fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(args)
        .output()
        .context("cannot run cargo")?;
    if !out.status.success() {
        bail!(
            "cargo {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// `cargo metadata` of the workspace at `root`.
pub fn metadata(root: &Path) -> anyhow::Result<Value> {
    let out = cargo(root, &["metadata", "--format-version", "1", "--locked"])?;
    serde_json::from_slice(&out).context("cargo metadata printed no JSON")
}

/// A package of the metadata by name (a workspace member's).
pub fn member<'a>(metadata: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    workspace_members(metadata)
        .find(|p| p["name"] == name)
        .with_context(|| format!("no workspace member {name}"))
}

fn workspace_members(metadata: &Value) -> impl Iterator<Item = &Value> {
    let members: BTreeSet<&str> = strings(&metadata["workspace_members"]).collect();
    packages(metadata).filter(move |p| members.contains(p["id"].as_str().unwrap_or("")))
}

fn packages(metadata: &Value) -> impl Iterator<Item = &Value> {
    metadata["packages"].as_array().into_iter().flatten()
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The SBOM of `toolgate` built for `target`, at `timestamp` (RFC 3339).
pub fn sbom(root: &Path, target: &str, timestamp: &str) -> anyhow::Result<Value> {
    let metadata = metadata(root)?;
    let checksums = lock_checksums(&root.join("Cargo.lock"))?;
    let details: BTreeMap<String, &Value> = packages(&metadata).map(|p| (purl(p), p)).collect();

    let toolgate = member(&metadata, "toolgate")?;
    let root_ref = purl(toolgate);
    let mut graph = Graph::default();
    graph.add(&tree(root, &["toolgate"], target)?);
    // The policy components the binary embeds, each with what it links.
    for batch in embedded_policies(&metadata) {
        for line in tree(root, &batch, POLICY_TARGET)? {
            if line.0 == 0 {
                graph
                    .edges
                    .entry(root_ref.clone())
                    .or_default()
                    .insert(line.1.clone());
            }
            graph.add(std::slice::from_ref(&line));
        }
    }

    let components = graph
        .nodes
        .iter()
        .filter(|purl| **purl != root_ref)
        .map(|purl| {
            let package = details
                .get(purl)
                .with_context(|| format!("{purl} is not in cargo metadata"))?;
            Ok(component(package, &checksums))
        })
        .collect::<anyhow::Result<Vec<Value>>>()?;
    let dependencies: Vec<Value> = graph
        .edges
        .iter()
        .map(|(from, to)| json!({ "ref": from, "dependsOn": to }))
        .collect();
    let mut bom = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": timestamp,
            "tools": { "components": [{ "type": "application", "name": "cargo xtask dist" }] },
            "component": {
                "type": "application",
                "bom-ref": root_ref,
                "name": "toolgate",
                "version": toolgate["version"],
                "purl": root_ref,
                "licenses": licenses(toolgate),
            },
            "properties": [{ "name": "cdx:rust:target", "value": target }],
        },
        "components": components,
        "dependencies": dependencies,
    });
    bom["serialNumber"] = serial_number(&bom).into();
    Ok(bom)
}

/// The policy components the binary embeds: the workspace's guest crates
/// built as components (cdylib).
/// The bundled policies, in the batches host/engine/build.rs builds them
/// in (features unify within one): those not marked `build-alone`
/// together, then each marked one alone.
fn embedded_policies(metadata: &Value) -> Vec<Vec<&str>> {
    let (alone, together): (Vec<&Value>, Vec<&Value>) = workspace_members(metadata)
        .filter(|p| {
            p["manifest_path"]
                .as_str()
                .unwrap_or("")
                .contains("/guest-plugins/")
        })
        .filter(|p| {
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| strings(&t["kind"]).any(|k| k == "cdylib"))
        })
        .partition(|p| p["metadata"]["toolgate"]["build-alone"] == Value::Bool(true));
    let together: Vec<&str> = together.iter().filter_map(|p| p["name"].as_str()).collect();
    let alone = alone
        .into_iter()
        .filter_map(|p| p["name"].as_str())
        .map(|n| vec![n]);
    std::iter::once(together)
        .chain(alone)
        .filter(|batch| !batch.is_empty())
        .collect()
}

/// A serial number the content decides, so the same build's SBOM is the
/// same file (RFC 4122 layout, version 4 bits).
fn serial_number(bom: &Value) -> String {
    let mut id = [0u8; 16];
    id.copy_from_slice(&Sha256::digest(bom.to_string())[..16]);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    let h = hex::encode(id);
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// `cargo tree` of `packages` built for `target`, normal dependencies
/// only: (depth, purl) per line, in its order.
fn tree(root: &Path, packages: &[&str], target: &str) -> anyhow::Result<Vec<(usize, String)>> {
    let mut args = vec!["tree", "--quiet", "--locked", "--edges", "normal"];
    args.extend(["--target", target, "--prefix", "depth", "--format", "{p}"]);
    for package in packages {
        args.extend(["--package", package]);
    }
    let out = String::from_utf8(cargo(root, &args)?)?;
    out.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let digits = line.bytes().take_while(u8::is_ascii_digit).count();
            let depth = line[..digits]
                .parse()
                .context("a cargo tree line without depth")?;
            let mut words = line[digits..].split_whitespace();
            let (Some(name), Some(version)) = (words.next(), words.next()) else {
                bail!("cannot read cargo tree's line {line:?}");
            };
            let version = version.trim_start_matches('v');
            Ok((depth, format!("pkg:cargo/{name}@{version}")))
        })
        .collect()
}

/// The packages and who depends on whom, by purl.
#[derive(Default)]
struct Graph {
    nodes: BTreeSet<String>,
    edges: BTreeMap<String, BTreeSet<String>>,
    /// The path from the current root to the last line read.
    path: Vec<String>,
}

impl Graph {
    /// Lines of [`tree`]: each a dependency of the nearest line above it
    /// that is one level up.
    fn add(&mut self, lines: &[(usize, String)]) {
        for (depth, purl) in lines {
            self.path.truncate(*depth);
            if let Some(parent) = self.path.last() {
                self.edges
                    .entry(parent.clone())
                    .or_default()
                    .insert(purl.clone());
            }
            self.edges.entry(purl.clone()).or_default();
            self.nodes.insert(purl.clone());
            self.path.push(purl.clone());
        }
    }
}

/// A package's purl: `pkg:cargo/NAME@VERSION`.
fn purl(package: &Value) -> String {
    format!(
        "pkg:cargo/{}@{}",
        package["name"].as_str().unwrap_or(""),
        package["version"].as_str().unwrap_or("")
    )
}

fn licenses(package: &Value) -> Value {
    match package["license"].as_str() {
        Some(expression) => json!([{ "expression": expression }]),
        None => json!([]),
    }
}

fn component(package: &Value, checksums: &BTreeMap<(String, String), String>) -> Value {
    let name = package["name"].as_str().unwrap_or("").to_string();
    let version = package["version"].as_str().unwrap_or("").to_string();
    let mut component = json!({
        "type": "library",
        "bom-ref": purl(package),
        "name": name,
        "version": version,
        "purl": purl(package),
        "scope": "required",
        "licenses": licenses(package),
    });
    if let Some(description) = package["description"].as_str() {
        component["description"] = description.trim().into();
    }
    if let Some(sha256) = checksums.get(&(name, version)) {
        component["hashes"] = json!([{ "alg": "SHA-256", "content": sha256 }]);
    }
    if let Some(repository) = package["repository"].as_str() {
        component["externalReferences"] = json!([{ "type": "vcs", "url": repository }]);
    }
    component
}

/// Each registry crate's sha256 in `Cargo.lock`, by (name, version).
fn lock_checksums(lock: &Path) -> anyhow::Result<BTreeMap<(String, String), String>> {
    let text =
        std::fs::read_to_string(lock).with_context(|| format!("cannot read {}", lock.display()))?;
    let parsed: toml::Value =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", lock.display()))?;
    Ok(parsed["package"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let get = |key: &str| p.get(key)?.as_str().map(str::to_string);
            Some(((get("name")?, get("version")?), get("checksum")?))
        })
        .collect())
}
