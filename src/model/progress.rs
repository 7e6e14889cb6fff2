//! How far a long command is: a command that works through a fleet (`preview`, `render`,
//! `adopt`, `fetch`, `rollout plan`) says how many items it has and each one it finishes; the
//! binary shows that on a terminal (`runtime::progress`), and nowhere else. The library only
//! counts: what it reports never changes what a command prints or returns.

use std::sync::Arc;

/// Told how far a command is. Implementations must be cheap: [`Progress::done`] is called once
/// per item, from any task.
pub trait Progress: Send + Sync {
    /// `total` more items of `what` (e.g. "Clusters") are to be done; called before the first
    /// [`Progress::done`] of them, possibly more than once (a command that finds more work).
    fn add(&self, what: &str, total: u64);
    /// One item is done.
    fn done(&self);
    /// The command's work is over (success or not): nothing more is reported.
    fn finish(&self);
}

/// Reports nothing: commands run in tests, under `-o json`, or with their output in a pipe.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn add(&self, _what: &str, _total: u64) {}
    fn done(&self) {}
    fn finish(&self) {}
}

/// A shared progress reporter, [`Silent`] unless one is given.
pub type Reporter = Arc<dyn Progress>;

/// The reporter that reports nothing.
pub fn silent() -> Reporter {
    Arc::new(Silent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct Count(AtomicU64, AtomicU64);
    impl Progress for Count {
        fn add(&self, _what: &str, total: u64) {
            self.0.fetch_add(total, Ordering::Relaxed);
        }
        fn done(&self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
        fn finish(&self) {}
    }

    #[test]
    fn a_reporter_is_told_the_total_and_each_item() {
        let count = Arc::new(Count::default());
        let reporter: Reporter = count.clone();
        reporter.add("Clusters", 3);
        (0..3).for_each(|_| reporter.done());
        reporter.finish();
        assert_eq!((count.0.load(Ordering::Relaxed), count.1.load(Ordering::Relaxed)), (3, 3));
        let quiet = silent();
        quiet.add("Clusters", 1);
        quiet.done();
        quiet.finish();
    }
}
