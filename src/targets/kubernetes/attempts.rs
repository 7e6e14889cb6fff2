//! Failed reconciles in a row, by Cluster: the backoff's attempt number; and the Clusters a
//! server refused with `Retry-After`, held until then.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::model::ClusterKey;
use crate::model::sync::MutexExt;

#[derive(Default)]
pub(super) struct Attempts {
    failed: Mutex<HashMap<ClusterKey, u32>>,
    /// Not before: a server throttled this Cluster's last try and said when to ask again.
    held: Mutex<HashMap<ClusterKey, Instant>>,
}

impl Attempts {
    /// One more failure of `key`'s reconcile: its attempt number.
    pub(super) fn failed(&self, key: &ClusterKey) -> u32 {
        let mut attempts = self.failed.locked();
        let n = attempts.entry(key.clone()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// `key`'s reconcile succeeded (or the Cluster is gone): the next failure is the first.
    pub(super) fn succeeded(&self, key: &ClusterKey) {
        self.failed.locked().remove(key);
        self.held.locked().remove(key);
    }

    /// A server refused `key`'s work and said to ask again in `wait`: nothing of it is sent
    /// before then, whatever wakes its reconcile (a watch event, a publication, a resync).
    pub(super) fn hold(&self, key: &ClusterKey, wait: Duration) {
        let until = Instant::now() + wait;
        let mut held = self.held.locked();
        let at = held.entry(key.clone()).or_insert(until);
        *at = (*at).max(until);
    }

    /// How long `key` is still held ([`Attempts::hold`]), if it is.
    pub(super) fn held(&self, key: &ClusterKey) -> Option<Duration> {
        let mut held = self.held.locked();
        let left = held.get(key)?.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        if left.is_none() {
            held.remove(key);
        }
        left
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

    #[test]
    fn a_held_cluster_is_held_until_the_latest_wait_and_a_success_releases_it() {
        let (a, key) = (Attempts::default(), ClusterKey::new("ns", "a"));
        assert_eq!(a.held(&key), None);
        a.hold(&key, Duration::from_secs(30));
        a.hold(&key, Duration::from_secs(1));
        assert!(a.held(&key).is_some_and(|d| d > Duration::from_secs(29)), "the later of the two");
        assert_eq!(a.held(&ClusterKey::new("ns", "b")), None, "per Cluster");
        a.succeeded(&key);
        assert_eq!(a.held(&key), None);
        a.hold(&key, Duration::ZERO);
        assert_eq!(a.held(&key), None, "a wait that is over holds nothing");
    }
}
