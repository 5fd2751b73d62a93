//! One packet in a pool entry, and taking one from the pool.

use super::mempool::{give_back, IdArray, Mempool, HEADROOM, META_SIZE};
use super::offload::Offload;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};

impl Mempool {
    /// Take one buffer from the shared stack.
    pub fn alloc(&self) -> Option<PktBuf> {
        let mut id = [0u32; 1];
        let mut got = IdArray::new(&mut id);
        self.inner.free.lock().take(&self.inner, 1, &mut got);
        (got.len == 1).then(|| self.make(id[0]))
    }
    #[inline(always)]
    pub(super) fn make(&self, id: u32) -> PktBuf {
        PktBuf {
            pool: self.borrowed(),
            id,
            offset: HEADROOM as u16,
            len: 0,
        }
    }
}

/// One packet in a DMA buffer of a [`Mempool`]. Dropping it returns the
/// buffer to its pool.
pub struct PktBuf {
    /// The pool, borrowed: no reference count (the pool's shared stack
    /// keeps it alive while this buffer is out, see `FreeStack`).
    pub(super) pool: ManuallyDrop<Mempool>,
    /// The entry id, in bit 31 ([`OFFLOAD_SET`]) whether the entry's
    /// [`Offload`] slot holds this packet's state, and in bit 30
    /// ([`CHAINED`]) whether more segments follow (pools have fewer
    /// than 2^30 entries). Flags here rather than stores into the
    /// slots: a packet without offload state or chain costs nothing.
    pub(super) id: u32,
    /// Offset of the first data byte within the entry.
    pub(super) offset: u16,
    pub(super) len: u16,
}

impl fmt::Debug for PktBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PktBuf")
            .field("pool", &self.pool.name())
            .field("id", &self.id())
            .field("len", &self.len)
            .finish()
    }
}

/// Bit 31 of [`PktBuf::id`]: the packet has offload state.
pub(super) const OFFLOAD_SET: u32 = 1 << 31;
/// Bit 30 of [`PktBuf::id`]: the packet is the head of a chain of
/// segments (see `chain.rs`).
pub(super) const CHAINED: u32 = 1 << 30;
/// The entry id in [`PktBuf::id`], without the flags.
pub(crate) const ID_MASK: u32 = CHAINED - 1;

/// The marks ([`OFFLOAD_SET`], [`CHAINED`]) any packet of this process
/// was ever given. Until a mark is used, nothing looks for it per packet:
/// [`crate::Batch::marks`] and [`crate::Batch::any_offload`] answer with
/// one load per batch instead of a pass over the batch's handles, and the
/// bulk free paths check no pool for chains (a pipeline that uses no
/// offload and makes no chain pays nothing per packet for either).
///
/// `Relaxed` is enough: a packet with a mark reaches another thread only
/// through a hand-over that orders its bytes (a ring's release and
/// acquire), and that orders this store too.
static MARKS_USED: AtomicU32 = AtomicU32::new(0);

/// The marks any packet of this process has ever had (bits of the id).
#[inline(always)]
pub(super) fn marks_used() -> u32 {
    MARKS_USED.load(Ordering::Relaxed)
}

/// Whether any packet of this process has ever had offload state.
#[inline(always)]
pub(super) fn offload_used() -> bool {
    marks_used() & OFFLOAD_SET != 0
}

/// Whether any packet of this process has ever been chained.
#[inline(always)]
pub(super) fn chains_used() -> bool {
    marks_used() & CHAINED != 0
}

/// Note that a packet got `mark`: a load, and a read-modify-write the
/// first time only (no shared line written per packet).
#[inline(always)]
pub(super) fn use_mark(mark: u32) {
    if marks_used() & mark == 0 {
        MARKS_USED.fetch_or(mark, Ordering::Relaxed);
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
        (self.id() as usize) << self.pool.inner.buf_shift
    }

    /// Give up ownership without returning the entry: the caller now
    /// owns `id`.
    #[inline(always)]
    pub(super) fn into_id(self) -> u32 {
        // By value, no `&mut self`: the handle stays in registers on the
        // bulk free paths (a method taking `&mut self` here made the
        // compiler store each packet and load its id back, a stall per
        // packet). The pool is alive while this id is out.
        let this = ManuallyDrop::new(self);
        let (id, inner) = (this.id, &*this.pool.inner);
        if id & CHAINED != 0 {
            super::chain_edit::free_tail_of(inner, id);
        }
        id & ID_MASK
    }

    /// Start of the packet bytes, in memory.
    #[inline(always)]
    pub(super) fn data_ptr(&self) -> *mut u8 {
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
    #[inline(always)]
    pub fn id(&self) -> u32 {
        self.id & ID_MASK
    }
    /// Bytes in this buffer: the whole packet unless it is chained
    /// (then the first segment; [`Self::pkt_len`] is the frame's).
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
        self.pool.entry_device_addr(self.id()) + self.offset as u64
    }

    /// Device address where received data should land (start of the data
    /// room, after the default headroom).
    #[inline(always)]
    pub fn rx_device_addr(&self) -> u64 {
        self.pool.entry_device_addr(self.id()) + HEADROOM as u64
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

    /// Set the length of this (first) segment, data start unchanged;
    /// a chain's total length follows.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<(), NoRoom> {
        let available = self.pool.inner.buf_size - self.offset as usize;
        if len > available {
            return Err(NoRoom {
                requested: len,
                available,
            });
        }
        if self.id & CHAINED != 0 {
            self.grow_total(len as isize - self.len as isize);
        }
        self.len = len as u16;
        Ok(())
    }

    /// Reset to an empty packet at the default headroom (for reception);
    /// a chain's other segments are freed.
    #[inline(always)]
    pub fn reset(&mut self) {
        if self.id & CHAINED != 0 {
            self.free_tail();
        }
        self.offset = HEADROOM as u16;
        self.len = 0;
    }

    /// Set length after a device wrote `len` bytes at [`Self::rx_device_addr`]
    /// (a buffer fresh from a receive ring: never chained).
    #[inline(always)]
    pub fn set_received(&mut self, len: usize) {
        debug_assert!(self.id & CHAINED == 0);
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
        if self.id & CHAINED != 0 {
            self.grow_total(n as isize);
        }
        // Offload state keeps pointing at the same headers.
        if let Some(o) = self.offload_mut() {
            if !o.front_grown(n) {
                self.take_offload();
            }
        }
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
        if self.id & CHAINED != 0 {
            self.grow_total(-(n as isize));
        }
        // Offload state keeps pointing at the same headers, or goes with
        // them.
        if let Some(o) = self.offload_mut() {
            if !o.front_shrunk(n) {
                self.take_offload();
            }
        }
        Ok(())
    }

    /// Append `bytes` at the end.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), NoRoom> {
        let old = self.len();
        self.set_len(old + bytes.len())?;
        self.data_mut()[old..].copy_from_slice(bytes);
        Ok(())
    }

    /// Replace the contents with `bytes` (a chain's other segments are
    /// freed).
    #[inline]
    pub fn copy_from(&mut self, bytes: &[u8]) -> Result<(), NoRoom> {
        if self.id & CHAINED != 0 {
            self.free_tail();
        }
        // Single-segment from here: no total length to follow (not
        // `set_len`, whose chain test would come a second time).
        let available = self.pool.inner.buf_size - self.offset as usize;
        if bytes.len() > available {
            return Err(NoRoom {
                requested: bytes.len(),
                available,
            });
        }
        self.len = bytes.len() as u16;
        self.data_mut().copy_from_slice(bytes);
        Ok(())
    }

    /// Per-packet metadata (pipeline attributes).
    #[inline(always)]
    pub fn metadata(&self) -> &[u8; META_SIZE] {
        // SAFETY: slot `id` belongs to this PktBuf alone (see Inner).
        unsafe { &*self.pool.inner.meta[self.id() as usize].get() }
    }

    /// Per-packet metadata, mutable.
    #[inline(always)]
    pub fn metadata_mut(&mut self) -> &mut [u8; META_SIZE] {
        // SAFETY: slot `id` belongs to this PktBuf alone, and `&mut self`
        // excludes other references through it.
        unsafe { &mut *self.pool.inner.meta[self.id() as usize].get() }
    }

    /// This packet's offload state, if a port or module gave it one.
    #[inline(always)]
    pub fn offload(&self) -> Option<&Offload> {
        if self.id & OFFLOAD_SET == 0 {
            return None;
        }
        // SAFETY: slot `id` belongs to this PktBuf alone (see Inner).
        Some(unsafe { &*self.pool.inner.offload[self.id() as usize].get() })
    }

    /// This packet's offload state, mutable, if it has one.
    #[inline(always)]
    pub fn offload_mut(&mut self) -> Option<&mut Offload> {
        if self.id & OFFLOAD_SET == 0 {
            return None;
        }
        // SAFETY: slot `id` belongs to this PktBuf alone, and `&mut self`
        // excludes other references through it.
        Some(unsafe { &mut *self.pool.inner.offload[self.id() as usize].get() })
    }

    /// Give this packet offload state (replacing any it had).
    #[inline(always)]
    pub fn set_offload(&mut self, o: Offload) {
        // SAFETY: as in `offload_mut`.
        unsafe { *self.pool.inner.offload[self.id() as usize].get() = o };
        self.id |= OFFLOAD_SET;
        use_mark(OFFLOAD_SET);
    }

    /// Take this packet's offload state away (it has none afterwards).
    #[inline(always)]
    pub fn take_offload(&mut self) -> Option<Offload> {
        let o = self.offload().copied();
        self.id &= !OFFLOAD_SET;
        o
    }

    /// Allocate a new buffer (a chain for a chain) from the same pool
    /// holding a copy of this packet (for replication).
    pub fn try_clone(&self) -> Option<PktBuf> {
        let mut b = self.pool.alloc()?;
        b.copy_from(self.data()).ok()?;
        if self.id & CHAINED != 0 {
            for seg in self.segments().skip(1) {
                let mut s = self.pool.alloc()?;
                s.copy_from(seg).ok()?;
                b.append(s).ok()?;
            }
        }
        *b.metadata_mut() = *self.metadata();
        if let Some(o) = self.offload() {
            b.set_offload(*o);
        }
        Some(b)
    }
}

impl Drop for PktBuf {
    fn drop(&mut self) {
        if self.id & CHAINED != 0 {
            self.free_tail();
        }
        give_back(&self.pool, &[self.id()]);
    }
}
