//! A mutex that a `fork` child can replace: the child has one thread, and a lock some other
//! parent thread held at the fork would otherwise stay locked in it forever.

use std::cell::UnsafeCell;
use std::sync::{Mutex, MutexGuard};

pub struct ForkSafe<T>(UnsafeCell<Mutex<T>>);

// SAFETY: access goes through the inner mutex; `reset` is only called in a fork child, which
// runs a single thread.
unsafe impl<T: Send> Sync for ForkSafe<T> {}

impl<T> ForkSafe<T> {
    pub const fn new(value: T) -> Self {
        ForkSafe(UnsafeCell::new(Mutex::new(value)))
    }

    /// Locks, ignoring poisoning (a panic was already reported by [`crate::guard::ffi`]).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        // SAFETY: shared access to the mutex; only `reset` writes the cell.
        let m = unsafe { &*self.0.get() };
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the mutex and its value without dropping the old ones (their state may be
    /// inconsistent and their lock held by a thread that does not exist in the child).
    ///
    /// # Safety
    /// Only in a `pthread_atfork` child handler, with no guard alive in this thread.
    pub unsafe fn reset(&self, value: T) {
        std::ptr::write(self.0.get(), Mutex::new(value));
    }
}
