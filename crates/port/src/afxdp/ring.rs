//! Memory shared with the kernel by an XDP socket: the UMEM (packet
//! frames) and the four single-producer/single-consumer rings
//! (Documentation/networking/af_xdp.rst, "Rings").
//!
//! Each ring is an array of `entries` slots (a power of two) plus a
//! producer and a consumer index that run freely and wrap at 2^32. The
//! producer writes slots, then publishes them with a release store of its
//! index; the consumer reads the producer index with acquire, reads the
//! slots, then returns them with a release store of its own index. We
//! produce on the fill and TX rings and consume the RX and completion
//! rings; the kernel does the opposite. Frames are owned by whoever holds
//! their address: we only touch a frame's bytes between taking it off the
//! RX or completion ring and putting it on the fill or TX ring.
//!
//! The kernel is trusted with nothing it writes here: an index that
//! claims more filled slots than the ring has, or a consumer index that
//! runs ahead of what we produced, is clamped (and counted in
//! [`Ring::bad_indices`]); what the slots say is checked by the caller
//! ([`super::queue`]). [`Ring::anonymous`] rings have no socket behind
//! them: a test or fuzz target plays the kernel through the `kernel_*`
//! methods.

use nfkit_hw::linux::Mapping;
use std::cell::Cell;
use std::io;
use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// The packet frames shared with the kernel: `count` frames of
/// `frame_size` bytes, addressed by byte offset.
pub struct Umem {
    map: Mapping,
    frame_size: usize,
}

impl Umem {
    pub fn new(count: usize, frame_size: usize) -> io::Result<Umem> {
        Ok(Umem {
            map: Mapping::anonymous(count * frame_size)?,
            frame_size,
        })
    }
    /// Start address and length, for `XDP_UMEM_REG`.
    pub fn region(&self) -> (u64, u64) {
        (self.map.ptr().as_ptr() as u64, self.map.len() as u64)
    }
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    fn in_bounds(&self, addr: u64, len: usize) -> Option<usize> {
        let a = usize::try_from(addr).ok()?;
        (a.checked_add(len)? <= self.map.len()).then_some(a)
    }

    /// The bytes of a frame we own, or `None` if the kernel handed over
    /// an address outside the UMEM.
    pub fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let a = self.in_bounds(addr, len)?;
        // SAFETY: in bounds; the frame was taken off the RX ring, so the
        // kernel does not write it until we put it back on the fill ring,
        // which needs `&mut self` of the socket holding this borrow.
        Some(unsafe { std::slice::from_raw_parts(self.map.ptr().as_ptr().add(a), len) })
    }

    /// Mutable bytes of a frame we own (a free TX frame).
    pub fn write(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let a = self.in_bounds(addr, len)?;
        // SAFETY: in bounds; the frame is on our free list (not on any
        // ring), so neither the kernel nor another borrow touches it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.map.ptr().as_ptr().add(a), len) })
    }
}

/// One ring mapping and its index words.
pub struct Ring<T> {
    _map: Mapping,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    slots: NonNull<T>,
    mask: u32,
    /// Our own index (producer or consumer, by ring direction), ahead of
    /// what we published until `submit`/`release`.
    local: u32,
    /// Times the kernel's index was out of range (clamped).
    bad: Cell<u64>,
    /// Private memory, no socket ([`Ring::anonymous`]).
    anonymous: bool,
    _t: PhantomData<T>,
}

/// Where [`Ring::anonymous`] puts the index words and the slots (each
/// index on its own cache line, as the kernel lays them out).
const ANON_OFFSETS: libc::xdp_ring_offset = libc::xdp_ring_offset {
    producer: 0,
    consumer: 64,
    flags: 128,
    desc: 192,
};

// SAFETY: the mapping is owned by the ring; the index words are shared
// with the kernel only through atomics.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Map a ring of `entries` slots of the socket `fd` at page offset
    /// `pgoff`, with the offsets from `XDP_MMAP_OFFSETS`.
    pub fn map(
        fd: BorrowedFd<'_>,
        off: &libc::xdp_ring_offset,
        entries: u32,
        pgoff: u64,
    ) -> io::Result<Ring<T>> {
        let map = Mapping::file(fd, Self::bytes(off, entries)?, pgoff)?;
        Self::over(map, off, entries, false)
    }

    /// A ring of `entries` slots (a power of two) in private anonymous
    /// memory, with no socket: the kernel's side is played through
    /// [`Ring::kernel_set_producer`] and the other `kernel_*` methods.
    pub fn anonymous(entries: u32) -> io::Result<Ring<T>> {
        let map = Mapping::anonymous(Self::bytes(&ANON_OFFSETS, entries)?)?;
        Self::over(map, &ANON_OFFSETS, entries, true)
    }

    fn bytes(off: &libc::xdp_ring_offset, entries: u32) -> io::Result<usize> {
        let words = [off.producer, off.consumer, off.flags];
        let aligned = words.iter().all(|o| o.is_multiple_of(4))
            && off.desc.is_multiple_of(std::mem::align_of::<T>() as u64);
        if !entries.is_power_of_two() || !aligned {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let slots = entries as u64 * std::mem::size_of::<T>() as u64;
        let end = words.iter().map(|o| o + 4).max().unwrap_or(0);
        usize::try_from(end.max(off.desc + slots))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    }

    fn over(
        map: Mapping,
        off: &libc::xdp_ring_offset,
        entries: u32,
        anonymous: bool,
    ) -> io::Result<Ring<T>> {
        let at = |o: u64| -> NonNull<u8> {
            // SAFETY: `bytes` sized the mapping to hold every index word
            // and the `entries` slots at these offsets, suitably aligned.
            unsafe { NonNull::new_unchecked(map.ptr().as_ptr().add(o as usize)) }
        };
        let ring = Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            slots: at(off.desc).cast(),
            mask: entries - 1,
            local: 0,
            bad: Cell::new(0),
            anonymous,
            _map: map,
            _t: PhantomData,
        };
        Ok(ring)
    }

    fn index(&self, p: NonNull<AtomicU32>) -> &AtomicU32 {
        // SAFETY: an aligned u32 inside the mapping, shared with the
        // kernel, which accesses it as a 32-bit word; atomics make the
        // sharing sound.
        unsafe { p.as_ref() }
    }

    /// Slots in the ring.
    pub fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// Times an index the kernel wrote was out of range.
    pub fn bad_indices(&self) -> u64 {
        self.bad.get()
    }

    fn out_of_range(&self) {
        self.bad.set(self.bad.get() + 1);
    }

    /// Whether the kernel asks for a wakeup (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.index(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // --- rings we produce on (fill, TX) ---

    /// Free slots: none if the kernel's consumer index is not between
    /// our producer index minus the ring size and our producer index (it
    /// claims to have consumed slots we never produced).
    pub fn free(&self) -> u32 {
        let cons = self.index(self.consumer).load(Ordering::Acquire);
        let used = self.local.wrapping_sub(cons);
        if used > self.mask + 1 {
            self.out_of_range();
            return 0;
        }
        (self.mask + 1) - used
    }

    /// Write the next slot; the caller checked `free() > 0` (a push past
    /// that overwrites a slot the kernel may still read: wrong, but
    /// inside the ring).
    pub fn push(&mut self, v: T) {
        let i = (self.local & self.mask) as usize;
        // SAFETY: i <= mask, inside the slot array; the slot is free (the
        // kernel consumed it), so nobody else accesses it.
        unsafe { self.slots.as_ptr().add(i).write(v) };
        self.local = self.local.wrapping_add(1);
    }

    /// Publish the pushed slots to the kernel.
    pub fn submit(&self) {
        self.index(self.producer)
            .store(self.local, Ordering::Release);
    }

    // --- rings we consume (RX, completion) ---

    /// Slots the kernel has filled and we have not released, at most the
    /// ring size (a producer index further ahead, or behind us, is
    /// clamped to a full ring: every slot is then read, each checked).
    pub fn available(&self) -> u32 {
        let prod = self.index(self.producer).load(Ordering::Acquire);
        let n = prod.wrapping_sub(self.local);
        if n > self.mask + 1 {
            self.out_of_range();
            return self.mask + 1;
        }
        n
    }

    /// Read the `i`-th available slot; the caller checked `i < available()`.
    pub fn peek(&self, i: u32) -> T {
        let at = (self.local.wrapping_add(i) & self.mask) as usize;
        // SAFETY: inside the slot array; the kernel published this slot
        // (acquire in `available`) and will not rewrite it until we
        // release it.
        unsafe { self.slots.as_ptr().add(at).read() }
    }

    /// Give `n` read slots back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.index(self.consumer)
            .store(self.local, Ordering::Release);
    }

    // --- the kernel's side, for anonymous rings (tests, fuzzing) ---

    /// Write the producer index as the kernel would (RX and completion
    /// rings: publishes slots; fill and TX rings: a hostile kernel).
    /// False (nothing written) on a ring mapped from a socket.
    pub fn kernel_set_producer(&self, v: u32) -> bool {
        self.anonymous && {
            self.index(self.producer).store(v, Ordering::Release);
            true
        }
    }

    /// Write the consumer index as the kernel would (fill and TX rings).
    pub fn kernel_set_consumer(&self, v: u32) -> bool {
        self.anonymous && {
            self.index(self.consumer).store(v, Ordering::Release);
            true
        }
    }

    /// Write the flags word (`XDP_RING_NEED_WAKEUP`).
    pub fn kernel_set_flags(&self, v: u32) -> bool {
        self.anonymous && {
            self.index(self.flags).store(v, Ordering::Relaxed);
            true
        }
    }

    /// The producer and consumer index words as the kernel reads them.
    pub fn kernel_indices(&self) -> (u32, u32) {
        (
            self.index(self.producer).load(Ordering::Acquire),
            self.index(self.consumer).load(Ordering::Acquire),
        )
    }

    /// Read slot `i` (modulo the ring size) as the kernel would; `None`
    /// on a ring mapped from a socket.
    pub fn kernel_read_slot(&self, i: u32) -> Option<T> {
        // SAFETY: masked, inside the slot array of private memory; slots
        // are plain `Copy` data that any bytes make valid (u64 or
        // `xdp_desc`), and only `&mut self` methods write them.
        self.anonymous
            .then(|| unsafe { self.slots.as_ptr().add((i & self.mask) as usize).read() })
    }

    /// Write slot `i` (taken modulo the ring size) as the kernel would.
    pub fn kernel_write_slot(&mut self, i: u32, v: T) -> bool {
        if !self.anonymous {
            return false;
        }
        // SAFETY: masked, inside the slot array of private memory that no
        // kernel and no other borrow (`&mut self`) accesses.
        unsafe { self.slots.as_ptr().add((i & self.mask) as usize).write(v) };
        true
    }
}
