//! Repeated failures said once: a failure that comes back on every retry is worth its level
//! (WARN, ERROR) when its cause changes and once an hour, DEBUG in between. The cause is what
//! the operator acts on — the OS error under it (`No space left on device`), or the text when
//! there is none — not the whole message, which may name a temp file new on every try.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::sync::MutexExt;

/// How often a failure that repeats with an unchanged cause is said at its level again.
pub const REPEAT: Duration = Duration::from_secs(3600);

/// The last cause said for each key (a release, a status file), with when it was said.
#[derive(Debug)]
pub struct Repeats<K>(Mutex<HashMap<K, (u64, Instant)>>);

impl<K> Default for Repeats<K> {
    fn default() -> Repeats<K> {
        Repeats(Mutex::new(HashMap::new()))
    }
}

impl<K: Hash + Eq + Clone> Repeats<K> {
    /// Whether a failure of `key` with `cause` is worth its level: the first, one whose cause
    /// differs from the last said, or the same [`REPEAT`] after it was last said (then it is
    /// the one recorded).
    pub fn worth(&self, key: &K, cause: &str) -> bool {
        self.worth_at(key, cause, Instant::now())
    }

    /// [`Repeats::worth`] at `now`.
    pub fn worth_at(&self, key: &K, cause: &str, now: Instant) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        cause.hash(&mut h);
        let digest = h.finish();
        let mut said = self.0.locked();
        match said.get(key) {
            Some((d, at)) if *d == digest && now.duration_since(*at) < REPEAT => false,
            _ => {
                said.insert(key.clone(), (digest, now));
                true
            }
        }
    }

    /// `key`'s failure is over: the next one is said at its level.
    pub fn cleared(&self, key: &K) {
        self.0.locked().remove(key);
    }

    /// Forgets every key `gone` says is gone (a Cluster deleted: each kind of its failures).
    pub fn forget_where(&self, gone: impl Fn(&K) -> bool) {
        self.0.locked().retain(|k, _| !gone(k));
    }
}

/// The cause of `error` for [`Repeats`]: the innermost I/O error of its chain that the OS
/// raised (`No space left on device (os error 28)`, `Read-only file system (os error 30)`),
/// else the whole text.
pub fn cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut found = None;
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.raw_os_error().is_some()
        {
            found = Some(io.to_string());
        }
        next = e.source();
    }
    found.unwrap_or_else(|| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_cause_is_said_on_change_and_once_an_hour() {
        let r = Repeats::default();
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        assert!(r.worth_at(&"a", "ENOSPC", at(0)), "the first time");
        assert!(!r.worth_at(&"a", "ENOSPC", at(600)), "the same, ten minutes later");
        assert!(r.worth_at(&"b", "ENOSPC", at(600)), "another key");
        assert!(r.worth_at(&"a", "EROFS", at(1200)), "a change");
        assert!(!r.worth_at(&"a", "EROFS", at(1800)));
        assert!(r.worth_at(&"a", "EROFS", at(1200 + 3600)), "an hour after it was last said");
        r.cleared(&"a");
        assert!(r.worth_at(&"a", "EROFS", at(1200 + 3601)), "after it was over");
        r.forget_where(|k| *k == "b");
        assert!(r.worth_at(&"b", "ENOSPC", at(1200 + 3602)), "forgotten");
        assert!(!r.worth_at(&"a", "EROFS", at(1200 + 3602)), "kept");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot write {path}: {source}")]
    struct Write {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn the_cause_is_the_os_error_whatever_the_path() {
        let full = |path: &str| Write { path: path.into(), source: std::io::Error::from_raw_os_error(28) };
        assert_eq!(cause(&full("/c/tmp/a-1-1")), cause(&full("/c/tmp/a-1-2")));
        assert!(cause(&full("/c/tmp/a-1-1")).contains("os error 28"), "{}", cause(&full("x")));
        let other = Write { path: "p".into(), source: std::io::Error::other("connection reset") };
        assert_eq!(cause(&other), "cannot write p: connection reset", "no OS error: the whole text");
    }
}
