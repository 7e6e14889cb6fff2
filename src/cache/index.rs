//! The cache index (`index.json`): what each source last advertised, which release trees are
//! materialised, and which release each subscription adopted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bumped when the format changes incompatibly.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Index {
    pub format: u32,
    /// By source key.
    #[serde(default)]
    pub sources: BTreeMap<String, SourceState>,
    /// By `<source key>/<tag>@<commit>`.
    #[serde(default)]
    pub releases: BTreeMap<String, ReleaseEntry>,
    /// By subscription name: the release it last adopted (used when `autoUpgrade: false` and to
    /// refuse silent downgrades when a tag disappears).
    #[serde(default)]
    pub adopted: BTreeMap<String, Adopted>,
    /// Written by earlier versions: by source key, what GitHub sources listed. Read once, into
    /// each source's own state ([`Index::migrate`]); never written.
    #[serde(default, skip_serializing)]
    github: BTreeMap<String, serde_json::Value>,
}

impl Default for Index {
    fn default() -> Self {
        Index { format: FORMAT, sources: BTreeMap::new(), releases: BTreeMap::new(), adopted: BTreeMap::new(), github: BTreeMap::new() }
    }
}

impl Index {
    /// Moves what an earlier version kept beside the sources into each source's own state: a
    /// GitHub listing, with its pre-releases, so nothing is listed again and no pre-release is
    /// offered before the first poll.
    pub fn migrate(&mut self) {
        for (key, listing) in std::mem::take(&mut self.github) {
            let Some(state) = self.sources.get_mut(&key) else { continue };
            if let Some(releases) = listing.get("releases").and_then(serde_json::Value::as_object) {
                state.prereleases = releases
                    .iter()
                    .filter(|(_, r)| r.get("prerelease").and_then(serde_json::Value::as_bool) == Some(true))
                    .map(|(tag, _)| tag.clone())
                    .collect();
            }
            state.own = Some(std::sync::Arc::new(listing));
        }
    }
}

/// The refs a source advertised at its last successful poll, after moved-tag policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceState {
    pub url: String,
    /// Tag name -> commit the tag is accepted at.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Branch name -> commit.
    #[serde(default)]
    pub heads: BTreeMap<String, String>,
    /// Tags that moved and were refused: tag -> the commit the remote now claims.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, String>,
    /// Sources with `verify`: who signed each accepted tag (`ssh:SHA256:…`, `openpgp:…`,
    /// `cosign:…`), as verified at the last poll against the keys of that poll.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signers: BTreeMap<String, String>,
    /// Sources with `verify`: tags whose signature did not verify (not in `tags`: never a
    /// candidate), with why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unsigned: BTreeMap<String, SignatureRefusal>,
    /// Tags the source marks as pre-releases: offered only to subscriptions that allow them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub prereleases: std::collections::BTreeSet<String>,
    /// The source kind's own state (a GitHub listing: its pages for conditional requests, its
    /// releases and their assets), opaque to everything but that kind. Shared, not copied, by
    /// every reader of the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<std::sync::Arc<serde_json::Value>>,
}

/// Why a tag's signature was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignatureRefusal {
    /// The commit (Git), manifest digest (OCI) or asset revision (GitHub) the tag names.
    pub commit: String,
    /// The signer found, or `unsigned`.
    pub signer: String,
    /// The whole reason, naming the tag, the signer and the trusted keys.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseEntry {
    pub source: String,
    pub tag: String,
    pub commit: String,
    /// Relative to the cache root.
    pub path: String,
    pub files: u64,
}

impl ReleaseEntry {
    pub fn id(key: &str, tag: &str, commit: &str) -> String {
        format!("{key}/{tag}@{commit}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Adopted {
    pub source: String,
    pub tag: String,
    pub commit: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_written_by_an_earlier_version_keeps_its_github_listing_and_pre_releases() {
        let old = r#"{"format":1,"sources":{"gh-1234":{"url":"https://api.github.com#acme/stacks","tags":{"v1.0.0":"r1","v1.1.0-rc.1":"r2"}}},
            "github":{"gh-1234":{"pages":{},"releases":{"v1.0.0":{"tag":"v1.0.0","prerelease":false},"v1.1.0-rc.1":{"tag":"v1.1.0-rc.1","prerelease":true}}}}}"#;
        let mut index: Index = serde_json::from_str(old).expect("an earlier index reads");
        index.migrate();
        let state = &index.sources["gh-1234"];
        assert_eq!(state.prereleases.iter().collect::<Vec<_>>(), ["v1.1.0-rc.1"]);
        let own = state.own.as_deref().expect("the listing moved into the source's own state");
        assert_eq!(own["releases"]["v1.0.0"]["tag"], "v1.0.0");
        let written = serde_json::to_string(&index).expect("serialise");
        assert!(!written.contains("\"github\""), "the old field is never written: {written}");
        let again: Index = serde_json::from_str(&written).expect("reads back");
        assert_eq!(again.sources, index.sources);
    }
}
