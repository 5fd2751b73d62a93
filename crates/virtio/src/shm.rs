//! DMA memory another process can map: a memfd arena.
//!
//! A vhost-user backend reaches the frontend's rings and packet buffers
//! by mapping the file descriptors sent with SET_MEM_TABLE, so the
//! frontend's "DMA memory" must live in a shareable file. [`MemfdArena`]
//! is one memfd mapped once (`MAP_SHARED`) and carved into regions by a
//! bump allocator: one file means one memory-table entry however many
//! rings and pools are allocated (backends accept few regions; DPDK
//! needs `--single-file-segments` for the same reason).
//!
//! Device addresses are by default our virtual addresses: the memory
//! table we send says guest-physical = user address (as DPDK's
//! virtio-user does), so a buffer's address means the same thing on both
//! sides of the socket.
//!
//! Freed regions are not reused (the arena lives as long as the port);
//! size the arena for the rings and pools of one device.

#![allow(unsafe_code)]

use nfkit_hw::dma::{DmaBacking, Translation};
use nfkit_hw::{DmaAllocator, DmaRegion, HwError};
use parking_lot::Mutex;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::Arc;

const ALIGN: usize = 4096;

struct Mapping {
    file: File,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; all
// access to it goes through `DmaRegion`, which documents its own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself has no interior mutability.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `new`, and
        // every region carved from it holds an `Arc<Mapping>`, so none
        // outlives this unmap.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

struct Held(#[allow(dead_code)] Arc<Mapping>);
impl DmaBacking for Held {}

/// A memfd-backed arena of shareable DMA memory.
#[derive(Clone)]
pub struct MemfdArena {
    map: Arc<Mapping>,
    next: Arc<Mutex<usize>>,
    /// Device address of the first byte.
    device_base: u64,
}

impl std::fmt::Debug for MemfdArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemfdArena")
            .field("base", &self.map.base)
            .field("len", &self.map.len)
            .field("used", &*self.next.lock())
            .finish()
    }
}

impl MemfdArena {
    /// An arena of `len` bytes (rounded up to 4 KiB) named `name` (the
    /// name shows in /proc/PID/maps), whose device addresses are its
    /// virtual addresses.
    pub fn new(name: &str, len: usize) -> Result<Self, HwError> {
        let mut arena = Self::with_device_base(name, len, 0)?;
        arena.device_base = arena.map.base.as_ptr() as u64;
        Ok(arena)
    }

    /// An arena whose first byte has device address `device_base` (e.g.
    /// below 16 TiB for a legacy device model, whose queue addresses are
    /// 32-bit page numbers).
    pub fn with_device_base(name: &str, len: usize, device_base: u64) -> Result<Self, HwError> {
        let len = len.div_ceil(ALIGN).max(1) * ALIGN;
        let cname = std::ffi::CString::new(format!("nfkit-{name}"))
            .map_err(|_| HwError::Invalid(format!("memfd name `{name}` contains a NUL byte")))?;
        let os = |what: &str| {
            HwError::Unsupported(format!("{what}: {}", std::io::Error::last_os_error()))
        };
        // SAFETY: `cname` is a valid C string; the flags are constants.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os("memfd_create"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)
            .map_err(|e| HwError::Unsupported(format!("sizing memfd to {len} bytes: {e}")))?;
        // SAFETY: a new shared mapping of the whole file; the kernel picks
        // the address, so it aliases nothing of ours.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os("mmap of the memfd"));
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| os("mmap returned NULL"))?;
        Ok(MemfdArena {
            map: Arc::new(Mapping { file, base, len }),
            next: Arc::new(Mutex::new(0)),
            device_base,
        })
    }

    /// The memfd (sent to the backend with SET_MEM_TABLE).
    pub fn file(&self) -> &File {
        &self.map.file
    }
    /// Virtual address of the first byte.
    pub fn base_addr(&self) -> u64 {
        self.map.base.as_ptr() as u64
    }
    /// Device address of the first byte (what a memory table calls its
    /// guest-physical address).
    pub fn device_base(&self) -> u64 {
        self.device_base
    }
    /// Size of the arena.
    pub fn len(&self) -> usize {
        self.map.len
    }
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }
}

impl DmaAllocator for MemfdArena {
    fn allocate(&self, size: usize, _contiguous: bool) -> Result<DmaRegion, HwError> {
        if size == 0 {
            return Err(HwError::Invalid("zero-sized DMA allocation".into()));
        }
        let rounded = size.div_ceil(ALIGN) * ALIGN;
        let mut next = self.next.lock();
        let start = *next;
        if rounded > self.map.len - start {
            return Err(HwError::Invalid(format!(
                "memfd arena of {} bytes has {} left, {size} requested: give the port a larger arena",
                self.map.len,
                self.map.len - start
            )));
        }
        *next = start + rounded;
        // SAFETY: `start + size <= len`, so the pointer stays in the mapping.
        let ptr = unsafe { NonNull::new_unchecked(self.map.base.as_ptr().add(start)) };
        let addr = self.device_base + start as u64;
        // SAFETY: bytes [start, start+size) of a fresh memfd are zero and
        // were never handed out before (bump allocation); the mapping
        // stays alive through `Held`; the translation is the arena's
        // device base plus the offset, which is what the memory table
        // sent to the backend says.
        Ok(unsafe {
            DmaRegion::from_raw_parts(
                ptr,
                size,
                Translation::Contiguous(addr),
                size,
                Box::new(Held(self.map.clone())),
            )
        })
    }

    fn page_size(&self) -> usize {
        2 << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_disjoint_and_bounded() {
        let arena = MemfdArena::new("t", 3 * 4096).unwrap();
        let mut a = arena.allocate(100, true).unwrap();
        let b = arena.allocate(4096, true).unwrap();
        assert_eq!(a.device_addr(), arena.base_addr());
        assert_eq!(b.device_addr(), arena.base_addr() + 4096);
        a.slice_mut(0, 4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
        assert!(arena.allocate(8192, true).is_err());
        drop(arena);
        assert_eq!(
            a.slice(0, 4).unwrap(),
            &[1, 2, 3, 4],
            "regions keep the mapping alive"
        );
    }
}
