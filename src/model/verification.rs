//! Verification records: how each asset of a release was verified, written by `source` into the
//! release tree and read back by `status` (the `ClusterSync`'s `verifiedBy`).

use serde::{Deserialize, Serialize};

/// How an asset's digest is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum VerifiedBy {
    /// The `digest` field of the GitHub API asset.
    Published,
    /// A `SHA256SUMS` / `checksums.txt` / `<asset>.sha256` asset of the same release.
    Checksums,
    /// `digests` in the config.
    Pinned,
    /// The checksums asset itself when GitHub published no digest for it: it is the reference
    /// the other assets are checked against.
    Reference,
    /// Nothing: accepted only with `verify: optional`.
    Unverified,
    /// An OCI layer: its digest is its address in the registry, named by the manifest, which is
    /// itself verified against the digest its tag resolved to.
    Registry,
}

impl std::fmt::Display for VerifiedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VerifiedBy::Published => "published digest",
            VerifiedBy::Checksums => "checksums file",
            VerifiedBy::Pinned => "pinned digest",
            VerifiedBy::Reference => "checksums reference",
            VerifiedBy::Unverified => "unverified",
            VerifiedBy::Registry => "registry digest",
        })
    }
}

impl VerifiedBy {
    /// The short word used in status summaries.
    pub fn word(self) -> &'static str {
        match self {
            VerifiedBy::Published => "published",
            VerifiedBy::Checksums => "checksums",
            VerifiedBy::Pinned => "pinned",
            VerifiedBy::Reference => "reference",
            VerifiedBy::Unverified => "unverified",
            VerifiedBy::Registry => "oci",
        }
    }
}

/// A digest as text in records (`sha256:<hex>`).
pub type Sha256DigestText = String;

/// One asset of a materialised release tree: its name, digest, size and how it was verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssetRecord {
    pub name: String,
    pub digest: Sha256DigestText,
    pub verified_by: VerifiedBy,
    pub size: u64,
}
