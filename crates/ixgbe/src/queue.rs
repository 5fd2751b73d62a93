//! The queue model (ixy/DPDK style): receive and transmit batches of pool
//! buffers ([`PktBuf`](nfkit_hw::PktBuf)) on advanced descriptors. The
//! network function may keep packets, reorder them, and allocate new ones.
//!
//! Both directions work a batch at a time: one tail write per batch, and
//! loops that walk runs of descriptors by pointer. Receive reads each
//! status without ordering and orders once per batch (an `Acquire` fence
//! before the packets are handed out), then moves the buffers of a whole
//! run into the batch in one call to the pool; transmit describes the
//! packets, then moves them all to the ring's buffers in one call, and
//! sets RS once per group of [`TX_CLEAN_BATCH`] descriptors, not as a
//! per-packet choice. Sent buffers go back a group at a time.

use crate::desc::{self, adv_rx, adv_tx, DescRing};
use crate::device::{Device, QueueClaim};
use crate::error::InitError;
use crate::queue_setup::{self, RxDescType, TxThresholds};
use crate::regs;
use nfkit_hw::pool::{RxBuffers, TxBuffers, MAX_BATCH};
use nfkit_hw::{Bar, Batch, Mempool};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

mod marked;
mod rx_chain;

/// Transmitted buffers are reclaimed this many at a time, and one
/// descriptor in this many requests status (RS) — the last of each group,
/// which is the only one the clean-up looks at. Requesting status for
/// every packet would make the device write back 32 times as many
/// descriptors for no information the driver uses.
pub const TX_CLEAN_BATCH: usize = 32;

/// The largest TSO send the transmit queue takes, headers included
/// (Linux's 64 KB; the 82599 takes up to 256 KB of payload, §7.2.4).
pub const TSO_MAX_SEND: usize = 64 * 1024;

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
    /// Jumbo frames are on: a frame over several descriptors is a chain
    /// (`rx_chain.rs`), not a drop.
    jumbo: bool,
    /// Checksum verdicts become offload state (`rx_chain.rs`).
    rx_checksum: bool,
}

/// Receive status bits checked for every descriptor (§7.1.6.2): DD, EOP,
/// the frame errors, and the length bits of 2 KiB and more (jumbo frames
/// are off, §8.2.3.22.8 HLREG0.JUMBOEN = 0, so no good frame comes near
/// 2 KiB: such a length is the device misbehaving).
const RX_CHECKED: u64 = adv_rx::DD
    | adv_rx::EOP
    | adv_rx::FRAME_ERRORS
    | ((adv_rx::LENGTH_MASK & !(MIN_RX_DATA_ROOM as u64 - 1)) << adv_rx::LENGTH_SHIFT);
/// ...of which a whole good frame has exactly these set.
const RX_GOOD: u64 = adv_rx::DD | adv_rx::EOP;
/// A pattern no checked status equals (it has bits outside RX_CHECKED):
/// while a frame that spans descriptors is discarded, its last
/// descriptor must not pass as a good frame.
const RX_NONE_GOOD: u64 = u64::MAX;

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
        let need = nfkit_hw::pool::min_pool_for_rx_ring(ring_size);
        if pool.capacity() < need {
            return Err(InitError::Config(format!(
                "pool `{}` has {} buffers; a {ring_size}-descriptor receive ring needs a pool of at least \
                 {need} (the ring plus what the receive and transmit queues' caches may keep; \
                 more for each further queue on the pool)",
                pool.name(),
                pool.capacity()
            )));
        }
        let claim = device.take_rx(q)?;
        let ring = desc::new_ring(device.dma(), ring_size)?;
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
            jumbo: device.config().max_frame > crate::device::STD_MAX_FRAME,
            rx_checksum: device.config().rx_checksum,
        })
    }
}

impl<B: Bar> RxQueue<B> {
    /// Move received packets into `batch` (up to its free room); returns
    /// how many were added. Each consumed descriptor gets a fresh buffer;
    /// the tail is written once per call. If the pool is empty, receiving
    /// stops early and the packets wait in the ring.
    ///
    /// In three steps per run of good frames: find them and their
    /// lengths (descriptors only), take their buffers into the batch in
    /// bulk (the pool), then give their descriptors the fresh buffers.
    pub fn rx_batch(&mut self, batch: &mut Batch) -> usize {
        path_call!(QueueReceive);
        let ring = self.ring.view();
        let first = self.next;
        if branch!(
            QueueReceive,
            "nothing received",
            ring.desc(first).read_q1_relaxed() & adv_rx::DD == 0
        ) {
            return 0;
        }
        // Not wrapped here: the ring accessors wrap it.
        let mut i = first;
        let mut added = 0;
        let mut bytes = 0;
        let mut lens = [0u16; MAX_BATCH];
        loop {
            let (n, run_bytes, stop) = self.good_frames(i, batch.room(), &mut lens);
            // The taken descriptors get their fresh buffers in the same
            // pass; the run does not wrap (see `good_frames`).
            let taken = if self.rx_checksum {
                rx_chain::take_with_verdicts(&self.ring, &mut self.bufs, i, &lens[..n], batch)
            } else {
                self.bufs
                    .take_bulk_to_descs(i, &lens[..n], batch, ring.run(i, n))
            };
            bytes += run_bytes;
            i = i.wrapping_add(taken);
            added += taken;
            if branch!(QueueReceive, "pool ran dry", taken < n) {
                // The pool ran dry: the rest wait in the ring.
                bytes -= lens[taken..n]
                    .iter()
                    .map(|&len| u64::from(len))
                    .sum::<u64>();
                break;
            }
            match stop {
                RunEnd::Room if batch.is_full() => {
                    arm!(QueueReceive, "run end", 0);
                    break;
                }
                // At the end of the ring: go on from descriptor 0.
                RunEnd::Room => arm!(QueueReceive, "run end", 1),
                RunEnd::Empty => {
                    arm!(QueueReceive, "run end", 2);
                    break;
                }
                RunEnd::NotGood(status) => {
                    if self.jumbo && !self.discarding {
                        let mut parts = rx_chain::ChainParts {
                            ring: &self.ring,
                            bufs: &mut self.bufs,
                            counters: &mut self.counters,
                            rx_checksum: self.rx_checksum,
                        };
                        match parts.rx_chain(i, batch) {
                            rx_chain::ChainRx::Wait => break,
                            rx_chain::ChainRx::Done { descs, bytes: b } => {
                                i = i.wrapping_add(descs);
                                added += usize::from(b > 0);
                                bytes += b;
                                continue;
                            }
                        }
                    }
                    arm!(QueueReceive, "run end", 3);
                    // Dropped, and its buffer lent again (write-back
                    // replaced the address, §7.1.6.2).
                    drop_frame(status, &mut self.discarding, &mut self.counters);
                    let desc = ring.desc(i);
                    desc.write_q0(self.bufs.rx_device_addr(i));
                    desc.write_q1(0);
                    i = i.wrapping_add(1);
                }
            }
        }
        if branch!(QueueReceive, "consumed", i != first) {
            // What the device wrote before each DD we saw (the frames)
            // is visible to whoever reads the packets after this.
            fence(Ordering::Acquire);
            self.next = i & self.mask;
            // The last consumed descriptor is the new gap.
            let tail = i.wrapping_sub(1) & self.mask;
            self.bar.write32(self.tail_offset, tail as u32);
            self.counters.packets += added as u64;
            self.counters.bytes += bytes;
        }
        added
    }

    /// The whole good frames (§7.1.6.2) in the descriptors from `i` on,
    /// at most `room`, and not past the end of the ring: their lengths go
    /// to `lens`. Returns how many, their bytes, and what ended the run.
    /// Statuses are read without ordering; `rx_batch` orders once.
    #[inline(always)]
    fn good_frames(
        &self,
        i: usize,
        room: usize,
        lens: &mut [u16; MAX_BATCH],
    ) -> (usize, u64, RunEnd) {
        // While a frame that spans descriptors is discarded, even its
        // last descriptor is not a good frame.
        let good = if branch!(QueueReceive, "discarding", self.discarding) {
            RX_NONE_GOOD
        } else {
            RX_GOOD
        };
        let descs = self.ring.view().run(i, room.min(MAX_BATCH));
        let mut bytes = 0;
        for (n, (desc, len)) in descs.iter().zip(lens.iter_mut()).enumerate() {
            let status = desc.read_q1_relaxed();
            if branch!(
                QueueReceive,
                "not a good frame",
                status & RX_CHECKED != good
            ) {
                let end = if branch!(QueueReceive, "not written back", status & adv_rx::DD == 0) {
                    RunEnd::Empty
                } else {
                    RunEnd::NotGood(status)
                };
                return (n, bytes, end);
            }
            *len = (status >> adv_rx::LENGTH_SHIFT) as u16;
            bytes += u64::from(*len);
        }
        (descs.len(), bytes, RunEnd::Room)
    }

    /// Queue index on its device.
    pub fn index(&self) -> usize {
        self.claim.index
    }
    pub fn counters(&self) -> QueueCounters {
        self.counters
    }
}

/// What ended a run of good frames.
enum RunEnd {
    /// The batch's room, or the end of the ring.
    Room,
    /// A descriptor the device has not written back (DD clear).
    Empty,
    /// A written-back descriptor that is not a whole good frame.
    NotGood(u64),
}

/// A descriptor that does not end a good frame: a frame error, part of a
/// frame spanning descriptors (dropped whole, counted once at its end),
/// or the end of such a frame.
#[cold]
#[inline(never)]
fn drop_frame(status: u64, discarding: &mut bool, counters: &mut QueueCounters) {
    let end_of_packet = status & adv_rx::EOP != 0;
    if branch!(QueueReceive, "end of packet", end_of_packet) {
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
    bufs: TxBuffers,
    mask: usize,
    /// Next descriptor to fill.
    next: usize,
    /// Oldest descriptor not yet reclaimed (a multiple of TX_CLEAN_BATCH).
    clean: usize,
    tail_offset: usize,
    counters: QueueCounters,
    /// Per group of TX_CLEAN_BATCH descriptors, how many hold no packet
    /// (context, non-last segment and null descriptors of marked
    /// packets; `marked.rs`). Zero while only single-segment packets
    /// without offloads are sent.
    extras: Box<[u8]>,
    /// The largest frame sent whole (not segmented), without CRC.
    wire_max: usize,
}

/// Advanced data descriptor command for one whole frame (§7.2.3.2.4):
/// data descriptor, end of packet, insert the FCS.
const TX_COMMAND: u64 = adv_tx::DTYP_DATA | adv_tx::CMD_DEXT | adv_tx::CMD_EOP | adv_tx::CMD_IFCS;

impl<B: Bar + 'static> TxQueue<B> {
    pub(crate) fn open(
        device: &Device<B>,
        q: usize,
        pool: &Mempool,
        ring_size: usize,
    ) -> Result<Self, InitError> {
        crate::desc::check_ring_size(ring_size)?;
        let claim = device.take_tx(q)?;
        let ring = desc::new_ring(device.dma(), ring_size)?;
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
            bufs: TxBuffers::new(pool, ring_size).ok_or_else(|| {
                InitError::Config(format!("transmit ring of {ring_size} entries"))
            })?,
            mask: ring_size - 1,
            next: 0,
            clean: 0,
            counters: QueueCounters::default(),
            extras: vec![0; ring_size / TX_CLEAN_BATCH].into_boxed_slice(),
            wire_max: device.config().max_frame as usize - 4,
        })
    }
}

impl<B: Bar> TxQueue<B> {
    /// Send packets from the front of `batch`; those sent leave the batch
    /// (the queue owns them until transmitted), the rest stay, in order.
    /// Empty packets cannot be sent: they leave the batch, counted in
    /// `counters().errors` (a packet is never longer than one descriptor
    /// carries, 64 KiB - 1). The tail is written once per call. Returns
    /// the number queued for transmission.
    pub fn tx_batch(&mut self, batch: &mut Batch) -> usize {
        path_call!(QueueTransmit);
        self.send(batch)
    }

    /// `tx_batch`'s work (its retry without empty packets is the same
    /// call).
    #[inline(always)]
    fn send(&mut self, batch: &mut Batch) -> usize {
        self.reclaim_transmitted();
        if batch.maybe_marked() && batch.marks().any() {
            return self.send_marked(batch);
        }
        // At most size - 1 in flight: TDH == TDT means empty.
        let room = self.mask - self.in_flight();
        let take = room.min(batch.len());
        let ring = self.ring.view();
        let first = self.next;
        let mut bytes = 0;
        // Up to two runs of descriptors: to the end of the ring, then on
        // from 0.
        let up_to_end = ring.run(first, take);
        let (pkts, wrapped) = batch.as_slice()[..take].split_at(up_to_end.len());
        let runs = [(up_to_end, pkts), (ring.run(0, wrapped.len()), wrapped)];
        let mut found_empty = false;
        'runs: for (descs, pkts) in runs {
            for (desc, pkt) in descs.iter().zip(pkts) {
                let len = pkt.len() as u64;
                if branch!(QueueTransmit, "empty packet", len == 0) {
                    found_empty = true;
                    break 'runs;
                }
                desc.write_q0(pkt.device_addr());
                desc.write_q1(TX_COMMAND | len | (len << adv_tx::PAYLEN_SHIFT));
                bytes += len;
            }
        }
        if branch!(QueueTransmit, "found empty", found_empty) {
            // Nothing handed to the device yet: start over without them.
            return self.tx_batch_without_empty(batch);
        }
        if branch!(QueueTransmit, "nothing to send", take == 0) {
            return 0;
        }
        // The packets described move to the ring's buffers (it has room
        // for every descriptor in flight, so for all of them).
        let held = self.bufs.hold_front(batch, take);
        debug_assert_eq!(held, take);
        let end = first + take;
        self.request_status(first, end);
        self.next = end & self.mask;
        self.counters.packets += take as u64;
        self.counters.bytes += bytes;
        self.bar.write32(self.tail_offset, self.next as u32);
        take
    }

    /// `tx_batch` once the batch has no empty packet: those are dropped
    /// and counted.
    #[cold]
    #[inline(never)]
    fn tx_batch_without_empty(&mut self, batch: &mut Batch) -> usize {
        let before = batch.len();
        batch.retain(|pkt| !pkt.is_empty());
        self.counters.errors += (before - batch.len()) as u64;
        self.send(batch)
    }

    /// Set RS on the last descriptor of every group of TX_CLEAN_BATCH
    /// among `first..end` (filled, not yet handed to the device): the
    /// only descriptors whose write-back (§7.2.3.5.1) the clean-up reads.
    /// Requesting status for every packet would make the device write
    /// back 32 times as many descriptors for nothing.
    fn request_status(&self, first: usize, end: usize) {
        let mut last = first | (TX_CLEAN_BATCH - 1);
        while branch!(QueueTransmit, "status request", last < end) {
            let desc = self.ring.desc(last);
            desc.write_q1(desc.read_q1() | adv_tx::CMD_RS);
            last += TX_CLEAN_BATCH;
        }
    }

    /// Give back the buffers of every complete group of TX_CLEAN_BATCH
    /// descriptors whose last (RS) descriptor the device has written back.
    #[inline]
    fn reclaim_transmitted(&mut self) {
        path_call!(QueueRecycle);
        loop {
            let in_flight = self.next.wrapping_sub(self.clean) & self.mask;
            if branch!(QueueRecycle, "no whole group", in_flight < TX_CLEAN_BATCH) {
                return;
            }
            let last = self.clean + TX_CLEAN_BATCH - 1;
            // `Acquire`: the device has read the buffers before this
            // write-back, so they may be written again after.
            if branch!(
                QueueRecycle,
                "group not sent",
                self.ring.read_q1(last) & adv_tx::DD == 0
            ) {
                return;
            }
            let group = &mut self.extras[self.clean / TX_CLEAN_BATCH];
            self.bufs.free_oldest(TX_CLEAN_BATCH - usize::from(*group));
            *group = 0;
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
