//! The DMA packet-buffer pool of the queue model (ixy/DPDK style).
//!
//! A [`Mempool`] carves DMA memory into fixed-size entries. Each entry is
//! `HEADROOM` bytes of headroom followed by the data room; the device
//! address of every entry is computed once at creation. Per-packet
//! metadata ([`META_SIZE`] bytes, for pipeline attributes) lives in
//! ordinary memory beside the pool, where no device can touch it.
//!
//! Free entries sit in a stack of entry ids shared by all cores, behind
//! a mutex. Hot paths (a driver queue refilling its ring, cleaning
//! transmitted buffers) go through a per-core [`PoolCache`]: a plain stack
//! of entry ids, refilled from and spilled to the shared stack in chunks
//! under one lock each, so cores do not contend, and take no lock, per
//! packet. (A hand-written stack rather than a lock-free queue such as
//! crossbeam's `ArrayQueue`: those move one id per atomic operation, and
//! the bulk moves are what keeps the per-packet cost low.) A [`PktBuf`]
//! dropped anywhere returns to the shared stack.
//!
//! A packet buffer does not count as a reference to its pool: making,
//! moving, freeing a [`PktBuf`] touches no reference count (an atomic
//! operation per packet, twice). Instead the shared stack, which knows
//! exactly when every id is home, holds one pool handle for all the
//! buffers while any id is out, and lets go of it when the last one comes
//! back. The pool's memory therefore outlives every buffer, whichever of
//! the pool's handles and buffers goes last.
//!
//! A receive ring lends its buffers to the device as entry ids only
//! ([`RxBuffers`]): the [`PktBuf`] is made when a packet arrives. A
//! transmit ring holds the buffers it sends in a [`TxBuffers`] and frees
//! them in groups.

use crate::dma::{DmaAllocator, DmaRegion};
use crate::error::HwError;
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::sync::Arc;

/// Bytes reserved in front of the packet data of every buffer, for
/// encapsulation headers (VXLAN, VirtIO net header, ...).
pub const HEADROOM: usize = 128;
/// Bytes of per-packet metadata for pipeline attributes.
pub const META_SIZE: usize = 128;
/// Default entry size: 2 KiB, as ixy and TinyNF use.
pub const DEFAULT_BUF_SIZE: usize = 2048;
/// Maximum packets in a [`Batch`].
pub const MAX_BATCH: usize = 64;
/// Ids moved between a [`PoolCache`] and the shared stack at once, at
/// least.
const CACHE_CHUNK: usize = 32;

struct Inner {
    region: DmaRegion,
    buf_size: usize,
    /// log2(buf_size).
    buf_shift: u32,
    count: u32,
    /// Device address of each entry's first byte.
    device_addrs: Box<[u64]>,
    free: Mutex<FreeStack>,
    meta: Box<[UnsafeCell<[u8; META_SIZE]>]>,
    name: String,
}

// SAFETY: each metadata slot is only accessed through the PktBuf that
// owns the corresponding entry id, and an id has at most one owner.
unsafe impl Sync for Inner {}
// SAFETY: as above; the region is Send.
unsafe impl Send for Inner {}

/// The shared stack of free entry ids, and the handle that keeps the
/// pool alive while any id is out of it.
struct FreeStack {
    /// Free entry ids; capacity `count` from the start, so pushing never
    /// allocates (an id is in at most one place at a time).
    ids: Vec<u32>,
    count: usize,
    /// A handle on the pool, held while some id is out of the stack (in
    /// a [`PktBuf`], a cache, a ring): buffers borrow the pool without a
    /// reference count, so this one count stands for all of them. A
    /// cycle (the pool holding itself) that the last id coming home
    /// breaks.
    keepalive: Option<Arc<Inner>>,
}

impl FreeStack {
    /// Move up to `n` ids to `out`, in stack order (the last pushed goes
    /// out last). `pool` is the stack's own pool.
    #[inline]
    fn take(&mut self, pool: &Arc<Inner>, n: usize, out: &mut impl Extend<u32>) -> usize {
        let n = n.min(self.ids.len());
        if n > 0 && self.keepalive.is_none() {
            self.keepalive = Some(pool.clone());
        }
        let from = self.ids.len() - n;
        out.extend(self.ids.drain(from..));
        n
    }

    /// Take back `ids`. When that brings every id home, the keep-alive
    /// handle is returned: the caller drops it after unlocking (it may
    /// be the last handle, and free the pool with its lock).
    #[inline]
    #[must_use = "drop the keep-alive handle after unlocking"]
    fn give_back(&mut self, ids: &[u32]) -> Option<Arc<Inner>> {
        // Never reallocates: the stack has room for every id, and holds
        // each at most once.
        self.ids.extend_from_slice(ids);
        if self.ids.len() >= self.count {
            self.keepalive.take()
        } else {
            None
        }
    }
}

/// Return `ids` to the shared stack of `pool`, under one lock.
#[inline]
fn give_back(pool: &Mempool, ids: &[u32]) {
    let last_handle = pool.inner.free.lock().give_back(ids);
    // Unlocked; `pool` may be a borrowed handle that this frees, and is
    // not used again.
    drop(last_handle);
}

/// A pool of DMA packet buffers. Cheap to clone (shared).
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<Inner>,
}

impl fmt::Debug for Mempool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("count", &self.inner.count)
            .field("buf_size", &self.inner.buf_size)
            .field("free", &self.free_count())
            .finish()
    }
}

impl Mempool {
    /// A pool of `count` buffers of `buf_size` bytes (a power of two from
    /// 512 to the allocator's page size; headroom included).
    pub fn new(
        dma: &dyn DmaAllocator,
        name: &str,
        count: usize,
        buf_size: usize,
    ) -> Result<Mempool, HwError> {
        if !buf_size.is_power_of_two() || buf_size < 512 || buf_size > dma.page_size() {
            return Err(HwError::Invalid(format!(
                "pool `{name}`: buffer size {buf_size} must be a power of two between 512 and {}",
                dma.page_size()
            )));
        }
        if count == 0 || count > u32::MAX as usize / 2 {
            return Err(HwError::Invalid(format!(
                "pool `{name}`: bad buffer count {count}"
            )));
        }
        let region = dma.allocate(count * buf_size, false)?;
        // Entries are a power of two no larger than a page, so none
        // straddles a page: each has one device address.
        let device_addrs = (0..count)
            .map(|i| region.device_addr_at(i * buf_size))
            .collect();
        // Popped from the end: entry 0 goes out first.
        let free = Mutex::new(FreeStack {
            ids: (0..count as u32).rev().collect(),
            count,
            keepalive: None,
        });
        let meta = (0..count)
            .map(|_| UnsafeCell::new([0u8; META_SIZE]))
            .collect();
        Ok(Mempool {
            inner: Arc::new(Inner {
                region,
                buf_size,
                buf_shift: buf_size.trailing_zeros(),
                count: count as u32,
                device_addrs,
                free,
                meta,
                name: name.to_string(),
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// Total buffers.
    pub fn capacity(&self) -> usize {
        self.inner.count as usize
    }
    /// Buffers currently in the shared free queue (not counting buffers
    /// held in per-core caches).
    pub fn free_count(&self) -> usize {
        self.inner.free.lock().ids.len()
    }
    /// Entry size (headroom + data room).
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }
    /// Largest packet a buffer holds.
    pub fn data_room(&self) -> usize {
        self.inner.buf_size - HEADROOM
    }

    /// Take one buffer from the shared stack.
    pub fn alloc(&self) -> Option<PktBuf> {
        let mut id = [0u32; 1];
        let mut got = IdArray::new(&mut id);
        self.inner.free.lock().take(&self.inner, 1, &mut got);
        (got.len == 1).then(|| self.make(id[0]))
    }

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

    /// A per-core cache for this pool, keeping about `size` ids.
    pub fn cache(&self, size: usize) -> PoolCache {
        let limit = size.max(CACHE_CHUNK);
        PoolCache {
            pool: self.clone(),
            ids: Vec::with_capacity(limit * 2),
            limit,
        }
    }

    /// A copy of this handle that holds no reference count, for a buffer
    /// of this pool; it must never be dropped (hence `ManuallyDrop`).
    #[inline(always)]
    fn borrowed(&self) -> ManuallyDrop<Mempool> {
        // SAFETY: a bitwise copy of the `Arc` that is never dropped, so
        // the count stays balanced. It is only used while its buffer's id
        // is out of the shared stack, and meanwhile the stack's
        // keep-alive handle keeps the pool allocated (see `FreeStack`).
        ManuallyDrop::new(unsafe { std::ptr::read(self) })
    }

    #[inline(always)]
    fn make(&self, id: u32) -> PktBuf {
        PktBuf {
            pool: self.borrowed(),
            id,
            offset: HEADROOM as u16,
            len: 0,
        }
    }

    /// Device address of the first byte of entry `id` (< count).
    #[inline(always)]
    fn entry_device_addr(&self, id: u32) -> u64 {
        debug_assert!(id < self.inner.count);
        // SAFETY: every id in circulation is below `count`, the length of
        // `device_addrs` (ids come only from the pool's own stack).
        unsafe { *self.inner.device_addrs.get_unchecked(id as usize) }
    }

    /// Whether `other` is a handle on the same pool.
    #[inline(always)]
    pub fn same(&self, other: &Mempool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Fixed room for ids taken under one lock, as an `Extend` target.
struct IdArray<'a> {
    ids: &'a mut [u32],
    len: usize,
}

impl<'a> IdArray<'a> {
    fn new(ids: &'a mut [u32]) -> Self {
        IdArray { ids, len: 0 }
    }
}

impl Extend<u32> for IdArray<'_> {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for id in iter {
            if let Some(slot) = self.ids.get_mut(self.len) {
                *slot = id;
                self.len += 1;
            }
        }
    }
}

/// A per-core stack of free entry ids (no lock and no atomic operation
/// per packet).
pub struct PoolCache {
    pool: Mempool,
    ids: Vec<u32>,
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
    unsafe fn free_all(&mut self, bufs: *const PktBuf, n: usize) {
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
                ids[len].write(buf.id);
                len += 1;
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
    fn alloc_id(&mut self) -> Option<u32> {
        if self.ids.is_empty() {
            self.refill();
        }
        self.ids.pop()
    }

    /// Take back an entry id the caller owned.
    #[inline(always)]
    fn free_id(&mut self, id: u32) {
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

    #[cold]
    fn refill(&mut self) {
        let want = self.limit.min(CACHE_CHUNK * 4);
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
struct ForeignRun {
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
    fn add(&mut self, buf: PktBuf) {
        let fits = self.len < CACHE_CHUNK && self.pool.as_ref().is_some_and(|p| p.same(&buf.pool));
        if !fits {
            self.flush();
            self.pool = Some(buf.pool.borrowed());
        }
        self.ids[self.len % CACHE_CHUNK] = buf.into_id();
        self.len += 1;
    }

    fn flush(&mut self) {
        if let Some(pool) = &self.pool {
            give_back(pool, &self.ids[..self.len.min(CACHE_CHUNK)]);
        }
        self.pool = None;
        self.len = 0;
    }
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
        let mut cache = pool.cache(entries.max(MAX_BATCH * 2));
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
        let want = lens.len().min(batch.room()).min(fresh.len());
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
        // move to the ring: the cache is shortened below); `lens` and
        // `fresh` are at least `n` long; ring slot `(first + k) & mask` is
        // below mask + 1, the length of `ids` (built so in `new`, never
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
            for k in 0..n {
                let new_id = *new_ids.add(k);
                let slot = ring_ids.add(first.wrapping_add(k) & mask);
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
                *fresh.get_unchecked_mut(k) = *device_addrs.add(new_id as usize) + HEADROOM as u64;
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
            cache: pool.cache(entries.max(MAX_BATCH * 2)),
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
            std::ptr::copy_nonoverlapping(pkts.add(first_part), slots, n - first_part);
            let rest = batch.pkts.len() - n;
            std::ptr::copy(pkts.add(n), pkts, rest);
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

/// One packet in a DMA buffer of a [`Mempool`]. Dropping it returns the
/// buffer to its pool.
pub struct PktBuf {
    /// The pool, borrowed: no reference count (the pool's shared stack
    /// keeps it alive while this buffer is out, see `FreeStack`).
    pool: ManuallyDrop<Mempool>,
    id: u32,
    /// Offset of the first data byte within the entry.
    offset: u16,
    len: u16,
}

impl fmt::Debug for PktBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PktBuf")
            .field("pool", &self.pool.name())
            .field("id", &self.id)
            .field("len", &self.len)
            .finish()
    }
}

/// Error from resizing a packet beyond its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("packet length {requested} does not fit in the buffer ({available} bytes available)")]
pub struct NoRoom {
    pub requested: usize,
    pub available: usize,
}

impl PktBuf {
    #[inline(always)]
    fn entry_start(&self) -> usize {
        (self.id as usize) << self.pool.inner.buf_shift
    }

    /// Give up ownership without returning the entry: the caller now
    /// owns `id`.
    #[inline(always)]
    fn into_id(self) -> u32 {
        ManuallyDrop::new(self).id
    }

    /// Start of the packet bytes, in memory.
    #[inline(always)]
    fn data_ptr(&self) -> *mut u8 {
        let start = self.entry_start() + self.offset as usize;
        debug_assert!(start + self.len as usize <= self.pool.inner.region.len());
        // SAFETY: id < count and offset + len <= buf_size are invariants
        // of every PktBuf (ids come from the pool; each method that moves
        // offset or len checks against the buffer), so the bytes
        // `start..start + len` lie in the pool's region.
        unsafe { self.pool.inner.region.as_ptr().add(start) }
    }

    /// The pool this buffer belongs to.
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }
    /// Entry index within the pool.
    pub fn id(&self) -> u32 {
        self.id
    }
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes free in front of the data.
    pub fn headroom(&self) -> usize {
        self.offset as usize
    }
    /// Bytes free after the data.
    pub fn tailroom(&self) -> usize {
        self.pool.inner.buf_size - self.offset as usize - self.len as usize
    }

    /// Device address of the first data byte.
    #[inline(always)]
    pub fn device_addr(&self) -> u64 {
        self.pool.entry_device_addr(self.id) + self.offset as u64
    }

    /// Device address where received data should land (start of the data
    /// room, after the default headroom).
    #[inline(always)]
    pub fn rx_device_addr(&self) -> u64 {
        self.pool.entry_device_addr(self.id) + HEADROOM as u64
    }

    /// The packet bytes.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        // SAFETY: in the region (see `data_ptr`); this PktBuf is the only
        // owner of entry `id` and `&self` excludes `&mut` access through it.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len as usize) }
    }

    /// The packet bytes, mutable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: in the region (see `data_ptr`); this PktBuf is the only
        // owner of entry `id`, so no other reference to these bytes exists
        // on the CPU side, and a device only touches an entry while a
        // driver ring owns it.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), self.len as usize) }
    }

    /// Set the packet length (data start unchanged).
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<(), NoRoom> {
        let available = self.pool.inner.buf_size - self.offset as usize;
        if len > available {
            return Err(NoRoom {
                requested: len,
                available,
            });
        }
        self.len = len as u16;
        Ok(())
    }

    /// Reset to an empty packet at the default headroom (for reception).
    #[inline(always)]
    pub fn reset(&mut self) {
        self.offset = HEADROOM as u16;
        self.len = 0;
    }

    /// Set length after a device wrote `len` bytes at [`Self::rx_device_addr`].
    #[inline(always)]
    pub fn set_received(&mut self, len: usize) {
        self.offset = HEADROOM as u16;
        self.len = len.min(self.pool.inner.buf_size - HEADROOM) as u16;
    }

    /// Grow the packet at the front by `n` bytes; returns the new bytes.
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], NoRoom> {
        if n > self.offset as usize {
            return Err(NoRoom {
                requested: n,
                available: self.offset as usize,
            });
        }
        self.offset -= n as u16;
        self.len += n as u16;
        Ok(&mut self.data_mut()[..n])
    }

    /// Remove `n` bytes from the front.
    pub fn adj(&mut self, n: usize) -> Result<(), NoRoom> {
        if n > self.len as usize {
            return Err(NoRoom {
                requested: n,
                available: self.len as usize,
            });
        }
        self.offset += n as u16;
        self.len -= n as u16;
        Ok(())
    }

    /// Append `bytes` at the end.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), NoRoom> {
        let old = self.len();
        self.set_len(old + bytes.len())?;
        self.data_mut()[old..].copy_from_slice(bytes);
        Ok(())
    }

    /// Replace the contents with `bytes`.
    pub fn copy_from(&mut self, bytes: &[u8]) -> Result<(), NoRoom> {
        self.set_len(bytes.len())?;
        self.data_mut().copy_from_slice(bytes);
        Ok(())
    }

    /// Per-packet metadata (pipeline attributes).
    #[inline(always)]
    pub fn metadata(&self) -> &[u8; META_SIZE] {
        // SAFETY: slot `id` belongs to this PktBuf alone (see Inner).
        unsafe { &*self.pool.inner.meta[self.id as usize].get() }
    }

    /// Per-packet metadata, mutable.
    #[inline(always)]
    pub fn metadata_mut(&mut self) -> &mut [u8; META_SIZE] {
        // SAFETY: slot `id` belongs to this PktBuf alone, and `&mut self`
        // excludes other references through it.
        unsafe { &mut *self.pool.inner.meta[self.id as usize].get() }
    }

    /// Allocate a new buffer from the same pool holding a copy of this
    /// packet (for replication).
    pub fn try_clone(&self) -> Option<PktBuf> {
        let mut b = self.pool.alloc()?;
        b.copy_from(self.data()).ok()?;
        *b.metadata_mut() = *self.metadata();
        Some(b)
    }
}

impl Drop for PktBuf {
    fn drop(&mut self) {
        give_back(&self.pool, &[self.id]);
    }
}

/// A fixed-capacity batch of packets ([`MAX_BATCH`]); never allocates
/// after creation.
pub struct Batch {
    pkts: Vec<PktBuf>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimDma;

    #[test]
    fn buffers_return_to_their_pool() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "t", 64, 2048).unwrap();
        let mut b = pool.alloc().unwrap();
        b.copy_from(&[1, 2, 3, 4]).unwrap();
        assert_eq!(b.data(), &[1, 2, 3, 4]);
        b.prepend(2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4]);
        b.adj(3).unwrap();
        assert_eq!(b.data(), &[2, 3, 4]);
        assert_eq!(b.device_addr() - b.rx_device_addr(), 1);
        assert_eq!(pool.free_count(), 63);
        drop(b);
        assert_eq!(pool.free_count(), 64);
        let mut cache = pool.cache(32);
        let bufs: Vec<_> = (0..64).map(|_| cache.alloc().unwrap()).collect();
        assert!(cache.alloc().is_none());
        for b in bufs {
            cache.free(b);
        }
        drop(cache);
        assert_eq!(pool.free_count(), 64);
    }

    #[test]
    fn resizing_past_the_buffer_is_an_error() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "t", 4, 2048).unwrap();
        let mut b = pool.alloc().unwrap();
        assert!(b.set_len(2048 - HEADROOM).is_ok());
        assert!(b.set_len(2048 - HEADROOM + 1).is_err());
        assert!(b.prepend(HEADROOM + 1).is_err());
        assert!(Mempool::new(&*dma, "bad", 4, 1000).is_err());
    }

    #[test]
    fn rx_buffers_lend_by_id_and_go_home() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "rx", 512, 2048).unwrap();
        let mut ring = RxBuffers::new(&pool, 128).unwrap();
        let before = ring.rx_device_addr(5);
        assert_eq!(ring.rx_device_addr(5 + 128), before, "indices wrap");
        let (pkt, fresh) = ring.take(5, 60).unwrap();
        assert_eq!(pkt.len(), 60);
        assert_eq!(pkt.rx_device_addr(), before);
        assert_eq!(ring.rx_device_addr(5), fresh);
        assert_ne!(fresh, before);
        assert!(RxBuffers::new(&pool, 1000).is_none(), "not a power of two");
        drop(pkt);
        drop(ring);
        assert_eq!(pool.free_count(), 512);
        assert_eq!(Arc::strong_count(&pool.inner), 1, "no handle leaked");
    }

    #[test]
    fn bulk_free_sends_foreign_buffers_home_and_keeps_own() {
        let dma = SimDma::new();
        let mine = Mempool::new(&*dma, "mine", 64, 2048).unwrap();
        let theirs = Mempool::new(&*dma, "theirs", 64, 2048).unwrap();
        let mut cache = mine.cache(32);
        let bufs: Vec<PktBuf> = (0..40)
            .map(|i| {
                if i % 3 == 0 {
                    mine.alloc()
                } else {
                    theirs.alloc()
                }
                .unwrap()
            })
            .collect();
        let own = bufs.iter().filter(|b| b.pool().same(&mine)).count();
        cache.free_bulk(bufs.into_iter());
        assert_eq!(theirs.free_count(), 64, "foreign buffers went home");
        assert_eq!(cache.cached(), own);
        let again: Vec<PktBuf> = (0..own).map(|_| cache.alloc().unwrap()).collect();
        drop(again);
        drop(cache);
        assert_eq!(mine.free_count(), 64);
        assert_eq!(Arc::strong_count(&mine.inner), 1, "no handle leaked");
        assert_eq!(Arc::strong_count(&theirs.inner), 1, "no handle leaked");
    }

    #[test]
    fn a_cleared_or_dropped_batch_sends_every_buffer_home() {
        let dma = SimDma::new();
        let a = Mempool::new(&*dma, "a", 200, 2048).unwrap();
        let b = Mempool::new(&*dma, "b", 200, 2048).unwrap();
        let fill = |batch: &mut Batch| {
            // Runs of one pool, alternating, and runs longer than a chunk.
            for i in 0..MAX_BATCH {
                let pool = if (i / 3) % 2 == 0 || i > 40 { &a } else { &b };
                assert!(batch.push(pool.alloc().unwrap()).is_none());
            }
        };
        let mut batch = Batch::new();
        fill(&mut batch);
        assert!(a.free_count() < 200 && b.free_count() < 200);
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!((a.free_count(), b.free_count()), (200, 200));
        fill(&mut batch);
        drop(batch);
        assert_eq!((a.free_count(), b.free_count()), (200, 200));
    }

    #[test]
    fn buffers_keep_their_pool_alive_without_counting() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "gone", 8, 2048).unwrap();
        let weak = Arc::downgrade(&pool.inner);
        let mut a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        assert_eq!(
            Arc::strong_count(&pool.inner),
            2,
            "one keep-alive for all the buffers out"
        );
        drop(pool);
        a.copy_from(&[7; 60]).unwrap();
        assert_eq!(a.data(), &[7; 60][..], "the memory is still there");
        drop(a);
        assert!(weak.upgrade().is_some(), "one buffer is still out");
        drop(b);
        assert!(
            weak.upgrade().is_none(),
            "the last buffer home frees the pool"
        );
    }

    #[test]
    fn tx_buffers_free_own_to_the_cache_and_foreign_home() {
        let dma = SimDma::new();
        let mine = Mempool::new(&*dma, "mine", 64, 2048).unwrap();
        let theirs = Mempool::new(&*dma, "theirs", 64, 2048).unwrap();
        let mut tx = TxBuffers::new(&mine, 16).unwrap();
        assert!(TxBuffers::new(&mine, 12).is_none());
        let mut batch = Batch::new();
        let fill = |batch: &mut Batch, n: usize, from: u16| {
            for k in 0..n as u16 {
                let pool = if (from + k).is_multiple_of(4) {
                    &mine
                } else {
                    &theirs
                };
                let mut p = pool.alloc().unwrap();
                p.copy_from(&(from + k).to_le_bytes()).unwrap();
                batch.push(p);
            }
        };
        // Around the ring five times: slots wrap.
        let mut next_seq = 0u16;
        for round in 0..6 {
            fill(&mut batch, 10, next_seq + 3);
            fill(&mut batch, 3, next_seq);
            assert_eq!(tx.hold_front(&mut batch, 13), 13, "round {round}");
            assert!(batch.is_empty());
            assert_eq!(tx.held(), 13);
            tx.free_oldest(5);
            tx.free_oldest(8);
            assert_eq!(tx.held(), 0);
            next_seq += 13;
        }
        // Room is bounded; what does not fit stays in the batch, in order.
        fill(&mut batch, 20, 0);
        assert_eq!(tx.hold_front(&mut batch, 20), 16);
        assert_eq!(batch.len(), 4);
        assert_eq!(batch[0].data(), &16u16.to_le_bytes());
        drop(batch);
        tx.free_oldest(3);
        drop(tx);
        assert_eq!(theirs.free_count(), 64, "foreign buffers went home");
        assert_eq!(mine.free_count(), 64);
        assert_eq!(Arc::strong_count(&mine.inner), 1, "no handle leaked");
        assert_eq!(Arc::strong_count(&theirs.inner), 1, "no handle leaked");
    }

    #[test]
    fn rx_buffers_take_in_bulk() {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "rx", 160, 2048).unwrap();
        let mut ring = RxBuffers::new(&pool, 128).unwrap();
        let lent: Vec<u64> = (120..130).map(|i| ring.rx_device_addr(i)).collect();
        let mut batch = Batch::new();
        let mut fresh = [0u64; MAX_BATCH];
        // Ten descriptors from 120, wrapping at 128; one length too long.
        let lens: Vec<u16> = (0..10).map(|k| 60 + k).chain([5000]).collect();
        let n = ring.take_bulk(120, &lens[..10], &mut batch, &mut fresh);
        assert_eq!(n, 10);
        for (k, pkt) in batch.iter().enumerate() {
            assert_eq!(pkt.len(), 60 + k);
            assert_eq!(pkt.rx_device_addr(), lent[k]);
            assert_eq!(ring.rx_device_addr(120 + k), fresh[k]);
        }
        let n = ring.take_bulk(130, &lens[10..], &mut batch, &mut fresh);
        assert_eq!(
            (n, batch[10].len()),
            (1, 2048 - HEADROOM),
            "clamped to the data room"
        );
        // The pool runs dry: 160 - 128 - 11 = 21 more at most.
        let many = [60u16; MAX_BATCH];
        let mut more = Batch::new();
        assert_eq!(ring.take_bulk(0, &many, &mut more, &mut fresh), 21);
        assert_eq!(ring.take_bulk(0, &many, &mut Batch::new(), &mut fresh), 0);
        drop((batch, more, ring));
        assert_eq!(pool.free_count(), 160);
        assert_eq!(Arc::strong_count(&pool.inner), 1, "no handle leaked");
    }

    #[test]
    fn desc_ring_and_slots_check_their_shape_once() {
        use crate::dma::{DescRing, DmaSlots};
        use crate::DmaAllocator;
        let dma = SimDma::new();
        let ring = DescRing::new(dma.allocate(4096, true).unwrap(), 256).unwrap();
        ring.write_q1(3, 7);
        assert_eq!(ring.read_q1(3 + 256), 7, "indices wrap");
        assert_eq!(ring.desc(259).read_q1(), 7);
        assert!(DescRing::new(dma.allocate(4096, true).unwrap(), 512).is_err());
        assert!(DescRing::new(dma.allocate(4096, true).unwrap(), 100).is_err());
        let mut slots = DmaSlots::<2048>::new(dma.allocate(8192, false).unwrap(), 4).unwrap();
        slots.slot_mut(1)[0] = 9;
        assert_eq!(slots.slot_mut(5)[0], 9);
        assert_eq!(slots.device_addr(1) - slots.device_addr(0), 2048);
        assert!(DmaSlots::<2048>::new(dma.allocate(4096, false).unwrap(), 4).is_err());
    }
}
