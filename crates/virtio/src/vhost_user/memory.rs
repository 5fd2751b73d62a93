//! The frontend's memory as a vhost-user backend sees it: the regions of
//! SET_MEM_TABLE, each mapped from the file descriptor that came with it
//! (vhost-user specification, "Memory regions").
//!
//! Everything the frontend says is checked before it is mapped: sizes,
//! overflows, overlaps, and that each region lies inside its file (a
//! region past the end of a memfd would fault on first touch and kill
//! the process with SIGBUS). After that, every byte is reached through
//! [`FrontendMemory::read`] and [`FrontendMemory::write`], which refuse
//! any range not wholly inside the mapped regions: a hostile frontend
//! cannot make us touch other memory.
//!
//! This file and [`super::shared_ring`] are the backend's shared-memory
//! access layer, the only place where it uses `unsafe`.
//!
//! Translation of a guest-physical address is a comparison with the
//! region that served the caller last time (a hint the caller keeps, one
//! per ring), then a scan of the few regions (at most [`MAX_REGIONS`]).

#![allow(unsafe_code)]

use nfkit_hw::linux::Mapping;
use std::fs::File;
use std::os::fd::AsFd;
use std::ptr::NonNull;

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

/// Why a memory table was refused, or an address not reached.
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

/// One region, mapped into our address space.
struct Mapped {
    desc: RegionDesc,
    host: NonNull<u8>,
    /// `desc.memory_size`, which fits a `usize` (checked when mapped).
    len: usize,
    /// Owns the mapping (unmapped on drop); everything that reads or
    /// writes it holds the `FrontendMemory` (rings through an `Arc`).
    _map: Mapping,
}

/// The frontend's memory, mapped.
pub struct FrontendMemory {
    /// Sorted by guest-physical address.
    regions: Vec<Mapped>,
}

// SAFETY: the mappings are plain shared memory owned by this value; it
// hands out no references into them, only copies (`read`/`write`) and
// the atomic accesses of `shared_ring`, which are sound from any thread.
unsafe impl Send for FrontendMemory {}
// SAFETY: as above; no method mutates `FrontendMemory` itself.
unsafe impl Sync for FrontendMemory {}

impl std::fmt::Debug for FrontendMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.regions.iter().map(|r| r.desc))
            .finish()
    }
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
            mapped.push(map_one(index, r, &file)?);
            // The mapping keeps the memory; the descriptor can go.
        }
        mapped.sort_by_key(|m| m.desc.guest_phys_addr);
        Ok(FrontendMemory { regions: mapped })
    }

    /// Translate a frontend virtual address (ring addresses in
    /// SET_VRING_ADDR are given so) into a guest-physical one.
    pub fn va_to_gpa(&self, va: u64) -> Result<u64, MemoryError> {
        self.regions
            .iter()
            .map(|m| &m.desc)
            .find(|r| va >= r.userspace_addr && va - r.userspace_addr < r.memory_size)
            .map(|r| r.guest_phys_addr + (va - r.userspace_addr))
            .ok_or(MemoryError::Unmapped(va))
    }

    /// The region holding `gpa` and the offset of `gpa` in it. `hint` is
    /// the caller's last hit, tried first and updated.
    #[inline(always)]
    fn find(&self, hint: &mut usize, gpa: u64) -> Option<(&Mapped, usize)> {
        let within = |m: &Mapped| {
            let off = gpa.wrapping_sub(m.desc.guest_phys_addr);
            (off < m.desc.memory_size).then_some(off as usize)
        };
        if let Some(m) = self.regions.get(*hint) {
            if let Some(off) = within(m) {
                return Some((m, off));
            }
        }
        let (i, m, off) = self
            .regions
            .iter()
            .enumerate()
            .find_map(|(i, m)| within(m).map(|off| (i, m, off)))?;
        *hint = i;
        Some((m, off))
    }

    /// Host pointer to `len` bytes at `gpa`, if they lie in one region
    /// (rings must).
    pub(super) fn host_range(&self, gpa: u64, len: usize) -> Option<NonNull<u8>> {
        let (m, off) = self.find(&mut 0, gpa)?;
        if len > m.len - off {
            return None;
        }
        // SAFETY: `off + len <= m.len`: the pointer stays in the mapping.
        Some(unsafe { m.host.add(off) })
    }

    /// Start loading the cache lines of up to the first 256 of `len`
    /// bytes at `gpa`, if they lie in a region. Only a hint to the CPU:
    /// nothing is read, and no address can fault.
    #[inline]
    pub fn prefetch(&self, hint: &mut usize, gpa: u64, len: usize) {
        let Some((m, off)) = self.find(hint, gpa) else {
            return;
        };
        let len = len.min(256).min(m.len - off);
        let mut line = 0;
        while line < len {
            // SAFETY: `off + line < off + len <= m.len`: inside the mapping.
            prefetch_line(unsafe { m.host.as_ptr().add(off + line) });
            line += 64;
        }
        if len > 0 && (off + len - 1) / 64 != (off + line - 64) / 64 {
            // SAFETY: as above, the last byte of the range.
            prefetch_line(unsafe { m.host.as_ptr().add(off + len - 1) });
        }
    }

    /// Copy `out.len()` bytes from guest-physical `gpa` (which may span
    /// adjacent regions). Nothing outside the regions is read.
    #[inline]
    pub fn read(&self, hint: &mut usize, gpa: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let mut done = 0;
        while done < out.len() {
            let at = gpa
                .checked_add(done as u64)
                .ok_or(MemoryError::Unmapped(gpa))?;
            let (m, off) = self.find(hint, at).ok_or(MemoryError::Unmapped(at))?;
            let n = (out.len() - done).min(m.len - off);
            // SAFETY: `off + n <= m.len`, so the source lies in the live
            // mapping; the destination is `n` bytes of `out`, which is
            // ours and cannot overlap shared memory we hand out no
            // references to. The frontend may write these bytes while we
            // copy: that changes only the values we get, and nothing of
            // ours relies on them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    m.host.as_ptr().add(off),
                    out.as_mut_ptr().add(done),
                    n,
                );
            }
            done += n;
        }
        Ok(())
    }

    /// Copy `bytes` to guest-physical `gpa` (which may span adjacent
    /// regions). Nothing outside the regions is written.
    #[inline]
    pub fn write(&self, hint: &mut usize, gpa: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let mut done = 0;
        while done < bytes.len() {
            let at = gpa
                .checked_add(done as u64)
                .ok_or(MemoryError::Unmapped(gpa))?;
            let (m, off) = self.find(hint, at).ok_or(MemoryError::Unmapped(at))?;
            let n = (bytes.len() - done).min(m.len - off);
            // SAFETY: `off + n <= m.len`, so the destination lies in the
            // live, writable mapping; the source is ours. The frontend
            // gave us this buffer to write (a device-writable descriptor);
            // whatever else it does with it concerns only its own data.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(done),
                    m.host.as_ptr().add(off),
                    n,
                );
            }
            done += n;
        }
        Ok(())
    }
}

/// Ask the CPU to bring the cache line at `p` closer (a hint that never
/// faults, whatever `p` is).
#[inline(always)]
pub(super) fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of x86_64; a prefetch reads nothing and
        // cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Map one checked region of the table.
fn map_one(index: usize, r: &RegionDesc, file: &File) -> Result<Mapped, MemoryError> {
    let map_err = |why: String| MemoryError::Map { index, why };
    let file_len = file.metadata().map_err(|e| map_err(e.to_string()))?.len();
    let end = r.mmap_offset.checked_add(r.memory_size);
    if end.is_none_or(|e| e > file_len) {
        return Err(MemoryError::PastEndOfFile {
            index,
            need: r.memory_size,
            offset: r.mmap_offset,
            file_len,
        });
    }
    let len = usize::try_from(r.memory_size).map_err(|_| MemoryError::BadRange { index })?;
    // A misaligned offset makes mmap fail, which is reported.
    let map =
        Mapping::file(file.as_fd(), len, r.mmap_offset).map_err(|e| map_err(e.to_string()))?;
    Ok(Mapped {
        desc: *r,
        host: map.ptr(),
        len,
        _map: map,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemfdArena;

    fn two_regions() -> (MemfdArena, FrontendMemory) {
        let arena = MemfdArena::new("mem-test", 2 * 4096).unwrap();
        let fd = || arena.file().try_clone().unwrap();
        // Two adjacent regions of one file, given in reverse order.
        let regions = [
            RegionDesc {
                guest_phys_addr: 0x10_1000,
                memory_size: 4096,
                userspace_addr: 0x7000_1000,
                mmap_offset: 4096,
            },
            RegionDesc {
                guest_phys_addr: 0x10_0000,
                memory_size: 4096,
                userspace_addr: 0x7000_0000,
                mmap_offset: 0,
            },
        ];
        let mem = FrontendMemory::map(&regions, vec![fd(), fd()]).unwrap();
        (arena, mem)
    }

    #[test]
    fn copies_span_adjacent_regions_and_stop_at_the_edge() {
        let (_arena, mem) = two_regions();
        let mut hint = 0;
        let bytes: Vec<u8> = (0..64).collect();
        mem.write(&mut hint, 0x10_0fe0, &bytes).unwrap();
        let mut back = [0u8; 64];
        mem.read(&mut hint, 0x10_0fe0, &mut back).unwrap();
        assert_eq!(&back[..], &bytes[..]);
        assert!(mem.read(&mut hint, 0x10_1fe0, &mut back).is_err());
        assert!(mem.write(&mut hint, u64::MAX - 8, &bytes).is_err());
        assert!(mem.read(&mut hint, 0xf_ffff, &mut back[..1]).is_err());
        assert_eq!(mem.va_to_gpa(0x7000_1010).unwrap(), 0x10_1010);
        assert!(
            mem.host_range(0x10_0ff0, 32).is_none(),
            "rings lie in one region"
        );
    }

    #[test]
    fn tables_past_the_file_or_overlapping_are_refused() {
        let arena = MemfdArena::new("mem-test", 4096).unwrap();
        let fd = || arena.file().try_clone().unwrap();
        let r = RegionDesc {
            guest_phys_addr: 0,
            memory_size: 8192,
            userspace_addr: 0,
            mmap_offset: 0,
        };
        assert!(matches!(
            FrontendMemory::map(&[r], vec![fd()]),
            Err(MemoryError::PastEndOfFile { .. })
        ));
        let r = RegionDesc {
            memory_size: 4096,
            ..r
        };
        assert!(matches!(
            FrontendMemory::map(&[r, r], vec![fd(), fd()]),
            Err(MemoryError::Overlap)
        ));
    }
}
