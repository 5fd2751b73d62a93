//! Driver ring bookkeeping: the buffers a receive ring lends to the
//! device (as entry ids) and those a transmit ring holds until sent.

use super::batch::{Batch, MAX_BATCH};
use super::cache::PoolCache;
use super::mempool::{Mempool, HEADROOM};
use super::pktbuf::PktBuf;
use crate::dma::Desc;
use std::fmt;
use std::mem::MaybeUninit;

/// Ids each driver ring's cache keeps (it holds at most twice as many
/// before spilling the excess to the shared stack), whatever the ring's
/// size. Buffers in a cache that does not allocate (a transmit ring's,
/// where sent buffers land) are out of everyone else's reach: a cache
/// sized by the ring (up to 2 x 512 ids for a 512-slot ring) could keep
/// every buffer a 1,536-buffer pool had beyond one 512-slot receive ring,
/// and receiving then stopped for good (nothing left to send, so nothing
/// to spill). With this size a cache keeps at most `2 * MAX_BATCH`, and
/// goes to the shared stack once per one or two batches (a refill brings
/// it to `2 * MAX_BATCH`, a spill takes it down to `MAX_BATCH`).
pub const RING_CACHE: usize = MAX_BATCH;

/// The fewest buffers a pool needs for a receive ring of `entries`
/// descriptors: the ring, plus what the receive queue's cache and one
/// transmit queue's cache can keep (each at most `2 * RING_CACHE`), so
/// that freed buffers always reach the receive ring again. Several
/// queues on one pool need the sum of theirs, and an NF that keeps
/// packets needs those on top.
pub const fn min_pool_for_rx_ring(entries: usize) -> usize {
    entries + 4 * RING_CACHE
}

/// The buffers a receive ring lends to a device: one pool entry per
/// descriptor, held as an id (a [`PktBuf`] is made only when a packet
/// arrives in it), replaced from a [`PoolCache`] as packets are taken.
pub struct RxBuffers {
    cache: PoolCache,
    ids: Box<[u32]>,
    mask: usize,
    /// The pool's data room: no packet taken is longer.
    data_room: usize,
}

impl fmt::Debug for RxBuffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxBuffers")
            .field("pool", &self.cache.pool.name())
            .field("entries", &self.ids.len())
            .finish()
    }
}

impl RxBuffers {
    /// One buffer for each of `entries` descriptors (a power of two),
    /// through a cache of `pool` that also keeps replacements; `None` if
    /// the pool cannot fill the ring.
    pub fn new(pool: &Mempool, entries: usize) -> Option<RxBuffers> {
        if !entries.is_power_of_two() {
            return None;
        }
        let mut cache = pool.cache(RING_CACHE);
        let mut ids = Vec::with_capacity(entries);
        for _ in 0..entries {
            match cache.alloc_id() {
                Some(id) => ids.push(id),
                None => {
                    ids.into_iter().for_each(|id| cache.free_id(id));
                    return None;
                }
            }
        }
        Some(RxBuffers {
            cache,
            ids: ids.into_boxed_slice(),
            mask: entries - 1,
            data_room: pool.data_room(),
        })
    }

    /// The pool the buffers come from.
    pub fn pool(&self) -> &Mempool {
        &self.cache.pool
    }

    /// Device address where the device should write into the buffer of
    /// descriptor `i mod entries` (after the default headroom).
    #[inline(always)]
    pub fn rx_device_addr(&self, i: usize) -> u64 {
        self.cache.pool.entry_device_addr(*self.slot(i)) + HEADROOM as u64
    }

    /// The device wrote `len` bytes into the buffer of descriptor
    /// `i mod entries`: take it as a packet (of at most the data room),
    /// and put a fresh buffer in its place. Returns the packet and the
    /// device address for the descriptor, or `None` (nothing changed) if
    /// the pool is empty.
    #[inline(always)]
    pub fn take(&mut self, i: usize, len: usize) -> Option<(PktBuf, u64)> {
        let fresh = self.cache.alloc_id()?;
        let id = std::mem::replace(self.slot_mut(i), fresh);
        let pkt = PktBuf {
            pool: self.cache.pool.borrowed(),
            id,
            offset: HEADROOM as u16,
            len: len.min(self.data_room) as u16,
        };
        let addr = self.cache.pool.entry_device_addr(fresh) + HEADROOM as u64;
        Some((pkt, addr))
    }

    /// [`Self::take`] for many descriptors at once: the device wrote
    /// `lens[k]` bytes into the buffer of descriptor `first + k` (indices
    /// wrap). Those buffers become packets at the end of `batch` (in
    /// order, each of at most the data room), and each is replaced by a
    /// fresh one, whose device address goes to `fresh[k]` for the
    /// descriptor. Stops short when the batch, `fresh` or the pool runs
    /// out; returns how many were taken (the others are unchanged).
    #[inline]
    pub fn take_bulk(
        &mut self,
        first: usize,
        lens: &[u16],
        batch: &mut Batch,
        fresh: &mut [u64],
    ) -> usize {
        let lens = &lens[..lens.len().min(fresh.len())];
        // SAFETY: `put` is called with k < n <= lens.len() <= fresh.len().
        unsafe {
            self.take_bulk_with(first, lens, batch, |k, addr| {
                *fresh.get_unchecked_mut(k) = addr;
            })
        }
    }

    /// [`Self::take_bulk`] that gives each fresh buffer straight to its
    /// receive descriptor: `descs[k]` (one per length, the descriptors
    /// of `first..`) gets the buffer's device address in quadword 0 and
    /// zero in quadword 1 (the read format of a one-buffer receive
    /// descriptor), with no array of addresses in between.
    #[inline]
    pub fn take_bulk_to_descs(
        &mut self,
        first: usize,
        lens: &[u16],
        batch: &mut Batch,
        descs: &[Desc],
    ) -> usize {
        let lens = &lens[..lens.len().min(descs.len())];
        let descs = descs.as_ptr();
        // SAFETY: `put` is called with k < n <= lens.len() <= descs.len().
        unsafe {
            self.take_bulk_with(first, lens, batch, |k, addr| {
                let desc = &*descs.add(k);
                desc.write_q0(addr);
                desc.write_q1(0);
            })
        }
    }

    /// The work of both `take_bulk`s; `put(k, addr)` hands out the fresh
    /// buffer of descriptor `first + k`.
    ///
    /// # Safety
    /// `put` must be sound to call for every `k < lens.len()`.
    #[inline(always)]
    unsafe fn take_bulk_with(
        &mut self,
        first: usize,
        lens: &[u16],
        batch: &mut Batch,
        mut put: impl FnMut(usize, u64),
    ) -> usize {
        let want = lens.len().min(batch.room());
        if self.cache.ids.len() < want {
            self.cache.refill();
        }
        let n = want.min(self.cache.ids.len());
        let rest = self.cache.ids.len() - n;
        let pool = &self.cache.pool;
        let data_room = self.data_room;
        let mask = self.mask;
        let batch_len = batch.pkts.len();
        // SAFETY: the `n` fresh ids are the last `n` of the cache (they
        // move to the ring: the cache is shortened below); `lens` is at
        // least `n` long, and `put` may be called below its length (the
        // caller's contract); ring slot `(first + k) & mask` is below
        // mask + 1, the length of `ids` (built so in `new`, never
        // resized); the batch has room for `n` more packets after its
        // `batch_len`, written here before its length covers them. Every
        // id taken out of the ring goes to exactly one packet. Nothing in
        // the loop can unwind, so the ring's ids and the cache's never
        // disagree where it shows.
        unsafe {
            let new_ids = self.cache.ids.as_ptr().add(rest);
            let ring_ids = self.ids.as_mut_ptr();
            let out = batch.pkts.as_mut_ptr().add(batch_len);
            // Loaded once: the stores below may not change them, but the
            // compiler cannot tell.
            let handle = pool.borrowed();
            let device_addrs = pool.inner.device_addrs.as_ptr();
            let mut take_one = |k: usize, slot: *mut u32| {
                let new_id = *new_ids.add(k);
                let id = std::ptr::replace(slot, new_id);
                out.add(k).write(PktBuf {
                    // A bitwise copy of a borrowed handle is one more
                    // borrowed handle (never dropped, see `borrowed`).
                    pool: std::ptr::read(&handle),
                    id,
                    offset: HEADROOM as u16,
                    len: usize::from(*lens.get_unchecked(k)).min(data_room) as u16,
                });
                // Entry ids are below `count`, the length of the table.
                put(k, *device_addrs.add(new_id as usize) + HEADROOM as u64);
            };
            let start = first & mask;
            if start + n <= mask + 1 {
                // The usual case, a run that does not wrap: slots
                // `start..start + n`, all below mask + 1.
                let slots = ring_ids.add(start);
                for k in 0..n {
                    take_one(k, slots.add(k));
                }
            } else {
                for k in 0..n {
                    take_one(k, ring_ids.add(first.wrapping_add(k) & mask));
                }
            }
            self.cache.ids.set_len(rest);
            batch.pkts.set_len(batch_len + n);
        }
        n
    }
}

impl RxBuffers {
    #[inline(always)]
    fn slot(&self, i: usize) -> &u32 {
        // SAFETY: `ids` has mask + 1 entries (built so in `new`, never
        // resized), so `i & mask` is in bounds.
        unsafe { self.ids.get_unchecked(i & self.mask) }
    }

    #[inline(always)]
    fn slot_mut(&mut self, i: usize) -> &mut u32 {
        // SAFETY: as in `slot`.
        unsafe { self.ids.get_unchecked_mut(i & self.mask) }
    }
}

impl Drop for RxBuffers {
    /// The buffers go back to the pool: the ring's owner must have
    /// stopped the device writing into them first.
    fn drop(&mut self) {
        for &id in self.ids.iter() {
            self.cache.free_id(id);
        }
    }
}

/// The buffers a transmit ring holds while the device sends them, in
/// ring order: a first-in first-out queue of packets of any pool, one
/// slot per descriptor, put in a batch at a time and freed a group at a
/// time once sent. Buffers of the transmit queue's own pool stay in its
/// cache for the next allocation; others go home under one lock per run
/// of one pool.
pub struct TxBuffers {
    cache: PoolCache,
    /// Slots `oldest..next` (indices wrap) hold packets; the others are
    /// empty.
    slots: Box<[MaybeUninit<PktBuf>]>,
    mask: usize,
    oldest: usize,
    next: usize,
}

impl fmt::Debug for TxBuffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxBuffers")
            .field("pool", &self.cache.pool.name())
            .field("entries", &self.slots.len())
            .field("held", &self.held())
            .finish()
    }
}

impl TxBuffers {
    /// Room for `entries` packets (a power of two), freeing into a cache
    /// of `pool`; `None` if `entries` is not a power of two.
    pub fn new(pool: &Mempool, entries: usize) -> Option<TxBuffers> {
        if !entries.is_power_of_two() {
            return None;
        }
        Some(TxBuffers {
            cache: pool.cache(RING_CACHE),
            slots: (0..entries).map(|_| MaybeUninit::uninit()).collect(),
            mask: entries - 1,
            oldest: 0,
            next: 0,
        })
    }

    /// Packets held.
    #[inline(always)]
    pub fn held(&self) -> usize {
        self.next.wrapping_sub(self.oldest)
    }

    /// Move the first `n` packets of `batch` (fewer if the batch or the
    /// room here is shorter) behind those held, in order; returns how
    /// many moved.
    #[inline]
    pub fn hold_front(&mut self, batch: &mut Batch, n: usize) -> usize {
        let room = self.slots.len() - self.held();
        let n = n.min(batch.len()).min(room);
        let at = self.next & self.mask;
        let first_part = n.min(self.slots.len() - at);
        let pkts = batch.pkts.as_mut_ptr();
        // SAFETY: `n` packets are initialized at the front of the batch
        // and `n` slots are empty from `at` on (wrapping after
        // `first_part`), all in bounds; the packets are moved (copied,
        // then forgotten by the batch: its first `n` are removed with
        // `ptr::copy` of the rest and a shorter length), so each has one
        // owner. No code that could unwind runs in between.
        unsafe {
            let slots = self.slots.as_mut_ptr().cast::<PktBuf>();
            std::ptr::copy_nonoverlapping(pkts, slots.add(at), first_part);
            // The two copies below are usually empty (no wrap, the whole
            // batch sent): a library call each for nothing otherwise.
            if n > first_part {
                std::ptr::copy_nonoverlapping(pkts.add(first_part), slots, n - first_part);
            }
            let rest = batch.pkts.len() - n;
            if rest > 0 {
                std::ptr::copy(pkts.add(n), pkts, rest);
            }
            batch.pkts.set_len(rest);
        }
        self.next = self.next.wrapping_add(n);
        n
    }

    /// Free the `n` oldest packets held (fewer if fewer are held): the
    /// device has sent them.
    pub fn free_oldest(&mut self, n: usize) {
        let n = n.min(self.held());
        let at = self.oldest & self.mask;
        let first_part = n.min(self.slots.len() - at);
        let slots = self.slots.as_ptr().cast::<PktBuf>();
        // SAFETY: slots `at..at + first_part` and `0..n - first_part`
        // hold packets (they are among the `held` from `oldest`), and
        // become empty: `oldest` moves past them before anything else
        // can run, and `free_all` neither unwinds nor uses them twice.
        unsafe {
            let (a, b) = (slots.add(at), slots);
            self.oldest = self.oldest.wrapping_add(n);
            self.cache.free_all(a, first_part);
            self.cache.free_all(b, n - first_part);
        }
    }

    /// The pool freed buffers are cached for.
    pub fn pool(&self) -> &Mempool {
        &self.cache.pool
    }
}

impl Drop for TxBuffers {
    /// The packets still held go home: the ring's owner must have let
    /// the device finish with them (or stopped it) first.
    fn drop(&mut self) {
        self.free_oldest(self.held());
    }
}
