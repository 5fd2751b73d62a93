//! The synchronization of the pool's shared paths (the free stack and
//! the handle that keeps the pool alive), and, under `cfg(loom)`, loom's
//! models of the same, so `tests/loom_pool.rs` can run those paths under
//! every interleaving. The ordinary build is exactly `parking_lot` and
//! `std` (nothing is wrapped).

#[cfg(not(loom))]
pub(super) use parking_lot::Mutex;
#[cfg(not(loom))]
pub(super) use std::sync::Arc;

#[cfg(loom)]
pub(super) use loom::sync::Arc;

/// loom's mutex with `parking_lot`'s `lock` (no poisoning to unwrap).
#[cfg(loom)]
pub(super) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(super) fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub(super) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
