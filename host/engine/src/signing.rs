//! Signed plugins: an operator can require that a plugin file was signed by
//! a key they trust before it loads.
//!
//! Keys are ed25519 (`ed25519-dalek`), written as hex. A signature is a
//! small text file beside the plugin, `PLUGIN.wasm.sig`:
//!
//! ```text
//! toolgate-signature-v1
//! key: <public key, 64 hex digits>
//! sha256: <the file's sha256, 64 hex digits>
//! signature: <ed25519 signature, 128 hex digits>
//! ```
//!
//! The signature covers a domain naming what was signed ([`Purpose`]:
//! `toolgate-plugin-v1\0` or `toolgate-release-v1\0`) followed by the 32
//! bytes of the file's sha256, so it signs exactly those bytes for exactly
//! that use: a release's checksum list cannot be passed off as a plugin, nor
//! a plugin signature as a release's. `toolgate plugins keygen` makes a key
//! pair, `toolgate plugins sign` writes the file, and `trusted_keys` /
//! `require_signature` in the config decide what loads; `toolgate release
//! sign` and `verify` do the same for a release's `SHA256SUMS`.

use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

const HEADER: &str = "toolgate-signature-v1";

/// What a signature is for: part of the signed message, so a signature made
/// for one use never verifies for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A plugin component (`PLUGIN.wasm.sig`).
    Plugin,
    /// A release's checksum list (`SHA256SUMS.sig`).
    Release,
}

impl Purpose {
    fn domain(self) -> &'static [u8] {
        match self {
            Purpose::Plugin => b"toolgate-plugin-v1\0",
            Purpose::Release => b"toolgate-release-v1\0",
        }
    }
}

/// A new key pair: (secret seed, public key), hex.
pub fn generate() -> (String, String) {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the OS random source is available");
    let key = SigningKey::from_bytes(&seed);
    (
        hex::encode(seed),
        hex::encode(key.verifying_key().to_bytes()),
    )
}

/// The public key of a secret seed (hex).
pub fn public_key(secret_hex: &str) -> Result<String, String> {
    Ok(hex::encode(
        signing_key(secret_hex)?.verifying_key().to_bytes(),
    ))
}

fn signing_key(secret_hex: &str) -> Result<SigningKey, String> {
    let seed: [u8; 32] = hex::decode(secret_hex.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("the secret key must be 64 hex digits (as `toolgate plugins keygen` writes it)")?;
    Ok(SigningKey::from_bytes(&seed))
}

fn message(purpose: Purpose, sha256: &[u8; 32]) -> Vec<u8> {
    [purpose.domain(), sha256.as_slice()].concat()
}

/// The signature file for `bytes` as `purpose`, signed with the secret key
/// `secret_hex`.
pub fn sign(purpose: Purpose, secret_hex: &str, bytes: &[u8]) -> Result<String, String> {
    let key = signing_key(secret_hex)?;
    let digest: [u8; 32] = Sha256::digest(bytes).into();
    let signature = key.sign(&message(purpose, &digest));
    Ok(format!(
        "{HEADER}\nkey: {}\nsha256: {}\nsignature: {}\n",
        hex::encode(key.verifying_key().to_bytes()),
        hex::encode(digest),
        hex::encode(signature.to_bytes())
    ))
}

/// A parsed signature file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureFile {
    /// The signer's public key (hex).
    pub key: String,
    sha256: [u8; 32],
    signature: [u8; 64],
}

/// Parse a signature file; the error names what is wrong.
pub fn parse(text: &str) -> Result<SignatureFile, String> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("it does not start with `{HEADER}`"));
    }
    let mut field = |name: &str| -> Result<Vec<u8>, String> {
        let line = lines
            .next()
            .ok_or_else(|| format!("it is truncated: no `{name}:` line"))?;
        let value = line
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(": "))
            .ok_or_else(|| format!("expected `{name}: …`, found `{line}`"))?;
        hex::decode(value.trim()).map_err(|_| format!("`{name}` is not hex"))
    };
    let key = field("key")?;
    let sha256 = field("sha256")?;
    let signature = field("signature")?;
    Ok(SignatureFile {
        key: hex::encode(&key),
        sha256: sha256
            .try_into()
            .map_err(|_| "`sha256` must be 32 bytes".to_string())?,
        signature: signature
            .try_into()
            .map_err(|_| "`signature` must be 64 bytes (it may be truncated)".to_string())?,
    })
}

impl SignatureFile {
    /// Whether this signature is its key's, over exactly `bytes`, made for
    /// `purpose`.
    pub fn verify(&self, purpose: Purpose, bytes: &[u8]) -> Result<(), String> {
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        if digest != self.sha256 {
            return Err(format!(
                "it was made for a file with sha256 {}, but this file's is {}: the file changed \
                 after signing",
                hex::encode(self.sha256),
                hex::encode(digest)
            ));
        }
        let key: [u8; 32] = hex::decode(&self.key)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("`key` must be 32 bytes")?;
        let key = VerifyingKey::from_bytes(&key).map_err(|_| "`key` is not an ed25519 key")?;
        key.verify_strict(
            &message(purpose, &digest),
            &Signature::from_bytes(&self.signature),
        )
        .map_err(|_| {
            "the signature does not verify with its key (forged, damaged, or made for another \
             use)"
                .into()
        })
    }
}

/// Check a plugin's bytes against its signature file text and the trusted
/// keys; the signer's key on success, else why not (with the fix).
pub fn check(
    bytes: &[u8],
    signature: Option<&str>,
    trusted: &[String],
    sig_path: &str,
) -> Result<String, String> {
    let text = signature.ok_or_else(|| {
        format!("it must be signed, but {sig_path} does not exist; sign it with `toolgate plugins sign --key KEY FILE`")
    })?;
    let parsed =
        parse(text).map_err(|why| format!("the signature file {sig_path} is malformed: {why}"))?;
    if !trusted.iter().any(|t| t.eq_ignore_ascii_case(&parsed.key)) {
        return Err(format!(
            "it is signed by key {}, which is not in trusted_keys; add that key to trusted_keys if you trust it, or have it signed by a trusted key",
            parsed.key
        ));
    }
    parsed
        .verify(Purpose::Plugin, bytes)
        .map_err(|why| format!("its signature ({sig_path}) is not valid: {why}"))?;
    Ok(parsed.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_exactly_the_signed_bytes() {
        let (secret, public) = generate();
        let bytes = b"\0asm component bytes".to_vec();
        let text = sign(Purpose::Plugin, &secret, &bytes).unwrap();
        assert_eq!(
            check(&bytes, Some(&text), std::slice::from_ref(&public), "x.sig"),
            Ok(public.clone())
        );

        let mut flipped = bytes.clone();
        flipped[3] ^= 1;
        assert!(
            check(
                &flipped,
                Some(&text),
                std::slice::from_ref(&public),
                "x.sig"
            )
            .unwrap_err()
            .contains("changed after signing")
        );
        let (_, other) = generate();
        assert!(
            check(&bytes, Some(&text), &[other], "x.sig")
                .unwrap_err()
                .contains("not in trusted_keys")
        );
        assert!(
            check(&bytes, None, std::slice::from_ref(&public), "x.sig")
                .unwrap_err()
                .contains("does not exist")
        );
        let truncated = &text[..text.len() - 40];
        assert!(
            check(
                &bytes,
                Some(truncated),
                std::slice::from_ref(&public),
                "x.sig"
            )
            .unwrap_err()
            .contains("malformed")
        );
        // A signature by another key passed off under the trusted key's name.
        let (mallory, _) = generate();
        let forged = sign(Purpose::Plugin, &mallory, &bytes).unwrap();
        let forged = forged.replace(&public_key(&mallory).unwrap(), &public);
        assert!(
            check(
                &bytes,
                Some(&forged),
                std::slice::from_ref(&public),
                "x.sig"
            )
            .unwrap_err()
            .contains("does not verify")
        );
        // The trusted key's signature of the same bytes as a release's
        // checksums: not a plugin signature.
        let release = sign(Purpose::Release, &secret, &bytes).unwrap();
        assert!(
            check(&bytes, Some(&release), &[public], "x.sig")
                .unwrap_err()
                .contains("does not verify")
        );
        assert_eq!(
            parse(&release).unwrap().verify(Purpose::Release, &bytes),
            Ok(())
        );
    }
}
