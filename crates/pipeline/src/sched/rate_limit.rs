//! A token bucket over one child.
//!
//! Tokens are kept in resource-units × 10⁹ (unit-nanoseconds) as a
//! signed 128-bit integer: `limit` units/s over `dt` ns add exactly
//! `limit × dt` tokens, so there is no per-rate conversion factor to
//! round and nothing overflows (100 Gbit/s × 300 years fits with room to
//! spare; BESS's 64-bit fixed point diverged above ~69 Gbit/s, BESS #534).
//!
//! A run may overdraw the bucket; the class then blocks until the debt is
//! repaid (`wake = now + ceil(debt / limit)`), so the long-run rate is
//! exact whatever the batch size. While blocked-free, tokens accrue up to
//! `max_burst` units; what the cap cuts off is kept as `tokens_lost`
//! (the class was idle, or its worker late: why a rate fell short).

use super::{Resource, Usage};

const NANOS: i128 = 1_000_000_000;

#[derive(Debug)]
pub struct RateLimit {
    resource: Resource,
    /// Units per second.
    limit: u64,
    /// Largest bucket, in unit-nanoseconds.
    cap: i128,
    tokens: i128,
    last: Option<u64>,
    throttled: bool,
    /// Tokens cut off at the cap and not yet taken by [`take_lost`](Self::take_lost).
    lost: i128,
}

impl RateLimit {
    /// `limit` units per second (> 0), bucket of `max_burst` units.
    pub fn new(resource: Resource, limit: u64, max_burst: u64) -> RateLimit {
        RateLimit {
            resource,
            limit: limit.max(1),
            cap: max_burst as i128 * NANOS,
            tokens: 0,
            last: None,
            throttled: false,
            lost: 0,
        }
    }
    pub fn resource(&self) -> Resource {
        self.resource
    }
    pub fn limit(&self) -> u64 {
        self.limit
    }
    pub fn throttled(&self) -> bool {
        self.throttled
    }
    /// Bucket content in units (may be negative: a debt).
    pub fn tokens(&self) -> i128 {
        self.tokens / NANOS
    }

    fn refill(&mut self, now: u64) {
        let last = self.last.unwrap_or(now);
        let dt = now.saturating_sub(last) as i128;
        self.last = Some(now.max(last));
        let full = self.tokens + self.limit as i128 * dt;
        if full > self.cap {
            self.lost += full - self.cap;
            self.tokens = self.cap;
        } else {
            self.tokens = full;
        }
    }

    /// Units lost at the cap since the last call (whole units; the
    /// fraction stays for the next call).
    pub fn take_lost(&mut self) -> u64 {
        let units = self.lost / NANOS;
        self.lost -= units * NANOS;
        units.min(u64::MAX as i128) as u64
    }

    /// Charge a run's usage; returns when to wake up if the bucket is
    /// now in debt.
    pub fn consume(&mut self, usage: &Usage, now: u64) -> Option<u64> {
        // The bucket starts with the class's first run, not its end.
        self.last.get_or_insert(now.saturating_sub(usage.cycles));
        self.refill(now);
        self.tokens -= self.resource.get(usage) as i128 * NANOS;
        if self.tokens >= 0 {
            return None;
        }
        self.throttled = true;
        let debt = -self.tokens;
        let limit = self.limit as i128;
        let wait = (debt + limit - 1) / limit;
        Some(now.saturating_add(wait.min(u64::MAX as i128) as u64))
    }

    /// The wake-up time came: refill and run again if out of debt.
    /// Returns whether the class is runnable now, or when to retry.
    pub fn wake(&mut self, now: u64) -> Result<(), u64> {
        self.refill(now);
        if self.tokens >= 0 {
            self.throttled = false;
            return Ok(());
        }
        let limit = self.limit as i128;
        Err(now + ((-self.tokens + limit - 1) / limit) as u64)
    }
}
