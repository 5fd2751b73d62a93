//! An owned `mmap` mapping, unmapped when dropped. Backs DMA regions
//! (hugepage or anonymous memory) and BAR mappings (sysfs `resourceN`,
//! VFIO regions).

use crate::dma::DmaBacking;
use crate::mmio::MappingOwner;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// Size of the hugepages nfkit maps (`MAP_HUGE_2MB`).
pub const HUGEPAGE_SIZE: usize = 2 << 20;

/// One `mmap`ed range, owned: dropping it unmaps it. Other crates get
/// one from [`Mapping::file`] (a vhost-user frontend's memory regions,
/// the rings of packet and XDP sockets) or [`Mapping::anonymous`] (an
/// AF_XDP UMEM).
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is a plain address range owned by this value; it
// carries no thread-bound state.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` only exposes the address and length.
unsafe impl Sync for Mapping {}

impl DmaBacking for Mapping {}
impl MappingOwner for Mapping {}

impl Mapping {
    /// Shared anonymous 2 MiB hugepages, populated (so every page has a
    /// physical frame now) and zeroed by the kernel. `MAP_SHARED` rather
    /// than `MAP_PRIVATE` so that a `fork` never turns a page
    /// copy-on-write, which would move it to another physical frame under
    /// the device. Fails with `ENOMEM` when too few hugepages are free.
    pub(crate) fn hugepages(len: usize) -> io::Result<Self> {
        Self::anonymous_with(
            len,
            libc::MAP_SHARED
                | libc::MAP_ANONYMOUS
                | libc::MAP_HUGETLB
                | libc::MAP_HUGE_2MB
                | libc::MAP_POPULATE,
        )
    }

    /// Shared anonymous 4 KiB pages, populated and zeroed (VFIO memory
    /// when no hugepages are reserved; `VFIO_IOMMU_MAP_DMA` pins them).
    pub(crate) fn small_pages(len: usize) -> io::Result<Self> {
        Self::anonymous_with(
            len,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
    }

    /// Private anonymous memory, populated and zeroed (memory this
    /// process shares with the kernel by registering it, such as an
    /// AF_XDP UMEM).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Self::anonymous_with(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
    }

    fn anonymous_with(len: usize, flags: libc::c_int) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: a fresh anonymous mapping chosen by the kernel; no
        // existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        Self::from_mmap_result(ptr, len)
    }

    /// Map `len` bytes of `fd` at `offset`, shared and read-write (a BAR:
    /// sysfs `resourceN` or a VFIO device region; a shared-memory file
    /// another process passed us). The caller checks that the range lies
    /// in the file: past its end, accesses fault.
    pub fn file(fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a new shared mapping of a file we hold open; the kernel
        // picks the address, so no existing memory is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        Self::from_mmap_result(ptr, len)
    }

    fn from_mmap_result(ptr: *mut libc::c_void, len: usize) -> io::Result<Self> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))?;
        Ok(Mapping { ptr, len })
    }

    /// Lock the pages in memory (`mlock`): they stay resident.
    pub(crate) fn lock(&self) -> io::Result<()> {
        // SAFETY: the range is exactly our live mapping.
        if unsafe { libc::mlock(self.ptr.as_ptr().cast(), self.len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// First byte of the mapping.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Bytes mapped (never 0).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `mmap` returned; nothing
        // borrows it any more (regions and BARs own their `Mapping`).
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(len = self.len, error = %io::Error::last_os_error(), "munmap failed");
        }
    }
}
