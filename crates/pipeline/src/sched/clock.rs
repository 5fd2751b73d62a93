//! Where the scheduler gets its time: the real monotonic clock, or a
//! virtual one that tests move by hand (exact and fast).

use nfkit_hw::sim::VirtualClock;
use nfkit_hw::SystemClock;
use std::time::Duration;

/// Time for the scheduler, in nanoseconds.
pub trait SchedClock: Send + Sync {
    fn now_ns(&self) -> u64;
    /// Nothing is runnable until `t`: wait (a virtual clock jumps there).
    fn idle_until(&self, t: u64);
    /// Whether this is wall-clock time (a worker may then sleep on its
    /// ports when idle; a virtual clock's tests keep polling).
    fn is_real(&self) -> bool {
        true
    }
}

/// The monotonic clock: nfkit-hw's, read from the time-stamp counter
/// where the kernel trusts it (a few nanoseconds a round). Short waits
/// spin (a worker owns its core); long ones sleep.
pub type RealClock = SystemClock;

/// Waits shorter than this spin instead of sleeping.
const SPIN_LIMIT_NS: u64 = 100_000;

impl SchedClock for SystemClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        SystemClock::now_ns(self)
    }
    fn idle_until(&self, t: u64) {
        let now = self.now_ns();
        if t <= now {
            return;
        }
        if t - now > SPIN_LIMIT_NS {
            std::thread::sleep(Duration::from_nanos(t - now - SPIN_LIMIT_NS / 2));
        }
        while self.now_ns() < t {
            std::hint::spin_loop();
        }
    }
}

impl SchedClock for VirtualClock {
    fn is_real(&self) -> bool {
        false
    }
    fn now_ns(&self) -> u64 {
        nfkit_hw::Clock::now(self).as_nanos() as u64
    }
    fn idle_until(&self, t: u64) {
        let now = self.now_ns();
        if t > now {
            self.advance(Duration::from_nanos(t - now));
        }
    }
}
