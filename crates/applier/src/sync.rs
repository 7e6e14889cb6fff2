//! Taking the crate's locks. A panic while a lock is held poisons it; every lock here guards data
//! that is consistent at each point a holder could panic (caches, counters and maps replaced or
//! updated in one step), so a poisoned lock is taken like any other instead of turning one panic
//! into a panic in every later caller. One spelling of that decision, written once.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], poisoned or not.
pub trait MutexExt<T: ?Sized> {
    /// The guard, whether or not a holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], poisoned or not.
pub trait RwLockExt<T: ?Sized> {
    /// The read guard, whether or not a writer panicked.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard, whether or not a writer panicked.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_taken_with_its_data() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
        let rw = RwLock::new(1);
        *rw.write_locked() += 1;
        assert_eq!(*rw.read_locked(), 2);
    }
}
