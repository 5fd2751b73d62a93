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
use std::marker::PhantomData;
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

/// A ring of 16-byte descriptors (two little-endian quadwords each, the
/// layout of 82599 and VirtIO split-ring descriptors) in DMA memory.
///
/// The data path touches descriptors once or twice per packet, so the
/// ring checks its memory once, here, instead of on every access as
/// [`DmaRegion`]'s accessors do: the number of descriptors is a power of
/// two, the region holds all of them and starts 16-byte aligned. Every
/// accessor then wraps its index with the ring mask, so no index can
/// leave the ring and no per-access check remains.
#[derive(Debug)]
pub struct DescRing {
    /// Descriptor 0.
    descs: NonNull<Desc>,
    mask: usize,
    region: DmaRegion,
}

// SAFETY: as for `DmaRegion` (which the ring owns); every access goes
// through the atomics of `Desc`.
unsafe impl Send for DescRing {}
// SAFETY: shared access is through atomics only.
unsafe impl Sync for DescRing {}

/// Bytes per descriptor of a [`DescRing`].
pub const DESC_BYTES: usize = 16;

impl DescRing {
    /// A ring of `entries` descriptors at the start of `region`.
    pub fn new(region: DmaRegion, entries: usize) -> Result<DescRing, HwError> {
        if !entries.is_power_of_two() {
            return Err(HwError::Invalid(format!(
                "descriptor ring of {entries} entries: not a power of two"
            )));
        }
        let bytes = entries.saturating_mul(DESC_BYTES);
        if bytes > region.len() || !region.virt_addr().is_multiple_of(DESC_BYTES) {
            return Err(HwError::Invalid(format!(
                "descriptor ring of {entries} entries does not fit {region:?} (or it is not 16-byte aligned)"
            )));
        }
        Ok(DescRing {
            descs: region.ptr.cast(),
            mask: entries - 1,
            region,
        })
    }

    /// Number of descriptors.
    #[inline(always)]
    pub fn entries(&self) -> usize {
        self.mask + 1
    }

    /// Device address of descriptor 0 (for the ring's base registers).
    pub fn device_addr(&self) -> u64 {
        self.region.device_addr()
    }

    /// Bytes the descriptors take (for the ring's length register).
    pub fn bytes(&self) -> usize {
        self.entries() * DESC_BYTES
    }

    /// The memory the ring lives in (device address for the base
    /// registers, and byte-level access for set-up and tests).
    pub fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// Descriptor `i mod entries`: reach it once, then read and write
    /// its quadwords.
    #[inline(always)]
    pub fn desc(&self, i: usize) -> &Desc {
        // SAFETY: `i & mask` < entries, and `new` checked that the region
        // holds `entries` 16-byte aligned descriptors; the region lives as
        // long as `self`; `Desc` is two atomics, so concurrent access by
        // the device (or a simulator thread) is through atomics only.
        unsafe { &*self.descs.as_ptr().add(i & self.mask) }
    }

    /// The ring as two plain words for a data-path loop (see
    /// [`DescRingView`]).
    #[inline(always)]
    pub fn view(&self) -> DescRingView<'_> {
        DescRingView {
            descs: self.descs,
            mask: self.mask,
            _ring: PhantomData,
        }
    }

    /// Quadword 0 of descriptor `i mod entries` (see [`Desc::read_q0`]).
    #[inline(always)]
    pub fn read_q0(&self, i: usize) -> u64 {
        self.desc(i).read_q0()
    }

    /// Quadword 1 of descriptor `i mod entries` (see [`Desc::read_q1`]).
    #[inline(always)]
    pub fn read_q1(&self, i: usize) -> u64 {
        self.desc(i).read_q1()
    }

    /// Write quadword 0 of descriptor `i mod entries`.
    #[inline(always)]
    pub fn write_q0(&self, i: usize, value: u64) {
        self.desc(i).write_q0(value)
    }

    /// Write quadword 1 of descriptor `i mod entries`.
    #[inline(always)]
    pub fn write_q1(&self, i: usize, value: u64) {
        self.desc(i).write_q1(value)
    }
}

/// A [`DescRing`] borrowed as two plain words: where descriptor 0 is and
/// the index mask.
///
/// For data-path loops. The compiler treats every `Acquire` load (a
/// descriptor's status) as a barrier to all memory, so a ring reached
/// through a reference has its base and mask loaded again after each
/// one; a view is a value, which stays in registers across the loop.
#[derive(Clone, Copy)]
pub struct DescRingView<'a> {
    descs: NonNull<Desc>,
    mask: usize,
    _ring: PhantomData<&'a DescRing>,
}

impl<'a> DescRingView<'a> {
    /// Descriptor `i mod entries`.
    #[inline(always)]
    pub fn desc(self, i: usize) -> &'a Desc {
        // SAFETY: as in `DescRing::desc`: the view borrows the ring, whose
        // memory holds mask + 1 aligned descriptors, and `i & mask` is
        // below that.
        unsafe { &*self.descs.as_ptr().add(i & self.mask) }
    }

    /// Up to `n` descriptors from `i mod entries` on, stopping at the end
    /// of the ring (a run never wraps): a loop over a batch walks them
    /// by pointer instead of wrapping each index.
    #[inline(always)]
    pub fn run(self, i: usize, n: usize) -> &'a [Desc] {
        let start = i & self.mask;
        let len = n.min(self.mask + 1 - start);
        // SAFETY: descriptors `start..start + len` are within the ring's
        // mask + 1 (len <= entries - start), which the view borrows.
        unsafe { std::slice::from_raw_parts(self.descs.as_ptr().add(start), len) }
    }
}

/// One 16-byte descriptor of a [`DescRing`]: two little-endian
/// quadwords the device reads and writes too.
#[repr(C, align(16))]
pub struct Desc([AtomicU64; 2]);

impl Desc {
    /// Quadword 0 as the device wrote it. `Acquire`: what the device
    /// wrote before the word is visible after.
    #[inline(always)]
    pub fn read_q0(&self) -> u64 {
        u64::from_le(self.0[0].load(Ordering::Acquire))
    }

    /// Quadword 1 (where status is written back), `Acquire` as for
    /// [`Self::read_q0`].
    #[inline(always)]
    pub fn read_q1(&self) -> u64 {
        u64::from_le(self.0[1].load(Ordering::Acquire))
    }

    /// Quadword 1 without ordering: to find many finished descriptors in
    /// a row and order once, with `std::sync::atomic::fence(Acquire)`
    /// after the last and before reading anything the device wrote.
    #[inline(always)]
    pub fn read_q1_relaxed(&self) -> u64 {
        u64::from_le(self.0[1].load(Ordering::Relaxed))
    }

    /// Write quadword 0.
    #[inline(always)]
    pub fn write_q0(&self, value: u64) {
        self.0[0].store(value.to_le(), Ordering::Relaxed)
    }

    /// Write quadword 1.
    #[inline(always)]
    pub fn write_q1(&self, value: u64) {
        self.0[1].store(value.to_le(), Ordering::Relaxed)
    }
}

/// A DMA region cut into a power-of-two number of equal slots of
/// `SLOT_SIZE` bytes, a power of two (the agent model's packet buffers:
/// slot `i` belongs to descriptor `i` of every ring). Like [`DescRing`],
/// the shape is checked once and a slot index wraps, so handing out a
/// slot costs no check, and the slot size is a constant the compiler
/// sees (code slicing a slot needs no check of its own either).
#[derive(Debug)]
pub struct DmaSlots<const SLOT_SIZE: usize> {
    base: NonNull<u8>,
    mask: usize,
    region: DmaRegion,
}

// SAFETY: as for `DmaRegion`, which this owns.
unsafe impl<const SLOT_SIZE: usize> Send for DmaSlots<SLOT_SIZE> {}
// SAFETY: `&self` gives no access to slot bytes; `&mut self` is exclusive.
unsafe impl<const SLOT_SIZE: usize> Sync for DmaSlots<SLOT_SIZE> {}

impl<const SLOT_SIZE: usize> DmaSlots<SLOT_SIZE> {
    /// `count` slots (a power of two) at the start of `region`.
    pub fn new(region: DmaRegion, count: usize) -> Result<Self, HwError> {
        let fits = count
            .checked_mul(SLOT_SIZE)
            .is_some_and(|bytes| bytes <= region.len());
        if !count.is_power_of_two() || !SLOT_SIZE.is_power_of_two() || !fits {
            return Err(HwError::Invalid(format!(
                "{count} slots of {SLOT_SIZE} bytes: need powers of two that fit {region:?}"
            )));
        }
        Ok(DmaSlots {
            base: region.ptr,
            mask: count - 1,
            region,
        })
    }

    /// Number of slots.
    pub fn count(&self) -> usize {
        self.mask + 1
    }

    /// Device address of slot `i mod count`.
    pub fn device_addr(&self, i: usize) -> u64 {
        self.region.device_addr_at((i & self.mask) * SLOT_SIZE)
    }

    /// The memory the slots live in.
    pub fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// The slots as two plain words for a data-path loop (see
    /// [`DescRingView`] for why), borrowing them exclusively.
    #[inline(always)]
    pub fn view_mut(&mut self) -> DmaSlotsMut<'_, SLOT_SIZE> {
        DmaSlotsMut {
            base: self.base,
            mask: self.mask,
            _slots: PhantomData,
        }
    }

    /// Exclusive view of slot `i mod count`. As for
    /// [`DmaRegion::slice_mut`], `&mut self` excludes CPU-side aliases and
    /// the driver protocol keeps the device off the slot meanwhile.
    #[inline(always)]
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8; SLOT_SIZE] {
        let offset = (i & self.mask) * SLOT_SIZE;
        // SAFETY: offset + SLOT_SIZE <= count * SLOT_SIZE <= region length
        // (checked in `new`); a byte array has alignment 1; `&mut self`
        // is exclusive for the returned lifetime.
        unsafe { &mut *(self.base.as_ptr().add(offset) as *mut [u8; SLOT_SIZE]) }
    }
}

/// [`DmaSlots`] borrowed exclusively as two plain words (base and index
/// mask), for a data-path loop.
pub struct DmaSlotsMut<'a, const SLOT_SIZE: usize> {
    base: NonNull<u8>,
    mask: usize,
    _slots: PhantomData<&'a mut DmaSlots<SLOT_SIZE>>,
}

impl<const SLOT_SIZE: usize> DmaSlotsMut<'_, SLOT_SIZE> {
    /// Exclusive view of slot `i mod count` (as [`DmaSlots::slot_mut`]).
    #[inline(always)]
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8; SLOT_SIZE] {
        let offset = (i & self.mask) * SLOT_SIZE;
        // SAFETY: as in `DmaSlots::slot_mut`: the view borrows the slots
        // exclusively, so `&mut self` here is exclusive for the returned
        // lifetime, and offset + SLOT_SIZE is within the region.
        unsafe { &mut *(self.base.as_ptr().add(offset) as *mut [u8; SLOT_SIZE]) }
    }
}
