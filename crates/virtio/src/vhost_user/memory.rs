//! The frontend's memory as a vhost-user backend sees it: the regions of
//! SET_MEM_TABLE, each mapped from the file descriptor that came with it
//! (vhost-user specification, "Memory regions").
//!
//! Everything the frontend says is checked before it is mapped: sizes,
//! overflows, overlaps, and that each region lies inside its file (a
//! region past the end of a memfd would fault on first touch and kill
//! the process with SIGBUS). After that, every access goes through
//! `vm-memory`, which refuses addresses outside the mapped regions: a
//! hostile frontend cannot make us touch other memory.

use std::fs::File;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

/// Most regions a frontend may send (QEMU and DPDK send at most 8).
pub const MAX_REGIONS: usize = 8;

/// One region of the frontend's memory table, as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionDesc {
    pub guest_phys_addr: u64,
    pub memory_size: u64,
    pub userspace_addr: u64,
    pub mmap_offset: u64,
}

/// Why a memory table was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("memory table has {0} regions (1 to {MAX_REGIONS} allowed)")]
    RegionCount(usize),
    #[error("memory table has {regions} regions but {fds} file descriptors")]
    FdCount { regions: usize, fds: usize },
    #[error("region {index} is empty or its addresses overflow")]
    BadRange { index: usize },
    #[error("region {index} ({need} bytes at file offset {offset}) extends past its file ({file_len} bytes)")]
    PastEndOfFile {
        index: usize,
        need: u64,
        offset: u64,
        file_len: u64,
    },
    #[error("regions overlap in guest-physical or frontend-virtual addresses")]
    Overlap,
    #[error("mapping region {index}: {why}")]
    Map { index: usize, why: String },
    #[error("frontend address {0:#x} is in no region of the memory table")]
    Unmapped(u64),
}

/// The frontend's memory, mapped.
#[derive(Debug)]
pub struct FrontendMemory {
    pub mem: GuestMemoryMmap,
    regions: Vec<RegionDesc>,
}

impl FrontendMemory {
    /// Check and map a memory table.
    pub fn map(regions: &[RegionDesc], files: Vec<File>) -> Result<Self, MemoryError> {
        if regions.is_empty() || regions.len() > MAX_REGIONS {
            return Err(MemoryError::RegionCount(regions.len()));
        }
        if files.len() != regions.len() {
            return Err(MemoryError::FdCount {
                regions: regions.len(),
                fds: files.len(),
            });
        }
        check_ranges(regions)?;
        let mut mapped = Vec::with_capacity(regions.len());
        for (index, (r, file)) in regions.iter().zip(files).enumerate() {
            let file_len = file
                .metadata()
                .map_err(|e| MemoryError::Map {
                    index,
                    why: e.to_string(),
                })?
                .len();
            let end = r.mmap_offset.checked_add(r.memory_size);
            if end.is_none_or(|e| e > file_len) {
                return Err(MemoryError::PastEndOfFile {
                    index,
                    need: r.memory_size,
                    offset: r.mmap_offset,
                    file_len,
                });
            }
            let size =
                usize::try_from(r.memory_size).map_err(|_| MemoryError::BadRange { index })?;
            let map =
                MmapRegion::from_file(FileOffset::new(file, r.mmap_offset), size).map_err(|e| {
                    MemoryError::Map {
                        index,
                        why: e.to_string(),
                    }
                })?;
            let region = GuestRegionMmap::new(map, GuestAddress(r.guest_phys_addr))
                .ok_or(MemoryError::BadRange { index })?;
            mapped.push(region);
        }
        mapped.sort_by_key(vm_memory::GuestMemoryRegion::start_addr);
        let mem = GuestMemoryMmap::from_regions(mapped).map_err(|_| MemoryError::Overlap)?;
        Ok(FrontendMemory {
            mem,
            regions: regions.to_vec(),
        })
    }

    /// Translate a frontend virtual address (ring addresses in
    /// SET_VRING_ADDR are given so) into a guest-physical one.
    pub fn va_to_gpa(&self, va: u64) -> Result<u64, MemoryError> {
        self.regions
            .iter()
            .find(|r| va >= r.userspace_addr && va - r.userspace_addr < r.memory_size)
            .map(|r| r.guest_phys_addr + (va - r.userspace_addr))
            .ok_or(MemoryError::Unmapped(va))
    }
}

fn check_ranges(regions: &[RegionDesc]) -> Result<(), MemoryError> {
    let end = |a: u64, r: &RegionDesc| a.checked_add(r.memory_size);
    for (index, r) in regions.iter().enumerate() {
        if r.memory_size == 0
            || end(r.guest_phys_addr, r).is_none()
            || end(r.userspace_addr, r).is_none()
        {
            return Err(MemoryError::BadRange { index });
        }
    }
    for (i, a) in regions.iter().enumerate() {
        for b in &regions[i + 1..] {
            let overlap = |x: u64, y: u64| x < y + b.memory_size && y < x + a.memory_size;
            if overlap(a.guest_phys_addr, b.guest_phys_addr)
                || overlap(a.userspace_addr, b.userspace_addr)
            {
                return Err(MemoryError::Overlap);
            }
        }
    }
    Ok(())
}
