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

//! **Feature.** Talking to a registry takes the engine's `oci` feature (an
//! HTTP client stack); without it a reference still parses, and a pull or
//! push is refused with the feature's name.

mod cache;
#[cfg(feature = "oci")]
pub mod credentials;
#[cfg(feature = "oci")]
#[doc(hidden)] // pub for the fuzz targets (`toolgate::fuzzing`)
pub mod layout;
mod reference;
#[cfg(feature = "oci")]
mod registry;

#[cfg(not(feature = "oci"))]
use std::path::Path;

pub use cache::{BlobCache, sha256_digest};
#[cfg(feature = "oci")]
pub use layout::encode_signature;
pub use reference::{Reference, SCHEME};
#[cfg(feature = "oci")]
pub use registry::{pull, push};

/// The wasm artifact config's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer's media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The manifest annotation that carries the toolgate signature file.
pub const SIGNATURE_ANNOTATION: &str = "dev.toolgate.signature.v1";
/// The largest component toolgate pulls: a manifest that says more is
/// refused, and a download is cut off past what its manifest says.
pub const MAX_LAYER_BYTES: i64 = 64 << 20;

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
    /// Why the pulled bytes could not be kept in the cache, if they could
    /// not (the next start then needs the registry).
    pub cache_problem: Option<String>,
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

/// Without the `oci` feature no registry can be asked: say so, and how to
/// get one.
#[cfg(not(feature = "oci"))]
pub fn pull(reference: &Reference, _cache_dir: &Path) -> Result<Pulled, String> {
    Err(format!(
        "{reference}: this build has no OCI registry client; build toolgate-engine with its \
         `oci` feature (the `toolgate` binaries have it), or load the plugin from a file"
    ))
}
