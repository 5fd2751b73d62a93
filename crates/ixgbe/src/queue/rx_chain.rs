//! Receive of frames larger than one buffer (jumbo frames on,
//! `DeviceConfig::max_frame` above 1518): the device spreads such a frame
//! over consecutive descriptors, each filled up to SRRCTL.BSIZEPACKET, EOP
//! and the frame's status (checksum verdicts) on the last (§7.1.6.2,
//! §8.2.3.8.7). The driver makes them one chained packet
//! (`nfkit_hw::pool` chains) once the last descriptor is written back.
//!
//! Reached from `RxQueue::rx_batch` only at a descriptor that is not a
//! whole good frame of one buffer, so single-buffer frames pay nothing.
//! Also here: the receive checksum verdicts (`DeviceConfig::rx_checksum`).

use super::QueueCounters;
use crate::desc::DescRing;
use crate::desc::{adv_rx, offload as ofl};
use nfkit_hw::pool::RxBuffers;
use nfkit_hw::pool::{MAX_BATCH, MAX_SEGS};
use nfkit_hw::{Batch, PktBuf};
use std::sync::atomic::{fence, Ordering};

/// What `rx_chain` did.
pub(super) enum ChainRx {
    /// The frame's last descriptor is not written back yet: try again.
    Wait,
    /// `descs` descriptors consumed: a packet of `bytes` bytes added to
    /// the batch, or (`bytes` 0) a frame dropped and counted.
    Done { descs: usize, bytes: u64 },
}

/// The parts of a receive queue `rx_chain` works with (borrowed apart
/// from the ring view `rx_batch` holds).
pub(super) struct ChainParts<'a> {
    pub ring: &'a DescRing,
    pub bufs: &'a mut RxBuffers,
    pub counters: &'a mut QueueCounters,
    pub rx_checksum: bool,
}

impl ChainParts<'_> {
    /// The frame whose first descriptor is `i`, as one chained packet at
    /// the end of `batch` (which has room).
    #[cold]
    #[inline(never)]
    pub(super) fn rx_chain(&mut self, i: usize, batch: &mut Batch) -> ChainRx {
        let ring = self.ring.view();
        let most = MAX_SEGS.min(self.ring.entries());
        let mut n = 0;
        let mut bad = false;
        let eop = loop {
            if n == most {
                // Longer than a chain may be: not a frame this driver
                // set the device up for. Dropped, counted once.
                return self.drop_descs(i, n);
            }
            let status = ring.desc(i.wrapping_add(n)).read_q1_relaxed();
            if status & adv_rx::DD == 0 {
                return ChainRx::Wait;
            }
            bad |= status & adv_rx::FRAME_ERRORS != 0;
            n += 1;
            if status & adv_rx::EOP != 0 {
                break status;
            }
        };
        // What the device wrote before the last DD is visible from here.
        fence(Ordering::Acquire);
        if bad || batch.is_full() {
            return self.drop_descs(i, n);
        }
        let mut head: Option<PktBuf> = None;
        let mut bytes = 0;
        let mut failed = false;
        for k in 0..n {
            let at = i.wrapping_add(k);
            let desc = ring.desc(at);
            let len =
                ((desc.read_q1_relaxed() >> adv_rx::LENGTH_SHIFT) & adv_rx::LENGTH_MASK) as usize;
            let Some((pkt, fresh)) = (if failed {
                None
            } else {
                self.bufs.take(at, len)
            }) else {
                // The pool ran dry: this descriptor keeps its buffer.
                failed = true;
                desc.write_q0(self.bufs.rx_device_addr(at));
                desc.write_q1(0);
                continue;
            };
            desc.write_q0(fresh);
            desc.write_q1(0);
            bytes += pkt.len() as u64;
            match head.as_mut() {
                None => head = Some(pkt),
                Some(h) => failed |= h.append(pkt).is_err(),
            }
        }
        match head {
            Some(mut h) if !failed => {
                if self.rx_checksum {
                    if let Some(o) = ofl::rx(eop) {
                        h.set_offload(o);
                    }
                }
                let _ = batch.push(h);
                ChainRx::Done { descs: n, bytes }
            }
            _ => {
                self.counters.errors += 1;
                ChainRx::Done { descs: n, bytes: 0 }
            }
        }
    }

    /// Drop the frame in descriptors `i..i + n` (their buffers are lent
    /// again), counted once.
    fn drop_descs(&mut self, i: usize, n: usize) -> ChainRx {
        let ring = self.ring.view();
        for k in 0..n {
            let desc = ring.desc(i.wrapping_add(k));
            desc.write_q0(self.bufs.rx_device_addr(i.wrapping_add(k)));
            desc.write_q1(0);
        }
        self.counters.errors += 1;
        ChainRx::Done { descs: n, bytes: 0 }
    }
}

/// `rx_batch`'s taking of a run of good frames (`lens`, from descriptor
/// `first` on, not wrapping) when checksum verdicts are on: the verdicts
/// are read from the written-back descriptors before they get their
/// fresh buffers. Returns how many were taken.
#[cold]
#[inline(never)]
pub(super) fn take_with_verdicts(
    ring: &DescRing,
    bufs: &mut RxBuffers,
    first: usize,
    lens: &[u16],
    batch: &mut Batch,
) -> usize {
    let mut fresh = [0u64; MAX_BATCH];
    let taken = bufs.take_bulk(first, lens, batch, &mut fresh);
    let ring = ring.view();
    let pkts = batch.as_mut_slice();
    let from = pkts.len() - taken;
    for (k, pkt) in pkts[from..].iter_mut().enumerate() {
        if let Some(o) = ofl::rx(ring.desc(first.wrapping_add(k)).read_q1_relaxed()) {
            pkt.set_offload(o);
        }
    }
    for (desc, &addr) in ring.run(first, taken).iter().zip(&fresh[..taken]) {
        desc.write_q0(addr);
        desc.write_q1(0);
    }
    taken
}
