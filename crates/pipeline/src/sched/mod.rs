//! The per-worker scheduler: a tree of traffic classes (SoftNIC §3.4,
//! §4.4).
//!
//! Inner classes are policies ([`Priority`], [`WeightedFair`],
//! [`RoundRobin`], [`RateLimit`]); leaves run tasks. Each round the
//! scheduler walks from the root to a runnable leaf, runs its task, and
//! accounts the usage (count, cycles, packets, bits) on every class from
//! the leaf to the root. Time comes from a [`SchedClock`], so tests run
//! on a virtual clock.

mod clock;
mod priority;
mod rate_limit;
mod round_robin;
mod tree;
mod weighted_fair;

pub use clock::{RealClock, SchedClock};
pub use priority::Priority;
pub use rate_limit::RateLimit;
pub use round_robin::RoundRobin;
pub use tree::{SchedCounters, SchedStats, Scheduler, TcCounters, TcId, TcStats, TcTree};
pub use weighted_fair::WeightedFair;

use std::fmt;

/// What a class's share or limit is measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Times scheduled.
    Count,
    /// Time spent running, in scheduler-clock ticks: nanoseconds, not
    /// TSC cycles (the name is BESS's; shown as `cpu_ns`).
    Cycle,
    Packet,
    /// Frame bits (bytes × 8).
    Bit,
}

impl Resource {
    pub fn parse(s: &str) -> Option<Resource> {
        Some(match s {
            "count" => Resource::Count,
            "cycle" | "cycles" => Resource::Cycle,
            "packet" | "packets" => Resource::Packet,
            "bit" | "bits" => Resource::Bit,
            _ => return None,
        })
    }
    /// The amount of this resource in a usage record.
    pub fn get(self, u: &Usage) -> u64 {
        match self {
            Resource::Count => u.count,
            Resource::Cycle => u.cycles,
            Resource::Packet => u.packets,
            Resource::Bit => u.bits,
        }
    }
    /// What a run costs for fair sharing: at least one unit, and a run
    /// that found no work is charged as a batch of 32 minimum-size
    /// packets, so an idle task cannot hold the processor by costing
    /// nothing.
    pub fn charge(self, u: &Usage) -> u64 {
        let amount = self.get(u).max(1);
        if u.packets > 0 {
            return amount;
        }
        let idle = match self {
            Resource::Count | Resource::Cycle => 1,
            Resource::Packet => 32,
            Resource::Bit => 32 * 64 * 8,
        };
        amount.max(idle)
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Count => "count",
            Resource::Cycle => "cycle",
            Resource::Packet => "packet",
            Resource::Bit => "bit",
        })
    }
}

/// Resources one task run used.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub count: u64,
    pub cycles: u64,
    pub packets: u64,
    pub bits: u64,
}

/// Where a class sits under its parent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Under a `priority` parent (lower runs first).
    pub priority: Option<u32>,
    /// Under a `weighted_fair` parent.
    pub share: Option<u64>,
}

/// An inner class's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySpec {
    Priority,
    WeightedFair {
        resource: Resource,
    },
    RoundRobin,
    RateLimit {
        resource: Resource,
        /// Units per second.
        limit: u64,
        /// Bucket size in units; `None` means one millisecond of `limit`.
        max_burst: Option<u64>,
    },
}

impl PolicySpec {
    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::Priority => "priority",
            PolicySpec::WeightedFair { .. } => "weighted_fair",
            PolicySpec::RoundRobin => "round_robin",
            PolicySpec::RateLimit { .. } => "rate_limit",
        }
    }
}

/// Errors building a class tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcError {
    #[error("traffic class `{0}` already exists")]
    Duplicate(String),
    #[error("traffic class `{class}`: {msg}")]
    Placement { class: String, msg: String },
    #[error("traffic class `{class}`: parent `{parent}` is a leaf")]
    LeafParent { class: String, parent: String },
    #[error("traffic class `{class}`: rate_limit `{parent}` already has a child")]
    RateLimitFull { class: String, parent: String },
    #[error("traffic class `{class}`: rate limit must be above 0")]
    ZeroLimit { class: String },
}
