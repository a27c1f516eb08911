//! Plugins from OCI registries: `toolgate plugins push` and `pull`, and
//! `path = "oci://REGISTRY/REPO:TAG@sha256:…"` in the config.
//!
//! **Layout.** The CNCF wasm OCI artifact layout that `wkg` (wasm-pkg-tools),
//! Spin and wasmCloud read and write: an OCI image manifest whose config has
//! media type `application/vnd.wasm.config.v0+json` (architecture `wasm`,
//! os `wasip2`, the layer digests, the component's top-level imports and
//! exports) and exactly one layer, `application/wasm`, holding the
//! component's bytes unchanged.
//!
//! **Signature.** A toolgate signature file (see [`crate::signing`]) travels
//! in the manifest as the annotation [`SIGNATURE_ANNOTATION`], base64-encoded
//! (manifests are pushed as canonical JSON, which leaves a newline raw, and
//! registries reject that), as cosign carries its own. It signs the
//! layer's bytes, exactly as `PLUGIN.wasm.sig` signs a local file, so one
//! key signs for both; and since it is inside the manifest, one manifest
//! digest pins the component and its signature together. Other tools ignore
//! an annotation they do not know.
//!
//! **Trust.** What a registry or the cache hands back is checked before it
//! is used: the manifest's sha256 against the pinned digest, the layer's
//! sha256 against the manifest, then (under `require_signature`) the
//! signature against the trusted keys, on every load. A pinned manifest
//! already in the cache is used without asking the registry. A tag that
//! cannot be resolved (the registry unreachable) falls back to the digest it
//! named when last pulled, and says so. TLS is verified; plain HTTP is
//! used only for a registry on the loopback interface.

mod cache;
pub mod credentials;
mod reference;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;

pub use cache::{BlobCache, sha256_digest};
pub use reference::{Reference, SCHEME};

/// The wasm artifact config's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer's media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The manifest annotation that carries the toolgate signature file.
pub const SIGNATURE_ANNOTATION: &str = "dev.toolgate.signature.v1";
/// The largest component toolgate pulls (the manifest says its size first).
pub const MAX_LAYER_BYTES: i64 = 64 << 20;
/// The largest manifest toolgate reads.
const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// How long connecting to a registry may take before the cache is used.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read from a registry may stall.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A pulled (or cached) plugin artifact, verified against its digests.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// The signature file the manifest carries, if any (not yet checked
    /// against any key: that is the loader's `require_signature`).
    pub signature: Option<String>,
    /// Which digest, and whether the registry or the cache served it.
    pub origin: Origin,
}

/// Where a registry plugin's bytes came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The reference pinned to the manifest digest that was used.
    pub pinned: Reference,
    /// Served from the cache, and why (None: pulled just now).
    pub from_cache: Option<&'static str>,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.from_cache {
            None => write!(f, "{} (pulled)", self.pinned),
            Some(why) => write!(f, "{} (from the verified cache: {why})", self.pinned),
        }
    }
}

/// The registry's client for `reference`: TLS verified except on loopback,
/// where plain HTTP is used.
fn client(reference: &Reference) -> oci_client::Client {
    // reqwest is built without a default crypto provider; toolgate uses
    // ring everywhere. A provider installed already is fine too.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if reference.is_loopback() {
        ClientProtocol::HttpsExcept(vec![reference.registry.clone()])
    } else {
        ClientProtocol::Https
    };
    oci_client::Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        user_agent: concat!("toolgate/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    })
}

/// Run a registry conversation to the end on a runtime of its own (on its
/// own thread, so it works from inside another runtime as well as outside).
fn blocking<T: Send>(work: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds")
                    .block_on(work)
            })
            .join()
            .expect("the registry thread does not panic")
    })
}

/// Why a registry conversation failed, without credentials in it.
fn registry_error(reference: &Reference, err: impl std::fmt::Display) -> String {
    format!(
        "the registry {} refused or failed: {err}",
        reference.registry
    )
}

/// Fetch the plugin `reference` names into the cache at `cache_dir` and
/// return its verified bytes.
pub fn pull(reference: &Reference, cache_dir: &Path) -> Result<Pulled, String> {
    let cache = BlobCache::new(cache_dir);
    if let Some(digest) = &reference.digest
        && let Some(pulled) = from_cache(&cache, reference, digest, "pinned, already pulled")?
    {
        return Ok(pulled);
    }
    match blocking(pull_from_registry(reference, &cache)) {
        Ok(pulled) => Ok(pulled),
        Err(Failure::Untrusted(why)) => Err(why),
        Err(Failure::Registry(why)) => {
            let cached = reference.digest.clone().or_else(|| cache.tagged(reference));
            let fallback = match &cached {
                Some(digest) => {
                    from_cache(&cache, reference, digest, "the registry is unreachable")?
                }
                None => None,
            };
            match fallback {
                Some(pulled) => {
                    tracing::warn!(reference = %reference, digest = %pulled.origin.pinned, cause = %why,
                        "the registry is unreachable; starting from the verified cache");
                    Ok(pulled)
                }
                None => Err(format!(
                    "{why}; and nothing for {reference} is in the cache ({})",
                    cache_dir.display()
                )),
            }
        }
    }
}

/// A registry error as a [`Failure`]: content that fails its digest is
/// untrusted (never replaced by the cache's copy silently), the rest is the
/// registry's.
fn failure(
    reference: &Reference,
    err: oci_client::errors::OciDistributionError,
    what: &str,
) -> Failure {
    match err {
        oci_client::errors::OciDistributionError::DigestError(err) => Failure::Untrusted(format!(
            "{reference}: the {what} the registry served does not match its digest ({err}); refusing it"
        )),
        other => Failure::Registry(registry_error(reference, other)),
    }
}

enum Failure {
    /// The registry could not be asked, or said no: the cache may serve.
    Registry(String),
    /// What came back does not match its digests or layout: refused.
    Untrusted(String),
}

/// A cached manifest and its layer, both verified, or None if either is
/// missing.
fn from_cache(
    cache: &BlobCache,
    reference: &Reference,
    digest: &str,
    why: &'static str,
) -> Result<Option<Pulled>, String> {
    let Some(manifest) = cache.read(digest) else {
        return Ok(None);
    };
    let (layer, signature) = artifact_of(reference, &manifest)?;
    let Some(bytes) = cache.read(&layer.digest) else {
        return Ok(None);
    };
    Ok(Some(Pulled {
        bytes,
        signature,
        origin: Origin {
            pinned: reference.pinned(digest),
            from_cache: Some(why),
        },
    }))
}

/// The component layer and signature a manifest describes, if it has the
/// wasm artifact layout.
fn artifact_of(
    reference: &Reference,
    manifest: &[u8],
) -> Result<(oci_client::manifest::OciDescriptor, Option<String>), String> {
    let manifest: OciImageManifest = serde_json::from_slice(manifest)
        .map_err(|err| format!("{reference} is not an OCI image manifest ({err})"))?;
    let not_wasm = |what: String| {
        format!(
            "{reference} is not a wasm component artifact: {what} (push it with `toolgate plugins push` or `wkg oci push`)"
        )
    };
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its config is `{}`, not `{CONFIG_MEDIA_TYPE}`",
            manifest.config.media_type
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not_wasm(format!(
            "it has {} layers, not exactly one",
            manifest.layers.len()
        )));
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "its layer is `{}`, not `{LAYER_MEDIA_TYPE}`",
            layer.media_type
        )));
    }
    if !(0..=MAX_LAYER_BYTES).contains(&layer.size) {
        return Err(format!(
            "{reference}'s component is {} bytes; toolgate pulls at most {MAX_LAYER_BYTES}",
            layer.size
        ));
    }
    let signature = match manifest
        .annotations
        .as_ref()
        .and_then(|a| a.get(SIGNATURE_ANNOTATION))
    {
        None => None,
        Some(encoded) => Some(decode_signature(encoded).ok_or_else(|| {
            format!("{reference}'s `{SIGNATURE_ANNOTATION}` annotation is not a base64-encoded signature file")
        })?),
    };
    Ok((layer.clone(), signature))
}

async fn pull_from_registry(reference: &Reference, cache: &BlobCache) -> Result<Pulled, Failure> {
    let client = client(reference);
    let auth = credentials::for_registry(&reference.registry).map_err(Failure::Registry)?;
    let image = reference.to_client();
    let (manifest, reported) = client
        .pull_manifest_raw(&image, &auth, &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .map_err(|err| failure(reference, err, "manifest"))?;
    if manifest.len() > MAX_MANIFEST_BYTES {
        return Err(Failure::Untrusted(format!(
            "{reference}'s manifest is {} bytes; toolgate reads at most {MAX_MANIFEST_BYTES}",
            manifest.len()
        )));
    }
    let digest = sha256_digest(&manifest);
    let expected = reference.digest.as_deref().unwrap_or(&reported);
    if digest != expected {
        return Err(Failure::Untrusted(format!(
            "{reference}: the registry served a manifest whose sha256 is {digest}, not {expected}; \
             refusing it (the registry's content changed, or the pin is wrong)"
        )));
    }
    let (layer, signature) = artifact_of(reference, &manifest).map_err(Failure::Untrusted)?;
    let mut bytes = Vec::with_capacity(layer.size as usize);
    client
        .pull_blob(&image, &layer, &mut bytes)
        .await
        .map_err(|err| failure(reference, err, "component"))?;
    if sha256_digest(&bytes) != layer.digest {
        return Err(Failure::Untrusted(format!(
            "{reference}: the component the registry served does not match the manifest's digest {}; refusing it",
            layer.digest
        )));
    }
    let cached = cache.write(&manifest).and_then(|_| cache.write(&bytes));
    let remembered = match &reference.tag {
        Some(_) => cached.and_then(|_| cache.remember_tag(reference, &digest)),
        None => cached.map(drop),
    };
    if let Err(err) = remembered {
        tracing::warn!(error = %err, "could not cache a pulled plugin; the next start needs the registry");
    }
    Ok(Pulled {
        bytes,
        signature,
        origin: Origin {
            pinned: reference.pinned(&digest),
            from_cache: None,
        },
    })
}

/// A signature file as the annotation carries it.
pub fn encode_signature(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn decode_signature(encoded: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The wasm artifact config of a component: its top-level imports and
/// exports, as the layout asks.
fn artifact_config(bytes: &[u8], layer_digest: &str) -> Result<Vec<u8>, String> {
    let (imports, exports) = component_interface(bytes)?;
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let config = serde_json::json!({
        "created": created,
        "author": null,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": { "exports": exports, "imports": imports, "target": null },
    });
    Ok(serde_json::to_vec(&config).expect("JSON values serialize"))
}

/// The names a component imports and exports at its top level.
fn component_interface(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    use wasmparser::{Encoding, Parser, Payload};
    let not_component =
        || "it is not a WebAssembly component (build policies for wasm32-wasip2)".to_string();
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|err| format!("it is not valid WebAssembly ({err})"))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(not_component());
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section {
                    let import = import.map_err(|err| format!("bad import section ({err})"))?;
                    imports.push(import.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    let export = export.map_err(|err| format!("bad export section ({err})"))?;
                    exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    if depth != 0 || (imports.is_empty() && exports.is_empty()) {
        return Err(not_component());
    }
    Ok((imports, exports))
}

/// Push a component (and its signature file, if given) to `reference` (a
/// tag); the reference pinned to the pushed manifest's digest.
pub fn push(
    bytes: &[u8],
    signature: Option<&str>,
    reference: &Reference,
) -> Result<Reference, String> {
    if reference.tag.is_none() || reference.digest.is_some() {
        return Err(format!(
            "push to a tag, without a digest (oci://REGISTRY/REPO:TAG); `{reference}` is not one"
        ));
    }
    let layer_digest = sha256_digest(bytes);
    let config = artifact_config(bytes, &layer_digest)?;
    let layers = vec![ImageLayer::new(
        bytes.to_vec(),
        LAYER_MEDIA_TYPE.to_string(),
        None,
    )];
    let config = Config {
        data: config.into(),
        media_type: CONFIG_MEDIA_TYPE.to_string(),
        annotations: None,
    };
    let annotations = signature
        .map(|text| BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), encode_signature(text))]));
    let mut manifest = OciImageManifest::build(&layers, &config, annotations);
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
    blocking(async {
        let client = client(reference);
        let auth: RegistryAuth = credentials::for_registry(&reference.registry)?;
        let image = reference.to_client();
        client
            .push(&image, &layers, config, &auth, Some(manifest))
            .await
            .map_err(|err| registry_error(reference, err))?;
        let digest = client
            .fetch_manifest_digest(&image, &auth)
            .await
            .map_err(|err| registry_error(reference, err))?;
        Ok(reference.pinned(&digest))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_component_has_an_artifact_config() {
        let core_module = b"\0asm\x01\0\0\0";
        assert!(
            component_interface(core_module)
                .unwrap_err()
                .contains("not a WebAssembly component")
        );
        assert!(
            component_interface(b"not wasm")
                .unwrap_err()
                .contains("not valid WebAssembly")
        );
    }

    #[test]
    fn a_manifest_without_the_wasm_layout_is_refused() {
        let reference = Reference::parse("oci://127.0.0.1:1/a:b").unwrap();
        let image = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
            "layers":[]}"#;
        let err = artifact_of(&reference, image).unwrap_err();
        assert!(err.contains("not a wasm component artifact"), "{err}");
    }
}
