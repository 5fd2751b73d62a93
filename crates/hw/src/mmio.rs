//! BAR access: memory-mapped registers ([`Bar`], [`MmioBar`]) and I/O-port
//! BARs reached through a file ([`IoBar`]).

use crate::error::HwError;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, Ordering};

/// A memory BAR of 32-bit registers. Offsets are in bytes.
///
/// Writes are ordered after all earlier stores to DMA memory (a release
/// fence): writing a tail register publishes the descriptors before it.
/// An offset outside the BAR reads as all-ones (like a PCI master abort)
/// and a write to one is ignored; driver offsets are constants, so this
/// never happens in a correct driver, and it cannot corrupt memory.
pub trait Bar: Send + Sync {
    fn read32(&self, offset: usize) -> u32;
    fn write32(&self, offset: usize, value: u32);
    /// Size of the BAR in bytes.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A 16-bit register (VirtIO 1.x common configuration has them). The
    /// default reads the containing dword; a BAR whose device cares about
    /// access width (real hardware) overrides it.
    fn read16(&self, offset: usize) -> u16 {
        let shift = (offset & 2) * 8;
        (self.read32(offset & !3) >> shift) as u16
    }
    /// The default is a read-modify-write of the containing dword, right
    /// only for plain storage; real hardware overrides it with a 16-bit
    /// store.
    fn write16(&self, offset: usize, value: u16) {
        let shift = (offset & 2) * 8;
        let old = self.read32(offset & !3) & !(0xFFFF << shift);
        self.write32(offset & !3, old | (u32::from(value) << shift));
    }
    /// An 8-bit register (see [`Bar::read16`]).
    fn read8(&self, offset: usize) -> u8 {
        let shift = (offset & 3) * 8;
        (self.read32(offset & !3) >> shift) as u8
    }
    /// An 8-bit register (see [`Bar::write16`]).
    fn write8(&self, offset: usize, value: u8) {
        let shift = (offset & 3) * 8;
        let old = self.read32(offset & !3) & !(0xFF << shift);
        self.write32(offset & !3, old | (u32::from(value) << shift));
    }
}

impl<B: Bar + ?Sized> Bar for std::sync::Arc<B> {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read16(&self, offset: usize) -> u16 {
        (**self).read16(offset)
    }
    fn write16(&self, offset: usize, value: u16) {
        (**self).write16(offset, value)
    }
    fn read8(&self, offset: usize) -> u8 {
        (**self).read8(offset)
    }
    fn write8(&self, offset: usize, value: u8) {
        (**self).write8(offset, value)
    }
}

/// Something that unmaps a BAR mapping when dropped.
pub trait MappingOwner: Send + Sync {}

/// A BAR mapped into our address space (sysfs `resourceN` mmap or a VFIO
/// region mmap). Accesses are volatile.
pub struct MmioBar {
    base: NonNull<u8>,
    len: usize,
    _owner: Box<dyn MappingOwner>,
}

// SAFETY: the mapping is device memory accessed only with volatile 32-bit
// operations, which the device serialises; it lives as long as `_owner`.
unsafe impl Send for MmioBar {}
// SAFETY: as above; `&self` accesses are single volatile loads/stores.
unsafe impl Sync for MmioBar {}

impl fmt::Debug for MmioBar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmioBar")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

impl MmioBar {
    /// # Safety
    /// `base` must point to a mapping of `len` bytes of device registers
    /// that stays valid until `owner` is dropped.
    pub unsafe fn from_raw_parts(
        base: NonNull<u8>,
        len: usize,
        owner: Box<dyn MappingOwner>,
    ) -> Self {
        MmioBar {
            base,
            len,
            _owner: owner,
        }
    }

    #[inline(always)]
    fn fits(&self, offset: usize, size: usize) -> bool {
        offset.is_multiple_of(size) && offset.checked_add(size).is_some_and(|e| e <= self.len)
    }

    #[inline(always)]
    fn in_bounds(&self, offset: usize) -> bool {
        offset.is_multiple_of(4) && offset.checked_add(4).is_some_and(|e| e <= self.len)
    }
}

impl Bar for MmioBar {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        if !self.in_bounds(offset) {
            return u32::MAX;
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds and 4-byte aligned within a live register
        // mapping; volatile because the device changes it.
        let v = unsafe { std::ptr::read_volatile(self.base.as_ptr().add(offset) as *const u32) };
        compiler_fence(Ordering::SeqCst);
        u32::from_le(v)
    }

    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        if !self.in_bounds(offset) {
            return;
        }
        // x86 does not reorder stores with older stores, so a compiler
        // fence is enough to publish descriptors before a tail write.
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds and aligned within a live register mapping.
        unsafe {
            std::ptr::write_volatile(self.base.as_ptr().add(offset) as *mut u32, value.to_le())
        };
        compiler_fence(Ordering::SeqCst);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read16(&self, offset: usize) -> u16 {
        if !self.fits(offset, 2) {
            return u16::MAX;
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds and 2-byte aligned within a live register
        // mapping; a 16-bit access, as the device expects.
        let v = unsafe { std::ptr::read_volatile(self.base.as_ptr().add(offset) as *const u16) };
        compiler_fence(Ordering::SeqCst);
        u16::from_le(v)
    }

    fn write16(&self, offset: usize, value: u16) {
        if !self.fits(offset, 2) {
            return;
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds and 2-byte aligned within a live register mapping.
        unsafe {
            std::ptr::write_volatile(self.base.as_ptr().add(offset) as *mut u16, value.to_le())
        };
        compiler_fence(Ordering::SeqCst);
    }

    fn read8(&self, offset: usize) -> u8 {
        if !self.fits(offset, 1) {
            return u8::MAX;
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds within a live register mapping.
        let v = unsafe { std::ptr::read_volatile(self.base.as_ptr().add(offset)) };
        compiler_fence(Ordering::SeqCst);
        v
    }

    fn write8(&self, offset: usize, value: u8) {
        if !self.fits(offset, 1) {
            return;
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: in bounds within a live register mapping.
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(offset), value) };
        compiler_fence(Ordering::SeqCst);
    }
}

/// An I/O-port BAR (the legacy VirtIO register block). These cannot be
/// mapped; each access is a `pread`/`pwrite` on the sysfs `resourceN`
/// file or the VFIO region, so each can fail.
pub trait IoBar: Send + Sync {
    fn read8(&self, offset: u64) -> Result<u8, HwError>;
    fn read16(&self, offset: u64) -> Result<u16, HwError>;
    fn read32(&self, offset: u64) -> Result<u32, HwError>;
    fn write8(&self, offset: u64, value: u8) -> Result<(), HwError>;
    fn write16(&self, offset: u64, value: u16) -> Result<(), HwError>;
    fn write32(&self, offset: u64, value: u32) -> Result<(), HwError>;
}

/// An [`IoBar`] over a file at a base offset (sysfs `resourceN`, or a
/// VFIO device fd region).
#[derive(Debug)]
pub struct FileIoBar {
    file: std::fs::File,
    base: u64,
    path: std::path::PathBuf,
}

impl FileIoBar {
    pub fn new(file: std::fs::File, base: u64, path: impl Into<std::path::PathBuf>) -> Self {
        FileIoBar {
            file,
            base,
            path: path.into(),
        }
    }

    fn read_exact<const N: usize>(&self, offset: u64) -> Result<[u8; N], HwError> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; N];
        self.file
            .read_exact_at(&mut buf, self.base + offset)
            .map_err(|e| HwError::io(&self.path, e))?;
        Ok(buf)
    }

    fn write_all(&self, offset: u64, bytes: &[u8]) -> Result<(), HwError> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(bytes, self.base + offset)
            .map_err(|e| HwError::io(&self.path, e))
    }
}

impl IoBar for FileIoBar {
    fn read8(&self, offset: u64) -> Result<u8, HwError> {
        Ok(self.read_exact::<1>(offset)?[0])
    }
    fn read16(&self, offset: u64) -> Result<u16, HwError> {
        Ok(u16::from_le_bytes(self.read_exact::<2>(offset)?))
    }
    fn read32(&self, offset: u64) -> Result<u32, HwError> {
        Ok(u32::from_le_bytes(self.read_exact::<4>(offset)?))
    }
    fn write8(&self, offset: u64, value: u8) -> Result<(), HwError> {
        self.write_all(offset, &[value])
    }
    fn write16(&self, offset: u64, value: u16) -> Result<(), HwError> {
        self.write_all(offset, &value.to_le_bytes())
    }
    fn write32(&self, offset: u64, value: u32) -> Result<(), HwError> {
        self.write_all(offset, &value.to_le_bytes())
    }
}
