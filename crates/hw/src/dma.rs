//! DMA memory: pinned, zeroed, aligned memory with the address a device
//! uses to reach it.
//!
//! A [`DmaRegion`] is handed out by a [`DmaAllocator`] (hugepages +
//! pagemap, VFIO, or the simulator). Drivers access descriptors in it with
//! the volatile/atomic accessors below: on x86 a `Relaxed` atomic load or
//! store of an aligned `u64` is a plain `mov`, exactly what a C driver's
//! volatile access compiles to, and unlike a bare volatile access it is
//! also sound when the "device" is a simulator thread.

use crate::error::HwError;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How virtual offsets translate to device addresses.
#[derive(Debug, Clone)]
pub enum Translation {
    /// Device address = base + offset (VFIO IOVA = VA, simulator, one page).
    Contiguous(u64),
    /// One device address per page of `1 << page_shift` bytes (pagemap on
    /// hugepages that are not physically adjacent).
    Pages { page_shift: u32, addrs: Vec<u64> },
}

/// Something that keeps the memory of a region alive and releases it on
/// drop (munmap, VFIO unmap, deallocation).
pub trait DmaBacking: Send + Sync {}

/// Pinned, zeroed DMA memory. The region owns its memory; dropping it
/// releases the memory.
pub struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    translation: Translation,
    /// Largest size, from the start, that is contiguous in device address
    /// space (a descriptor ring must fit in it).
    contiguous: usize,
    _backing: Box<dyn DmaBacking>,
}

// SAFETY: the region is plain memory owned by this value; concurrent
// access from a device (or simulator thread) only goes through the atomic
// accessors or through slices whose exclusivity the driver protocol
// guarantees (the device owns a buffer from tail write to DD write-back).
unsafe impl Send for DmaRegion {}
// SAFETY: shared access is through atomics or `&self` reads of memory that
// no `&mut` alias exists for while shared.
unsafe impl Sync for DmaRegion {}

impl fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaRegion")
            .field("virt", &self.ptr)
            .field("len", &self.len)
            .field("device_addr", &format_args!("{:#x}", self.device_addr()))
            .finish()
    }
}

impl DmaRegion {
    /// Build a region from raw parts. Used by allocator implementations.
    ///
    /// # Safety
    /// `ptr` must point to `len` bytes of zeroed memory that stays valid and
    /// pinned until `backing` is dropped, and is not aliased elsewhere;
    /// `translation` must give the correct device address of each byte and
    /// `contiguous` must not exceed the device-contiguous prefix.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        translation: Translation,
        contiguous: usize,
        backing: Box<dyn DmaBacking>,
    ) -> Self {
        DmaRegion {
            ptr,
            len,
            translation,
            contiguous: contiguous.min(len),
            _backing: backing,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Virtual address of the first byte.
    pub fn virt_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Raw pointer to the first byte (for simulator/device-side code in
    /// this crate and for mapping into other address spaces).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Device address of the first byte.
    pub fn device_addr(&self) -> u64 {
        self.device_addr_at(0)
    }

    /// Device address of byte `offset` (`offset <= len`).
    pub fn device_addr_at(&self, offset: usize) -> u64 {
        match &self.translation {
            Translation::Contiguous(base) => base + offset as u64,
            Translation::Pages { page_shift, addrs } => {
                let page = offset >> page_shift;
                let within = offset & ((1usize << page_shift) - 1);
                match addrs.get(page) {
                    Some(a) => a + within as u64,
                    // offset == len at the very end of the last page
                    None => addrs.last().copied().unwrap_or(0) + (1u64 << page_shift),
                }
            }
        }
    }

    /// Bytes from the start that are contiguous in device address space.
    pub fn contiguous_len(&self) -> usize {
        self.contiguous
    }

    /// The translation table.
    pub fn translation(&self) -> &Translation {
        &self.translation
    }

    #[inline(always)]
    fn check(&self, offset: usize, size: usize) -> bool {
        offset.checked_add(size).is_some_and(|end| end <= self.len) && offset.is_multiple_of(size)
    }

    #[inline(always)]
    fn atomic64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            self.check(offset, 8),
            "DMA u64 access out of bounds or unaligned"
        );
        // SAFETY: bounds and 8-byte alignment checked above (the region base
        // is page aligned); the memory lives as long as `self`; AtomicU64
        // has the same layout as u64 and every concurrent access to
        // descriptor words goes through atomics.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) }
    }

    #[inline(always)]
    fn atomic32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            self.check(offset, 4),
            "DMA u32 access out of bounds or unaligned"
        );
        // SAFETY: as for `atomic64`, with 4-byte alignment.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU32) }
    }

    /// Read a little-endian u64 written by the device (descriptor word).
    /// `Acquire`: data the device wrote before this word is visible after.
    #[inline(always)]
    pub fn read_u64(&self, offset: usize) -> u64 {
        u64::from_le(self.atomic64(offset).load(Ordering::Acquire))
    }

    /// Write a little-endian u64 for the device to read (descriptor word).
    #[inline(always)]
    pub fn write_u64(&self, offset: usize, value: u64) {
        self.atomic64(offset)
            .store(value.to_le(), Ordering::Relaxed)
    }

    /// Read a little-endian u32 (e.g. a written-back transmit head).
    #[inline(always)]
    pub fn read_u32(&self, offset: usize) -> u32 {
        u32::from_le(self.atomic32(offset).load(Ordering::Acquire))
    }

    /// Write a little-endian u32.
    #[inline(always)]
    pub fn write_u32(&self, offset: usize, value: u32) {
        self.atomic32(offset)
            .store(value.to_le(), Ordering::Relaxed)
    }

    /// Exclusive view of `len` bytes at `offset`, or `None` if out of
    /// bounds. Exclusive access from the CPU side is guaranteed by `&mut
    /// self`; the driver protocol guarantees the device does not touch
    /// the bytes meanwhile.
    #[inline(always)]
    pub fn slice_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: in bounds; `&mut self` excludes other CPU-side aliases.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }

    /// Shared view of `len` bytes at `offset`, or `None` if out of bounds.
    #[inline(always)]
    pub fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: in bounds; no `&mut` alias can exist while `&self` lives.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }

    /// Fill the whole region with `byte` (e.g. 0xFF to poison fresh rings).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole region is ours and `&mut self` is exclusive.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len) }
    }
}

/// A source of DMA memory (the "memory" and "address translation" groups).
pub trait DmaAllocator: Send + Sync {
    /// Allocate `size` bytes of zeroed, pinned memory aligned to at least
    /// 4096 bytes. If `contiguous`, the whole region is contiguous in
    /// device address space (needed for descriptor rings), else only each
    /// page is.
    fn allocate(&self, size: usize, contiguous: bool) -> Result<DmaRegion, HwError>;

    /// The page size translation works in (2 MiB hugepages, 4 KiB...).
    /// Packet buffers never straddle a page boundary of this size.
    fn page_size(&self) -> usize;
}
