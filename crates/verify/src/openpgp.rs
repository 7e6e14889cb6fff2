//! OpenPGP detached signatures (what `gpg` writes into a signed Git tag) checked against a
//! keyring of ASCII-armoured public keys. A signature by the primary key or by a subkey whose
//! binding signature verifies counts; the signer is recorded as the primary key's fingerprint.
//! Expiry and revocation inside the keyring are not evaluated: a key is trusted while it is in
//! the file (rotation is editing the file). Pure.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;

use super::{KeyParseError, Refusal, Verified};

/// One trusted key: the primary key and its subkeys.
#[derive(Debug, Clone)]
pub(crate) struct TrustedKey {
    pub key: SignedPublicKey,
    /// `openpgp:<FINGERPRINT>` of the primary key.
    pub fingerprint: String,
}

/// Parsed keyring.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    pub(crate) keys: Vec<TrustedKey>,
}

impl Keyring {
    /// Parses one or several armoured public key blocks.
    ///
    /// # Errors
    /// `(line, message)`: the line of the block that cannot be read (0 when the file holds no
    /// key block), or a key whose self-signatures do not verify.
    pub fn parse(text: &str) -> Result<Keyring, (usize, KeyParseError)> {
        const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
        const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";
        let mut keys = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim() != BEGIN {
                if lines[i].trim().starts_with("-----BEGIN PGP PRIVATE KEY") {
                    return Err((i + 1, KeyParseError::PgpPrivateKey));
                }
                i += 1;
                continue;
            }
            let start = i;
            let Some(end) = lines[i..].iter().position(|l| l.trim() == END).map(|p| i + p) else {
                return Err((start + 1, KeyParseError::PgpUnterminated));
            };
            let block = lines[start..=end].join("\n") + "\n";
            let (parsed, _) = SignedPublicKey::from_string(&block).map_err(|e| (start + 1, KeyParseError::NotPgp(e)))?;
            parsed.verify_bindings().map_err(|e| (start + 1, KeyParseError::PgpBindings(e)))?;
            let fingerprint = format!("openpgp:{:X}", parsed.primary_key.fingerprint());
            keys.push(TrustedKey { key: parsed, fingerprint });
            i = end + 1;
        }
        if keys.is_empty() {
            return Err((0, KeyParseError::NoPgpKey));
        }
        Ok(Keyring { keys })
    }

    /// The trusted primary keys' fingerprints (`openpgp:…`).
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.fingerprint.clone()).collect()
    }

    /// Verifies an armoured detached signature over `payload`.
    ///
    /// # Errors
    /// The signature cannot be read, its issuer is no key of the ring, or it does not verify.
    pub fn verify(&self, payload: &[u8], armored: &str) -> Result<Verified, Refusal> {
        let (sig, _) = DetachedSignature::from_string(armored)
            .map_err(|e| Refusal::Malformed { signer: "unknown".into(), message: format!("not an OpenPGP signature: {e}") })?;
        let issuer_fps: Vec<String> = sig.signature.issuer_fingerprint().iter().map(|f| format!("{f:X}")).collect();
        let issuer_ids: Vec<String> = sig.signature.issuer_key_id().iter().map(|k| hex::encode_upper(k.as_ref())).collect();
        let found = issuer_fps.first().or(issuer_ids.first()).map_or_else(|| "openpgp:unknown".to_owned(), |f| format!("openpgp:{f}"));
        let mut tried_one = None;
        for trusted in &self.keys {
            let primary = &trusted.key.primary_key;
            let subkeys = trusted.key.public_subkeys.iter().filter(|sub| sub.verify_bindings(primary).is_ok()).map(|sub| &sub.key);
            let named = |fp: String, id: String| issuer_fps.contains(&fp) || issuer_ids.contains(&id);
            let mut outcomes = Vec::new();
            if named(format!("{:X}", primary.fingerprint()), hex::encode_upper(primary.legacy_key_id().as_ref())) {
                outcomes.push(sig.signature.verify(primary, payload));
            }
            for sub in subkeys {
                if named(format!("{:X}", sub.fingerprint()), hex::encode_upper(sub.legacy_key_id().as_ref())) {
                    outcomes.push(sig.signature.verify(sub, payload));
                }
            }
            for outcome in outcomes {
                match outcome {
                    Ok(()) => return Ok(Verified { signer: trusted.fingerprint.clone() }),
                    Err(e) => tried_one = Some((trusted.fingerprint.clone(), e.to_string())),
                }
            }
        }
        match tried_one {
            Some((signer, message)) => Err(Refusal::BadSignature { signer, message }),
            None => Err(Refusal::UntrustedKey { signer: found }),
        }
    }
}
