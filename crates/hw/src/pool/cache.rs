//! The per-core cache of free entry ids, and the runs of freed buffers
//! of another pool that go home under one lock.

use super::batch::Batch;
use super::mempool::{give_back, Mempool};
use super::pktbuf::PktBuf;
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};

/// Ids moved between a [`PoolCache`] and the shared stack at once, at
/// least (2 under loom, so a handful of ids runs through refill and
/// spill).
pub(super) const CACHE_CHUNK: usize = if cfg!(loom) { 2 } else { 32 };

impl Mempool {
    /// A per-core cache for this pool, keeping about `size` ids.
    pub fn cache(&self, size: usize) -> PoolCache {
        let limit = size.max(CACHE_CHUNK);
        PoolCache {
            pool: self.clone(),
            ids: Vec::with_capacity(limit * 2),
            limit,
        }
    }
}

/// A per-core stack of free entry ids (no lock and no atomic operation
/// per packet).
pub struct PoolCache {
    pub(super) pool: Mempool,
    pub(super) ids: Vec<u32>,
    limit: usize,
}

impl fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache")
            .field("pool", &self.pool.name())
            .field("cached", &self.ids.len())
            .finish()
    }
}

impl PoolCache {
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// Take one buffer, refilling from the shared stack when empty.
    #[inline]
    pub fn alloc(&mut self) -> Option<PktBuf> {
        let id = self.alloc_id()?;
        Some(self.pool.make(id))
    }

    /// Take one buffer holding `len` bytes at the default headroom (at
    /// most [`Mempool::data_room`]), as a receive path that wrote them
    /// would ([`PktBuf::set_received`]), built in one piece. Not
    /// `alloc` then a setter: a handle written field by field and then
    /// moved whole into a batch is a narrow store read back by a wide
    /// load, which the store buffer cannot forward (a stall per packet
    /// on AMD Zen: `bench pipeline` PortInc -> PortOut lost ~10 cycles
    /// per packet to it).
    #[inline(always)]
    pub fn alloc_received(&mut self, len: usize) -> Option<PktBuf> {
        let id = self.alloc_id()?;
        let mut p = self.pool.make(id);
        p.len = len.min(self.pool.data_room()) as u16;
        Some(p)
    }

    /// Take one buffer holding a copy of `bytes` (at most
    /// [`Mempool::data_room`], else `None`, nothing taken), built in one
    /// piece as [`Self::alloc_received`] is: a fresh buffer is never
    /// chained, so nothing here takes the handle's address.
    #[inline(always)]
    pub fn alloc_copy(&mut self, bytes: &[u8]) -> Option<PktBuf> {
        if bytes.len() > self.pool.data_room() {
            return None;
        }
        let id = self.alloc_id()?;
        let len = bytes.len() as u16;
        {
            // A view of entry `id` for the copy, forgotten after it: the
            // handle returned is made after the copy's call, from scalars
            // (one made before would be spilled across the call field by
            // field and reloaded whole: the stall above).
            let mut view = std::mem::ManuallyDrop::new(self.pool.make(id));
            view.len = len;
            view.data_mut().copy_from_slice(bytes);
        }
        let mut p = self.pool.make(id);
        p.len = len;
        Some(p)
    }

    /// Return a buffer. A buffer of another pool goes straight home.
    #[inline]
    pub fn free(&mut self, buf: PktBuf) {
        if !buf.pool.same(&self.pool) {
            drop(buf);
            return;
        }
        let id = buf.into_id();
        self.free_id(id);
    }

    /// Return many buffers. Those of this pool stay in the cache; the
    /// others go home under one lock per run of buffers of one pool (a
    /// queue forwarding from another port frees nothing but those).
    pub fn free_bulk(&mut self, bufs: impl Iterator<Item = PktBuf>) {
        let mut run = ForeignRun::default();
        for buf in bufs {
            self.free_into(buf, &mut run);
        }
        run.flush();
    }

    /// Free every packet of `batch`, leaving it empty: runs of this
    /// pool's packets go to the cache, runs of another pool home under
    /// one lock each (as a transmit ring frees what it sent).
    pub fn free_batch(&mut self, batch: &mut Batch) {
        let n = batch.pkts.len();
        let bufs = batch.pkts.as_ptr();
        // SAFETY: the batch's `n` packets are initialized; its length is
        // 0 before they are read, so it never drops or hands out them
        // again, and `free_all` neither unwinds nor uses them twice.
        unsafe {
            batch.pkts.set_len(0);
            self.free_all(bufs, n);
        }
    }

    /// One buffer of [`Self::free_bulk`]: kept if it is this pool's,
    /// else added to `run` (flushed first if it is another pool's run or
    /// full).
    #[inline(always)]
    fn free_into(&mut self, buf: PktBuf, run: &mut ForeignRun) {
        if buf.pool.same(&self.pool) {
            let id = buf.into_id();
            self.free_id(id);
        } else {
            run.add(buf);
        }
    }

    /// Free the `n` packets at `bufs`, which the caller gives up (reads
    /// them, then never uses or drops them again). One comparison and
    /// one store per packet while they are of one pool; each run of one
    /// pool goes to the cache (this pool) or home (others) at once.
    ///
    /// # Safety
    /// `bufs..bufs + n` are initialized packets the caller owns and
    /// forgets.
    #[inline]
    pub(super) unsafe fn free_all(&mut self, bufs: *const PktBuf, n: usize) {
        let mut k = 0;
        while k < n {
            // SAFETY: k < n (caller's contract).
            let pool = unsafe { &(*bufs.add(k)).pool };
            let mut ids = [MaybeUninit::<u32>::uninit(); CACHE_CHUNK];
            let run = (n - k).min(CACHE_CHUNK);
            let mut len = 0;
            while len < run {
                // SAFETY: k + len < n.
                let buf = unsafe { &*bufs.add(k + len) };
                if !buf.pool.same(pool) {
                    break;
                }
                ids[len].write(buf.id());
                len += 1;
            }
            // One load per run, and none of the pool's while no packet of
            // the process was ever chained.
            if super::pktbuf::chains_used()
                && pool
                    .inner
                    .chains_out
                    .load(std::sync::atomic::Ordering::Relaxed)
                    != 0
            {
                // SAFETY: k + len <= n.
                let run = unsafe { std::slice::from_raw_parts(bufs.add(k), len) };
                super::chain_edit::free_tails_of(run);
            }
            // SAFETY: the first `len` ids were written just above.
            let ids = unsafe { std::slice::from_raw_parts(ids.as_ptr().cast::<u32>(), len) };
            // The run's ids now belong to `ids`: the packets are forgotten.
            if pool.same(&self.pool) {
                self.free_ids(ids);
            } else {
                give_back(pool, ids);
            }
            k += len;
        }
    }

    /// Ids currently cached.
    pub fn cached(&self) -> usize {
        self.ids.len()
    }

    /// An entry id of this pool for the caller to own, refilling from the
    /// shared stack when empty.
    #[inline(always)]
    pub(super) fn alloc_id(&mut self) -> Option<u32> {
        if self.ids.is_empty() {
            self.refill();
        }
        self.ids.pop()
    }

    /// Take back an entry id the caller owned.
    #[inline(always)]
    pub(super) fn free_id(&mut self, id: u32) {
        if self.ids.len() >= 2 * self.limit {
            self.spill();
        }
        // Never reallocates: spilling keeps the length below the
        // capacity of 2 * limit.
        self.ids.push(id);
    }

    /// Take back entry ids the caller owned, at most `2 * limit`.
    #[inline(always)]
    fn free_ids(&mut self, ids: &[u32]) {
        if self.ids.len() + ids.len() > 2 * self.limit {
            self.spill();
        }
        // Never reallocates: after spilling, `limit` ids are cached.
        self.ids.extend_from_slice(ids);
    }

    /// Refill from the shared stack up to `2 * limit` ids (the most the
    /// cache keeps), at most `4 * CACHE_CHUNK` at a time. A receive
    /// ring's cache (`RING_CACHE`), which only allocates, so goes to the
    /// stack once per 128 buffers, as a ring-sized one did, and still
    /// keeps no more than `2 * RING_CACHE`.
    #[cold]
    pub(super) fn refill(&mut self) {
        let want = (2 * self.limit)
            .saturating_sub(self.ids.len())
            .min(CACHE_CHUNK * 4);
        let inner = &self.pool.inner;
        inner.free.lock().take(inner, want, &mut self.ids);
    }

    #[cold]
    fn spill(&mut self) {
        let keep = self.limit;
        give_back(&self.pool, &self.ids[keep..]);
        self.ids.truncate(keep);
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        give_back(&self.pool, &self.ids);
        self.ids.clear();
    }
}

/// Ids of consecutive freed buffers of one pool, returned under one lock.
#[derive(Default)]
pub(super) struct ForeignRun {
    /// The pool of the ids, borrowed like a buffer's (the ids are out of
    /// its stack, so it is alive).
    pool: Option<ManuallyDrop<Mempool>>,
    ids: [u32; CACHE_CHUNK],
    len: usize,
}

impl ForeignRun {
    /// Add a buffer: to this run if it is of the run's pool and there is
    /// room, else to a new run after flushing this one.
    #[inline(always)]
    pub(super) fn add(&mut self, buf: PktBuf) {
        let fits = self.len < CACHE_CHUNK && self.pool.as_ref().is_some_and(|p| p.same(&buf.pool));
        if !fits {
            self.flush();
            self.pool = Some(buf.pool.borrowed());
        }
        self.ids[self.len % CACHE_CHUNK] = buf.into_id();
        self.len += 1;
    }

    pub(super) fn flush(&mut self) {
        if let Some(pool) = &self.pool {
            give_back(pool, &self.ids[..self.len.min(CACHE_CHUNK)]);
        }
        self.pool = None;
        self.len = 0;
    }
}
