//! The DMA packet-buffer pool of the queue model (ixy/DPDK style).
//!
//! A [`Mempool`] carves DMA memory into fixed-size entries. Each entry is
//! `HEADROOM` bytes of headroom followed by the data room; the device
//! address of every entry is computed once at creation. Per-packet
//! metadata ([`META_SIZE`] bytes, for pipeline attributes) lives in
//! ordinary memory beside the pool, where no device can touch it.
//!
//! Free entries sit in a lock-free LIFO-ish MPMC queue shared by all
//! cores. Hot paths (a driver queue refilling its ring, cleaning
//! transmitted buffers) go through a per-core [`PoolCache`]: a plain stack
//! of entry ids, refilled from and spilled to the shared queue in bulk, so
//! cores do not contend per packet. A [`PktBuf`] dropped anywhere returns
//! to the shared queue.

use crate::dma::{DmaAllocator, DmaRegion};
use crate::error::HwError;
use crossbeam_queue::ArrayQueue;
use std::cell::UnsafeCell;
use std::fmt;
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
/// Ids moved between a [`PoolCache`] and the shared queue at once.
const CACHE_CHUNK: usize = 32;

struct Inner {
    region: DmaRegion,
    buf_size: usize,
    count: u32,
    /// Device address of each entry's first byte.
    device_addrs: Box<[u64]>,
    free: ArrayQueue<u32>,
    meta: Box<[UnsafeCell<[u8; META_SIZE]>]>,
    name: String,
}

// SAFETY: each metadata slot is only accessed through the PktBuf that
// owns the corresponding entry id, and an id has at most one owner.
unsafe impl Sync for Inner {}
// SAFETY: as above; the region is Send.
unsafe impl Send for Inner {}

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
            .field("free", &self.inner.free.len())
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
        let free = ArrayQueue::new(count);
        for id in 0..count as u32 {
            let _ = free.push(id);
        }
        let meta = (0..count)
            .map(|_| UnsafeCell::new([0u8; META_SIZE]))
            .collect();
        Ok(Mempool {
            inner: Arc::new(Inner {
                region,
                buf_size,
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
        self.inner.free.len()
    }
    /// Entry size (headroom + data room).
    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }
    /// Largest packet a buffer holds.
    pub fn data_room(&self) -> usize {
        self.inner.buf_size - HEADROOM
    }

    /// Take one buffer from the shared queue.
    pub fn alloc(&self) -> Option<PktBuf> {
        self.inner.free.pop().map(|id| self.make(id))
    }

    /// Take up to `n` buffers into `out`; returns how many were added.
    pub fn alloc_bulk(&self, out: &mut Batch, n: usize) -> usize {
        let mut got = 0;
        while got < n && !out.is_full() {
            match self.alloc() {
                Some(b) => {
                    out.push(b);
                    got += 1;
                }
                None => break,
            }
        }
        got
    }

    /// A per-core cache for this pool.
    pub fn cache(&self, size: usize) -> PoolCache {
        PoolCache {
            pool: self.clone(),
            ids: Vec::with_capacity(size.max(CACHE_CHUNK) * 2),
            limit: size.max(CACHE_CHUNK),
        }
    }

    #[inline(always)]
    fn make(&self, id: u32) -> PktBuf {
        PktBuf {
            pool: self.clone(),
            id,
            offset: HEADROOM as u16,
            len: 0,
        }
    }

    #[inline(always)]
    fn release(&self, id: u32) {
        // Cannot fail: the queue holds every id at most once and has room
        // for all of them.
        let _ = self.inner.free.push(id);
    }

    fn same(&self, other: &Mempool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A per-core stack of free entry ids (no atomics on the fast path).
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

    /// Take one buffer, refilling from the shared queue when empty.
    #[inline]
    pub fn alloc(&mut self) -> Option<PktBuf> {
        if self.ids.is_empty() {
            self.refill();
        }
        self.ids.pop().map(|id| self.pool.make(id))
    }

    /// Return a buffer of this pool. A buffer of another pool goes home.
    #[inline]
    pub fn free(&mut self, buf: PktBuf) {
        if !buf.pool.same(&self.pool) {
            drop(buf);
            return;
        }
        let id = buf.id;
        std::mem::forget(buf);
        self.ids.push(id);
        if self.ids.len() >= 2 * self.limit {
            self.spill();
        }
    }

    #[cold]
    fn refill(&mut self) {
        for _ in 0..self.limit.min(CACHE_CHUNK * 4) {
            match self.pool.inner.free.pop() {
                Some(id) => self.ids.push(id),
                None => break,
            }
        }
    }

    #[cold]
    fn spill(&mut self) {
        while self.ids.len() > self.limit {
            if let Some(id) = self.ids.pop() {
                self.pool.release(id);
            }
        }
    }

    /// Ids currently cached.
    pub fn cached(&self) -> usize {
        self.ids.len()
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.pool.release(id);
        }
    }
}

/// One packet in a DMA buffer of a [`Mempool`]. Dropping it returns the
/// buffer to its pool.
pub struct PktBuf {
    pool: Mempool,
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
        self.id as usize * self.pool.inner.buf_size
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
        self.pool.inner.device_addrs[self.id as usize] + self.offset as u64
    }

    /// Device address where received data should land (start of the data
    /// room, after the default headroom).
    #[inline(always)]
    pub fn rx_device_addr(&self) -> u64 {
        self.pool.inner.device_addrs[self.id as usize] + HEADROOM as u64
    }

    /// The packet bytes.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let start = self.entry_start() + self.offset as usize;
        // In bounds by construction: offset + len <= buf_size.
        self.pool
            .inner
            .region
            .slice(start, self.len as usize)
            .unwrap_or(&[])
    }

    /// The packet bytes, mutable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let start = self.entry_start() + self.offset as usize;
        let len = self.len as usize;
        let region = &self.pool.inner.region;
        assert!(start + len <= region.len());
        // SAFETY: this PktBuf is the only owner of entry `id`, so no other
        // reference to these bytes exists on the CPU side, and a device
        // only touches an entry while a driver ring owns the PktBuf.
        unsafe { std::slice::from_raw_parts_mut(region.as_ptr().add(start), len) }
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
        self.pool.release(self.id);
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
        if self.is_full() {
            return Some(p);
        }
        self.pkts.push(p);
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
    pub fn clear(&mut self) {
        self.pkts.clear()
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
}
