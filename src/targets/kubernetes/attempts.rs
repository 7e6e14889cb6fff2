//! Failed reconciles in a row, by Cluster: the backoff's attempt number.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::ClusterKey;
use crate::model::sync::MutexExt;

#[derive(Default)]
pub(super) struct Attempts(Mutex<HashMap<ClusterKey, u32>>);

impl Attempts {
    /// One more failure of `key`'s reconcile: its attempt number.
    pub(super) fn failed(&self, key: &ClusterKey) -> u32 {
        let mut attempts = self.0.locked();
        let n = attempts.entry(key.clone()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// `key`'s reconcile succeeded (or the Cluster is gone): the next failure is the first.
    pub(super) fn succeeded(&self, key: &ClusterKey) {
        self.0.locked().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_count_up_until_a_success() {
        let (a, key) = (Attempts::default(), ClusterKey::new("ns", "a"));
        assert_eq!((a.failed(&key), a.failed(&key)), (1, 2));
        assert_eq!(a.failed(&ClusterKey::new("ns", "b")), 1, "per Cluster");
        a.succeeded(&key);
        assert_eq!(a.failed(&key), 1);
    }
}
