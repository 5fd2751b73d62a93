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

use super::mempool::{give_back, Mempool};
use super::pktbuf::{PktBuf, CHAINED, ID_MASK};
use std::sync::atomic::Ordering;

/// Most segments in one frame (64 KiB frames fit in 35 buffers of the
/// default size).
pub const MAX_SEGS: usize = 64;

/// Largest frame a chain may hold.
pub const MAX_FRAME: usize = 256 * 1024;

/// The chain links of one pool entry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ChainSlot {
    /// Next segment's entry id (valid when `left > 0`).
    next: u32,
    /// Segments after this one.
    left: u16,
    /// This segment's data offset and length (other segments only).
    off: u16,
    len: u16,
    /// The frame's total length (the head's slot only).
    pkt_len: u32,
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
    fn slot(&self, id: u32) -> *mut ChainSlot {
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
    fn head_slot(&self) -> ChainSlot {
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
    fn segment_bytes(&self, id: u32, off: u16, len: u16) -> &[u8] {
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
    fn segment_bytes_mut(&mut self, id: u32, off: u16, len: u16) -> &mut [u8] {
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

    /// Add `seg` (with any segments chained to it) at the end of this
    /// frame. On error `seg` is freed and this frame is unchanged.
    pub fn append(&mut self, seg: PktBuf) -> Result<(), ChainError> {
        if !self.pool.same(&seg.pool) {
            return Err(ChainError::OtherPool);
        }
        let added = seg.nb_segs();
        let (mut head, was_chained) = if self.is_chained() {
            (self.head_slot(), true)
        } else {
            (ChainSlot::default(), false)
        };
        if 1 + head.left as usize + added > MAX_SEGS {
            return Err(ChainError::TooManySegments);
        }
        let total = self.pkt_len() + seg.pkt_len();
        if total > MAX_FRAME {
            return Err(ChainError::TooLong(total));
        }
        // The new segments: seg's first (its offset and length move into
        // its slot), then its own chain, which keeps its links.
        let seg_slot = if seg.is_chained() {
            seg.head_slot()
        } else {
            ChainSlot::default()
        };
        let seg_id = seg.id();
        // SAFETY: `seg`'s id and chain become this chain's (ownership
        // moves below, with `forget`); its slot is ours to write.
        unsafe {
            *self.pool.slot(seg_id) = ChainSlot {
                next: seg_slot.next,
                left: seg_slot.left,
                off: seg.offset,
                len: seg.len,
                pkt_len: 0,
            };
        }
        if seg.is_chained() {
            self.pool.inner.chains_out.fetch_sub(1, Ordering::Relaxed);
        }
        std::mem::forget(seg);
        // Link the last segment of this frame to it.
        if head.left == 0 {
            head.next = seg_id;
        } else {
            let mut id = head.next;
            for _ in 1..head.left {
                // SAFETY: a segment of this chain.
                id = unsafe { (*self.pool.slot(id)).next };
            }
            // SAFETY: the last segment of this chain.
            unsafe {
                let last = &mut *self.pool.slot(id);
                last.next = seg_id;
            }
        }
        // Every segment before the new ones now has `added` more after it.
        if head.left > 0 {
            let mut id = head.next;
            for _ in 0..head.left {
                // SAFETY: a segment of this chain.
                let s = unsafe { &mut *self.pool.slot(id) };
                s.left += added as u16;
                id = s.next;
            }
        }
        head.left += added as u16;
        head.pkt_len = total as u32;
        // SAFETY: the head's own slot.
        unsafe { *self.pool.slot(self.id()) = head };
        if !was_chained {
            self.id |= CHAINED;
            self.pool.inner.chains_out.fetch_add(1, Ordering::Relaxed);
            super::pktbuf::CHAINS_USED.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Change a chain's total length by `delta` (its first segment grew
    /// or shrank).
    pub(super) fn grow_total(&mut self, delta: isize) {
        let id = self.id();
        // SAFETY: the head's own slot.
        let s = unsafe { &mut *self.pool.slot(id) };
        s.pkt_len = (s.pkt_len as isize + delta) as u32;
    }

    /// Make the first `n` bytes of the frame contiguous in the first
    /// segment, moving only those bytes (headers) from the following
    /// segments into its tailroom; returns them. The payload stays
    /// where it is. Errors when the frame is shorter than `n` or the
    /// first segment has no room for them.
    pub fn pull_up(&mut self, n: usize) -> Result<&mut [u8], ChainError> {
        if n <= self.len() {
            return Ok(&mut self.data_mut()[..n]);
        }
        if n > self.pkt_len() {
            return Err(ChainError::NoRoom {
                requested: n,
                available: self.pkt_len(),
            });
        }
        if n > self.len() + self.tailroom() {
            return Err(ChainError::NoRoom {
                requested: n,
                available: self.len() + self.tailroom(),
            });
        }
        // Chained (n > len and n <= pkt_len).
        let mut head = self.head_slot();
        let mut freed = [0u32; MAX_SEGS];
        let mut nfreed = 0;
        while self.len() < n && head.left > 0 {
            let id = head.next;
            // SAFETY: a segment of this chain.
            let mut s = unsafe { *self.pool.slot(id) };
            let take = (n - self.len()).min(s.len as usize);
            let old = self.len();
            // Grows the head, and the total (restored below).
            let _ = self.set_len(old + take);
            let src = self.segment_bytes(id, s.off, take as u16).as_ptr();
            let dst = self.data_mut()[old..].as_mut_ptr();
            // SAFETY: `take` bytes at each end, in two different entries
            // of the region (checked by the two accessors above), both
            // this chain's.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, take) };
            s.off += take as u16;
            s.len -= take as u16;
            if s.len == 0 {
                head.next = s.next;
                head.left -= 1;
                freed[nfreed] = id;
                nfreed += 1;
            } else {
                // SAFETY: a segment of this chain.
                unsafe { *self.pool.slot(id) = s };
            }
        }
        // The bytes moved, the total did not change (`head` holds it).
        // SAFETY: the head's own slot.
        unsafe { *self.pool.slot(self.id()) = head };
        if nfreed > 0 {
            // Every remaining segment's `left` is unchanged (the freed
            // ones were before them).
            give_back(&self.pool, &freed[..nfreed]);
        }
        if head.left == 0 {
            self.id &= !CHAINED;
            self.pool.inner.chains_out.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(&mut self.data_mut()[..n])
    }

    /// Free every segment after the first, leaving a single-segment
    /// packet.
    pub(super) fn free_tail(&mut self) {
        let head = self.head_slot();
        let mut ids = [0u32; MAX_SEGS];
        let k = tail_ids(&self.pool, head, &mut ids);
        give_back(&self.pool, &ids[..k]);
        self.id &= !CHAINED;
        self.pool.inner.chains_out.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The ids of the segments after a head whose slot is `head`, into `ids`;
/// returns how many.
fn tail_ids(pool: &Mempool, head: ChainSlot, ids: &mut [u32; MAX_SEGS]) -> usize {
    let mut id = head.next;
    let n = (head.left as usize).min(MAX_SEGS);
    for slot in ids.iter_mut().take(n) {
        *slot = id & ID_MASK;
        // SAFETY: a segment of this chain.
        id = unsafe { (*pool.slot(id & ID_MASK)).next };
    }
    n
}

/// Free the other segments of the chained heads among `bufs` (a bulk
/// free path, taken only while the pool has chains out); the heads
/// themselves are freed by the caller.
pub(super) fn free_tails_of(bufs: &[PktBuf]) {
    for b in bufs {
        if b.is_chained() {
            let mut ids = [0u32; MAX_SEGS];
            let k = tail_ids(&b.pool, b.head_slot(), &mut ids);
            give_back(&b.pool, &ids[..k]);
            b.pool.inner.chains_out.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
