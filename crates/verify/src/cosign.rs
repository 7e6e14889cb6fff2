//! cosign signatures with a key pair (`cosign generate-key-pair`): ECDSA P-256 over SHA-256,
//! the signature base64 of its ASN.1 DER form. Blobs (`cosign sign-blob`) are signed as they
//! are; an OCI artifact's signature signs a simple-signing JSON payload whose
//! `critical.image.docker-manifest-digest` names the manifest — which must be the one pulled.
//! A key is named `cosign:SHA256:<base64>`: the SHA-256 of its DER `SubjectPublicKeyInfo`
//! (`openssl pkey -pubin -in cosign.pub -outform DER | openssl dgst -sha256 -binary | base64`,
//! without the trailing `=`). Pure.

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use sha2::{Digest, Sha256};

use super::{KeyParseError, Refusal, Verified};

/// The annotation of a cosign signature layer holding the base64 signature of the layer.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// One trusted cosign key.
#[derive(Debug, Clone)]
pub(crate) struct CosignKey {
    pub key: VerifyingKey,
    /// `cosign:SHA256:<base64>`.
    pub fingerprint: String,
}

/// The trusted cosign keys (a PEM file with one or several `PUBLIC KEY` blocks).
#[derive(Debug, Clone, Default)]
pub struct CosignKeys {
    pub(crate) keys: Vec<CosignKey>,
}

impl CosignKeys {
    /// Parses every `-----BEGIN PUBLIC KEY-----` block.
    ///
    /// # Errors
    /// `(line, message)` of a block that is not an ECDSA P-256 public key; line 0 when there is
    /// no block.
    pub fn parse(text: &str) -> Result<CosignKeys, (usize, KeyParseError)> {
        const BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
        const END: &str = "-----END PUBLIC KEY-----";
        let lines: Vec<&str> = text.lines().collect();
        let mut keys = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let l = lines[i].trim();
            if l.starts_with("-----BEGIN") && l.contains("PRIVATE KEY") {
                return Err((i + 1, KeyParseError::CosignPrivateKey));
            }
            if l != BEGIN {
                i += 1;
                continue;
            }
            let start = i;
            let Some(end) = lines[i..].iter().position(|l| l.trim() == END).map(|p| i + p) else {
                return Err((start + 1, KeyParseError::CosignUnterminated));
            };
            let pem = lines[start..=end].join("\n") + "\n";
            let key = VerifyingKey::from_public_key_pem(&pem).map_err(|e| (start + 1, KeyParseError::NotP256(e)))?;
            let body: String = lines[start + 1..end].iter().map(|l| l.trim()).collect();
            let der = base64::engine::general_purpose::STANDARD.decode(body).map_err(|e| (start + 1, KeyParseError::Base64(e)))?;
            keys.push(CosignKey { key, fingerprint: fingerprint(&der) });
            i = end + 1;
        }
        if keys.is_empty() {
            return Err((0, KeyParseError::NoCosignKey));
        }
        Ok(CosignKeys { keys })
    }

    /// The trusted keys' fingerprints (`cosign:SHA256:…`).
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.fingerprint.clone()).collect()
    }

    /// Verifies a base64 signature (`cosign sign-blob` output, or a signature layer's
    /// annotation) over `content` against every trusted key.
    ///
    /// # Errors
    /// The signature is not base64 DER, or no trusted key verifies it (cosign signatures do not
    /// name their key, so the signer found is `unknown`).
    pub fn verify_blob(&self, content: &[u8], sig_b64: &str) -> Result<Verified, Refusal> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sig_b64.trim())
            .map_err(|e| Refusal::Malformed { signer: "unknown".into(), message: format!("the signature is not base64: {e}") })?;
        let sig = Signature::from_der(&raw)
            .map_err(|e| Refusal::Malformed { signer: "unknown".into(), message: format!("not an ECDSA signature: {e}") })?;
        for k in &self.keys {
            if k.key.verify(content, &sig).is_ok() {
                return Ok(Verified { signer: k.fingerprint.clone() });
            }
        }
        Err(Refusal::UntrustedKey { signer: "cosign:unknown key (the signature verifies against no trusted key)".into() })
    }

    /// Verifies a cosign OCI signature: `payload` (the simple-signing layer's bytes), signed by
    /// `sig_b64`, must name `manifest_digest` (`sha256:<hex>`, the digest pulled).
    ///
    /// # Errors
    /// As [`CosignKeys::verify_blob`], or the payload is not simple signing or names another
    /// digest.
    pub fn verify_payload(&self, payload: &[u8], sig_b64: &str, manifest_digest: &str) -> Result<Verified, Refusal> {
        let verified = self.verify_blob(payload, sig_b64)?;
        let signed = payload_digest(payload).map_err(|e| Refusal::Malformed { signer: verified.signer.clone(), message: e.to_string() })?;
        if signed != manifest_digest {
            return Err(Refusal::WrongSubject {
                signer: verified.signer,
                signed: format!("manifest {signed}"),
                expected: format!("manifest {manifest_digest}"),
            });
        }
        Ok(verified)
    }
}

/// `cosign:SHA256:<base64 without padding>` of a DER public key.
pub(crate) fn fingerprint(spki_der: &[u8]) -> String {
    let digest = Sha256::digest(spki_der);
    format!("cosign:SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest))
}

/// Why a simple-signing payload names no manifest ([`payload_digest`]); it becomes a
/// [`Refusal::Malformed`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum PayloadError {
    #[error("the signed payload is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the signed payload's critical.type is `{0}`, not `cosign container image signature`")]
    Type(String),
    #[error("the signed payload has no critical.image.docker-manifest-digest")]
    NoDigest,
}

/// The `docker-manifest-digest` a simple-signing payload signs.
///
/// # Errors
/// Not JSON, not a cosign container image signature, or no digest.
pub(crate) fn payload_digest(payload: &[u8]) -> Result<String, PayloadError> {
    let v: serde_json::Value = serde_json::from_slice(payload).map_err(PayloadError::NotJson)?;
    let critical = &v["critical"];
    let kind = critical["type"].as_str().unwrap_or_default();
    if kind != "cosign container image signature" && kind != "atomic container signature" {
        return Err(PayloadError::Type(kind.to_owned()));
    }
    critical["image"]["docker-manifest-digest"].as_str().map(str::to_owned).ok_or(PayloadError::NoDigest)
}

/// The tag cosign stores an artifact's signature under: `sha256-<hex>.sig`.
pub fn signature_tag(manifest_hex: &str) -> String {
    format!("sha256-{manifest_hex}.sig")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_digest_and_tag() {
        let p = br#"{"critical":{"identity":{"docker-reference":"r/a"},"image":{"docker-manifest-digest":"sha256:ab"},"type":"cosign container image signature"},"optional":null}"#;
        assert_eq!(payload_digest(p).unwrap(), "sha256:ab");
        assert!(payload_digest(br#"{"critical":{"type":"x"}}"#).unwrap_err().to_string().contains("critical.type"));
        assert_eq!(signature_tag("ab"), "sha256-ab.sig");
    }

    #[test]
    fn key_files_without_a_key_or_with_a_private_key_are_refused_by_line() {
        assert_eq!(CosignKeys::parse("nothing\n").unwrap_err().0, 0);
        assert_eq!(CosignKeys::parse("\n-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n").unwrap_err().0, 2);
        assert_eq!(CosignKeys::parse("x\n-----BEGIN PRIVATE KEY-----\n").unwrap_err().0, 2);
        let err = CosignKeys::parse("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n").unwrap_err();
        assert_eq!(err.0, 1, "{}", err.1);
    }
}
