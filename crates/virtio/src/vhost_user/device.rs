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
use crate::vnet::DropReason;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// What happened to one packet moved through a device queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A packet of this many bytes (header excluded).
    Packet(usize),
    /// The driver has posted nothing (or the queue has stopped).
    Empty,
    /// The chain was malformed or too small, or the frame too large; it
    /// was returned unused (every chain taken for it, with length 0).
    Bad(DropReason),
}

/// The `virtio_net_hdr` a device puts in front of a received packet
/// (§5.1.6.4), `hdr_len` bytes: no checksum or segmentation offload, and
/// `num_buffers` = 1 when the header has that field (12 bytes: VERSION_1
/// or MRG_RXBUF). A constant: copying it loads nothing just stored.
pub fn rx_header(hdr_len: usize) -> &'static [u8] {
    static LEGACY: [u8; 10] = [0; 10];
    if hdr_len == MODERN_RX_HEADER.len() {
        &MODERN_RX_HEADER
    } else {
        &LEGACY[..hdr_len.min(LEGACY.len())]
    }
}

/// The 12-byte [`rx_header`].
const MODERN_RX_HEADER: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];

/// Write [`rx_header`] over the first `hdr_len` bytes of `frame`: the
/// usual 12 bytes as two word stores, not a copy of `hdr_len` bytes.
#[inline(always)]
pub fn put_rx_header(frame: &mut [u8], hdr_len: usize) {
    match frame.first_chunk_mut::<12>() {
        Some(h) if hdr_len == 12 => *h = MODERN_RX_HEADER,
        _ => {
            let h = rx_header(hdr_len);
            let n = h.len().min(frame.len());
            frame[..n].copy_from_slice(&h[..n]);
        }
    }
}

/// A read position in a frame given as slices.
struct Cursor<'a> {
    parts: &'a [&'a [u8]],
    i: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    fn done(&mut self) -> bool {
        while let Some(p) = self.parts.get(self.i) {
            if self.off < p.len() {
                return false;
            }
            self.i += 1;
            self.off = 0;
        }
        true
    }
    /// Up to `max` bytes of the current part (call after `done`).
    fn take(&mut self, max: usize) -> &'a [u8] {
        let p: &'a [u8] = self.parts.get(self.i).copied().unwrap_or(&[]);
        let end = p.len().min(self.off + max);
        let chunk = &p[self.off.min(end)..end];
        self.off = end;
        chunk
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
    /// Heads of the chains one merged receive frame took (queue size).
    taken: Box<[u16]>,
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
            taken: vec![0; size as usize].into_boxed_slice(),
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
        match self.seen_avail.wrapping_sub(self.next_avail) {
            0 => self.read_avail_idx(),
            left => left,
        }
    }

    /// Chains newly made available, from a read of `avail.idx` (once per
    /// batch); 0 once the queue has stopped.
    #[inline(never)]
    fn read_avail_idx(&mut self) -> u16 {
        if self.fault.is_some() {
            return 0;
        }
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
        moved
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
    /// transmitted and give the chain back. Its `hdr_len`-byte header is
    /// skipped, or with `keep_hdr` copied in front of the packet (one
    /// copy: header and packet usually share a buffer) and counted in
    /// the length. The bytes go into `out`, or, when longer than `out`,
    /// all of them into `spill` (`Moved::Packet(n)` with
    /// `n > out.len()`). More than `max` bytes, a loop, a buffer outside
    /// the memory or of the wrong direction is `Moved::Bad`, never read
    /// past.
    #[inline]
    pub fn pop_tx(
        &mut self,
        hdr_len: usize,
        keep_hdr: bool,
        out: &mut [u8],
        spill: &mut Vec<u8>,
        max: usize,
    ) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad(DropReason::BadIndex); // no such chain to give back
        }
        let skip = if keep_hdr { 0 } else { hdr_len };
        // The usual chain: one readable buffer holding header and packet,
        // which fit `out`; read in one copy, with the same checks the
        // walk makes (the walk handles everything else, bad input too).
        if let Some(d) = self.ring.descriptor(head) {
            let len = d.len as usize;
            if d.flags & (desc::F_NEXT | desc::F_WRITE | desc::F_INDIRECT) == 0
                && len >= hdr_len
                && len - skip <= out.len()
                && len - skip <= max
            {
                let ok = match (d.addr.checked_add(skip as u64), out.get_mut(..len - skip)) {
                    (Some(at), Some(o)) => self.ring.memory().read(&mut self.hint, at, o).is_ok(),
                    _ => false,
                };
                self.give_back(head, 0);
                return if ok {
                    Moved::Packet(len - skip)
                } else {
                    Moved::Bad(DropReason::Outside)
                };
            }
        }
        let got = self.read_chain(head, skip, hdr_len, out, spill, max);
        self.give_back(head, 0);
        match got {
            Ok(n) => Moved::Packet(n),
            Err(r) => Moved::Bad(r),
        }
    }

    /// Read chain `head` as one byte stream (header, then packet), the
    /// first `skip` bytes skipped; the bytes read. The stream must be at
    /// least `hdr_len` long.
    fn read_chain(
        &mut self,
        head: u16,
        mut skip: usize,
        hdr_len: usize,
        out: &mut [u8],
        spill: &mut Vec<u8>,
        max: usize,
    ) -> Result<usize, DropReason> {
        let skip_total = skip;
        let mut n = 0usize;
        let mut spilled = false;
        let mut id = head;
        for _ in 0..self.ring.size() {
            let d = self.ring.descriptor(id).ok_or(DropReason::BadIndex)?;
            if d.flags & (desc::F_WRITE | desc::F_INDIRECT) != 0 {
                return Err(DropReason::Direction);
            }
            let mut len = d.len as usize;
            // The frontend picks the address: one near u64::MAX must
            // not wrap around to memory it did not name.
            let mut addr = d.addr;
            if skip > 0 {
                let s = skip.min(len);
                skip -= s;
                len -= s;
                addr = addr.checked_add(s as u64).ok_or(DropReason::Outside)?;
            }
            if len > 0 {
                if n + len > max {
                    return Err(DropReason::TooLong);
                }
                let mem = self.ring.memory();
                if !spilled && n + len <= out.len() {
                    mem.read(&mut self.hint, addr, &mut out[n..n + len])
                        .map_err(|_| DropReason::Outside)?;
                } else {
                    if !spilled {
                        spilled = true;
                        spill.clear();
                        spill.extend_from_slice(&out[..n]);
                    }
                    spill.resize(n + len, 0);
                    mem.read(&mut self.hint, addr, &mut spill[n..n + len])
                        .map_err(|_| DropReason::Outside)?;
                }
                n += len;
            }
            if d.flags & desc::F_NEXT == 0 {
                return if skip == 0 && n >= hdr_len - hdr_len.min(skip_total) {
                    Ok(n)
                } else {
                    Err(DropReason::ShortHeader)
                };
            }
            id = d.next;
        }
        Err(DropReason::Loop) // longer than the queue: a loop
    }

    /// §5.1.6.4 seen from the device: write `pkt` behind a
    /// `hdr_len`-byte [`rx_header`] into the next receive chain (one
    /// buffer, usually: the header is a small constant store, the packet
    /// one copy), and give it back. With `mergeable` (MRG_RXBUF) a packet
    /// larger than one chain continues in the next ones.
    #[inline]
    pub fn push_rx(&mut self, hdr_len: usize, pkt: &[u8], mergeable: bool) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad(DropReason::BadIndex);
        }
        let hdr = rx_header(hdr_len);
        let total = hdr.len() + pkt.len();
        // The usual case: one buffer with room for everything.
        if let Some(d) = self.ring.descriptor(head) {
            if d.flags & (desc::F_WRITE | desc::F_INDIRECT) == desc::F_WRITE
                && d.len as usize >= total
            {
                let mem = self.ring.memory();
                let ok = mem.write(&mut self.hint, d.addr, hdr).is_ok()
                    // Inside the buffer: d.len >= total.
                    && mem.write(&mut self.hint, d.addr + hdr.len() as u64, pkt).is_ok();
                if !ok {
                    self.give_back(head, 0);
                    return Moved::Bad(DropReason::Outside);
                }
                self.give_back(head, total as u32);
                return Moved::Packet(pkt.len());
            }
        }
        self.push_slow(head, hdr_len, &[hdr, pkt], mergeable)
    }

    /// [`Self::push_rx`] of a frame whose `hdr_len`-byte header is
    /// already in front of it (as [`put_rx_header`] writes it): one copy
    /// into the usual one-buffer chain.
    #[inline]
    pub fn push_rx_framed(&mut self, hdr_len: usize, frame: &[u8], mergeable: bool) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad(DropReason::BadIndex);
        }
        if let Some(d) = self.ring.descriptor(head) {
            if d.flags & (desc::F_WRITE | desc::F_INDIRECT) == desc::F_WRITE
                && d.len as usize >= frame.len()
            {
                if self
                    .ring
                    .memory()
                    .write(&mut self.hint, d.addr, frame)
                    .is_err()
                {
                    self.give_back(head, 0);
                    return Moved::Bad(DropReason::Outside);
                }
                self.give_back(head, frame.len() as u32);
                return Moved::Packet(frame.len().saturating_sub(hdr_len));
            }
        }
        self.push_slow(head, hdr_len, &[frame], mergeable)
    }

    /// Write a frame given as slices (its `hdr_len`-byte header first,
    /// then its bytes) into the next receive chain, or with `mergeable`
    /// into as many chains as it needs, `num_buffers` (header bytes 10
    /// and 11) set to their number. When the driver has not posted enough
    /// chains yet, nothing is taken (`Moved::Empty`); a frame that would
    /// need more chains than its ring has, or a chain it does not fit
    /// without `mergeable`, is `Moved::Bad(NoRoom)`; every chain taken for
    /// a dropped frame goes back with length 0.
    #[inline]
    pub fn push_frame(&mut self, hdr_len: usize, parts: &[&[u8]], mergeable: bool) -> Moved {
        let Some(head) = self.take_head() else {
            return Moved::Empty;
        };
        if head >= self.ring.size() {
            return Moved::Bad(DropReason::BadIndex);
        }
        // The usual case: one buffer with room for everything.
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if let Some(d) = self.ring.descriptor(head) {
            if d.flags & (desc::F_WRITE | desc::F_INDIRECT) == desc::F_WRITE
                && d.len as usize >= total
            {
                let mem = self.ring.memory();
                let mut at = d.addr;
                for part in parts {
                    if mem.write(&mut self.hint, at, part).is_err() {
                        self.give_back(head, 0);
                        return Moved::Bad(DropReason::Outside);
                    }
                    at += part.len() as u64; // inside the buffer
                }
                self.give_back(head, total as u32);
                return Moved::Packet(total.saturating_sub(hdr_len));
            }
        }
        self.push_slow(head, hdr_len, parts, mergeable)
    }

    fn push_slow(&mut self, first: u16, hdr_len: usize, parts: &[&[u8]], mergeable: bool) -> Moved {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let start_avail = self.next_avail.wrapping_sub(1);
        let start_used = self.next_used;
        let mut cur = Cursor {
            parts,
            i: 0,
            off: 0,
        };
        // Where header bytes 10 and 11 (num_buffers) landed.
        let mut nb = [None; 2];
        let mut head = first;
        let mut bufs: u16 = 0;
        let fail = |q: &mut Self, r| {
            // Every chain taken for this frame: length 0.
            let mut i = start_used;
            while i != q.next_used {
                let id = q.taken[(i.wrapping_sub(start_used)) as usize];
                q.ring.set_used_entry(i, id, 0);
                i = i.wrapping_add(1);
            }
            Moved::Bad(r)
        };
        loop {
            let w = self.write_chain(head, &mut cur, &mut nb);
            let i = self.next_used.wrapping_sub(start_used) as usize;
            if let Some(t) = self.taken.get_mut(i) {
                *t = head;
            }
            match w {
                Ok(w) => self.give_back(head, w as u32),
                Err(r) => {
                    self.give_back(head, 0);
                    return fail(self, r);
                }
            }
            bufs += 1;
            if cur.done() {
                break;
            }
            if !mergeable {
                return fail(self, DropReason::NoRoom);
            }
            if bufs >= self.ring.size() {
                return fail(self, DropReason::NoRoom);
            }
            match self.take_head() {
                Some(h) if h < self.ring.size() => head = h,
                Some(_) => return fail(self, DropReason::BadIndex),
                None => {
                    // Not enough posted yet: take nothing, try again later.
                    self.next_avail = start_avail;
                    self.next_used = start_used;
                    return Moved::Empty;
                }
            }
        }
        if mergeable {
            let mem = self.ring.memory();
            for (at, byte) in nb.iter().zip(bufs.to_le_bytes()) {
                if let Some(a) = at {
                    // Written a moment ago: inside the memory.
                    let _ = mem.write(&mut self.hint, *a, &[byte]);
                }
            }
        }
        Moved::Packet(total.saturating_sub(hdr_len))
    }

    /// Write what is left of `cur` into chain `head`, as far as it goes;
    /// the bytes written. `nb` records where header bytes 10 and 11 went.
    fn write_chain(
        &mut self,
        head: u16,
        cur: &mut Cursor<'_>,
        nb: &mut [Option<u64>; 2],
    ) -> Result<usize, DropReason> {
        let mut written = 0usize;
        let mut id = head;
        for _ in 0..self.ring.size() {
            let d = self.ring.descriptor(id).ok_or(DropReason::BadIndex)?;
            if d.flags & desc::F_WRITE == 0 || d.flags & desc::F_INDIRECT != 0 {
                return Err(DropReason::Direction);
            }
            let mut addr = d.addr;
            let mut room = d.len as usize;
            while room > 0 && !cur.done() {
                let (part, off) = (cur.i, cur.off);
                let chunk = cur.take(room);
                self.ring
                    .memory()
                    .write(&mut self.hint, addr, chunk)
                    .map_err(|_| DropReason::Outside)?;
                if part == 0 {
                    for (k, slot) in nb.iter_mut().enumerate() {
                        let b = 10 + k;
                        if (off..off + chunk.len()).contains(&b) {
                            *slot = Some(addr + (b - off) as u64);
                        }
                    }
                }
                // Cannot overflow: the write covered addr..addr + len.
                addr += chunk.len() as u64;
                room -= chunk.len();
                written += chunk.len();
            }
            if cur.done() || d.flags & desc::F_NEXT == 0 {
                return Ok(written);
            }
            id = d.next;
        }
        Err(DropReason::Loop)
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
