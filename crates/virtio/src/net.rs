//! The network device over any transport (VirtIO 1.2 §5.1): receive and
//! transmit queue pairs on [`Virtqueue`]s, one [`PktBuf`] per descriptor,
//! and the [`Port`] implementation.
//!
//! Queue numbering (§5.1.2): receiveq*k* is virtqueue 2*k*, transmitq*k*
//! is 2*k*+1, and the control queue is 2 × `max_virtqueue_pairs`.
//!
//! Every packet carries a `virtio_net_hdr` in front (§5.1.6), in the
//! buffer's headroom, so header and packet share one descriptor (needs
//! VERSION_1 or ANY_LAYOUT, §5.1.6.6 / §6). The usual header (no
//! offload, one buffer) is written as zeros and recognised on receive
//! by two 16-bit loads; offload state and merged buffers take an
//! out-of-line path.

use crate::virtqueue::{Segment, Used, Virtqueue};
use crate::vnet::{self, DropCounts, DropReason, Offloads};
use nfkit_hw::pool::MAX_BATCH;
use nfkit_hw::{Batch, HwError, Mempool, PktBuf, PoolCache};
use nfkit_port::{LinkStatus, Port, QueueStats};

/// Packets made available between two stores of avail.idx on transmit:
/// publishing every few packets rather than once per batch lets the
/// device start on the first packets while the rest are being queued
/// (against DPDK's vhost with 32 frames in flight: about +40%).
const PUBLISH_EVERY: usize = 8;

/// How a transport tells the device that a queue has new buffers
/// (§2.7.13.4): an I/O-port write, an MMIO write, an eventfd.
pub trait Notify: Send {
    fn notify(&self, queue: u16) -> Result<(), HwError>;
    /// The descriptor the device signals used buffers of ring `queue`
    /// on (vhost-user's call eventfd), if the transport has one: an idle
    /// loop sleeps on it ([`Port::rx_wake`]).
    fn call_fd(&self, queue: u16) -> Option<std::os::fd::RawFd> {
        let _ = queue;
        None
    }
    /// Reset ring `queue`'s call descriptor after a wake-up.
    fn drain_call(&self, queue: u16) {
        let _ = queue;
    }
    /// Link state, if the transport can tell without disturbing the
    /// data path (configuration space, §5.1.4 `status`).
    fn link_up(&self) -> Option<bool> {
        None
    }
}

/// Per-queue buffers the device holds, indexed by chain head.
type Slots = Box<[Option<PktBuf>]>;

fn empty_slots(n: u16) -> Slots {
    (0..n).map(|_| None).collect()
}

/// What a receive pass needs beside its queue.
struct RxState<'a> {
    name: &'a str,
    hdr_len: usize,
    offloads: Offloads,
    stats: &'a mut QueueStats,
    drops: &'a mut DropCounts,
    scratch: &'a mut Vec<u8>,
}

/// One receive virtqueue and the buffers posted on it.
pub(crate) struct RxQueue {
    pub(crate) vq: Virtqueue,
    pub(crate) index: u16,
    slots: Slots,
}

/// One transmit virtqueue and the packets the device still holds.
pub(crate) struct TxQueue {
    pub(crate) vq: Virtqueue,
    pub(crate) index: u16,
    slots: Slots,
}

impl RxQueue {
    pub(crate) fn new(vq: Virtqueue, index: u16) -> Self {
        let slots = empty_slots(vq.size());
        RxQueue { vq, index, slots }
    }

    /// §5.1.6.4: take received packets, strip the header. With
    /// MRG_RXBUF a packet spans `num_buffers` used buffers (§5.1.6.3.1),
    /// chained here; the header's offload fields become offload state.
    fn receive(&mut self, rx: &mut RxState<'_>, batch: &mut Batch) -> usize {
        let hdr_len = rx.hdr_len;
        // Per batch, not per packet: whether the header is read at all,
        // and which header asks nothing (see `plain_rx_header`).
        let reads = rx.offloads.reads_header();
        let nb_mask = if rx.offloads.mergeable { 0xffff } else { 0 };
        let mut got = 0;
        while !batch.is_full() {
            let Used { head, len } = match self.vq.pop_used() {
                Ok(Some(u)) => u,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(queue = self.index, "device error on receive: {e}");
                    rx.stats.rx_errors += 1;
                    continue;
                }
            };
            let Some(mut buf) = self.slots[head as usize].take() else {
                rx.stats.rx_errors += 1;
                continue;
            };
            let len = len as usize;
            if len < hdr_len || len - hdr_len > buf.pool().data_room() {
                rx.stats.rx_errors += 1;
                continue; // dropping `buf` returns it to the pool
            }
            buf.set_received(len - hdr_len);
            // The header lies in the headroom, in front of the packet.
            if reads && !plain_rx_header(buf.front(hdr_len).unwrap_or(&[]), nb_mask) {
                if let Err(r) = self.take_rx_header(&mut buf, rx) {
                    rx.drops.count(r, rx.name);
                    rx.stats.rx_errors += 1;
                    continue;
                }
            }
            rx.stats.rx_packets += 1;
            rx.stats.rx_bytes += buf.pkt_len() as u64;
            batch.push(buf);
            got += 1;
        }
        got
    }

    /// A header that asks something: the other buffers of a merged
    /// packet (MRG_RXBUF), then the offload fields as offload state.
    #[inline(never)]
    fn take_rx_header(&mut self, buf: &mut PktBuf, rx: &mut RxState<'_>) -> Result<(), DropReason> {
        let mut hdr = [0u8; 12];
        if let Some(h) = buf.front(rx.hdr_len) {
            let n = h.len().min(12);
            hdr[..n].copy_from_slice(&h[..n]);
        }
        if rx.offloads.mergeable {
            self.merge(buf, u16::from_le_bytes([hdr[10], hdr[11]]), rx)?;
        }
        vnet::take_header(&hdr, buf, &rx.offloads, rx.scratch)
    }

    /// The other `n - 1` buffers of a merged packet, in used order, at the
    /// end of `head`'s chain (their data starts where the header would
    /// be: the device wrote from the posted address on).
    fn merge(&mut self, head: &mut PktBuf, n: u16, rx: &mut RxState<'_>) -> Result<(), DropReason> {
        if n <= 1 {
            return if n == 1 {
                Ok(())
            } else {
                Err(DropReason::BadMerge)
            };
        }
        let mut result = Ok(());
        for _ in 1..n {
            // Every buffer of the packet is taken, even when it is dropped.
            let seg = match self.vq.pop_used() {
                Ok(Some(Used { head: id, len })) => {
                    self.slots[id as usize].take().map(|b| (b, len as usize))
                }
                _ => return Err(DropReason::BadMerge),
            };
            let Some((mut seg, len)) = seg else {
                result = Err(DropReason::BadMerge);
                continue;
            };
            if result.is_err() {
                continue;
            }
            seg.set_received(0);
            let ok = seg.prepend(rx.hdr_len).is_ok() && seg.set_len(len).is_ok();
            if !ok || len == 0 {
                result = Err(DropReason::BadMerge);
            } else if head.pkt_len() + len > vnet::MAX_FRAME {
                result = Err(DropReason::TooLong);
            } else if head.append(seg).is_err() {
                result = Err(DropReason::BadMerge);
            }
        }
        result
    }

    /// §5.1.6.3: post empty buffers on every free descriptor; returns
    /// whether the device wants to be told.
    pub(crate) fn refill(&mut self, cache: &mut PoolCache, hdr_len: usize) -> bool {
        let room = cache.pool().data_room();
        while self.vq.free_descriptors() > 0 {
            let Some(buf) = cache.alloc() else { break };
            let seg = Segment {
                addr: buf.rx_device_addr() - hdr_len as u64,
                len: (room + hdr_len) as u32,
                device_writes: true,
            };
            let Some(head) = self.vq.add(&[seg]) else {
                break;
            };
            self.slots[head as usize] = Some(buf);
        }
        self.vq.publish()
    }
}

impl TxQueue {
    pub(crate) fn new(vq: Virtqueue, index: u16) -> Self {
        let slots = empty_slots(vq.size());
        TxQueue { vq, index, slots }
    }

    /// Return the buffers of packets the device has sent to the cache.
    fn reclaim(&mut self, cache: &mut PoolCache, stats: &mut QueueStats) {
        loop {
            match self.vq.pop_used() {
                Ok(Some(Used { head, .. })) => match self.slots[head as usize].take() {
                    Some(buf) => cache.free(buf),
                    None => stats.tx_errors += 1,
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(queue = self.index, "device error on transmit: {e}");
                    stats.tx_errors += 1;
                }
            }
        }
    }

    /// §5.1.6.2: put a header in front of each packet (zeros, or what
    /// its offload state asks that the device negotiated) and make it
    /// available: one descriptor, or one per segment of a chain.
    /// Returns (packets sent, whether to notify).
    fn send(
        &mut self,
        tx: &mut TxState<'_>,
        cache: &mut PoolCache,
        batch: &mut Batch,
    ) -> (usize, bool) {
        let hdr_len = tx.hdr_len;
        let n = batch.len().min(self.vq.free_descriptors());
        let mut sent = 0;
        let mut kick = false;
        // Chains may need more descriptors than are left: they wait. (No
        // pass over the batch unless it holds a chain.)
        let taken = if batch.marks().chained() {
            let mut free = self.vq.free_descriptors();
            let mut taken = 0;
            for pkt in batch.as_slice()[..n].iter() {
                if pkt.nb_segs() > free {
                    break;
                }
                free -= pkt.nb_segs();
                taken += 1;
            }
            taken
        } else {
            n
        };
        for pkt in batch.drain_front(taken) {
            let Some(mut pkt) = tx.own.adopt(pkt, cache) else {
                tx.stats.tx_dropped += 1; // our pool is empty
                continue;
            };
            let len = pkt.pkt_len();
            let head = if pkt.is_chained() || pkt.offload().is_some() {
                match self.add_marked(&mut pkt, tx) {
                    Some(h) => h,
                    None => continue, // counted
                }
            } else {
                // The usual packet: an all-zero header written in the
                // headroom, one descriptor for header and packet.
                let Some(h) = pkt.front_mut(hdr_len) else {
                    tx.stats.tx_errors += 1; // no headroom for the header
                    continue;
                };
                zero_header(h);
                self.vq.add(&[Segment {
                    addr: pkt.device_addr() - hdr_len as u64,
                    len: (pkt.len() + hdr_len) as u32,
                    device_writes: false,
                }])
            };
            // Cannot fail: enough descriptors were free.
            let Some(head) = head else {
                tx.stats.tx_dropped += 1;
                continue;
            };
            self.slots[head as usize] = Some(pkt);
            tx.stats.tx_packets += 1;
            tx.stats.tx_bytes += len as u64;
            sent += 1;
            if sent % PUBLISH_EVERY == 0 {
                kick |= self.vq.publish();
            }
        }
        kick |= self.vq.publish();
        (sent, kick)
    }

    /// A packet with offload state or a chain: the state the device
    /// negotiated goes into its header (the rest is done in software
    /// first), and each segment gets a descriptor. `None` when it was
    /// dropped (counted); else what `Virtqueue::add` gave.
    #[inline(never)]
    fn add_marked(&mut self, pkt: &mut PktBuf, tx: &mut TxState<'_>) -> Option<Option<u16>> {
        if pkt.offload().is_some() {
            if let Err(r) = finish(pkt, &tx.offloads) {
                tx.drops.count(r, tx.name);
                tx.stats.tx_errors += 1;
                return None;
            }
        }
        let o = pkt.offload().copied();
        match pkt.prepend(tx.hdr_len) {
            Ok(hdr) => match o {
                None => zero_header(hdr),
                Some(o) => vnet::write_header(Some(&o), 0, hdr),
            },
            Err(_) => {
                tx.stats.tx_errors += 1; // no headroom for the header
                return None;
            }
        }
        let mut segs = [Segment {
            addr: 0,
            len: 0,
            device_writes: false,
        }; nfkit_hw::pool::MAX_SEGS];
        let mut k = 0;
        for (addr, l) in pkt.dma_segments() {
            if let Some(s) = segs.get_mut(k) {
                *s = Segment {
                    addr,
                    len: l as u32,
                    device_writes: false,
                };
                k += 1;
            }
        }
        Some(self.vq.add(&segs[..k]))
    }
}

/// What a transmit pass needs beside its queue.
struct TxState<'a> {
    name: &'a str,
    hdr_len: usize,
    offloads: Offloads,
    own: &'a OwnPool,
    stats: &'a mut QueueStats,
    drops: &'a mut DropCounts,
}

/// Leave on `pkt` only the offload state the device negotiated, done in
/// software otherwise (a single buffer; a chain's state must be the
/// device's already).
fn finish(pkt: &mut PktBuf, offloads: &Offloads) -> Result<(), DropReason> {
    if !pkt.is_chained() {
        nfkit_packet::offload_meta::finish_for(pkt, offloads.caps(vnet::MAX_FRAME))
            .map_err(|_| DropReason::BadOffload)?;
    }
    match pkt.offload() {
        Some(o) if !offloads.sends(o) || o.check(pkt.pkt_len()).is_err() => {
            Err(DropReason::BadOffload)
        }
        _ => Ok(()),
    }
}

/// This device's packet pool and where its buffers lie in our address
/// space. Only its buffers have device addresses the device can use: a
/// buffer from another port's pool (an AF_PACKET port's heap memory,
/// another device's hugepages, a VFIO container's IOVAs) is copied into
/// one of ours before it is transmitted.
struct OwnPool {
    pool: Mempool,
    /// Virtual addresses of the pool's one contiguous region.
    span: std::ops::Range<usize>,
}

impl OwnPool {
    /// The pool's region is one allocation of `capacity` entries of
    /// `buf_size` bytes; a fresh buffer's data starts `headroom` bytes
    /// into entry `id`, which gives the region's start.
    fn new(pool: Mempool) -> Result<Self, HwError> {
        let probe = pool
            .alloc()
            .ok_or_else(|| HwError::Invalid(format!("pool `{}` is empty", pool.name())))?;
        let entry = probe.data().as_ptr() as usize - probe.headroom();
        let start = entry - probe.id() as usize * pool.buf_size();
        let span = start..start + pool.capacity() * pool.buf_size();
        drop(probe);
        Ok(OwnPool { pool, span })
    }

    fn owns(&self, pkt: &PktBuf) -> bool {
        self.span.contains(&(pkt.data().as_ptr() as usize))
    }

    /// `pkt` itself if it is ours, else a copy in one of our buffers
    /// (`None` if we have none free); the original goes back to its pool.
    fn adopt(&self, pkt: PktBuf, cache: &mut PoolCache) -> Option<PktBuf> {
        if self.owns(&pkt) {
            return Some(pkt);
        }
        let mut copy = if pkt.is_chained() {
            let mut whole = Vec::with_capacity(pkt.pkt_len());
            pkt.copy_frame_to(&mut whole);
            self.pool.alloc_frame(&whole).ok()?
        } else {
            let mut c = cache.alloc()?;
            c.copy_from(pkt.data()).ok()?;
            c
        };
        if let Some(o) = pkt.offload() {
            copy.set_offload(*o);
        }
        Some(copy)
    }
}

/// Whether the header in front of a received packet asks nothing: no
/// offload (`flags` and `gso_type` 0, so the other offload fields mean
/// nothing, §5.1.6.4) and, where `nb_mask` is 0xffff (MRG_RXBUF), one
/// buffer (`num_buffers` 1). Two 16-bit loads and no branch on the
/// negotiated features: the caller works `nb_mask` out once per batch.
#[inline(always)]
fn plain_rx_header(h: &[u8], nb_mask: u16) -> bool {
    match h {
        [f, g, _, _, _, _, _, _, _, _, n0, n1, ..] => {
            u16::from_le_bytes([*f, *g]) | ((u16::from_le_bytes([*n0, *n1]) ^ 1) & nb_mask) == 0
        }
        [f, g, ..] => *f | *g == 0 && nb_mask == 0,
        _ => false,
    }
}

/// §5.1.6.2: no offload asked, so the transmit header is all zeros. The
/// usual 12 bytes as three stores rather than a call to memset.
#[inline(always)]
fn zero_header(hdr: &mut [u8]) {
    match <&mut [u8; 12]>::try_from(&mut *hdr) {
        Ok(h) => *h = [0; 12],
        Err(_) => hdr.fill(0),
    }
}

/// A VirtIO network device with its queue pairs, over transport `N`.
pub struct NetDevice<N: Notify> {
    name: String,
    mac: [u8; 6],
    notify: N,
    hdr_len: usize,
    features: u64,
    offloads: Offloads,
    pool: OwnPool,
    /// Per queue pair: receive buffers come from it, sent ones go back to
    /// it (no lock per packet).
    caches: Vec<PoolCache>,
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    stats: Vec<QueueStats>,
    /// Per queue pair: drops by reason, and room to read a chain.
    drops: Vec<DropCounts>,
    scratch: Vec<Vec<u8>>,
}

impl<N: Notify> std::fmt::Debug for NetDevice<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetDevice")
            .field("name", &self.name)
            .field("pairs", &self.rx.len())
            .field("features", &format_args!("{:#x}", self.features))
            .finish()
    }
}

/// The parts a transport hands over once the device is running.
pub(crate) struct NetParts<N> {
    pub name: String,
    pub mac: [u8; 6],
    pub notify: N,
    pub hdr_len: usize,
    pub features: u64,
    pub pool: Mempool,
    pub rx: Vec<RxQueue>,
    pub tx: Vec<TxQueue>,
}

impl<N: Notify> NetDevice<N> {
    /// Assemble a device whose queues are set up, and post receive
    /// buffers on every receive queue.
    pub(crate) fn start(p: NetParts<N>) -> Result<Self, HwError> {
        let pairs = p.rx.len();
        let mut dev = NetDevice {
            name: p.name,
            mac: p.mac,
            notify: p.notify,
            hdr_len: p.hdr_len,
            features: p.features,
            offloads: Offloads::of_driver(p.features),
            caches: (0..pairs).map(|_| p.pool.cache(2 * MAX_BATCH)).collect(),
            pool: OwnPool::new(p.pool)?,
            rx: p.rx,
            tx: p.tx,
            stats: vec![QueueStats::default(); pairs],
            drops: vec![DropCounts::default(); pairs],
            scratch: (0..pairs).map(|_| Vec::new()).collect(),
        };
        for q in 0..pairs {
            if dev.rx[q].refill(&mut dev.caches[q], dev.hdr_len) {
                dev.notify.notify(dev.rx[q].index)?;
            }
        }
        Ok(dev)
    }

    /// Features both sides agreed on.
    pub fn features(&self) -> u64 {
        self.features
    }
    /// The offloads and buffer merging negotiated.
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }
    /// Frames dropped on queue pair `queue`, by reason.
    pub fn drops(&self, queue: usize) -> DropCounts {
        self.drops.get(queue).copied().unwrap_or_default()
    }
    /// Bytes of `virtio_net_hdr` in front of every packet.
    pub fn header_len(&self) -> usize {
        self.hdr_len
    }
    /// The transport (e.g. to reach the control queue or the socket).
    pub fn transport(&self) -> &N {
        &self.notify
    }
    pub fn transport_mut(&mut self) -> &mut N {
        &mut self.notify
    }
}

impl<N: Notify> Port for NetDevice<N> {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.rx.len()
    }
    fn tx_queues(&self) -> usize {
        self.tx.len()
    }

    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let (Some(rxq), Some(stats), Some(cache)) = (
            self.rx.get_mut(queue),
            self.stats.get_mut(queue),
            self.caches.get_mut(queue),
        ) else {
            return 0;
        };
        let (Some(drops), Some(scratch)) = (self.drops.get_mut(queue), self.scratch.get_mut(queue))
        else {
            return 0;
        };
        let mut st = RxState {
            name: &self.name,
            hdr_len: self.hdr_len,
            offloads: self.offloads,
            stats,
            drops,
            scratch,
        };
        let got = rxq.receive(&mut st, batch);
        if rxq.refill(cache, self.hdr_len) && self.notify.notify(rxq.index).is_err() {
            stats.rx_errors += 1;
        }
        got
    }

    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let (Some(txq), Some(stats), Some(cache)) = (
            self.tx.get_mut(queue),
            self.stats.get_mut(queue),
            self.caches.get_mut(queue),
        ) else {
            return 0;
        };
        let Some(drops) = self.drops.get_mut(queue) else {
            return 0;
        };
        txq.reclaim(cache, stats);
        let mut st = TxState {
            name: &self.name,
            hdr_len: self.hdr_len,
            offloads: self.offloads,
            own: &self.pool,
            stats,
            drops,
        };
        let (sent, kick) = txq.send(&mut st, cache, batch);
        if kick && self.notify.notify(txq.index).is_err() {
            stats.tx_errors += 1;
        }
        sent
    }

    fn tx_refused(&mut self, queue: usize, n: u64) {
        if let Some(s) = self.stats.get_mut(queue) {
            s.tx_dropped += n;
        }
    }
    fn queue_stats(&self, queue: usize) -> QueueStats {
        self.stats.get(queue).copied().unwrap_or_default()
    }

    /// Chains both ways with MRG_RXBUF (receive) ; without it, what one
    /// receive buffer holds.
    fn max_frame(&self) -> usize {
        if self.offloads.mergeable {
            vnet::MAX_FRAME
        } else {
            self.pool.pool.data_room()
        }
    }
    fn tx_chains(&self) -> bool {
        self.offloads.mergeable
    }
    /// What the device negotiated (`crate::vnet::Offloads`).
    fn capabilities(&self) -> nfkit_port::Caps {
        self.offloads.caps(self.max_frame())
    }

    fn link(&self) -> LinkStatus {
        LinkStatus {
            up: self.notify.link_up().unwrap_or(true),
            speed_mbps: None,
        }
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn pool(&self) -> &Mempool {
        &self.pool.pool
    }

    /// The receive ring's call descriptor, where the transport has one
    /// (virtio-user); otherwise the loop keeps polling.
    fn rx_wake(&self, queue: usize) -> nfkit_port::RxWake {
        match self
            .rx
            .get(queue)
            .and_then(|q| self.notify.call_fd(q.index))
        {
            Some(fd) => nfkit_port::RxWake::Fd(fd),
            None => nfkit_port::RxWake::Poll,
        }
    }
    /// Ask the device for a notification at the next used buffer
    /// (EVENT_IDX's `used_event`, else clear `NO_INTERRUPT`).
    fn rx_arm(&mut self, queue: usize) -> bool {
        match self.rx.get_mut(queue) {
            Some(q) => {
                q.vq.enable_used_notification();
                true
            }
            None => false,
        }
    }
    /// Suppress notifications again and reset the call eventfd.
    fn rx_disarm(&mut self, queue: usize) {
        if let Some(q) = self.rx.get_mut(queue) {
            q.vq.disable_used_notification();
            if let Some(fd) = self.notify.call_fd(q.index) {
                if nfkit_port::idle::readable_now(fd) {
                    self.notify.drain_call(q.index);
                }
            }
        }
    }
}
