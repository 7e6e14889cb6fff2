//! Content digests: how a blob, an asset pin and an OCI layer are named.

use sha2::{Digest, Sha256};

/// A `sha256:<hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Digest(String);

impl Sha256Digest {
    /// Parses `sha256:<64 hex>` (or bare hex); lowercases it.
    pub fn parse(text: &str) -> Option<Sha256Digest> {
        let hex = text.trim().strip_prefix("sha256:").unwrap_or(text.trim()).to_ascii_lowercase();
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(Sha256Digest(hex))
    }

    pub fn of(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest::finished(Sha256::new_with_prefix(bytes))
    }

    /// The digest of what `hasher` was fed.
    pub fn finished(hasher: Sha256) -> Sha256Digest {
        Sha256Digest(hex::encode(hasher.finalize()))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}
