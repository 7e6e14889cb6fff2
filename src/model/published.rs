//! What a release host published, as stacksync last saw it: GitHub releases with their assets
//! and the listing pages kept for conditional requests. Plain data (the source module lists and
//! downloads; the cache stores it in its index opaquely).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The last listing of a GitHub source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GithubState {
    /// By page URL: ETag and content, so an unchanged page is a 304 that costs no quota.
    #[serde(default)]
    pub pages: BTreeMap<String, CachedPage>,
    /// By tag: the non-draft releases of the last successful listing.
    #[serde(default)]
    pub releases: BTreeMap<String, GhRelease>,
}

/// A release as the list endpoint describes it (drafts are dropped when listing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GhRelease {
    pub id: u64,
    pub tag: String,
    pub prerelease: bool,
    pub assets: Vec<GhAsset>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GhAsset {
    pub id: u64,
    pub name: String,
    pub size: u64,
    /// `sha256:<hex>` when GitHub published one (assets uploaded since mid-2025).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The API URL of the asset (`.../releases/assets/<id>`).
    pub url: String,
}

impl GhRelease {
    /// Identifies the content of a release: changes when an asset is replaced. Used like a
    /// commit id for moved-tag detection.
    pub fn revision(&self) -> String {
        let mut lines: Vec<String> =
            self.assets.iter().map(|a| format!("{}:{}:{}:{}", a.id, a.name, a.size, a.digest.as_deref().unwrap_or(""))).collect();
        lines.sort();
        format!("assets-{}", &hex::encode(Sha256::digest(lines.join("\n").as_bytes()))[..24])
    }
}

/// One page of the release list as last seen, for conditional requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPage {
    pub etag: String,
    pub releases: Vec<GhRelease>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}
