//! Repeated warnings said once: a failure that repeats every resync is said at WARN when its
//! text changes and once an hour, at DEBUG otherwise.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::ClusterKey;
use crate::model::sync::MutexExt;

/// How often a failure that repeats unchanged is said at WARN again (DEBUG in between).
pub const REPEAT_WARNING: std::time::Duration = std::time::Duration::from_secs(3600);

/// The last warning of one kind about a Cluster: a digest of its text, and when it was said.
type Warned = (u64, std::time::Instant);

/// The last warning of each kind said about each Cluster.
#[derive(Default)]
pub(super) struct Warnings(Mutex<HashMap<(ClusterKey, &'static str), Warned>>);

impl Warnings {
    /// Whether a warning of kind `what` about `key` is worth WARN: its text differs from the
    /// last one of that kind, or that one was said [`REPEAT_WARNING`] ago or more (then it is
    /// the one recorded).
    pub(super) fn worth(&self, key: &ClusterKey, what: &'static str, text: &str) -> bool {
        self.worth_at(key, what, text, std::time::Instant::now())
    }

    /// [`Warnings::worth`] at `now`.
    fn worth_at(&self, key: &ClusterKey, what: &'static str, text: &str, now: std::time::Instant) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let digest = h.finish();
        let mut warned = self.0.locked();
        match warned.get(&(key.clone(), what)) {
            Some((d, at)) if *d == digest && now.duration_since(*at) < REPEAT_WARNING => false,
            _ => {
                warned.insert((key.clone(), what), (digest, now));
                true
            }
        }
    }

    /// A Cluster's failure of kind `what` is over: the next one is said at WARN.
    pub(super) fn cleared(&self, key: &ClusterKey, what: &'static str) {
        self.0.locked().remove(&(key.clone(), what));
    }

    /// Forgets a Cluster that is gone.
    pub(super) fn forget(&self, key: &ClusterKey) {
        self.0.locked().retain(|(k, _), _| k != key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_failure_is_warned_on_change_and_once_an_hour() {
        let (r, a, b) = (Warnings::default(), ClusterKey::new("ns", "a"), ClusterKey::new("ns", "b"));
        let t0 = std::time::Instant::now();
        let at = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        assert!(r.worth_at(&a, "objects", "cm failed: 403", at(0)), "the first time");
        assert!(!r.worth_at(&a, "objects", "cm failed: 403", at(600)), "the same, ten minutes later");
        assert!(r.worth_at(&b, "objects", "cm failed: 403", at(600)), "another Cluster");
        assert!(r.worth_at(&a, "reconcile", "cm failed: 403", at(600)), "another kind of failure");
        assert!(r.worth_at(&a, "objects", "cm failed: 500", at(1200)), "a change");
        assert!(!r.worth_at(&a, "objects", "cm failed: 500", at(1800)));
        assert!(r.worth_at(&a, "objects", "cm failed: 500", at(1200 + 3600)), "an hour after it was last said");
    }
}
