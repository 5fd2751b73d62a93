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

use nfkit_hw::linux::Mapping;
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
    _t: PhantomData<T>,
}

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
        let len = off.desc as usize + entries as usize * std::mem::size_of::<T>();
        let map = Mapping::file(fd, len, pgoff)?;
        let at = |o: u64| -> NonNull<u8> {
            // SAFETY: the kernel's offsets lie inside the ring it sized for
            // `entries` slots, which is `len` bytes.
            unsafe { NonNull::new_unchecked(map.ptr().as_ptr().add(o as usize)) }
        };
        let ring = Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            slots: at(off.desc).cast(),
            mask: entries - 1,
            local: 0,
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

    /// Whether the kernel asks for a wakeup (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.index(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // --- rings we produce on (fill, TX) ---

    /// Free slots.
    pub fn free(&self) -> u32 {
        let cons = self.index(self.consumer).load(Ordering::Acquire);
        (self.mask + 1) - self.local.wrapping_sub(cons)
    }

    /// Write the next slot; the caller checked `free() > 0`.
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

    /// Slots the kernel has filled and we have not released.
    pub fn available(&self) -> u32 {
        let prod = self.index(self.producer).load(Ordering::Acquire);
        prod.wrapping_sub(self.local)
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
}
