//! The three parts of one split virtqueue (VirtIO 1.2 §2.7) in the
//! frontend's memory, as the device reaches them:
//!
//! ```text
//!  descriptor table  size × {addr u64, len u32, flags u16, next u16}  (§2.7.5)
//!  available ring    flags u16, idx u16, ring[size] u16, used_event u16  (§2.7.6)
//!  used ring         flags u16, idx u16, ring[size] {id u32, len u32}, avail_event u16  (§2.7.8)
//! ```
//!
//! A [`SharedRing`] is made once per ring start: each part must lie whole
//! inside one mapped region and be aligned as §2.7 requires (16, 2 and 4
//! bytes), which is checked then. After that every field is one atomic
//! load or store at an offset bounded by the queue size, so the walk in
//! [`super::device`] needs neither `unsafe` nor per-access translation.
//!
//! Part of the backend's shared-memory access layer (with
//! [`super::memory`]).

#![allow(unsafe_code)]

use super::memory::FrontendMemory;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Guest-physical addresses of a ring's three parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingAddrs {
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
}

/// Why a ring cannot be used where the frontend put it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("queue size {0} is not a power of two from 1 to 32768 (§2.7)")]
    Size(u16),
    #[error("the {part} ({len} bytes at {addr:#x}) does not lie inside one memory region")]
    Outside {
        part: &'static str,
        addr: u64,
        len: usize,
    },
    #[error("the {part} at {addr:#x} is not {align}-byte aligned (§2.7)")]
    Misaligned {
        part: &'static str,
        addr: u64,
        align: u64,
    },
}

/// One descriptor as read (§2.7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: u16,
}

/// A split ring in the frontend's memory, checked.
pub struct SharedRing {
    desc: NonNull<u8>,
    avail: NonNull<u8>,
    used: NonNull<u8>,
    /// Power of two.
    size: u16,
    /// Keeps the mappings the pointers point into.
    mem: Arc<FrontendMemory>,
}

// SAFETY: the pointers are into mappings kept alive by `mem` (Send +
// Sync), and every access through them is atomic.
unsafe impl Send for SharedRing {}
// SAFETY: as above.
unsafe impl Sync for SharedRing {}

impl std::fmt::Debug for SharedRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRing")
            .field("size", &self.size)
            .finish()
    }
}

impl SharedRing {
    /// Check where the frontend placed a ring of `size` entries.
    pub fn place(
        mem: Arc<FrontendMemory>,
        addrs: RingAddrs,
        size: u16,
    ) -> Result<SharedRing, PlaceError> {
        if !size.is_power_of_two() || size > 32768 {
            return Err(PlaceError::Size(size));
        }
        let n = size as usize;
        let part = |part, addr: u64, len, align: u64| {
            if !addr.is_multiple_of(align) {
                return Err(PlaceError::Misaligned { part, addr, align });
            }
            mem.host_range(addr, len)
                .ok_or(PlaceError::Outside { part, addr, len })
        };
        let desc = part("descriptor table", addrs.desc, 16 * n, 16)?;
        let avail = part("available ring", addrs.avail, 6 + 2 * n, 2)?;
        let used = part("used ring", addrs.used, 6 + 8 * n, 4)?;
        Ok(SharedRing {
            desc,
            avail,
            used,
            size,
            mem,
        })
    }

    pub fn size(&self) -> u16 {
        self.size
    }
    /// The memory the ring lies in (packet buffers are reached through it).
    pub fn memory(&self) -> &FrontendMemory {
        &self.mem
    }

    /// The 16-bit field `off` bytes into a ring part of which at least
    /// `off + 2` bytes were checked.
    #[inline(always)]
    fn u16_at(&self, part: NonNull<u8>, off: usize) -> &AtomicU16 {
        // SAFETY: callers pass offsets inside the checked part (see each
        // caller); parts are 2-byte aligned and offsets even, so the
        // address is aligned; the mapping lives as long as `self.mem`,
        // which outlives the returned reference (it borrows `self`).
        unsafe { AtomicU16::from_ptr(part.as_ptr().add(off).cast()) }
    }

    /// avail.idx (§2.7.6), read with acquire ordering: the ring entries
    /// and descriptors the driver wrote before it are visible after.
    #[inline(always)]
    pub fn avail_idx(&self) -> u16 {
        u16::from_le(self.u16_at(self.avail, 2).load(Ordering::Acquire))
    }
    /// avail.flags (§2.7.6).
    #[inline(always)]
    pub fn avail_flags(&self) -> u16 {
        u16::from_le(self.u16_at(self.avail, 0).load(Ordering::Relaxed))
    }
    /// avail.ring[slot mod size].
    #[inline(always)]
    pub fn avail_entry(&self, slot: u16) -> u16 {
        let i = (slot & (self.size - 1)) as usize;
        u16::from_le(self.u16_at(self.avail, 4 + 2 * i).load(Ordering::Relaxed))
    }
    /// used_event, after the available ring (§2.7.7).
    #[inline(always)]
    pub fn used_event(&self) -> u16 {
        u16::from_le(
            self.u16_at(self.avail, 4 + 2 * self.size as usize)
                .load(Ordering::Relaxed),
        )
    }

    /// Descriptor `id`, or `None` if `id` is not below the queue size.
    #[inline(always)]
    pub fn descriptor(&self, id: u16) -> Option<Descriptor> {
        if id >= self.size {
            return None;
        }
        let off = 16 * id as usize;
        // SAFETY: `id < size`, so bytes off..off+16 are inside the checked
        // table; the table is 16-byte aligned, so both words are 8-byte
        // aligned; the mapping lives as long as `self.mem`.
        let (a, b) = unsafe {
            let p = self.desc.as_ptr().add(off);
            (
                AtomicU64::from_ptr(p.cast()).load(Ordering::Relaxed),
                AtomicU64::from_ptr(p.add(8).cast()).load(Ordering::Relaxed),
            )
        };
        // Little-endian fields (§2.4): len, flags, next in the second word.
        Some(Descriptor {
            addr: u64::from_le(a),
            len: u64::from_le(b) as u32,
            flags: (u64::from_le(b) >> 32) as u16,
            next: (u64::from_le(b) >> 48) as u16,
        })
    }

    /// Start loading descriptor `id` into the cache (nothing if `id` is
    /// not below the queue size).
    #[inline(always)]
    pub fn prefetch_descriptor(&self, id: u16) {
        if id < self.size {
            // SAFETY: `id < size`: inside the checked table.
            let p = unsafe { self.desc.as_ptr().add(16 * id as usize) };
            super::memory::prefetch_line(p);
        }
    }

    /// used.flags (§2.7.8).
    #[inline(always)]
    pub fn set_used_flags(&self, flags: u16) {
        self.u16_at(self.used, 0)
            .store(flags.to_le(), Ordering::Relaxed);
    }
    /// used.idx as it stands in memory.
    #[inline(always)]
    pub fn used_idx(&self) -> u16 {
        u16::from_le(self.u16_at(self.used, 2).load(Ordering::Relaxed))
    }
    /// Publish used.idx with release ordering: the used entries written
    /// before it are visible to the driver first (§2.7.8.2).
    #[inline(always)]
    pub fn set_used_idx(&self, idx: u16) {
        self.u16_at(self.used, 2)
            .store(idx.to_le(), Ordering::Release);
    }
    /// used.ring[slot mod size] = {id, len}.
    #[inline(always)]
    pub fn set_used_entry(&self, slot: u16, id: u16, len: u32) {
        let off = 4 + 8 * (slot & (self.size - 1)) as usize;
        // SAFETY: slot mod size < size, so off..off+8 is inside the
        // checked used ring; the ring is 4-byte aligned, so both 32-bit
        // words are aligned; the mapping lives as long as `self.mem`.
        unsafe {
            let p = self.used.as_ptr().add(off);
            AtomicU32::from_ptr(p.cast()).store((id as u32).to_le(), Ordering::Relaxed);
            AtomicU32::from_ptr(p.add(4).cast()).store(len.to_le(), Ordering::Relaxed);
        }
    }
    /// avail_event, after the used ring (§2.7.10).
    #[inline(always)]
    pub fn set_avail_event(&self, v: u16) {
        self.u16_at(self.used, 4 + 8 * self.size as usize)
            .store(v.to_le(), Ordering::Relaxed);
    }
}
