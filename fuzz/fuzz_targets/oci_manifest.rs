//! A manifest from a registry, which whoever runs the registry writes: it
//! is a wasm component artifact or refused with a message, never a panic;
//! what it accepts has one `sha256:` layer, and the signature file its
//! annotation carries parses or is refused like a `.sig` file beside a
//! plugin.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::fuzzing::oci_manifest;

fuzz_target!(|data: &[u8]| {
    match oci_manifest(data) {
        Ok((digest, signature)) => {
            let hex = digest.strip_prefix("sha256:").expect("a sha256 layer");
            assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
            if let Some(text) = signature
                && let Ok(parsed) = toolgate::signing::parse(&text)
            {
                let _ = parsed.verify(data);
            }
        }
        Err(message) => assert!(!message.is_empty()),
    }
});
