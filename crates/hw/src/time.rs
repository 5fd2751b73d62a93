//! Time: a monotonic clock and sleeping, plus the bounded poll every
//! hardware wait goes through.

use std::time::{Duration, Instant};

/// Monotonic time and sleep. The simulated platform implements this with
/// a virtual clock so that a lock-step device model advances while the
/// driver "sleeps".
pub trait Clock: Send + Sync {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
    /// Sleep at least `d` (longer is acceptable).
    fn sleep(&self, d: Duration);
}

/// The real clock: `CLOCK_MONOTONIC` and `nanosleep`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// Poll `cond` until it is true or `timeout` has passed, sleeping
/// `timeout / 10` between polls (as TinyNF does: at most ~10 polls).
/// Returns whether the condition became true. Every wait on hardware in
/// nfkit goes through here, so none can hang.
pub fn poll_until(clock: &dyn Clock, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    if cond() {
        return true;
    }
    let step = (timeout / 10).max(Duration::from_micros(1));
    let deadline = clock.now() + timeout;
    loop {
        clock.sleep(step);
        if cond() {
            return true;
        }
        if clock.now() >= deadline {
            return cond();
        }
    }
}
