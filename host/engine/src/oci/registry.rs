//! The registry conversations behind [`pull`] and [`push`] (the engine's
//! `oci` feature).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;

use super::{
    BlobCache, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, Origin, Pulled, Reference,
    SIGNATURE_ANNOTATION, credentials, layout, sha256_digest,
};

/// The largest manifest toolgate accepts.
const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// How long connecting to a registry may take before the cache is used.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one read from a registry may stall.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one whole pull or push may take (a registry that trickles
/// bytes is cut off here, not after every read).
const DEADLINE: Duration = Duration::from_secs(120);
/// How much of a registry's error text a message quotes.
const ERROR_TEXT: usize = 512;

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

/// Run a registry conversation to the end, within [`DEADLINE`], on a
/// runtime of its own (on its own thread, so it works from inside another
/// runtime as well as outside).
fn blocking<T: Send>(
    work: impl std::future::Future<Output = Result<T, Failure>> + Send,
) -> Result<T, Failure> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|err| {
                        Failure::Unreachable(format!("cannot start a runtime: {err}"))
                    })?;
                runtime.block_on(async {
                    tokio::time::timeout(DEADLINE, work)
                        .await
                        .unwrap_or_else(|_| {
                            Err(Failure::Unreachable(format!(
                                "the registry took longer than {} s",
                                DEADLINE.as_secs()
                            )))
                        })
                })
            })
            .join()
            .unwrap_or_else(|_| {
                Err(Failure::Refused(
                    "the registry client failed unexpectedly (a panic; see the log)".into(),
                ))
            })
    })
}

/// Why a registry conversation failed, without credentials in it, and
/// without more than [`ERROR_TEXT`] of what the registry said.
fn registry_error(reference: &Reference, err: impl std::fmt::Display) -> String {
    let mut text = err.to_string();
    if text.len() > ERROR_TEXT {
        let cut = (0..=ERROR_TEXT)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    format!(
        "the registry {} refused or failed: {text}",
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
    let why = match blocking(pull_from_registry(reference, &cache)) {
        Ok(pulled) => return Ok(pulled),
        Err(Failure::Untrusted(why) | Failure::Refused(why)) => return Err(why),
        Err(Failure::Unreachable(why)) => why,
    };
    // Only a registry out of reach falls back: one that answered (the tag
    // is gone, the credentials are refused) is not second-guessed.
    let cached = reference.digest.clone().or_else(|| cache.tagged(reference));
    let fallback = match &cached {
        Some(digest) => from_cache(&cache, reference, digest, "the registry is unreachable")?,
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

/// A registry error as a [`Failure`]: content that fails its digest is
/// untrusted (never replaced by the cache's copy silently); a registry
/// that could not be reached may be stood in for by the cache; one that
/// answered with an error is believed.
fn failure(
    reference: &Reference,
    err: oci_client::errors::OciDistributionError,
    what: &str,
) -> Failure {
    use oci_client::errors::OciDistributionError as E;
    match err {
        E::DigestError(err) => Failure::Untrusted(format!(
            "{reference}: the {what} the registry served does not match its digest ({err}); refusing it"
        )),
        E::RequestError(err) if err.is_connect() || err.is_timeout() => {
            Failure::Unreachable(registry_error(reference, err))
        }
        E::IoError(err) => Failure::Unreachable(registry_error(reference, err)),
        other => Failure::Refused(registry_error(reference, other)),
    }
}

enum Failure {
    /// The registry could not be reached: the cache may stand in.
    Unreachable(String),
    /// The registry answered with an error (not found, not authorized).
    Refused(String),
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
    let (layer, signature) = layout::artifact_of(reference, &manifest)?;
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
        cache_problem: None,
    }))
}

async fn pull_from_registry(reference: &Reference, cache: &BlobCache) -> Result<Pulled, Failure> {
    let client = client(reference);
    let auth = credentials::for_registry(&reference.registry).map_err(Failure::Refused)?;
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
    let (layer, signature) =
        layout::artifact_of(reference, &manifest).map_err(Failure::Untrusted)?;
    let bytes = pull_layer(&client, reference, &layer).await?;
    let mut kept = cache
        .write(&manifest)
        .and_then(|_| cache.write(&bytes))
        .map(drop);
    // What a tag names is remembered only when the registry was asked
    // about the tag, not when a digest was.
    if reference.digest.is_none() {
        kept = kept.and_then(|_| cache.remember_tag(reference, &digest));
    }
    let cache_problem = kept.err().map(|err| {
        tracing::warn!(error = %err, "could not cache a pulled plugin; the next start needs the registry");
        err.to_string()
    });
    Ok(Pulled {
        bytes,
        signature,
        origin: Origin {
            pinned: reference.pinned(&digest),
            from_cache: None,
        },
        cache_problem,
    })
}

/// The component's bytes, read no further than its manifest says, and
/// checked against its digest.
async fn pull_layer(
    client: &oci_client::Client,
    reference: &Reference,
    layer: &oci_client::manifest::OciDescriptor,
) -> Result<Vec<u8>, Failure> {
    use futures_util::StreamExt as _;
    use oci_client::errors::DigestError;
    let mismatch = || {
        Failure::Untrusted(format!(
            "{reference}: the component the registry served does not match the manifest's digest {}; refusing it",
            layer.digest
        ))
    };
    let declared = usize::try_from(layer.size).unwrap_or(0);
    let mut stream = client
        .pull_blob_stream(&reference.to_client(), layer)
        .await
        .map_err(|err| failure(reference, err, "component"))?;
    let mut bytes = Vec::with_capacity(declared);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| {
            // The stream checks the digest at its end, as an I/O error.
            let digest = err.get_ref().and_then(|e| e.downcast_ref::<DigestError>());
            match digest {
                Some(_) => mismatch(),
                None => failure(reference, err.into(), "component"),
            }
        })?;
        if bytes.len() + chunk.len() > declared {
            return Err(mismatch());
        }
        bytes.extend_from_slice(&chunk);
    }
    if sha256_digest(&bytes) != layer.digest {
        return Err(mismatch());
    }
    Ok(bytes)
}

/// Push a component (and its signature file, if given) to `reference` (a
/// tag); the reference pinned to the pushed manifest's digest, computed
/// here from the bytes sent (not taken from the registry's word).
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
    let config = layout::artifact_config(bytes, &layer_digest)?;
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
    let annotations = signature.map(|text| {
        BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_string(),
            layout::encode_signature(text),
        )])
    });
    let mut manifest = OciImageManifest::build(&layers, &config, annotations);
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
    let body = serde_json::to_vec(&manifest).expect("a manifest serializes");
    let digest = sha256_digest(&body);
    let pushed = blocking(async {
        let refused = |err| Failure::Refused(registry_error(reference, err));
        let client = client(reference);
        let auth: RegistryAuth =
            credentials::for_registry(&reference.registry).map_err(Failure::Refused)?;
        let image = reference.to_client();
        client
            .store_auth_if_needed(image.resolve_registry(), &auth)
            .await;
        for (data, digest) in [
            (layers[0].data.clone(), layer_digest.as_str()),
            (config.data.clone(), manifest.config.digest.as_str()),
        ] {
            client
                .push_blob(&image, data, digest)
                .await
                .map_err(refused)?;
        }
        let content_type = OCI_IMAGE_MEDIA_TYPE.parse().expect("a valid header value");
        client
            .push_manifest_raw(&image, body, content_type)
            .await
            .map_err(refused)?;
        Ok(())
    });
    match pushed {
        Ok(()) => Ok(reference.pinned(&digest)),
        Err(Failure::Unreachable(why) | Failure::Refused(why) | Failure::Untrusted(why)) => {
            Err(why)
        }
    }
}
