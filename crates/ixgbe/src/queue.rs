//! The queue model (ixy/DPDK style): receive and transmit batches of pool
//! buffers ([`PktBuf`]) on advanced descriptors. The network function may
//! keep packets, reorder them, and allocate new ones.

use crate::desc::{adv_rx, adv_tx, DescRing};
use crate::device::{Device, QueueClaim};
use crate::error::InitError;
use crate::queue_setup::{self, RxDescType, TxThresholds};
use crate::regs;
use nfkit_hw::pool::{RxBuffers, MAX_BATCH};
use nfkit_hw::{Bar, Batch, Mempool, PktBuf, PoolCache};
use std::sync::Arc;

/// Transmitted buffers are reclaimed this many at a time, and one
/// descriptor in this many requests status (RS) — the last of each group,
/// which is the only one the clean-up looks at. Requesting status for
/// every packet would make the device write back 32 times as many
/// descriptors for no information the driver uses.
pub const TX_CLEAN_BATCH: usize = 32;

/// Per-queue counters, kept by the driver (no register reads).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounters {
    pub packets: u64,
    pub bytes: u64,
    /// Receive: frames the device flagged with an error (dropped here).
    /// Transmit: packets that cannot be sent (empty, or too long for one
    /// descriptor), dropped and counted.
    pub errors: u64,
}

/// One receive queue of an initialized device.
pub struct RxQueue<B: Bar> {
    claim: QueueClaim<B>,
    /// The device's BAR; `tail_offset` is this queue's RDT.
    bar: Arc<B>,
    ring: DescRing,
    /// The buffer each descriptor points at (always one per descriptor).
    bufs: RxBuffers,
    mask: usize,
    next: usize,
    tail_offset: usize,
    /// Inside a frame that spans several descriptors (cannot happen with
    /// jumbo frames off; discarded whole if it does).
    discarding: bool,
    counters: QueueCounters,
}

/// Bytes of buffer the pool must offer after the headroom: SRRCTL sets
/// the receive buffer size in whole KiB, and a 1522-byte frame needs 2.
pub const MIN_RX_DATA_ROOM: usize = 2048;

impl<B: Bar + 'static> RxQueue<B> {
    pub(crate) fn open(
        device: &Device<B>,
        q: usize,
        pool: &Mempool,
        ring_size: usize,
    ) -> Result<Self, InitError> {
        crate::desc::check_ring_size(ring_size)?;
        if pool.data_room() < MIN_RX_DATA_ROOM {
            return Err(InitError::Config(format!(
                "pool `{}` buffers hold {} data bytes; the 82599 receive buffer size is set in whole KiB \
                 (SRRCTL.BSIZEPACKET, §8.2.3.8.7) and a full frame needs 2 KiB: use a buffer size of 4096",
                pool.name(),
                pool.data_room()
            )));
        }
        let claim = device.take_rx(q)?;
        let ring = DescRing::new(device.dma(), ring_size)?;
        let bufs = RxBuffers::new(pool, ring_size).ok_or_else(|| {
            InitError::Config(format!(
                "pool `{}` ran out filling a {ring_size}-descriptor receive ring",
                pool.name()
            ))
        })?;
        for i in 0..ring_size {
            ring.write_q0(i, bufs.rx_device_addr(i));
            ring.write_q1(i, 0);
        }
        let kib = (pool.data_room() / 1024).min(16) as u32;
        queue_setup::start_rx_queue(
            device.regs(),
            device.clock(),
            device.poll_timeout(),
            q,
            &ring,
            kib,
            RxDescType::AdvancedOneBuffer,
        )?;
        Ok(RxQueue {
            bar: device.regs().bar().clone(),
            tail_offset: regs::RDT.at(q),
            claim,
            ring,
            bufs,
            mask: ring_size - 1,
            next: 0,
            discarding: false,
            counters: QueueCounters::default(),
        })
    }
}

impl<B: Bar> RxQueue<B> {
    /// Move received packets into `batch` (up to its free room); returns
    /// how many were added. Each consumed descriptor gets a fresh buffer;
    /// the tail is written once per call. If the pool is empty, receiving
    /// stops early and the packets wait in the ring.
    pub fn rx_batch(&mut self, batch: &mut Batch) -> usize {
        let first = self.next;
        let mut i = first;
        let mut added = 0;
        let room = batch.room();
        while added < room {
            let desc = self.ring.desc(i);
            let status = desc.read_q1();
            if status & adv_rx::DD == 0 {
                break;
            }
            // One test for "a whole frame without errors" (§7.1.6.2),
            // unless a frame spanning descriptors is being discarded.
            if status & (adv_rx::EOP | adv_rx::FRAME_ERRORS) == adv_rx::EOP && !self.discarding {
                let len = ((status >> adv_rx::LENGTH_SHIFT) & adv_rx::LENGTH_MASK) as usize;
                let Some((pkt, fresh)) = self.bufs.take(i, len) else {
                    break;
                };
                desc.write_q0(fresh);
                self.counters.bytes += len as u64;
                batch.push(pkt);
                added += 1;
            } else {
                drop_frame(status, &mut self.discarding, &mut self.counters);
                // The buffer stays and is lent again.
                desc.write_q0(self.bufs.rx_device_addr(i));
            }
            desc.write_q1(0);
            i = (i + 1) & self.mask;
        }
        if i != first {
            self.next = i;
            // The last consumed descriptor is the new gap.
            let tail = i.wrapping_sub(1) & self.mask;
            self.bar.write32(self.tail_offset, tail as u32);
        }
        self.counters.packets += added as u64;
        added
    }

    /// Queue index on its device.
    pub fn index(&self) -> usize {
        self.claim.index
    }
    pub fn counters(&self) -> QueueCounters {
        self.counters
    }
}

/// A descriptor that does not end a good frame: a frame error, or part
/// of a frame spanning descriptors (dropped whole, counted once at its
/// end).
#[cold]
fn drop_frame(status: u64, discarding: &mut bool, counters: &mut QueueCounters) {
    let end_of_packet = status & adv_rx::EOP != 0;
    if end_of_packet {
        counters.errors += 1;
    }
    *discarding = !end_of_packet;
}

impl<B: Bar> Drop for RxQueue<B> {
    /// Disable the queue before its buffers go back to the pool, so the
    /// device cannot write into a buffer someone else now owns.
    fn drop(&mut self) {
        self.claim.stop();
    }
}

/// One transmit queue of an initialized device.
pub struct TxQueue<B: Bar> {
    claim: QueueClaim<B>,
    /// The device's BAR; `tail_offset` is this queue's TDT.
    bar: Arc<B>,
    ring: DescRing,
    /// Buffers owned by the device, by descriptor.
    bufs: Vec<Option<PktBuf>>,
    cache: PoolCache,
    mask: usize,
    /// Next descriptor to fill.
    next: usize,
    /// Oldest descriptor not yet reclaimed (a multiple of TX_CLEAN_BATCH).
    clean: usize,
    tail_offset: usize,
    counters: QueueCounters,
}

impl<B: Bar + 'static> TxQueue<B> {
    pub(crate) fn open(
        device: &Device<B>,
        q: usize,
        pool: &Mempool,
        ring_size: usize,
    ) -> Result<Self, InitError> {
        crate::desc::check_ring_size(ring_size)?;
        let claim = device.take_tx(q)?;
        let ring = DescRing::new(device.dma(), ring_size)?;
        queue_setup::start_tx_queue(
            device.regs(),
            device.clock(),
            device.poll_timeout(),
            q,
            &ring,
            // DPDK/ixy values (§7.2.3.4.1): prefetch when 36 descriptors
            // can be fetched and 8 are ready. WTHRESH 0: each RS
            // descriptor is written back at once, so reclaiming is not
            // delayed by write-back batching.
            TxThresholds {
                prefetch: 36,
                host: 8,
                write_back: 0,
            },
            None,
        )?;
        Ok(TxQueue {
            bar: device.regs().bar().clone(),
            tail_offset: regs::TDT.at(q),
            claim,
            ring,
            bufs: (0..ring_size).map(|_| None).collect(),
            cache: pool.cache(ring_size.max(MAX_BATCH * 2)),
            mask: ring_size - 1,
            next: 0,
            clean: 0,
            counters: QueueCounters::default(),
        })
    }
}

impl<B: Bar> TxQueue<B> {
    /// Send packets from the front of `batch`; those sent leave the batch
    /// (the queue owns them until transmitted), the rest stay, in order.
    /// Packets that cannot be sent at all (empty, or longer than a
    /// descriptor can carry) leave the batch too, counted in
    /// `counters().errors`. The tail is written once per call. Returns
    /// the number queued for transmission.
    pub fn tx_batch(&mut self, batch: &mut Batch) -> usize {
        self.reclaim_transmitted();
        // At most size - 1 in flight: TDH == TDT means empty.
        let in_flight = self.next.wrapping_sub(self.clean) & self.mask;
        let room = self.mask - in_flight;
        let take = room.min(batch.len());
        let first = self.next;
        let mut i = first;
        for pkt in batch.drain_front(take) {
            let len = pkt.len();
            if len == 0 || len > adv_tx::LENGTH_MASK as usize {
                self.counters.errors += 1;
                continue;
            }
            let status_request = if i % TX_CLEAN_BATCH == TX_CLEAN_BATCH - 1 {
                adv_tx::CMD_RS
            } else {
                0
            };
            let cmd_type_len = len as u64
                | adv_tx::DTYP_DATA
                | adv_tx::CMD_DEXT
                | adv_tx::CMD_EOP
                | adv_tx::CMD_IFCS
                | status_request;
            let desc = self.ring.desc(i);
            desc.write_q0(pkt.device_addr());
            desc.write_q1(cmd_type_len | ((len as u64) << adv_tx::PAYLEN_SHIFT));
            self.counters.bytes += len as u64;
            self.bufs[i] = Some(pkt);
            i = (i + 1) & self.mask;
        }
        let sent = i.wrapping_sub(first) & self.mask;
        if sent > 0 {
            self.next = i;
            self.counters.packets += sent as u64;
            self.bar.write32(self.tail_offset, i as u32);
        }
        sent
    }

    /// Give back the buffers of every complete group of TX_CLEAN_BATCH
    /// descriptors whose last (RS) descriptor the device has written back.
    #[inline]
    fn reclaim_transmitted(&mut self) {
        loop {
            let in_flight = self.next.wrapping_sub(self.clean) & self.mask;
            if in_flight < TX_CLEAN_BATCH {
                return;
            }
            let last = self.clean + TX_CLEAN_BATCH - 1;
            if self.ring.read_q1(last) & adv_tx::DD == 0 {
                return;
            }
            let group = self.bufs[self.clean..=last].iter_mut();
            self.cache.free_bulk(group.filter_map(Option::take));
            self.clean = (last + 1) & self.mask;
        }
    }

    /// Descriptors the device still owns or that await reclaiming.
    pub fn in_flight(&self) -> usize {
        self.next.wrapping_sub(self.clean) & self.mask
    }
    pub fn index(&self) -> usize {
        self.claim.index
    }
    pub fn counters(&self) -> QueueCounters {
        self.counters
    }
}

impl<B: Bar> Drop for TxQueue<B> {
    /// Let the device finish what was queued, disable the queue, then
    /// return the buffers.
    fn drop(&mut self) {
        self.claim.stop();
    }
}

impl<B: Bar + 'static> Device<B> {
    /// Open receive queue `q` with a ring of `ring_size` advanced
    /// descriptors, filled from `pool` (data room ≥ 2048 bytes, i.e. a
    /// buffer size of 4096).
    pub fn rx_queue(
        &self,
        q: usize,
        pool: &Mempool,
        ring_size: usize,
    ) -> Result<RxQueue<B>, InitError> {
        RxQueue::open(self, q, pool, ring_size)
    }

    /// Open transmit queue `q` with a ring of `ring_size` descriptors.
    /// Transmitted buffers are returned through a per-queue cache of
    /// `pool` (buffers of other pools go straight home).
    pub fn tx_queue(
        &self,
        q: usize,
        pool: &Mempool,
        ring_size: usize,
    ) -> Result<TxQueue<B>, InitError> {
        TxQueue::open(self, q, pool, ring_size)
    }
}
