//! Manifest releases whose `StackRelease` this process has recorded, kept by `Kube`: a
//! manifests Cluster's reconcile records its release once per process, not with a read per
//! reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::model::sync::MutexExt;
use crate::release::Release;

/// Manifest releases (`subscription`, `tag`, `commit`) whose StackRelease this process has
/// recorded: once per release, not a read per reconcile.
#[derive(Default)]
pub(super) struct Recorded(Mutex<HashMap<String, HashMap<String, HashSet<String>>>>);

impl Recorded {
    /// Whether this is the first time the release is recorded (it is now). Asked by every
    /// reconcile of a manifests Cluster: the answer "no" copies nothing.
    pub(super) fn first(&self, sub: &str, rel: &Release) -> bool {
        let mut recorded = self.0.locked();
        if recorded.get(sub).and_then(|tags| tags.get(&rel.tag)).is_some_and(|commits| commits.contains(&rel.commit)) {
            return false;
        }
        recorded.entry(sub.to_owned()).or_default().entry(rel.tag.clone()).or_default().insert(rel.commit.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(tag: &str) -> Release {
        Release {
            source: "s".into(),
            tag: tag.into(),
            commit: "c".repeat(40),
            version: crate::model::version::Version::from_tag(tag).expect("version"),
        }
    }

    #[test]
    fn a_release_is_recorded_once_per_subscription_tag_and_commit() {
        let recorded = Recorded::default();
        let v1 = rel("v1.0.0");
        assert!(recorded.first("ferrol", &v1));
        assert!(!recorded.first("ferrol", &v1), "recorded already");
        assert!(recorded.first("other", &v1), "per subscription");
        let moved = Release { commit: "another".to_owned(), ..v1.clone() };
        assert!(recorded.first("ferrol", &moved), "the tag moved: recorded again");
        assert!(recorded.first("ferrol", &rel("v1.0.1")), "per tag");
    }
}
