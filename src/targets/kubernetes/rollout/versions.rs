//! The Kubernetes version of each target release (`versions.kubernetes` of its metadata), read
//! once per process: a release's content never changes under its tag and commit.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::sync::MutexExt;

/// Kubernetes versions by release (`tag@commit`).
#[derive(Default)]
pub(in crate::targets::kubernetes) struct KubernetesVersions(Mutex<HashMap<String, Option<String>>>);

impl KubernetesVersions {
    /// The version read before for `id`, if one was.
    pub(super) fn get(&self, id: &str) -> Option<Option<String>> {
        self.0.locked().get(id).cloned()
    }

    pub(super) fn insert(&self, id: String, version: Option<String>) {
        self.0.locked().insert(id, version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_read_once_is_kept_even_when_there_is_none() {
        let versions = KubernetesVersions::default();
        assert_eq!(versions.get("v1@abc"), None, "not read yet");
        versions.insert("v1@abc".to_owned(), None);
        versions.insert("v2@def".to_owned(), Some("v1.31.2".to_owned()));
        assert_eq!(versions.get("v1@abc"), Some(None), "read: the release names none");
        assert_eq!(versions.get("v2@def"), Some(Some("v1.31.2".to_owned())));
    }
}
