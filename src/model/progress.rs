//! How far a long command is: a command that works through a fleet (`preview`, `render`,
//! `adopt`, `fetch`) says how many items it has and each one it finishes; the binary shows that
//! on a terminal (`runtime::progress`), and nowhere else. The library only counts: what it
//! reports never changes what a command prints or returns.
//!
//! The reporter is the process's, as its log subscriber is: the binary installs one ([`install`])
//! before a command run from a terminal, and the code deep in a command asks for it
//! ([`reporter`]) instead of every signature on the way carrying it. Nothing installs one in the
//! daemon, in tests or under `-o json`: there it is [`Silent`].

use std::sync::{Arc, OnceLock};

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
    /// Runs `write` with the progress line out of the way (a log line written meanwhile lands on
    /// a line of its own, and the progress line is drawn again below it).
    fn suspend(&self, write: &mut dyn FnMut()) {
        write();
    }
}

/// Reports nothing: commands run in tests, under `-o json`, or with their output in a pipe.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn add(&self, _what: &str, _total: u64) {}
    fn done(&self) {}
    fn finish(&self) {}
}

/// A shared progress reporter for a command's options: [`Silent`] by default.
#[derive(Clone)]
pub struct Reporter(Arc<dyn Progress>);

impl Reporter {
    pub fn new(progress: Arc<dyn Progress>) -> Reporter {
        Reporter(progress)
    }

    /// `total` more items of `what` are to be done.
    pub fn add(&self, what: &str, total: u64) {
        self.0.add(what, total);
    }

    /// One item is done.
    pub fn done(&self) {
        self.0.done();
    }

    /// The command's work is over.
    pub fn finish(&self) {
        self.0.finish();
    }

    /// Runs `write` with the progress line out of the way ([`Progress::suspend`]).
    pub fn suspend<T>(&self, write: impl FnOnce() -> T) -> T {
        let mut write = Some(write);
        let mut out = None;
        self.0.suspend(&mut || out = write.take().map(|w| w()));
        out.expect("suspend runs its closure")
    }

    /// One item begun: it is done when the guard drops, however its loop iteration ends.
    pub fn tick(&self) -> Tick<'_> {
        Tick(self)
    }
}

/// Reports one item done when dropped ([`Reporter::tick`]).
pub struct Tick<'a>(&'a Reporter);

impl Drop for Tick<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

impl Default for Reporter {
    fn default() -> Reporter {
        silent()
    }
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reporter")
    }
}

/// The reporter that reports nothing.
pub fn silent() -> Reporter {
    Reporter(Arc::new(Silent))
}

static INSTALLED: OnceLock<Reporter> = OnceLock::new();

/// Makes `reporter` the process's (once; a second call changes nothing).
pub fn install(reporter: Reporter) {
    let _ = INSTALLED.set(reporter);
}

/// The process's reporter: the one installed, else [`Silent`].
pub fn reporter() -> Reporter {
    INSTALLED.get().cloned().unwrap_or_default()
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
        let reporter = Reporter::new(count.clone());
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
