//! The receive DMA engine (datasheet §7.1): move frames from the RX packet
//! buffer into the selected queue's descriptors and write them back.
//!
//! Descriptor formats (§7.1.5 legacy, §7.1.6 advanced one-buffer):
//! - legacy read: buffer address; write-back (second quadword): length
//!   15:0, status 39:32 (DD 32, EOP 33), errors 47:40 (RXE 40), VLAN 63:48;
//!   the buffer address is left as it was;
//! - advanced read: packet buffer address, header buffer address (bit 0
//!   must be 0: DD); write-back: RSS type 3:0, packet type 16:4, RSS hash
//!   63:32; extended status 19:0 (DD 0, EOP 1), extended errors 31:20 (RXE
//!   29), length 47:32, VLAN 63:48.
//!
//! A frame larger than one buffer (SRRCTL.BSIZEPACKET) spans several
//! descriptors, EOP on the last. With no free descriptor (head == tail)
//! the frame is dropped and counted if SRRCTL.DROP_EN is set, else it
//! waits in the packet buffer (SRRCTL.DROP_EN, §8.2.3.8.7).

use crate::datapath::{DataPath, Writeback};
use crate::device::{bump, Device, Dir};
use crate::dmacache::DmaCache;
use crate::regs::{bits::*, off};
use crate::wire::RxFrame;

const LEGACY_DD: u64 = 1 << 32;
const LEGACY_EOP: u64 = 1 << 33;
/// Errors bit 0: RXE ("receive data error": CRC, symbol or other MAC error).
const LEGACY_RXE: u64 = 1 << 40;
const ADV_DD: u64 = 1 << 0;
const ADV_EOP: u64 = 1 << 1;
const ADV_RXE: u64 = 1 << 29;

/// Move frames from the packet buffer into descriptors. Returns frames handled.
pub(crate) fn run(dp: &mut DataPath, dev: &Device) -> usize {
    let mut work = 0;
    loop {
        let mut frame = match dp.held.take() {
            Some(f) => f,
            None => match dev.wire.rx_fifo.pop() {
                Some(f) => f,
                None => break,
            },
        };
        match deliver(dp, dev, &mut frame) {
            Outcome::Done => {
                work += 1;
                dev.wire.recycle_rx(frame.data);
            }
            Outcome::Wait => {
                dp.held = Some(frame);
                break;
            }
        }
    }
    work
}

enum Outcome {
    /// Delivered or dropped (and counted).
    Done,
    /// No descriptor and SRRCTL.DROP_EN clear: the frame waits.
    Wait,
}

fn deliver(dp: &mut DataPath, dev: &Device, frame: &mut RxFrame) -> Outcome {
    let c = &dev.counters;
    let q = usize::from(frame.class.queue);
    let mut ring = dp.rx[q];
    if !ring.live {
        bump(&c.rx_dropped_other, 1);
        return Outcome::Done;
    }
    let srrctl = dev.regs.get(off::srrctl(q));
    let bsize = ((srrctl & SRRCTL_BSIZEPACKET_MASK) as usize) * 1024;
    if bsize == 0 {
        dev.strict.record("8.2.3.8.7", || {
            format!("SRRCTL[{q}].BSIZEPACKET is 0; it must be 1-16 (KB)")
        });
        bump(&c.rx_dropped_other, 1);
        return Outcome::Done;
    }
    let desc_type = (srrctl & SRRCTL_DESCTYPE_MASK) >> SRRCTL_DESCTYPE_SHIFT;
    let advanced = match desc_type {
        SRRCTL_DESCTYPE_LEGACY => false,
        SRRCTL_DESCTYPE_ADV_ONEBUF => true,
        other => {
            dev.strict.record("8.2.3.8.7", || {
                format!("SRRCTL[{q}].DESCTYPE = {other:#b}: header split and replication are not modelled")
            });
            bump(&c.rx_dropped_other, 1);
            return Outcome::Done;
        }
    };
    // the MAC strips the CRC when HLREG0.RXCRCSTRP; otherwise it is DMA'd
    let strip = dev.regs.get(off::HLREG0) & HLREG0_RXCRCSTRP != 0;
    let crc = if strip {
        [0; 4]
    } else {
        crc32fast::hash(&frame.data).to_le_bytes()
    };
    let total = frame.data.len() + if strip { 0 } else { 4 };
    let needed = total.div_ceil(bsize) as u32;
    let tail = dev.regs.get(off::rdt(q));
    let free = if tail >= ring.count {
        0
    } else {
        (tail + ring.count - ring.head) % ring.count
    };
    if free < needed {
        if !frame.waited {
            // RNBC counts frames that found no descriptor, once each
            frame.waited = true;
            dev.regs.count(off::rnbc(0), 1);
        }
        if srrctl & SRRCTL_DROP_EN == 0 {
            return Outcome::Wait;
        }
        dev.regs.count(off::qprdc(rx_stat_index(dev, q)), 1);
        bump(&c.rx_missed, 1);
        return Outcome::Done;
    }
    dp.rx_seen += 1;
    let inject_error = dev
        .cfg
        .faults
        .rx_error_every
        .is_some_and(|n| n > 0 && dp.rx_seen.is_multiple_of(u64::from(n)));
    if inject_error {
        bump(&c.rx_errors_injected, 1);
    }
    let mut written = 0;
    let mut dma_error = false;
    for k in 0..needed {
        let idx = (ring.head + k) % ring.count;
        let da = ring.desc_addr(idx);
        let chunk = (total - written).min(bsize);
        let last = k + 1 == needed;
        let buf = match dp.mem.read_u64(&dev.dma, da) {
            Ok(b) => b,
            Err(e) => {
                bump(&c.dma_faults, 1);
                dev.strict
                    .record("7.1.5", || format!("RX ring {q} descriptor {idx}: {e}"));
                dma_error = true;
                written += chunk;
                continue;
            }
        };
        if let Err(e) = write_chunk(&mut dp.mem, dev, buf, &frame.data, &crc, written, chunk) {
            bump(&c.dma_faults, 1);
            dev.strict.record("7.1.5", || {
                format!("RX queue {q} descriptor {idx}: buffer address outside DMA memory ({e})")
            });
            dma_error = true;
        }
        written += chunk;
        let error = inject_error || dma_error;
        let reported = (chunk + usize::from(dev.cfg.faults.rx_length_excess)).min(0xFFFF);
        if advanced {
            let lo = u64::from(frame.class.rss_type)
                | u64::from(frame.class.ptype) << 4
                | u64::from(frame.class.hash) << 32;
            // Checksum verdicts (§7.1.11) are valid in the last descriptor.
            let csum = if last {
                crate::offload::rx_status(&frame.data)
            } else {
                0
            };
            let hi = ADV_DD
                | csum
                | if last { ADV_EOP } else { 0 }
                | if error { ADV_RXE } else { 0 }
                | (reported as u64) << 32;
            dp.writeback(dev, Writeback::U64(da, lo));
            dp.writeback(dev, Writeback::U64(da + 8, hi));
        } else {
            let hi = reported as u64
                | LEGACY_DD
                | if last { LEGACY_EOP } else { 0 }
                | if error { LEGACY_RXE } else { 0 };
            dp.writeback(dev, Writeback::U64(da + 8, hi));
        }
    }
    dp.writeback(dev, Writeback::Cause(Dir::Rx, q));
    ring.head = (ring.head + needed) % ring.count;
    dp.rx[q].head = ring.head;
    dev.regs.set(off::rdh(q), ring.head);
    let stat = rx_stat_index(dev, q);
    dev.regs.count(off::qprc(stat), 1);
    dev.regs.count64(off::qbrc_l(stat), total as u64);
    bump(&c.rx_frames, 1);
    bump(&c.rx_bytes, total as u64);
    Outcome::Done
}

/// Bytes `[from, from+len)` of frame+CRC into the buffer at `buf`.
fn write_chunk(
    mem: &mut DmaCache,
    dev: &Device,
    buf: u64,
    data: &[u8],
    crc: &[u8; 4],
    from: usize,
    len: usize,
) -> Result<(), nfkit_hw::sim::DmaFault> {
    let end = from + len;
    let data_end = end.min(data.len());
    if from < data_end {
        mem.write(&dev.dma, buf, &data[from..data_end])?;
    }
    if end > data.len() {
        let c0 = from.max(data.len()) - data.len();
        let c1 = end - data.len();
        let at = buf + (from.max(data.len()) - from) as u64;
        mem.write(&dev.dma, at, &crc[c0..c1])?;
    }
    Ok(())
}

/// Statistics index of RX queue `q` from RQSMR (§8.2.3.8.15).
fn rx_stat_index(dev: &Device, q: usize) -> usize {
    ((dev.regs.get(off::rqsmr(q / 4)) >> (8 * (q % 4))) & 0xF) as usize
}
