//! Counters the data path writes and anyone may read while it runs.
//!
//! Each counter has exactly one writing thread at a time (the worker
//! that owns the gate, module or class; a module split over two workers
//! has a second set of counters for its task half). So an increment is a
//! relaxed load and store, not a read-modify-write: on x86 a plain `add`
//! to memory instead of a `lock xadd`, which costs some 20 cycles and
//! would be paid about twenty times a batch. Readers (the control thread)
//! still see whole values, live. Counters are bumped once per batch,
//! never per packet.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Add `n`. Only the counter's one writing thread may call this (see
    /// the module documentation); two writers would lose increments.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Traffic through one gate: packets, batches and bits (frame bytes × 8,
/// without preamble, IFG or CRC).
#[derive(Debug, Default)]
pub struct GateCounters {
    pub packets: Counter,
    pub batches: Counter,
    pub bits: Counter,
}

impl GateCounters {
    #[inline(always)]
    pub fn count(&self, packets: u64, bits: u64) {
        self.packets.add(packets);
        self.batches.add(1);
        self.bits.add(bits);
    }
    pub fn snapshot(&self) -> GateStats {
        GateStats {
            packets: self.packets.get(),
            batches: self.batches.get(),
            bits: self.bits.get(),
        }
    }
}

/// A copy of [`GateCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GateStats {
    pub packets: u64,
    pub batches: u64,
    pub bits: u64,
}

/// Per-module packet accounting. For every module, at every moment
/// between batches:
/// `received + created == sent + consumed + dropped`
/// where `received`/`sent` are the sums over its input/output gates.
#[derive(Debug, Default)]
pub struct ModuleCounters {
    /// Packets the module made (a source, a port it received from, copies).
    pub created: Counter,
    /// Packets that left the pipeline on purpose (sent on a port, sunk).
    pub consumed: Counter,
    /// Packets dropped: by the module's logic, left unhandled, sent to an
    /// unconnected gate, or refused by a full queue or port.
    pub dropped: Counter,
}

/// A copy of one module's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ModuleStats {
    pub name: String,
    pub class: &'static str,
    pub created: u64,
    pub consumed: u64,
    pub dropped: u64,
    /// Per input gate.
    pub igates: Vec<GateStats>,
    /// Per output gate (only gates in use).
    pub ogates: Vec<GateStats>,
    /// Module-specific values (latency percentiles, ...).
    pub extra: Vec<(&'static str, u64)>,
}

impl ModuleStats {
    pub fn received(&self) -> u64 {
        self.igates.iter().map(|g| g.packets).sum()
    }
    pub fn sent(&self) -> u64 {
        self.ogates.iter().map(|g| g.packets).sum()
    }
    /// Packets the module holds (a Queue's ring): its `queued` value.
    pub fn held(&self) -> u64 {
        self.extra
            .iter()
            .find(|(k, _)| *k == "queued")
            .map_or(0, |e| e.1)
    }
    /// Whether `received + created == sent + consumed + dropped + held`.
    pub fn balanced(&self) -> bool {
        self.received() + self.created == self.sent() + self.consumed + self.dropped + self.held()
    }
}
