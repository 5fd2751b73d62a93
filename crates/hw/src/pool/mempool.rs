//! The pool: DMA memory carved into entries, per-entry metadata beside
//! it, and the shared stack of free entry ids that keeps it alive while
//! any id is out.

use super::chain::ChainSlot;
use super::offload::Offload;
use super::pktbuf::ID_MASK;
use super::sync::{Arc, Mutex};
use crate::dma::{DmaAllocator, DmaRegion};
use crate::error::HwError;
use std::cell::UnsafeCell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::AtomicUsize;

/// Bytes reserved in front of the packet data of every buffer, for
/// encapsulation headers (VXLAN, VirtIO net header, ...).
pub const HEADROOM: usize = 128;
/// Bytes of per-packet metadata for pipeline attributes.
pub const META_SIZE: usize = 128;
/// Default entry size: 2 KiB, as ixy and TinyNF use.
pub const DEFAULT_BUF_SIZE: usize = 2048;

pub(super) struct Inner {
    pub(super) region: DmaRegion,
    pub(super) buf_size: usize,
    /// log2(buf_size).
    pub(super) buf_shift: u32,
    pub(super) count: u32,
    /// Device address of each entry's first byte.
    pub(super) device_addrs: Box<[u64]>,
    pub(super) free: Mutex<FreeStack>,
    pub(super) meta: Box<[UnsafeCell<[u8; META_SIZE]>]>,
    /// Per-entry offload state, valid while the packet's flag says so.
    pub(super) offload: Box<[UnsafeCell<Offload>]>,
    /// Per-entry chain links (see `chain.rs`), valid while the head's
    /// flag says so.
    pub(super) chain: Box<[UnsafeCell<ChainSlot>]>,
    /// Chained heads out of the pool: while 0 (no frame of this pool is
    /// chained), the bulk free paths check no packet for a chain.
    pub(super) chains_out: AtomicUsize,
    name: String,
}

// SAFETY: each metadata slot is only accessed through the PktBuf that
// owns the corresponding entry id, and an id has at most one owner.
unsafe impl Sync for Inner {}
// SAFETY: as above; the region is Send.
unsafe impl Send for Inner {}

/// The shared stack of free entry ids, and the handle that keeps the
/// pool alive while any id is out of it.
pub(super) struct FreeStack {
    /// Free entry ids; capacity `count` from the start, so pushing never
    /// allocates (an id is in at most one place at a time).
    pub(super) ids: Vec<u32>,
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
    pub(super) fn take(
        &mut self,
        pool: &Arc<Inner>,
        n: usize,
        out: &mut impl Extend<u32>,
    ) -> usize {
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
    pub(super) fn give_back_ids(&mut self, ids: &[u32]) -> Option<Arc<Inner>> {
        self.give_back(ids)
    }

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
pub(super) fn give_back(pool: &Mempool, ids: &[u32]) {
    let last_handle = pool.inner.free.lock().give_back(ids);
    // Unlocked; `pool` may be a borrowed handle that this frees, and is
    // not used again.
    drop(last_handle);
}

/// A pool of DMA packet buffers. Cheap to clone (shared).
#[derive(Clone)]
pub struct Mempool {
    pub(super) inner: Arc<Inner>,
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
        if count == 0 || count > ID_MASK as usize {
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
        let offload = (0..count)
            .map(|_| UnsafeCell::new(Offload::default()))
            .collect();
        let chain = (0..count)
            .map(|_| UnsafeCell::new(ChainSlot::default()))
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
                offload,
                chain,
                chains_out: AtomicUsize::new(0),
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

    /// A copy of this handle that holds no reference count, for a buffer
    /// of this pool; it must never be dropped (hence `ManuallyDrop`).
    #[inline(always)]
    pub(super) fn borrowed(&self) -> ManuallyDrop<Mempool> {
        // SAFETY: a bitwise copy of the `Arc` that is never dropped, so
        // the count stays balanced. It is only used while its buffer's id
        // is out of the shared stack, and meanwhile the stack's
        // keep-alive handle keeps the pool allocated (see `FreeStack`).
        ManuallyDrop::new(unsafe { std::ptr::read(self) })
    }
    /// Device address of the first byte of entry `id` (< count).
    #[inline(always)]
    pub(super) fn entry_device_addr(&self, id: u32) -> u64 {
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
pub(super) struct IdArray<'a> {
    ids: &'a mut [u32],
    pub(super) len: usize,
}

impl<'a> IdArray<'a> {
    pub(super) fn new(ids: &'a mut [u32]) -> Self {
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
