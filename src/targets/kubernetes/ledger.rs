//! The fleet's memory of release tags, kept by `Kube`: the name of a release's `StackRelease`,
//! and the commit each tag was recorded at there (`Ledger`), read once per tag and kept as this
//! process records releases.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::Api;

use crate::model::sync::MutexExt;
use crate::release::Release;
use crate::status::crd::StackRelease;

/// The commit each release tag was recorded at in its StackRelease: the fleet's memory of what
/// a tag pointed to, which lasts where the cache does not (the shipped Deployment's cache is an
/// emptyDir, and deleting it is always allowed). A Cluster's `ClusterSync` remembers the release
/// it runs; this covers a Cluster that runs none of the tag yet (a new Cluster, or its first move
/// to the tag) and the ClusterClasses. Read once per subscription and tag, then kept as this
/// process records them.
#[derive(Default)]
pub(super) struct Ledger(Mutex<HashMap<(String, String), Option<String>>>);

impl Ledger {
    /// The commit `tag` was recorded at for subscription `sub`, if it was (a `Refused`
    /// StackRelease records no commit that was ever used).
    async fn commit(&self, mgmt: &kube::Client, sub: &str, tag: &str) -> Result<Option<String>, kube::Error> {
        let id = (sub.to_owned(), tag.to_owned());
        if let Some(known) = self.0.locked().get(&id) {
            return Ok(known.clone());
        }
        let api: Api<StackRelease> = Api::all(mgmt.clone());
        let recorded = api
            .get_opt(&release_name(sub, tag))
            .await?
            .filter(|r| r.spec.subscription == sub && r.spec.tag == tag)
            .and_then(|r| r.status)
            .filter(|s| s.phase != "Refused" && !s.commit.is_empty())
            .map(|s| s.commit);
        Ok(self.0.locked().entry(id).or_insert(recorded).clone())
    }

    pub(super) fn note(&self, sub: &str, tag: &str, commit: &str) {
        self.0.locked().insert((sub.to_owned(), tag.to_owned()), Some(commit.to_owned()));
    }

    /// Whether `rel` is its tag moved since the fleet recorded it ([`moved_since_applied`]):
    /// `accepted` when the source takes moved tags. `Err`: the record could not be read (the
    /// release is not used until it can).
    ///
    /// [`moved_since_applied`]: crate::controller::fetch::moved_since_applied
    pub(super) async fn moved(
        &self,
        mgmt: &kube::Client,
        sub: &str,
        rel: &Release,
        accepted: bool,
    ) -> Result<Option<crate::controller::Mismatch>, kube::Error> {
        if accepted {
            return Ok(None);
        }
        let recorded = self.commit(mgmt, sub, &rel.tag).await?;
        Ok(crate::controller::fetch::moved_since_applied(&rel.source, false, recorded.as_deref().map(|c| (rel.tag.as_str(), c)), rel))
    }
}

/// The longest StackRelease name: an Event about it is named `<name>.<16 hex digits>`
/// (kube-runtime's recorder), which must be an object name (253) too.
const MAX_RELEASE_NAME: usize = 253 - 17;

/// `<subscription>.<tag>` made a valid object name. One of a tag as long as a ClusterClass name
/// (253) is shortened with a digest of the whole ([`crate::model::names::bounded`]): two long
/// tags never share a StackRelease, and its Events fit.
pub(super) fn release_name(sub: &str, tag: &str) -> String {
    let raw: String = format!("{sub}.{tag}")
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .collect();
    crate::model::names::bounded(raw, MAX_RELEASE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_are_valid_object_names() {
        assert_eq!(release_name("ferrol", "docker-ferrol-1-27-v2"), "ferrol.docker-ferrol-1-27-v2");
        assert_eq!(release_name("s", "v1.2.3+build_7"), "s.v1.2.3-build-7");
        // A tag as long as a ClusterClass name may be: the name and its Events' names fit.
        let long = format!("docker-{}-1-35-v1", "f".repeat(253 - "docker--1-35-v1".len()));
        let name = release_name("ferrol", &long);
        assert!(name.len() + 17 <= 253, "{}", name.len());
        assert_ne!(name, release_name("ferrol", &long.replace("-v1", "-v2")));
    }

    #[test]
    fn a_tag_noted_is_known_without_a_read() {
        let ledger = Ledger::default();
        ledger.note("ferrol", "v1.0.0", "abc");
        assert_eq!(ledger.0.locked().get(&("ferrol".to_owned(), "v1.0.0".to_owned())), Some(&Some("abc".to_owned())));
        ledger.note("ferrol", "v1.0.0", "def");
        assert_eq!(ledger.0.locked().get(&("ferrol".to_owned(), "v1.0.0".to_owned())), Some(&Some("def".to_owned())), "the last record");
    }
}
