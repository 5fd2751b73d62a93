//! The device side of one split virtqueue of a VirtIO-net device: what a
//! vhost-user backend does with the frontend's rings (VirtIO 1.2 §2.7
//! seen from the device; §5.1.6.2 and §5.1.6.4 for the packets).
//!
//! One [`DeviceQueue`] per ring. A batch reads `avail.idx` once
//! ([`DeviceQueue::pop_tx`] / [`DeviceQueue::push_rx`] take chains until
//! the index read last is reached, then read it again), writes one used
//! entry per chain, and ends with [`DeviceQueue::publish_used`]: one
//! store of `used.idx` and the decision whether the driver wants a
//! used-buffer notification (§2.7.7: `used_event` with EVENT_IDX, else
//! `avail.flags`).
//!
//! Everything in the rings is the frontend's to scribble on, so nothing
//! read there is believed: `avail.idx` may not run more than the queue
//! size ahead (else the queue stops, [`RingFault`]); descriptor indices
//! beyond the table, chains longer than the queue (a loop, §2.7.5.3.1),
//! indirect descriptors (not offered), buffers of the wrong direction or
//! outside the memory table make the chain [`Moved::Bad`]: it goes back
//! to the driver with length 0 and the caller counts it.

use super::memory::FrontendMemory;
use super::shared_ring::{PlaceError, RingAddrs, SharedRing};
use crate::spec::{desc, ring};
use crate::virtqueue::need_event;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// What happened to one packet moved through a device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A packet of this many bytes (header excluded).
    Packet(usize),
    /// The driver has posted nothing (or the queue has stopped).
    Empty,
    /// The chain was malformed or too small; it was returned unused.
    Bad,
}

/// The `virtio_net_hdr` a device puts in front of a received packet
/// (§5.1.6.4), `hdr_len` bytes: no checksum or segmentation offload, and
/// `num_buffers` = 1 when the header has that field (12 bytes: VERSION_1
/// or MRG_RXBUF). A constant: copying it loads nothing just stored.
pub fn rx_header(hdr_len: usize) -> &'static [u8] {
    static MODERN: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    static LEGACY: [u8; 10] = [0; 10];
    if hdr_len == MODERN.len() {
        &MODERN
    } else {
        &LEGACY[..hdr_len.min(LEGACY.len())]
    }
}

/// The driver broke the ring itself; the queue stops until the frontend
/// sets it up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingFault {
    #[error("avail.idx moved {moved} entries ahead in a queue of {size} (§2.7.6)")]
    AvailJump { moved: u16, size: u16 },
}

/// The device side of one split virtqueue.
#[derive(Debug)]
pub struct DeviceQueue {
    ring: SharedRing,
    /// Last region that served an address (see `FrontendMemory::read`).
    hint: usize,
    /// Next available-ring slot to take.
    next_avail: u16,
    /// avail.idx as last read.
    seen_avail: u16,
    /// used.idx including entries not yet published.
    next_used: u16,
    /// used.idx as last published.
    published: u16,
    event_idx: bool,
    fault: Option<RingFault>,
}

impl DeviceQueue {
    /// Start a queue of `size` entries at `addrs`, taking chains from
    /// available index `next_avail` on and returning them after the used
    /// entries the ring already holds. We poll, so the driver is asked not
    /// to notify (§2.7.10: used.flags NO_NOTIFY; with EVENT_IDX,
    /// `avail_event` is parked half the index space away and never moved,
    /// so a driver notifies at most once per 65536 buffers).
    pub fn start(
        mem: Arc<FrontendMemory>,
        addrs: RingAddrs,
        size: u16,
        next_avail: u16,
        event_idx: bool,
    ) -> Result<DeviceQueue, PlaceError> {
        let ring = SharedRing::place(mem, addrs, size)?;
        let used = ring.used_idx();
        ring.set_used_flags(ring::USED_F_NO_NOTIFY);
        if event_idx {
            ring.set_avail_event(next_avail.wrapping_add(0x8000));
        }
        Ok(DeviceQueue {
            ring,
            hint: 0,
            next_avail,
            seen_avail: next_avail,
            next_used: used,
            published: used,
            event_idx,
            fault: None,
        })
    }

    /// Ask the driver to notify (kick) for buffers it makes available
    /// from now on, before a loop sleeps (§2.7.10: used.flags 0; with
    /// EVENT_IDX, `avail_event` = the next index we take, §2.7.10.2).
    /// The full fence orders these stores before the caller's re-check
    /// of `avail.idx`: the driver stores `avail.idx`, fences, then reads
    /// them (§2.7.13.4), so either it sees the request or we see its
    /// buffers.
    pub fn enable_notify(&mut self) {
        self.ring.set_used_flags(0);
        if self.event_idx {
            self.ring.set_avail_event(self.next_avail);
        }
        fence(Ordering::SeqCst);
    }

    /// Back to polling: no notifications (as [`DeviceQueue::start`]).
    pub fn disable_notify(&mut self) {
        self.ring.set_used_flags(ring::USED_F_NO_NOTIFY);
        if self.event_idx {
            self.ring
                .set_avail_event(self.next_avail.wrapping_add(0x8000));
        }
    }

    /// The available index from which chains are still to be taken (what
    /// GET_VRING_BASE reports).
    pub fn next_avail(&self) -> u16 {
        self.next_avail
    }
    /// Why the queue stopped, if it did.
    pub fn fault(&self) -> Option<RingFault> {
        self.fault
    }

    /// Chains the driver has made available and we have not taken; reads
    /// `avail.idx` only when those seen last time are used up.
    #[inline]
    pub fn pending(&mut self) -> u16 {
        if self.next_avail == self.seen_avail && self.fault.is_none() {
            let idx = self.ring.avail_idx();
            let moved = idx.wrapping_sub(self.next_avail);
            if moved > self.ring.size() {
                self.fault = Some(RingFault::AvailJump {
                    moved,
                    size: self.ring.size(),
                });
                return 0;
            }
            self.seen_avail = idx;
        }
        if self.fault.is_some() {
            return 0;
        }
        self.seen_avail.wrapping_sub(self.next_avail)
    }

    /// Start loading what the next `n` chains need for reading (their
    /// descriptors, then the start of the buffers they name), so that
    /// the cache misses of a batch overlap instead of coming one after
    /// the other in [`Self::pop_tx`]. The chains are not taken.
    ///
    /// (Only for chains the device reads: for receive chains, where the
    /// device writes, measured against DPDK's virtio_user, prefetching
    /// the buffers, even for writing, cost more than it saved.)
    #[inline]
    pub fn prefetch(&mut self, n: usize) {
        let n = (self.pending() as usize).min(n) as u16;
        for i in 0..n {
            let head = self.ring.avail_entry(self.next_avail.wrapping_add(i));
            self.ring.prefetch_descriptor(head);
        }
        for i in 0..n {
            let head = self.ring.avail_entry(self.next_avail.wrapping_add(i));
            if let Some(d) = self.ring.descriptor(head) {
                let mem = self.ring.memory();
                mem.prefetch(&mut self.hint, d.addr, d.len as usize);
            }
        }
    }

    /// The head of the next available chain, if any.
    #[inline]
    fn take_head(&mut self) -> Option<u16> {
        if self.pending() == 0 {
            return None;
        }
        let head = self.ring.avail_entry(self.next_avail);
        self.next_avail = self.next_avail.wrapping_add(1);
        Some(head)
    }

    /// Hand chain `head` back with `len` bytes written (not yet visible
    /// to the driver: see [`Self::publish_used`]).
    #[inline]
    fn give_back(&mut self, head: u16, len: u32) {
        self.ring.set_used_entry(self.next_used, head, len);
        self.next_used = self.next_used.wrapping_add(1);
    }

    /// §5.1.6.2 seen from the device: copy the next packet the driver
    /// transmitted into `out` (without its `hdr_len`-byte header, which
    /// asks for no offload we offered) and give the chain back.
    #[inline]
    pub fn pop_tx(&mut self, hdr_len: usize, out: &mut [u8]) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad; // no such chain to give back
        }
        let got = self.read_chain(head, hdr_len, out);
        self.give_back(head, 0);
        match got {
            Some(n) => Moved::Packet(n),
            None => Moved::Bad,
        }
    }

    /// Read chain `head` as one byte stream (header, then packet) into
    /// `out`; the packet's length, or `None` if the chain is bad.
    fn read_chain(&mut self, head: u16, hdr_len: usize, out: &mut [u8]) -> Option<usize> {
        let mut skip = hdr_len;
        let mut n = 0usize;
        let mut id = head;
        for _ in 0..self.ring.size() {
            let d = self.ring.descriptor(id)?;
            if d.flags & (desc::F_WRITE | desc::F_INDIRECT) != 0 {
                return None;
            }
            let s = skip.min(d.len as usize);
            skip -= s;
            let len = d.len as usize - s;
            if len > 0 {
                // The frontend picks the address: one near u64::MAX must
                // not wrap around to memory it did not name.
                let addr = d.addr.checked_add(s as u64)?;
                let dst = out.get_mut(n..n + len)?;
                self.ring.memory().read(&mut self.hint, addr, dst).ok()?;
                n += len;
            }
            if d.flags & desc::F_NEXT == 0 {
                return (skip == 0).then_some(n);
            }
            id = d.next;
        }
        None // longer than the queue: a loop
    }

    /// §5.1.6.4 seen from the device: write `pkt` behind a
    /// `hdr_len`-byte [`rx_header`] into the next receive chain (one
    /// buffer, usually: the header is a small constant store, the packet
    /// one copy), and give it back.
    #[inline]
    pub fn push_rx(&mut self, hdr_len: usize, pkt: &[u8]) -> Moved {
        self.push_parts(hdr_len, [rx_header(hdr_len), pkt])
    }

    #[inline]
    fn push_parts(&mut self, hdr_len: usize, parts: [&[u8]; 2]) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad;
        }
        match self.write_chain(head, parts) {
            Some(written) => {
                self.give_back(head, written as u32);
                Moved::Packet(written.saturating_sub(hdr_len))
            }
            None => {
                self.give_back(head, 0);
                Moved::Bad
            }
        }
    }

    /// Write `parts` one after the other into chain `head`; the bytes
    /// written, or `None` if the chain is bad or too short.
    fn write_chain(&mut self, head: u16, mut parts: [&[u8]; 2]) -> Option<usize> {
        let total = parts[0].len() + parts[1].len();
        // The usual case: one buffer with room for everything.
        let d = self.ring.descriptor(head)?;
        if d.flags & (desc::F_WRITE | desc::F_INDIRECT) == desc::F_WRITE && d.len as usize >= total
        {
            let mem = self.ring.memory();
            mem.write(&mut self.hint, d.addr, parts[0]).ok()?;
            if !parts[1].is_empty() {
                let at = d.addr + parts[0].len() as u64; // inside the buffer
                mem.write(&mut self.hint, at, parts[1]).ok()?;
            }
            return Some(total);
        }
        let mut written = 0usize;
        let mut id = head;
        for _ in 0..self.ring.size() {
            let d = self.ring.descriptor(id)?;
            if d.flags & desc::F_WRITE == 0 || d.flags & desc::F_INDIRECT != 0 {
                return None;
            }
            let mut addr = d.addr;
            let mut room = d.len as usize;
            for part in parts.iter_mut() {
                let take = part.len().min(room);
                if take == 0 {
                    continue;
                }
                self.ring
                    .memory()
                    .write(&mut self.hint, addr, &part[..take])
                    .ok()?;
                *part = &part[take..];
                // Cannot overflow: the write covered addr..addr + take.
                addr += take as u64;
                room -= take;
                written += take;
            }
            if parts.iter().all(|p| p.is_empty()) {
                return Some(written);
            }
            if d.flags & desc::F_NEXT == 0 {
                return None; // the packet does not fit
            }
            id = d.next;
        }
        None
    }

    /// Make the chains given back since the last call visible to the
    /// driver (one store of used.idx, §2.7.8.2) and say whether it asked
    /// to be notified of them (§2.7.7).
    #[inline]
    pub fn publish_used(&mut self) -> bool {
        if self.next_used == self.published {
            return false;
        }
        let old = self.published;
        self.published = self.next_used;
        self.ring.set_used_idx(self.next_used);
        // The index store before the read of the driver's suppression
        // state, or both sides could decide no notification is needed.
        fence(Ordering::SeqCst);
        if self.event_idx {
            need_event(self.ring.used_event(), self.next_used, old)
        } else {
            self.ring.avail_flags() & ring::AVAIL_F_NO_INTERRUPT == 0
        }
    }
}
