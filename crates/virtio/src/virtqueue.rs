//! The driver side of one split virtqueue (VirtIO 1.2 §2.7), in DMA
//! memory shared with the device.
//!
//! ```text
//!  offset 0        descriptor table   size × 16 B   (§2.7.5)
//!  16 × size       available ring     flags, idx, ring[size], used_event   (§2.7.6)
//!  aligned         used ring          flags, idx, ring[size] of {id, len}, avail_event (§2.7.8)
//! ```
//!
//! Modern queues align the used ring to 4 bytes (§2.7, "Alignment"),
//! legacy ones to 4096 (§2.7.2), because a legacy device is told only the
//! page frame of the descriptor table and computes the rest.
//!
//! Hot-path rules: nothing here allocates after [`Virtqueue::new`]; the
//! free descriptors are a stack preallocated to the queue size; which
//! descriptors form a chain is remembered in ordinary memory (a device
//! that scribbles on the descriptor table cannot make the driver free a
//! descriptor twice); every used-ring entry is checked before it is
//! believed.
//!
//! With VIRTIO_F_IN_ORDER (§2.7.9), [`Virtqueue::set_in_order`] turns the
//! bookkeeping into counting: descriptors are taken in table order (a
//! chain of *k* is the next *k*, wrapping), the chain made available in
//! ring slot *i* is remembered by slot, and a used buffer is known by its
//! position, not by the id the device wrote (which §2.7.9 allows it to
//! write for the last buffer of a batch only); only the length is read,
//! and only where the device writes the buffers. With one descriptor per
//! chain (as the network queues post single-buffer packets) the chain in
//! slot *i* is descriptor *i*, so the available ring, once written round,
//! already holds every entry it will ever hold: its slots are written
//! only when their head changes.
//!
//! The 16-bit ring fields are reached through 32-bit accesses (the DMA
//! region offers u32/u64 atomics): the driver only ever writes words it
//! alone owns (the available ring), so a read-modify-write of such a word
//! races with nobody.

use crate::spec::{desc, ring};
use nfkit_hw::{DmaAllocator, DmaRegion, HwError};
use std::sync::atomic::{fence, Ordering};

/// Which ring layout the transport expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutKind {
    /// Legacy PCI (§2.7.2): used ring on the next 4096-byte boundary.
    Legacy,
    /// VirtIO 1.x (§2.7): each part at its own address, used ring
    /// 4-byte aligned.
    Modern,
}

/// Where the three parts of a queue of `size` entries sit in its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    pub size: u16,
    pub avail: usize,
    pub used: usize,
    /// Bytes to allocate (a whole number of 4 KiB pages).
    pub len: usize,
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

impl RingLayout {
    /// The layout of a queue of `size` entries (a power of two, §2.7).
    pub fn new(kind: LayoutKind, size: u16) -> Result<Self, QueueError> {
        if size < 2 || !size.is_power_of_two() || size > ring::MAX_SIZE {
            return Err(QueueError::BadSize(size));
        }
        let n = size as usize;
        let avail = desc::SIZE * n;
        let avail_end = avail + 6 + 2 * n;
        let used = match kind {
            LayoutKind::Legacy => align_up(avail_end, ring::LEGACY_ALIGN),
            LayoutKind::Modern => align_up(avail_end, 4),
        };
        // +8 rather than +6: `avail_event` is read as the low half of a
        // 32-bit word, whose upper half must be ours too.
        let len = align_up(used + 8 + 8 * n, 4096);
        Ok(RingLayout {
            size,
            avail,
            used,
            len,
        })
    }

    fn avail_ring_entry(&self, slot: u16) -> usize {
        self.avail + 4 + 2 * (slot as usize)
    }
    fn used_event(&self) -> usize {
        self.avail + 4 + 2 * self.size as usize
    }
    fn used_ring_entry(&self, slot: u16) -> usize {
        self.used + 4 + 8 * (slot as usize)
    }
    fn avail_event(&self) -> usize {
        self.used + 4 + 8 * self.size as usize
    }
}

/// Errors building a queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue size {0} is not a power of two between 2 and 32768 (VirtIO 1.2 §2.7)")]
    BadSize(u16),
    #[error("DMA memory for a virtqueue: {0}")]
    Dma(#[from] HwError),
    #[error("a virtqueue needs {need} bytes contiguous in device address space, the allocator gave {got}")]
    NotContiguous { need: usize, got: usize },
}

/// The device put something impossible in the used ring (§2.7.8). The
/// entry is skipped; the caller counts it as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsedError {
    #[error(
        "used ring entry names descriptor {id}, which heads no chain the driver made available"
    )]
    BadId { id: u32 },
    #[error("used.idx moved ahead by {moved} but only {in_flight} buffers are with the device")]
    IndexJump { moved: u16, in_flight: u16 },
}

/// One buffer of a chain: device address, length, and who writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
    pub device_writes: bool,
}

/// A buffer the device has finished with: the chain's head descriptor
/// and the number of bytes it wrote (§2.7.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub head: u16,
    pub len: u32,
}

/// The driver side of one split virtqueue.
pub struct Virtqueue {
    ring: DmaRegion,
    layout: RingLayout,
    event_idx: bool,
    /// Free descriptor ids (capacity = size; never reallocates).
    free: Vec<u16>,
    /// Our own record of each chain: next descriptor of each link.
    chain_next: Box<[u16]>,
    /// Descriptors in the chain headed here; 0 = not a head in flight.
    chain_len: Box<[u16]>,
    /// avail.idx including entries not yet published.
    next_avail: u16,
    /// avail.idx as the device has seen it.
    published: u16,
    /// Next used-ring entry to read.
    last_used: u16,
    /// used.idx as last read from the device.
    seen_used: u16,
    /// Chains with the device.
    in_flight: u16,
    avail_flags: u16,
    /// IN_ORDER bookkeeping (see the module documentation), and whether
    /// used lengths are read.
    in_order: Option<InOrder>,
    /// IN_ORDER: the head of the chain in each available-ring slot, as
    /// written there (`u16::MAX`: not written yet).
    slot_head: Box<[u16]>,
}

#[derive(Debug, Clone, Copy)]
struct InOrder {
    reads_lengths: bool,
    /// The next descriptor to take (mod size).
    next_desc: u16,
    /// Descriptors in chains with the device.
    descs_out: u16,
}

impl std::fmt::Debug for Virtqueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Virtqueue")
            .field("size", &self.layout.size)
            .field("free", &self.free.len())
            .field("next_avail", &self.next_avail)
            .field("last_used", &self.last_used)
            .field("event_idx", &self.event_idx)
            .finish()
    }
}

impl Virtqueue {
    /// A queue of `size` entries in fresh DMA memory. The driver polls,
    /// so used-buffer notifications are suppressed from the start: with
    /// `event_idx`, `used_event` is set one behind the next used index
    /// (the device would interrupt only after 65536 more buffers, §2.7.7);
    /// without it, `avail.flags = NO_INTERRUPT` (§2.7.6).
    pub fn new(
        dma: &dyn DmaAllocator,
        kind: LayoutKind,
        size: u16,
        event_idx: bool,
    ) -> Result<Self, QueueError> {
        let layout = RingLayout::new(kind, size)?;
        let ring = dma.allocate(layout.len, true)?;
        if ring.contiguous_len() < layout.len {
            return Err(QueueError::NotContiguous {
                need: layout.len,
                got: ring.contiguous_len(),
            });
        }
        let n = size as usize;
        let mut q = Virtqueue {
            ring,
            layout,
            event_idx,
            free: (0..size).rev().collect(),
            chain_next: vec![0; n].into_boxed_slice(),
            chain_len: vec![0; n].into_boxed_slice(),
            next_avail: 0,
            published: 0,
            last_used: 0,
            seen_used: 0,
            in_flight: 0,
            avail_flags: 0,
            in_order: None,
            slot_head: vec![u16::MAX; n].into_boxed_slice(),
        };
        if event_idx {
            q.write_avail_u16(layout.used_event(), u16::MAX);
        } else {
            q.avail_flags = ring::AVAIL_F_NO_INTERRUPT;
            q.write_avail_header();
        }
        Ok(q)
    }

    pub fn size(&self) -> u16 {
        self.layout.size
    }
    pub fn layout(&self) -> RingLayout {
        self.layout
    }
    /// Descriptors not in any chain.
    pub fn free_descriptors(&self) -> usize {
        match self.in_order {
            Some(o) => (self.layout.size - o.descs_out) as usize,
            None => self.free.len(),
        }
    }

    /// VIRTIO_F_IN_ORDER was negotiated (§2.7.9): keep the books by
    /// position (module documentation).
    /// `reads_lengths`: the device writes these buffers, so each used
    /// entry's length is read. Only on a fresh queue (returns false and
    /// changes nothing otherwise).
    pub fn set_in_order(&mut self, reads_lengths: bool) -> bool {
        if self.next_avail != 0 || self.in_flight != 0 {
            return false;
        }
        self.in_order = Some(InOrder {
            reads_lengths,
            next_desc: 0,
            descs_out: 0,
        });
        true
    }
    /// Chains the device holds.
    pub fn in_flight(&self) -> u16 {
        self.in_flight
    }
    /// Device address of the descriptor table (also the legacy queue's
    /// base address, §4.1.4.8).
    pub fn desc_addr(&self) -> u64 {
        self.ring.device_addr()
    }
    pub fn avail_addr(&self) -> u64 {
        self.ring.device_addr_at(self.layout.avail)
    }
    pub fn used_addr(&self) -> u64 {
        self.ring.device_addr_at(self.layout.used)
    }
    /// Virtual address of the descriptor table (vhost-user rings are
    /// given by the frontend's virtual addresses).
    pub fn desc_virt(&self) -> usize {
        self.ring.virt_addr()
    }
    pub fn avail_virt(&self) -> usize {
        self.ring.virt_addr() + self.layout.avail
    }
    pub fn used_virt(&self) -> usize {
        self.ring.virt_addr() + self.layout.used
    }

    /// Place a chain of buffers (device-readable ones first, §2.7.4) and
    /// put its head in the available ring, not yet visible to the device
    /// (§2.7.13.1-2). Returns the head, or `None` if too few descriptors
    /// are free (nothing is changed then).
    #[inline]
    pub fn add(&mut self, chain: &[Segment]) -> Option<u16> {
        match (self.in_order, chain) {
            // The usual case, inlined into the caller's loop.
            (Some(order), [seg]) => self.add_one_in_order(order, seg),
            _ => self.add_chain(chain),
        }
    }

    /// [`Self::add`] of anything but one descriptor on an IN_ORDER queue.
    #[inline(never)]
    fn add_chain(&mut self, chain: &[Segment]) -> Option<u16> {
        if let Some(order) = self.in_order {
            return self.add_in_order(order, chain);
        }
        if chain.is_empty() || chain.len() > self.free.len() {
            return None;
        }
        let head = *self.free.last()?;
        let mut prev: Option<u16> = None;
        for seg in chain {
            let id = self.free.pop()?;
            if let Some(p) = prev {
                self.chain_next[p as usize] = id;
                self.link(p, id);
            }
            self.write_descriptor(id, seg);
            prev = Some(id);
        }
        self.chain_len[head as usize] = chain.len() as u16;
        let slot = self.next_avail & (self.layout.size - 1);
        self.write_avail_u16(self.layout.avail_ring_entry(slot), head);
        self.next_avail = self.next_avail.wrapping_add(1);
        self.in_flight += 1;
        Some(head)
    }

    /// IN_ORDER: the chain takes the next `chain.len()` descriptors in
    /// table order (free: the device returns chains in order), and the
    /// next available-ring slot (written only if it held another head).
    fn add_in_order(&mut self, mut order: InOrder, chain: &[Segment]) -> Option<u16> {
        let size = self.layout.size;
        if let [seg] = chain {
            return self.add_one_in_order(order, seg);
        }
        let k = chain.len() as u16;
        if chain.is_empty()
            || chain.len() > size as usize
            || self.in_flight >= size
            || order.descs_out + k > size
        {
            return None;
        }
        let head = order.next_desc;
        let mut id = head;
        for (i, seg) in chain.iter().enumerate() {
            self.write_descriptor(id, seg);
            let next = (id + 1) & (size - 1);
            if i + 1 < chain.len() {
                self.link(id, next);
            }
            id = next;
        }
        order.next_desc = id;
        order.descs_out += k;
        self.in_order = Some(order);
        let slot = self.next_avail & (size - 1);
        self.chain_len[slot as usize] = k;
        if self.slot_head[slot as usize] != head {
            self.slot_head[slot as usize] = head;
            self.write_avail_u16(self.layout.avail_ring_entry(slot), head);
        }
        self.next_avail = self.next_avail.wrapping_add(1);
        self.in_flight += 1;
        Some(head)
    }

    /// IN_ORDER, one descriptor (the usual case): in slot i it is
    /// descriptor i while no longer chain has gone round, so after the
    /// first round no ring slot is written.
    #[inline(always)]
    fn add_one_in_order(&mut self, mut order: InOrder, seg: &Segment) -> Option<u16> {
        let size = self.layout.size;
        if self.in_flight >= size || order.descs_out >= size {
            return None;
        }
        let id = order.next_desc;
        self.write_descriptor(id, seg);
        order.next_desc = (id + 1) & (size - 1);
        order.descs_out += 1;
        self.in_order = Some(order);
        let slot = (self.next_avail & (size - 1)) as usize;
        if let (Some(len), Some(h)) = (self.chain_len.get_mut(slot), self.slot_head.get_mut(slot)) {
            *len = 1;
            if *h != id {
                *h = id;
                self.write_avail_u16(self.layout.avail_ring_entry(slot as u16), id);
            }
        }
        self.next_avail = self.next_avail.wrapping_add(1);
        self.in_flight += 1;
        Some(id)
    }

    #[inline(always)]
    fn write_descriptor(&self, id: u16, seg: &Segment) {
        let off = id as usize * desc::SIZE;
        let flags = if seg.device_writes { desc::F_WRITE } else { 0 };
        self.ring.write_u64(off, seg.addr);
        self.ring.write_u32(off + 8, seg.len);
        // flags and next share a word; next is set by `link` if chained.
        self.ring.write_u32(off + 12, flags as u32);
    }

    fn link(&self, from: u16, to: u16) {
        let off = from as usize * desc::SIZE + 12;
        let flags = self.ring.read_u32(off) as u16 | desc::F_NEXT;
        self.ring.write_u32(off, flags as u32 | (to as u32) << 16);
    }

    /// Make every added chain visible to the device by writing avail.idx
    /// (§2.7.13.3), then say whether the device wants a notification
    /// (§2.7.13.4): with EVENT_IDX, whether the new index passed
    /// `avail_event` (§2.7.10); otherwise whether used.flags lacks
    /// NO_NOTIFY. One call per batch: the batching point of the queue.
    pub fn publish(&mut self) -> bool {
        if self.next_avail == self.published {
            return false;
        }
        // Descriptors and ring entries before the index (§2.7.13.3.1).
        fence(Ordering::Release);
        let old = self.published;
        self.published = self.next_avail;
        self.write_avail_header();
        // The index store before the read of the device's suppression
        // state, or both sides could decide no notification is needed.
        fence(Ordering::SeqCst);
        if self.event_idx {
            let event = self.read_u16(self.layout.avail_event());
            need_event(event, self.next_avail, old)
        } else {
            self.read_u16(self.layout.used) & ring::USED_F_NO_NOTIFY == 0
        }
    }

    /// Take the next buffer the device has used (§2.7.14), or `None`.
    /// used.idx is read from DMA memory only when the entries seen last
    /// time are exhausted, so a batch costs one read of it.
    #[inline]
    pub fn pop_used(&mut self) -> Result<Option<Used>, UsedError> {
        if self.last_used == self.seen_used && self.read_used_idx()? == 0 {
            return Ok(None);
        }
        let slot = self.last_used & (self.layout.size - 1);
        let entry = self.layout.used_ring_entry(slot);
        if let Some(mut order) = self.in_order {
            // The buffer is the one made available in this slot; the id
            // the device wrote is not needed (nor always written, §2.7.9).
            let len = if order.reads_lengths {
                self.ring.read_u32(entry + 4)
            } else {
                0
            };
            self.last_used = self.last_used.wrapping_add(1);
            let k = std::mem::replace(&mut self.chain_len[slot as usize], 0);
            order.descs_out -= k;
            self.in_order = Some(order);
            self.in_flight -= 1;
            let head = self.slot_head[slot as usize];
            return Ok(Some(Used { head, len }));
        }
        self.pop_used_by_id(entry)
    }

    /// How many used entries the device has added since the last read
    /// of used.idx (once per batch), checked against what it holds.
    #[inline(never)]
    fn read_used_idx(&mut self) -> Result<u16, UsedError> {
        let idx = self.read_u16(self.layout.used + 2);
        let moved = idx.wrapping_sub(self.last_used);
        if moved > self.in_flight {
            return Err(UsedError::IndexJump {
                moved,
                in_flight: self.in_flight,
            });
        }
        self.seen_used = idx;
        Ok(moved)
    }

    /// [`Self::pop_used`] without IN_ORDER: the entry names its chain.
    #[inline(never)]
    fn pop_used_by_id(&mut self, entry: usize) -> Result<Option<Used>, UsedError> {
        let id = self.ring.read_u32(entry);
        let len = self.ring.read_u32(entry + 4);
        self.last_used = self.last_used.wrapping_add(1);
        if id >= self.layout.size as u32 || self.chain_len[id as usize] == 0 {
            self.in_flight = self.in_flight.saturating_sub(1);
            return Err(UsedError::BadId { id });
        }
        self.free_chain(id as u16);
        Ok(Some(Used {
            head: id as u16,
            len,
        }))
    }

    fn free_chain(&mut self, head: u16) {
        let mut id = head;
        let n = std::mem::replace(&mut self.chain_len[head as usize], 0);
        for i in 0..n {
            self.free.push(id);
            if i + 1 < n {
                id = self.chain_next[id as usize];
            }
        }
        self.in_flight -= 1;
    }

    /// Ask for a used-buffer notification once the device has used the
    /// buffer at used index `idx` (EVENT_IDX, §2.7.7), or allow
    /// notifications again (no EVENT_IDX, §2.7.6). For a driver that
    /// blocks instead of polling.
    pub fn enable_used_notification(&mut self) {
        if self.event_idx {
            self.write_avail_u16(self.layout.used_event(), self.last_used);
        } else {
            self.avail_flags &= !ring::AVAIL_F_NO_INTERRUPT;
            self.write_avail_header();
        }
        fence(Ordering::SeqCst);
    }

    /// Back to polling: suppress used-buffer notifications again, as
    /// [`Virtqueue::new`] does (`used_event` one behind the next used
    /// index; or `NO_INTERRUPT`).
    pub fn disable_used_notification(&mut self) {
        if self.event_idx {
            self.write_avail_u16(self.layout.used_event(), self.last_used.wrapping_sub(1));
        } else {
            self.avail_flags |= ring::AVAIL_F_NO_INTERRUPT;
            self.write_avail_header();
        }
    }

    fn write_avail_header(&self) {
        self.ring.write_u32(
            self.layout.avail,
            self.avail_flags as u32 | (self.published as u32) << 16,
        );
    }

    fn write_avail_u16(&self, off: usize, v: u16) {
        let word = off & !3;
        let shift = (off & 2) * 8;
        let old = self.ring.read_u32(word);
        self.ring
            .write_u32(word, (old & !(0xffff << shift)) | (v as u32) << shift);
    }

    fn read_u16(&self, off: usize) -> u16 {
        (self.ring.read_u32(off & !3) >> ((off & 2) * 8)) as u16
    }
}

/// §2.7.10: the device asked to be notified when the driver's index moves
/// past `event`; did the move from `old` to `new` do so? (Wrapping
/// arithmetic: the indices are free-running 16-bit counters.)
pub fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_hw::sim::SimDma;

    #[test]
    fn layouts_match_the_spec_formulas() {
        let l = RingLayout::new(LayoutKind::Legacy, 256).unwrap();
        assert_eq!(l.avail, 4096);
        assert_eq!(l.used, 8192); // 4096 + 6 + 512 rounded to 4096
        let m = RingLayout::new(LayoutKind::Modern, 256).unwrap();
        assert_eq!(m.used, 4096 + 520);
        assert!(RingLayout::new(LayoutKind::Modern, 100).is_err());
        assert!(RingLayout::new(LayoutKind::Modern, 1).is_err());
    }

    #[test]
    fn need_event_wraps() {
        assert!(need_event(0, 1, 0));
        assert!(!need_event(1, 1, 0));
        assert!(need_event(0xffff, 2, 0xfffe));
        assert!(!need_event(5, 3, 0));
    }

    #[test]
    fn in_order_queues_count_positions_and_reuse_descriptors_in_ring_order() {
        let dma = SimDma::new();
        let mut q = Virtqueue::new(&*dma, LayoutKind::Modern, 4, false).unwrap();
        assert!(q.set_in_order(true));
        let seg = |addr| Segment {
            addr,
            len: 64,
            device_writes: true,
        };
        let heads: Vec<u16> = (0..4).filter_map(|i| q.add(&[seg(0x1000 * i)])).collect();
        assert_eq!(heads, [0, 1, 2, 3], "slot i is descriptor i");
        assert!(q.add(&[seg(0)]).is_none(), "all four are out");
        assert!(q.add(&[seg(0), seg(0)]).is_none(), "no room for two");
        q.publish();
        // The device returns two buffers, writing a bogus id in the first
        // entry (only the last of a batch need carry one, §2.7.9).
        let used = q.used_addr();
        dma.write_u32(used + 4, 0xdead).unwrap();
        dma.write_u32(used + 8, 60).unwrap();
        dma.write_u32(used + 12, 1).unwrap();
        dma.write_u32(used + 16, 70).unwrap();
        dma.write_u32(used, 2 << 16).unwrap();
        assert_eq!(q.pop_used().unwrap(), Some(Used { head: 0, len: 60 }));
        assert_eq!(q.pop_used().unwrap(), Some(Used { head: 1, len: 70 }));
        assert_eq!(q.pop_used().unwrap(), None);
        assert_eq!(q.free_descriptors(), 2);
        assert_eq!(q.add(&[seg(0x9000)]), Some(0), "descriptor 0 again");
        // More used than in flight is still refused.
        dma.write_u32(used, 9 << 16).unwrap();
        assert!(matches!(q.pop_used(), Err(UsedError::IndexJump { .. })));
        assert!(!q.set_in_order(false), "only on a fresh queue");
    }

    #[test]
    fn in_order_chains_of_several_descriptors_take_them_in_table_order() {
        let dma = SimDma::new();
        let mut q = Virtqueue::new(&*dma, LayoutKind::Modern, 4, false).unwrap();
        assert!(q.set_in_order(false));
        let seg = Segment {
            addr: 0x1000,
            len: 64,
            device_writes: false,
        };
        assert_eq!(q.add(&[seg, seg, seg]), Some(0));
        assert_eq!(q.free_descriptors(), 1);
        assert!(q.add(&[seg, seg]).is_none(), "two do not fit in one");
        assert_eq!(q.add(&[seg]), Some(3));
        q.publish();
        // Descriptor 0 links to 1 and 2; 2 ends the chain.
        let desc = q.desc_addr();
        let word = |id: u64| (dma.read_u64(desc + 16 * id + 8).unwrap() >> 32) as u32;
        assert_eq!(word(0), desc::F_NEXT as u32 | 1 << 16);
        assert_eq!(word(1), desc::F_NEXT as u32 | 2 << 16);
        assert_eq!(word(2) & desc::F_NEXT as u32, 0);
        let used = q.used_addr();
        dma.write_u32(used + 4, 0).unwrap();
        dma.write_u32(used, 1 << 16).unwrap();
        assert_eq!(q.pop_used().unwrap(), Some(Used { head: 0, len: 0 }));
        assert_eq!(q.free_descriptors(), 3);
        // The next chain wraps round the table: 0, 1 (after 3).
        assert_eq!(q.add(&[seg, seg]), Some(0));
        assert_eq!(q.add(&[seg]), Some(2));
    }

    #[test]
    fn chains_are_freed_whole_and_bad_ids_rejected() {
        let dma = SimDma::new();
        let mut q = Virtqueue::new(&*dma, LayoutKind::Modern, 4, false).unwrap();
        let seg = Segment {
            addr: 0x1000,
            len: 64,
            device_writes: false,
        };
        let head = q.add(&[seg, seg, seg]).unwrap();
        assert_eq!(q.free_descriptors(), 1);
        assert!(q.add(&[seg, seg]).is_none());
        assert!(q.publish(), "no NO_NOTIFY set by the device: notify");
        // Device side: put the head in the used ring by hand.
        let base = q.used_addr();
        dma.write_u32(base + 4, head as u32).unwrap();
        dma.write_u32(base + 8, 0).unwrap();
        dma.write_u32(base, 1 << 16).unwrap(); // flags 0, idx 1
        assert_eq!(q.pop_used().unwrap(), Some(Used { head, len: 0 }));
        assert_eq!(q.free_descriptors(), 4);
        assert_eq!(q.pop_used().unwrap(), None);
        // A used index far ahead of what is in flight is refused.
        dma.write_u32(base, 9 << 16).unwrap();
        assert!(matches!(q.pop_used(), Err(UsedError::IndexJump { .. })));
    }
}
