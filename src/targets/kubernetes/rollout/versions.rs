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
