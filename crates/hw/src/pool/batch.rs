//! A fixed-capacity batch of packets, and filling one from the pool.

use super::cache::ForeignRun;
use super::mempool::{IdArray, Mempool};
use super::pktbuf::PktBuf;
use std::fmt;

/// Maximum packets in a [`Batch`].
pub const MAX_BATCH: usize = 64;

impl Mempool {
    /// Take up to `n` buffers into `out` (under one lock); returns how
    /// many were added.
    pub fn alloc_bulk(&self, out: &mut Batch, n: usize) -> usize {
        let mut ids = [0u32; MAX_BATCH];
        let mut got = IdArray::new(&mut ids);
        let n = n.min(out.room());
        self.inner.free.lock().take(&self.inner, n, &mut got);
        let got = got.len;
        // Popped order: the top of the stack goes out first.
        for &id in ids[..got].iter().rev() {
            out.push(self.make(id));
        }
        got
    }
}

/// What [`Batch::marks`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks(u32);

impl Marks {
    /// Some packet has a mark.
    #[inline(always)]
    pub fn any(self) -> bool {
        self.0 != 0
    }
    /// Some packet has offload state.
    #[inline(always)]
    pub fn offload(self) -> bool {
        self.0 & super::pktbuf::OFFLOAD_SET != 0
    }
    /// Some packet is chained.
    #[inline(always)]
    pub fn chained(self) -> bool {
        self.0 & super::pktbuf::CHAINED != 0
    }
}

/// A fixed-capacity batch of packets ([`MAX_BATCH`]); never allocates
/// after creation.
pub struct Batch {
    pub(super) pkts: Vec<PktBuf>,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("len", &self.pkts.len())
            .finish()
    }
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch {
            pkts: Vec::with_capacity(MAX_BATCH),
        }
    }
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.pkts.len() >= MAX_BATCH
    }
    /// Free slots.
    #[inline(always)]
    pub fn room(&self) -> usize {
        MAX_BATCH - self.pkts.len()
    }
    /// Add a packet; if the batch is full the packet is handed back.
    #[inline(always)]
    pub fn push(&mut self, p: PktBuf) -> Option<PktBuf> {
        let len = self.pkts.len();
        if len >= MAX_BATCH {
            return Some(p);
        }
        // Not `Vec::push`, which would check the capacity a second time
        // and keep a path that grows the vector.
        // SAFETY: the vector was made with room for MAX_BATCH packets and
        // nothing here shrinks it, so slot `len` < MAX_BATCH is allocated
        // and unused; it is written before the length covers it.
        unsafe {
            self.pkts.as_mut_ptr().add(len).write(p);
            self.pkts.set_len(len + 1);
        }
        None
    }
    #[inline(always)]
    pub fn pop(&mut self) -> Option<PktBuf> {
        self.pkts.pop()
    }
    /// Remove and return the first `n` packets, in order.
    pub fn drain_front(&mut self, n: usize) -> std::vec::Drain<'_, PktBuf> {
        let n = n.min(self.pkts.len());
        self.pkts.drain(..n)
    }
    /// Remove all packets, in order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, PktBuf> {
        self.pkts.drain(..)
    }
    pub fn iter(&self) -> std::slice::Iter<'_, PktBuf> {
        self.pkts.iter()
    }
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, PktBuf> {
        self.pkts.iter_mut()
    }
    pub fn as_slice(&self) -> &[PktBuf] {
        &self.pkts
    }
    pub fn as_mut_slice(&mut self) -> &mut [PktBuf] {
        &mut self.pkts
    }
    /// Whether any packet has offload state ([`PktBuf::offload`]): one
    /// load per batch while no packet of the process ever had any, then
    /// one OR over the buffer handles (no branch per packet).
    #[inline]
    pub fn any_offload(&self) -> bool {
        super::pktbuf::offload_used()
            && self.pkts.iter().fold(0, |a, p| a | p.id) & super::pktbuf::OFFLOAD_SET != 0
    }
    /// Whether any packet is chained ([`PktBuf::is_chained`]): one OR
    /// over the buffer handles, no branch per packet.
    #[inline]
    pub fn any_chained(&self) -> bool {
        self.marks().chained()
    }
    /// Whether a packet may have a mark: false (two loads, nothing per
    /// packet) until some packet of the process had offload state or a
    /// chain; then [`Self::marks`] tells.
    #[inline(always)]
    pub fn maybe_marked(&self) -> bool {
        super::pktbuf::marks_used()
    }
    /// Which marks (offload state, chain) any packet has, with one OR
    /// over the buffer handles for both.
    #[inline]
    pub fn marks(&self) -> Marks {
        Marks(
            self.pkts.iter().fold(0, |a, p| a | p.id)
                & (super::pktbuf::OFFLOAD_SET | super::pktbuf::CHAINED),
        )
    }
    /// Keep the packets for which `f` is true, in order; drop the others.
    pub fn retain(&mut self, f: impl FnMut(&mut PktBuf) -> bool) {
        self.pkts.retain_mut(f)
    }
    /// Drop every packet (returning buffers to their pools).
    ///
    /// Buffers go home a run at a time: one lock per run of consecutive
    /// buffers of one pool, not one per buffer (a dropped batch costs
    /// about what a sink's does).
    #[inline]
    pub fn clear(&mut self) {
        if self.pkts.is_empty() {
            return;
        }
        self.free_runs();
    }

    fn free_runs(&mut self) {
        let mut run = ForeignRun::default();
        for buf in self.pkts.drain(..) {
            run.add(buf);
        }
        run.flush();
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.clear();
    }
}

impl std::ops::Index<usize> for Batch {
    type Output = PktBuf;
    fn index(&self, i: usize) -> &PktBuf {
        &self.pkts[i]
    }
}

impl std::ops::IndexMut<usize> for Batch {
    fn index_mut(&mut self, i: usize) -> &mut PktBuf {
        &mut self.pkts[i]
    }
}
