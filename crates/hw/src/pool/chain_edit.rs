//! Building and freeing chains (see `chain.rs` for the layout): adding
//! segments, the total length as the first segment changes, headers
//! made contiguous, and every free path's walk over a chain's other
//! segments.

use super::chain::{ChainError, ChainSlot, MAX_FRAME, MAX_SEGS};
use super::mempool::{give_back, Mempool};
use super::pktbuf::{PktBuf, CHAINED, ID_MASK};
use std::sync::atomic::Ordering;

impl PktBuf {
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
            super::pktbuf::use_mark(CHAINED);
            self.pool.inner.chains_out.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Change a chain's total length by `delta` (its first segment grew
    /// or shrank).
    #[cold]
    #[inline(never)]
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
    /// packet. Out of line: its id array must not cost the single-segment
    /// paths that test the flag a stack frame (and its zeroing).
    #[cold]
    #[inline(never)]
    pub(super) fn free_tail(&mut self) {
        let head = self.head_slot();
        let mut ids = [0u32; MAX_SEGS];
        let k = tail_ids(&self.pool, head, &mut ids);
        give_back(&self.pool, &ids[..k]);
        self.id &= !CHAINED;
        self.pool.inner.chains_out.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Free the other segments of chained head `id` (flags included) of the
/// pool `inner`, which the caller gives up.
#[cold]
#[inline(never)]
pub(super) fn free_tail_of(inner: &super::mempool::Inner, id: u32) {
    let head_id = id & ID_MASK;
    // SAFETY: the head's own slot, and its chain's slots, belong to the
    // caller's packet.
    let head = unsafe { *inner.chain[head_id as usize].get() };
    let mut ids = [0u32; MAX_SEGS];
    let mut next = head.next;
    let n = (head.left as usize).min(MAX_SEGS);
    for slot in ids.iter_mut().take(n) {
        *slot = next & ID_MASK;
        // SAFETY: a segment of this chain.
        next = unsafe { (*inner.chain[(next & ID_MASK) as usize].get()).next };
    }
    // Never the last ids home (the head is still out): no keep-alive
    // handle comes back to drop.
    let last = inner.free.lock().give_back_ids(&ids[..n]);
    drop(last);
    inner.chains_out.fetch_sub(1, Ordering::Relaxed);
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
#[cold]
#[inline(never)]
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
