//! What this process applied of each release's ClusterClass, by namespace (`ClassResult`), and
//! the locks that make Clusters reconciled at once apply and record it once (`Classes`, kept by
//! `Kube`). The applies themselves are `classes.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::model::sync::MutexExt;
use applier::ChangeSet;

/// The ClusterClass apply of one release, over every namespace it went to.
#[derive(Debug, Default, Clone)]
pub(super) struct ClassResult {
    pub changes: ChangeSet,
    pub errors: Vec<String>,
    /// Inventory lines (`group|kind|namespace|name|version`) of what was applied.
    pub inventory: Vec<String>,
    /// Not applied: the release no longer verifies (its tag moved since it was recorded). Its
    /// StackRelease is not written over.
    pub refused: bool,
}

impl ClassResult {
    /// Whether the ClusterClass is not fully in place: it could not be rendered or prepared, or
    /// one of its objects failed to apply. Such a release is `Failed`, never `Applied`.
    pub fn failed(&self) -> bool {
        !self.errors.is_empty() || self.changes.entries.iter().any(|e| e.action == applier::changeset::Action::Failed)
    }

    /// The first thing that went wrong: an error, else the first object that failed to apply.
    pub fn problem(&self) -> Option<String> {
        self.errors.first().cloned().or_else(|| {
            let e = self.changes.entries.iter().find(|e| e.action == applier::changeset::Action::Failed)?;
            Some(format!("{}: {}", e.object, e.message))
        })
    }
}

/// (subscription, tag, namespace)
pub(super) type Key = (String, String, String);

/// Held while one task does what must not run twice at once.
pub(super) type Lock = Arc<tokio::sync::Mutex<()>>;

/// What this process applied, and one lock per (subscription, release, namespace) so Clusters of
/// one namespace reconciled at once render its ClusterClass once; one per (subscription,
/// release) so its StackRelease is recorded by one of them at a time (each records every
/// namespace applied so far: they would only conflict with each other).
#[derive(Default)]
pub(super) struct Classes {
    applied: Mutex<HashMap<Key, (Instant, ClassResult)>>,
    locks: Mutex<HashMap<Key, Lock>>,
    records: Mutex<HashMap<(String, String), Lock>>,
}

impl Classes {
    /// The lock of one (subscription, release, namespace): held while its ClusterClass is
    /// applied.
    pub(super) fn lock(&self, key: &Key) -> Lock {
        self.locks.locked().entry(key.clone()).or_default().clone()
    }

    /// Whether `key`'s ClusterClass was applied without a failure less than `resync` ago.
    pub(super) fn fresh(&self, key: &Key, resync: std::time::Duration) -> bool {
        self.applied.locked().get(key).is_some_and(|(at, r)| !r.failed() && at.elapsed() < resync)
    }

    /// What applying `key`'s ClusterClass gave, now.
    pub(super) fn applied(&self, key: Key, result: ClassResult) {
        self.applied.locked().insert(key, (Instant::now(), result));
    }

    /// The lock of one (subscription, release): held while its StackRelease is recorded.
    pub(super) fn record_lock(&self, sub: &str, tag: &str) -> Lock {
        self.records.locked().entry((sub.to_owned(), tag.to_owned())).or_default().clone()
    }

    /// Forgets a release whose ClusterClasses were pruned.
    pub(super) fn forget(&self, sub: &str, tag: &str) {
        self.applied.locked().retain(|(s, t, _), _| !(s == sub && t == tag));
        self.locks.locked().retain(|(s, t, _), _| !(s == sub && t == tag));
        self.records.locked().remove(&(sub.to_owned(), tag.to_owned()));
    }

    /// What went wrong with the ClusterClass of release `tag` in `namespace`, as last applied by
    /// this process: `None` when it is in place (or was not applied here yet).
    pub(super) fn problem(&self, sub: &str, tag: &str, namespace: &str) -> Option<String> {
        let key = (sub.to_owned(), tag.to_owned(), namespace.to_owned());
        self.applied.locked().get(&key).filter(|(_, r)| r.failed()).and_then(|(_, r)| r.problem())
    }

    /// The results of a release over every namespace, in namespace order.
    pub(super) fn merged(&self, sub: &str, tag: &str) -> ClassResult {
        let applied = self.applied.locked();
        let mut mine: Vec<(&Key, &(Instant, ClassResult))> = applied.iter().filter(|((s, t, _), _)| s == sub && t == tag).collect();
        mine.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = ClassResult::default();
        for (_, (_, r)) in mine {
            out.changes.entries.extend(r.changes.entries.iter().cloned());
            out.errors.extend(r.errors.iter().cloned());
            out.inventory.extend(r.inventory.iter().cloned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(ns: &str) -> Key {
        ("ferrol".to_owned(), "v2".to_owned(), ns.to_owned())
    }

    fn failed(error: &str) -> ClassResult {
        ClassResult { errors: vec![error.to_owned()], ..ClassResult::default() }
    }

    #[test]
    fn a_class_applied_without_failure_is_fresh_until_the_resync() {
        let classes = Classes::default();
        assert!(!classes.fresh(&key("a"), Duration::from_secs(600)), "never applied");
        classes.applied(key("a"), ClassResult { inventory: vec!["line".to_owned()], ..ClassResult::default() });
        assert!(classes.fresh(&key("a"), Duration::from_secs(600)));
        assert!(!classes.fresh(&key("a"), Duration::ZERO), "the resync is due");
        assert!(!classes.fresh(&key("b"), Duration::from_secs(600)), "per namespace");
        classes.applied(key("b"), failed("b: render failed"));
        assert!(!classes.fresh(&key("b"), Duration::from_secs(600)), "a failure is tried again");
    }

    #[test]
    fn a_release_merges_its_namespaces_in_order_and_says_its_first_problem() {
        let classes = Classes::default();
        classes.applied(key("b"), failed("b: render failed"));
        classes.applied(key("a"), ClassResult { inventory: vec!["a-line".to_owned()], ..ClassResult::default() });
        let merged = classes.merged("ferrol", "v2");
        assert_eq!((merged.errors, merged.inventory), (vec!["b: render failed".to_owned()], vec!["a-line".to_owned()]));
        assert_eq!(classes.problem("ferrol", "v2", "a"), None);
        assert_eq!(classes.problem("ferrol", "v2", "b").as_deref(), Some("b: render failed"));
        assert!(classes.merged("ferrol", "v3").errors.is_empty(), "another release");
    }

    #[test]
    fn a_forgotten_release_is_applied_again_under_new_locks() {
        let classes = Classes::default();
        let lock = classes.lock(&key("a"));
        assert!(Arc::ptr_eq(&lock, &classes.lock(&key("a"))), "one lock per key");
        assert!(Arc::ptr_eq(&classes.record_lock("ferrol", "v2"), &classes.record_lock("ferrol", "v2")));
        classes.applied(key("a"), ClassResult::default());
        classes.forget("ferrol", "v2");
        assert!(!classes.fresh(&key("a"), Duration::from_secs(600)));
        assert!(!Arc::ptr_eq(&lock, &classes.lock(&key("a"))));
    }
}
