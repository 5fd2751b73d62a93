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

/// The real clock: monotonic time, cheap to read, and `nanosleep`.
///
/// Where the kernel itself keeps time with the CPU's time-stamp counter
/// (clocksource `tsc`: invariant, synchronized across cores), a reading
/// is one `rdtsc` and a multiplication, scaled to nanoseconds by a
/// calibration against `CLOCK_MONOTONIC` made once per process; elsewhere
/// (another clocksource, another architecture, miri) it is
/// `CLOCK_MONOTONIC` through `Instant`. A data-path loop that reads the
/// time every round (the pipeline's scheduler) pays a few nanoseconds
/// rather than a `clock_gettime`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
    tsc: Option<TscOrigin>,
}

/// A TSC reading taken with `SystemClock::origin`, and the scale.
#[derive(Debug, Clone, Copy)]
struct TscOrigin {
    at: u64,
    /// Nanoseconds per tick, fixed point with 32 fraction bits.
    ns_per_tick_q32: u64,
}

impl Default for SystemClock {
    fn default() -> Self {
        let tsc = tsc::scale();
        let (at, origin) = tsc::paired();
        SystemClock {
            origin,
            tsc: tsc.map(|ns_per_tick_q32| TscOrigin {
                at,
                ns_per_tick_q32,
            }),
        }
    }
}

impl SystemClock {
    /// Nanoseconds since the clock was made; never goes backwards on one
    /// thread.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self.tsc {
            Some(t) => {
                // A core whose counter reads a hair below the origin's
                // reads 0, not a wrapped value.
                let ticks = tsc::read().saturating_sub(t.at);
                ((u128::from(ticks) * u128::from(t.ns_per_tick_q32)) >> 32) as u64
            }
            None => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Whether readings come from the time-stamp counter.
    pub fn uses_tsc(&self) -> bool {
        self.tsc.is_some()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns())
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// The time-stamp counter: reading it, and its scale.
mod tsc {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// The counter, where it is a usable clock (see `scale`); 0 elsewhere.
    #[inline(always)]
    pub(super) fn read() -> u64 {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            // SAFETY: `rdtsc` reads a counter register; it touches no
            // memory and exists on every x86_64 CPU.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        {
            0
        }
    }

    /// A counter reading and an `Instant` taken together (retried while
    /// something, a preemption, came between them).
    pub(super) fn paired() -> (u64, Instant) {
        let mut best = (read(), Instant::now(), u64::MAX);
        for _ in 0..8 {
            let before = read();
            let now = Instant::now();
            let spread = read().wrapping_sub(before);
            if spread < best.2 {
                best = (before.wrapping_add(spread / 2), now, spread);
            }
        }
        (best.0, best.1)
    }

    /// Nanoseconds per tick (32 fraction bits), calibrated once per
    /// process against `CLOCK_MONOTONIC` over a few milliseconds; `None`
    /// unless the kernel keeps time with the counter itself (which it
    /// does only when the counter is invariant and synchronized).
    pub(super) fn scale() -> Option<u64> {
        static SCALE: OnceLock<Option<u64>> = OnceLock::new();
        *SCALE.get_or_init(|| {
            if !cfg!(all(target_arch = "x86_64", not(miri))) {
                return None;
            }
            let source = std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .ok()?;
            if source.trim() != "tsc" {
                return None;
            }
            let (t0, i0) = paired();
            while i0.elapsed() < Duration::from_millis(5) {
                std::hint::spin_loop();
            }
            let (t1, i1) = paired();
            let ticks = t1.checked_sub(t0).filter(|&t| t > 0)?;
            let ns = i1.duration_since(i0).as_nanos();
            u64::try_from((ns << 32) / u128::from(ticks)).ok()
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_keeps_pace_with_monotonic_time_and_never_goes_back() {
        let clock = SystemClock::default();
        // Each reading of the clock is bracketed by two of `Instant`, so
        // a preemption between them widens the bracket, not the error.
        let start = Instant::now();
        let first = clock.now_ns();
        let first_late = start.elapsed();
        let mut last = first;
        while start.elapsed() < Duration::from_millis(20) {
            let now = clock.now_ns();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        let end_early = start.elapsed();
        let end = clock.now_ns();
        let end_late = start.elapsed();
        assert!(end >= last, "went back from {last} to {end}");
        let read = Duration::from_nanos(end - first);
        // Calibration error is far below 1%.
        let (low, high) = (end_early - first_late, end_late);
        assert!(
            read >= low - low / 100 && read <= high + high / 100,
            "{read:?} read between {low:?} and {high:?} (tsc: {})",
            clock.uses_tsc()
        );
    }
}
