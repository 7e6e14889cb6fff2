//! Per-object results of a sync: data, not log lines, so status is built from them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Object;

/// Identifies an object in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The kind, as the manifest names it.
    pub kind: String,
    /// `None` for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl From<&Object> for ObjectRef {
    fn from(o: &Object) -> Self {
        ObjectRef { api_version: o.api_version.clone(), kind: o.kind.clone(), namespace: o.namespace.clone(), name: o.name.clone() }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// What a sync did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// It was not there; it is now.
    Created,
    /// It was there and differed; it was written.
    Configured,
    /// It was there as the release wants it: no write.
    Unchanged,
    /// A release dropped it (or a delete stage named it): deleted.
    Pruned,
    /// Left as it is, and why: whether that counts as synced depends on the reason.
    Skipped(SkipReason),
    /// The API server refused it, or did not answer: the entry's message says which.
    Failed,
}

/// Why an object was left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    /// Its policy annotation (`<prefix>/policy`, [`crate::ssa::Manager`]) is `ignore`: as the
    /// release wants it.
    Ignored,
    /// Its policy is `apply-once` and it exists: as the release wants it.
    ApplyOnceExists,
    /// It drifted and `driftMode: warn` only reports: not synced.
    Drifted,
    /// Deleting it was due, but it does not carry our owner label: not ours to delete.
    NotOurs,
    /// Another part of the same release failed, so this one was not written (directory target).
    Held,
}

impl Action {
    /// Whether the object is now as the release wants it: applied, unchanged, pruned, or left
    /// alone because its policy says so. A Skipped drift (`driftMode: warn`) is not synced.
    pub fn is_synced(self) -> bool {
        matches!(
            self,
            Action::Created
                | Action::Configured
                | Action::Unchanged
                | Action::Pruned
                | Action::Skipped(SkipReason::Ignored | SkipReason::ApplyOnceExists)
        )
    }

    /// Whether this action wrote to the cluster (a create, an update, a deletion).
    pub fn is_write(self) -> bool {
        matches!(self, Action::Created | Action::Configured | Action::Pruned)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "Created",
            Action::Configured => "Configured",
            Action::Unchanged => "Unchanged",
            Action::Pruned => "Pruned",
            Action::Skipped(_) => "Skipped",
            Action::Failed => "Failed",
        })
    }
}

/// One object of a sync: what was done to it, why, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The object.
    pub object: ObjectRef,
    /// What was done to it.
    pub action: Action,
    /// Empty when there is nothing to say; the reason for Failed and Skipped.
    pub message: String,
    /// Release-relative file the object came from (empty for pruned objects).
    pub file: String,
    /// Chart and addon stage of a cluster-stack object.
    pub chart: Option<String>,
    /// The cluster-addon stage it belongs to (`None` for plain manifests).
    pub stage: Option<String>,
}

/// Skipped because the object's policy annotation (`<prefix>/policy`) is `ignore`: as the
/// release wants it.
pub const SKIPPED_IGNORE: &str = "policy: ignore";
/// Skipped because the object's policy is `apply-once` and it exists: as the release wants it.
pub const SKIPPED_APPLY_ONCE: &str = "apply-once: exists";

impl Entry {
    /// Whether the object is as the release wants it: applied, unchanged, pruned, or left alone
    /// because its policy says so. A Skipped drift (`driftMode: warn`) is not synced.
    pub fn is_synced(&self) -> bool {
        self.action.is_synced()
    }

    /// Whether the entry is about an object of the release (not a prune of an object the release
    /// no longer has, which carries no source file). A failed prune counts: it needs attention.
    pub fn is_release_object(&self) -> bool {
        !self.file.is_empty() || self.action == Action::Failed
    }

    /// An entry for a rendered object.
    pub fn for_object(o: &Object, action: Action, message: String) -> Entry {
        Entry { object: o.into(), action, message, file: o.file.clone(), chart: o.chart.clone(), stage: o.stage.clone() }
    }
}

/// Everything one sync did to one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// One entry per object, in apply order (pruned objects after the stages).
    pub entries: Vec<Entry>,
}

impl ChangeSet {
    /// Entries with this action (any reason, for Skipped).
    pub fn count(&self, action: Action) -> usize {
        let same = |a: Action| std::mem::discriminant(&a) == std::mem::discriminant(&action);
        self.entries.iter().filter(|e| same(e.action)).count()
    }

    /// How many entries wrote to the cluster ([`Action::is_write`]).
    pub fn writes(&self) -> usize {
        self.entries.iter().filter(|e| e.action.is_write()).count()
    }

    /// One line such as `3 created, 1 configured, 10 unchanged`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> =
            [Action::Created, Action::Configured, Action::Unchanged, Action::Pruned, Action::Skipped(SkipReason::Held), Action::Failed]
                .into_iter()
                .filter_map(|a| match self.count(a) {
                    0 => None,
                    n => Some(format!("{n} {}", a.to_string().to_lowercase())),
                })
                .collect();
        if parts.is_empty() { "nothing to do".into() } else { parts.join(", ") }
    }
}
