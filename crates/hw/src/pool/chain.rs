//! Chained (multi-segment) packets: a frame larger than one buffer is a
//! chain of pool entries, DPDK-mbuf-like.
//!
//! The first segment is an ordinary [`PktBuf`] (its `offset`/`len` are
//! the first segment's); bit 30 of its id ([`CHAINED`]) says more
//! follow. The links live beside the pool, one [`ChainSlot`] per entry
//! (like the metadata and offload slots): the head's slot holds the
//! frame's total length, the number of segments and the first of the
//! others; each other segment's slot holds its own data offset, length
//! and the next one. The other segments belong to the head: dropping or
//! freeing it (any path: `Drop`, a batch, a cache, a driver ring's
//! bulk free) frees the whole chain, each id once.
//!
//! A packet without the flag touches no slot: the single-segment paths
//! pay one flag test where a buffer is freed one at a time, and the bulk
//! free of a driver ring checks nothing per packet while no frame of the
//! pool is chained (`chains_out`).
//!
//! A chain holds at most [`MAX_SEGS`] segments, all of one pool; building
//! a longer one or mixing pools is an error ([`ChainError`]), so every
//! walk is bounded. Headers are made contiguous by [`PktBuf::pull_up`],
//! which moves only the bytes asked for into the first segment's room.

use super::mempool::Mempool;
use super::pktbuf::{PktBuf, CHAINED, ID_MASK};

/// Most segments in one frame (64 KiB frames fit in 35 buffers of the
/// default size).
pub const MAX_SEGS: usize = 64;

/// Largest frame a chain may hold.
pub const MAX_FRAME: usize = 256 * 1024;

/// The chain links of one pool entry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ChainSlot {
    /// Next segment's entry id (valid when `left > 0`).
    pub(super) next: u32,
    /// Segments after this one.
    pub(super) left: u16,
    /// This segment's data offset and length (other segments only).
    pub(super) off: u16,
    pub(super) len: u16,
    /// The frame's total length (the head's slot only).
    pub(super) pkt_len: u32,
}

/// Error from building or reading a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("a frame of more than {MAX_SEGS} segments")]
    TooManySegments,
    #[error("a frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLong(usize),
    #[error("segments of different pools cannot be chained")]
    OtherPool,
    #[error("no free buffer for the frame")]
    NoBuffer,
    #[error("{requested} contiguous bytes asked, the first segment has room for {available}")]
    NoRoom { requested: usize, available: usize },
}

impl Mempool {
    #[inline(always)]
    pub(super) fn slot(&self, id: u32) -> *mut ChainSlot {
        self.inner.chain[id as usize].get()
    }

    /// A frame holding a copy of `bytes`, chained over as many buffers
    /// as it needs (one when it fits a buffer).
    pub fn alloc_frame(&self, bytes: &[u8]) -> Result<PktBuf, ChainError> {
        if bytes.len() > MAX_FRAME {
            return Err(ChainError::TooLong(bytes.len()));
        }
        let room = self.data_room();
        if bytes.len().div_ceil(room) > MAX_SEGS {
            return Err(ChainError::TooManySegments);
        }
        let mut parts = bytes.chunks(room);
        let mut head = self.alloc().ok_or(ChainError::NoBuffer)?;
        // Cannot fail: each part fits a buffer's data room.
        let _ = head.copy_from(parts.next().unwrap_or(&[]));
        for part in parts {
            let mut seg = self.alloc().ok_or(ChainError::NoBuffer)?;
            let _ = seg.copy_from(part);
            head.append(seg)?;
        }
        Ok(head)
    }
}

/// The segments of a frame, first to last.
pub struct Segments<'a> {
    buf: &'a PktBuf,
    /// The next segment's id, and how many remain after the first.
    next: Option<u32>,
    left: usize,
    first: bool,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.first {
            self.first = false;
            return Some(self.buf.data());
        }
        if self.left == 0 {
            return None;
        }
        let id = self.next?;
        self.left -= 1;
        // SAFETY: `id` is a segment of this chain (owned by its head,
        // borrowed here), so its slot and bytes are ours to read.
        let slot = unsafe { *self.buf.pool.slot(id) };
        self.next = (slot.left > 0).then_some(slot.next);
        Some(self.buf.segment_bytes(id, slot.off, slot.len))
    }
}

impl PktBuf {
    /// Whether more segments follow this one.
    #[inline(always)]
    pub fn is_chained(&self) -> bool {
        self.id & CHAINED != 0
    }

    #[inline(always)]
    pub(super) fn head_slot(&self) -> ChainSlot {
        // SAFETY: slot `id` belongs to this PktBuf alone.
        unsafe { *self.pool.slot(self.id()) }
    }

    /// The frame's length, every segment counted.
    #[inline(always)]
    pub fn pkt_len(&self) -> usize {
        if self.id & CHAINED == 0 {
            self.len()
        } else {
            self.head_slot().pkt_len as usize
        }
    }

    /// Segments in the frame (1 unless chained).
    pub fn nb_segs(&self) -> usize {
        if self.id & CHAINED == 0 {
            1
        } else {
            1 + self.head_slot().left as usize
        }
    }

    /// The frame's segments, first to last.
    pub fn segments(&self) -> Segments<'_> {
        let slot = if self.is_chained() {
            self.head_slot()
        } else {
            super::chain::ChainSlot::default()
        };
        Segments {
            buf: self,
            next: (slot.left > 0).then_some(slot.next),
            left: slot.left as usize,
            first: true,
        }
    }

    /// Bytes `off..off + len` of entry `id` (a segment of this chain).
    pub(super) fn segment_bytes(&self, id: u32, off: u16, len: u16) -> &[u8] {
        let start = ((id as usize) << self.pool.inner.buf_shift) + off as usize;
        let end = start + len as usize;
        // Slots are only written by this module, within the buffer; a
        // range past the region would be a bug here, not a bad input.
        assert!(end <= self.pool.inner.region.len() && id < self.pool.inner.count);
        // SAFETY: in the region (checked); the segment belongs to this
        // chain, whose head `&self` borrows, so nothing writes it meanwhile.
        unsafe {
            std::slice::from_raw_parts(self.pool.inner.region.as_ptr().add(start), len as usize)
        }
    }

    /// Bytes of entry `id` (a segment of this chain), mutable.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn segment_bytes_mut(&mut self, id: u32, off: u16, len: u16) -> &mut [u8] {
        let start = ((id as usize) << self.pool.inner.buf_shift) + off as usize;
        let end = start + len as usize;
        assert!(end <= self.pool.inner.region.len() && id < self.pool.inner.count);
        // SAFETY: as in `segment_bytes`, and `&mut self` excludes every
        // other reference to the chain's bytes.
        unsafe {
            std::slice::from_raw_parts_mut(self.pool.inner.region.as_ptr().add(start), len as usize)
        }
    }

    /// Call `f` on each segment's bytes, mutable, first to last.
    pub fn for_each_segment_mut(&mut self, mut f: impl FnMut(&mut [u8])) {
        f(self.data_mut());
        let mut slot = if self.is_chained() {
            self.head_slot()
        } else {
            return;
        };
        for _ in 0..slot.left {
            let id = slot.next;
            // SAFETY: a segment of this chain.
            slot = unsafe { *self.pool.slot(id) };
            f(self.segment_bytes_mut(id, slot.off, slot.len));
            if slot.left == 0 {
                break;
            }
        }
    }

    /// Device address and length of each segment, first to last: what
    /// a driver hands a device as one descriptor per segment.
    pub fn dma_segments(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let mut slot = if self.is_chained() {
            self.head_slot()
        } else {
            ChainSlot::default()
        };
        let mut left = slot.left;
        let first = std::iter::once((self.device_addr(), self.len()));
        first.chain(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let id = slot.next & ID_MASK;
            // SAFETY: a segment of this chain (owned by its head,
            // borrowed here).
            slot = unsafe { *self.pool.slot(id) };
            Some((
                self.pool.entry_device_addr(id) + u64::from(slot.off),
                usize::from(slot.len),
            ))
        }))
    }

    /// Copy the whole frame into `out` (cleared first).
    pub fn copy_frame_to(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.pkt_len());
        for s in self.segments() {
            out.extend_from_slice(s);
        }
    }
}
