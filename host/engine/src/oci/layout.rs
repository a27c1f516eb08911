//! The CNCF wasm OCI artifact layout: what a manifest must say to be a
//! component toolgate loads, and the config `push` writes for one.

use super::{
    CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MAX_LAYER_BYTES, Reference, SIGNATURE_ANNOTATION,
};
use oci_client::manifest::{OciDescriptor, OciImageManifest};

/// The component layer and signature a manifest describes, if it has the
/// wasm artifact layout.
pub fn artifact_of(
    reference: &Reference,
    manifest: &[u8],
) -> Result<(OciDescriptor, Option<String>), String> {
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
    if !layer
        .digest
        .strip_prefix("sha256:")
        .is_some_and(super::reference::is_sha256_hex)
    {
        return Err(not_wasm(format!(
            "its layer's digest `{}` is not sha256: and 64 hex digits",
            layer.digest
        )));
    }
    if let Some(urls) = layer.urls.as_ref().filter(|urls| !urls.is_empty()) {
        // A "foreign" layer is fetched from wherever the manifest says.
        return Err(not_wasm(format!(
            "its layer is to be fetched from elsewhere ({}); toolgate pulls only from the registry",
            urls.join(", ")
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

/// A signature file as the annotation carries it.
pub fn encode_signature(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

pub(super) fn decode_signature(encoded: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The wasm artifact config of a component: its top-level imports and
/// exports, as the layout asks.
pub(super) fn artifact_config(bytes: &[u8], layer_digest: &str) -> Result<Vec<u8>, String> {
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
pub(super) fn component_interface(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
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

    fn manifest(config_type: &str, layer: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": config_type, "size": 2,
                "digest": format!("sha256:{}", "4".repeat(64))},
            "layers": [layer],
        }))
        .unwrap()
    }

    #[test]
    fn a_manifest_without_the_wasm_layout_is_refused() {
        let reference = Reference::parse("oci://127.0.0.1:1/a:b").unwrap();
        let good = serde_json::json!({"mediaType": "application/wasm", "size": 10,
            "digest": format!("sha256:{}", "a".repeat(64))});
        assert!(artifact_of(&reference, &manifest(CONFIG_MEDIA_TYPE, good.clone())).is_ok());
        let image = manifest("application/vnd.oci.image.config.v1+json", good.clone());
        let cases = [
            (image, "not a wasm component artifact"),
            (
                manifest(
                    CONFIG_MEDIA_TYPE,
                    serde_json::json!({"mediaType": "application/wasm",
                "size": 10, "digest": "sha256:../../v2/x"}),
                ),
                "sha256: and 64 hex digits",
            ),
            (
                manifest(
                    CONFIG_MEDIA_TYPE,
                    serde_json::json!({"mediaType": "application/wasm",
                "size": MAX_LAYER_BYTES + 1, "digest": format!("sha256:{}", "a".repeat(64))}),
                ),
                "at most",
            ),
            (
                manifest(CONFIG_MEDIA_TYPE, {
                    let mut foreign = good;
                    foreign["urls"] = serde_json::json!(["http://elsewhere.example/x"]);
                    foreign
                }),
                "elsewhere",
            ),
        ];
        for (bytes, says) in cases {
            let err = artifact_of(&reference, &bytes).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
