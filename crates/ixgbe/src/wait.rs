//! Bounded waits on device registers.

use crate::error::{InitError, Step};
use nfkit_hw::{poll_until, Clock};
use std::time::Duration;

/// Wait for `cond` through [`nfkit_hw::poll_until`] with growing steps
/// (timeout/1000, /100, /10, then the whole timeout): a bit the device
/// flips within microseconds is seen within microseconds, as the poll of
/// `poll_until` alone would only look every timeout/10. The total wait is
/// bounded by 1.111 × `timeout`.
pub(crate) fn wait_until(
    clock: &dyn Clock,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> bool {
    let mut budget = (timeout / 1000).max(Duration::from_micros(1));
    loop {
        if poll_until(clock, budget, &mut cond) {
            return true;
        }
        if budget >= timeout {
            return false;
        }
        budget = (budget * 10).min(timeout);
    }
}

/// [`wait_until`], failing with a timeout error that names the step.
pub(crate) fn wait_for(
    clock: &dyn Clock,
    timeout: Duration,
    step: Step,
    waited_for: &'static str,
    cond: impl FnMut() -> bool,
) -> Result<(), InitError> {
    if wait_until(clock, timeout, cond) {
        Ok(())
    } else {
        Err(InitError::Timeout {
            step,
            waited_for,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_hw::sim::VirtualClock;

    #[test]
    fn fast_conditions_are_seen_fast_and_slow_ones_time_out() {
        let clock = VirtualClock::new();
        let start = clock.now();
        let t0 = start;
        assert!(wait_until(&*clock, Duration::from_secs(1), || clock.now()
            - t0
            >= Duration::from_micros(50)));
        assert!(
            clock.now() - start < Duration::from_millis(2),
            "{:?}",
            clock.now() - start
        );
        let start = clock.now();
        assert!(!wait_until(&*clock, Duration::from_millis(100), || false));
        let waited = clock.now() - start;
        assert!(
            waited >= Duration::from_millis(100) && waited <= Duration::from_millis(112),
            "{waited:?}"
        );
    }
}
