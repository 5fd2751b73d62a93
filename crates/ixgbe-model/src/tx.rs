//! The transmit DMA engine (datasheet §7.2): fetch descriptors from head
//! to tail, assemble each packet up to its EOP descriptor, put it on the
//! wire, and write back DD (only for descriptors with RS, §7.2.3.5.1) or
//! the head (TDWBAL.Head_WB_En, §7.2.3.5.2).
//!
//! Descriptor formats (second quadword, little endian):
//! - legacy (§7.2.3.2.2): length 15:0, CSO 23:16, CMD 31:24 (EOP 24,
//!   IFCS 25, RS 27, DEXT 29 = 0), STA 35:32 (DD 32);
//! - advanced data (§7.2.3.2.4): DTALEN 15:0, DTYP 23:20 = 0011b, DCMD
//!   31:24 (EOP 24, IFCS 25, RS 27, DEXT 29 = 1), STA 35:32 (DD 32);
//! - advanced context (§7.2.3.2.3): DTYP = 0010b, consumed without data;
//!   it fills one of the queue's two contexts (IDX), which later data
//!   descriptors name in their olinfo (IDX 6:4) when they ask for an
//!   offload: POPTS.IXSM (IPv4 header checksum), POPTS.TXSM (TCP/UDP
//!   checksum), DCMD.TSE (TCP segmentation, §7.2.4), DCMD.VLE (VLAN tag
//!   insertion). The offload fields are read from the packet's first data
//!   descriptor (offload.rs).
//!
//! A data descriptor of length 0 is a null descriptor: no data is fetched
//! but it is consumed and written back like any other.

use crate::datapath::{DataPath, Ring, Writeback};
use crate::device::{bump, Device, Dir};
use crate::filter::size_bucket;
use crate::regs::{bits::*, off};
use crate::wire::{self, PeerNow};

const LEN_MASK: u64 = 0xFFFF;
const CMD_EOP: u64 = 1 << 24;
const CMD_IFCS: u64 = 1 << 25;
const CMD_RS: u64 = 1 << 27;
const CMD_DEXT: u64 = 1 << 29;
const DTYP_SHIFT: u32 = 20;
const DTYP_CONTEXT: u64 = 0b0010;
const STA_DD: u64 = 1 << 32;
/// Largest frame the engine assembles (jumbo 15.5 KB, §1.3).
pub(crate) const MAX_TX_FRAME: usize = 16 * 1024;
/// Largest TSO send: header plus a PAYLEN of 18 bits (256 KB, §7.2.4).
const MAX_TSO_SEND: usize = 256 * 1024 + 512;
/// Minimum frame without CRC when HLREG0.TXPADEN pads (64 with CRC).
const MIN_FRAME: usize = 60;

/// Run every live TX queue up to its tail. Returns descriptors consumed.
pub(crate) fn run(dp: &mut DataPath, dev: &Device) -> usize {
    if dp.active_tx.is_empty() || dev.regs.get(off::DMATXCTL) & DMATXCTL_TE == 0 {
        return 0;
    }
    // with the link down nothing leaves the MAC: descriptors wait
    if !dev.link_up(dev.now()) {
        return 0;
    }
    let peer = dev.wire.peer_now();
    let mut work = 0;
    for i in 0..dp.active_tx.len() {
        let q = dp.active_tx[i];
        work += run_queue(dp, dev, q, &peer);
    }
    work
}

fn run_queue(dp: &mut DataPath, dev: &Device, q: usize, peer: &PeerNow) -> usize {
    let tail = dev.regs.get(off::tdt(q));
    let mut ring = dp.tx[q];
    if tail >= ring.count {
        return 0;
    }
    let mut consumed = 0;
    let mut rs_seen = false;
    while ring.head != tail {
        let Some(end) = gather_packet(dp, dev, q, &ring, tail) else {
            break; // the packet's EOP descriptor is not there yet
        };
        rs_seen |= send_packet(dp, dev, q, peer);
        for k in 0..dp.descs.len() {
            let (idx, _, d1) = dp.descs[k];
            if d1 & CMD_RS != 0 && !head_writeback_enabled(dev, q) {
                dp.writeback(dev, Writeback::U64(ring.desc_addr(idx) + 8, d1 | STA_DD));
            }
        }
        consumed += dp.descs.len();
        ring.head = (end + 1) % ring.count;
    }
    if consumed > 0 {
        dp.tx[q].head = ring.head;
        dev.regs.set(off::tdh(q), ring.head);
        if rs_seen && head_writeback_enabled(dev, q) {
            let addr = u64::from(dev.regs.get(off::tdwbah(q))) << 32
                | u64::from(dev.regs.get(off::tdwbal(q)) & !0x3);
            dp.writeback(dev, Writeback::U32(addr, ring.head));
        }
        dp.writeback(dev, Writeback::Cause(Dir::Tx, q));
    }
    consumed
}

fn head_writeback_enabled(dev: &Device, q: usize) -> bool {
    dev.regs.get(off::tdwbal(q)) & TDWBAL_HEAD_WB_EN != 0
}

/// Read descriptors from the head to the packet's EOP (or a context
/// descriptor) into `dp.descs`. Returns the index of the last one.
fn gather_packet(dp: &mut DataPath, dev: &Device, q: usize, ring: &Ring, tail: u32) -> Option<u32> {
    dp.descs.clear();
    let mut i = ring.head;
    while i != tail {
        let a = ring.desc_addr(i);
        let (d0, d1) = match (
            dp.mem.read_u64(&dev.dma, a),
            dp.mem.read_u64(&dev.dma, a + 8),
        ) {
            (Ok(d0), Ok(d1)) => (d0, d1),
            _ => {
                bump(&dev.counters.dma_faults, 1);
                dev.strict.record("7.2.3", || {
                    format!("TX ring {q} descriptor {i} at {a:#x} is outside DMA memory")
                });
                return None;
            }
        };
        dp.descs.push((i, d0, d1));
        let context = d1 & CMD_DEXT != 0 && (d1 >> DTYP_SHIFT) & 0xF == DTYP_CONTEXT;
        if context || d1 & CMD_EOP != 0 {
            return Some(i);
        }
        i = (i + 1) % ring.count;
    }
    None
}

/// Fetch the data of `dp.descs` and transmit it. Returns whether any
/// descriptor asked for a report (RS).
fn send_packet(dp: &mut DataPath, dev: &Device, q: usize, peer: &PeerNow) -> bool {
    let c = &dev.counters;
    dp.frame.clear();
    let mut rs = false;
    let mut ok = true;
    let mut ifcs = false;
    let mut context_only = false;
    let mut first: Option<u64> = None;
    let mut limit = MAX_TX_FRAME;
    for &(idx, d0, d1) in &dp.descs {
        rs |= d1 & CMD_RS != 0;
        if d1 & CMD_DEXT != 0 && (d1 >> DTYP_SHIFT) & 0xF == DTYP_CONTEXT {
            context_only = true;
            crate::offload::set_context(&mut dp.tx_ctx[q], dev, q, idx, d0, d1);
            continue;
        }
        if first.is_none() {
            first = Some(d1);
            if crate::offload::tse(d1) {
                limit = MAX_TSO_SEND;
            }
        }
        ifcs = d1 & CMD_IFCS != 0;
        let len = (d1 & LEN_MASK) as usize;
        if len == 0 {
            bump(&c.tx_null_descriptors, 1);
            continue;
        }
        if dp.frame.len() + len > limit {
            dev.strict.record("7.2.3.2.4", || {
                format!("TX queue {q}: packet longer than {limit} bytes")
            });
            ok = false;
            continue;
        }
        let at = dp.frame.len();
        dp.frame.resize(at + len, 0);
        if let Err(e) = dp.mem.read(&dev.dma, d0, &mut dp.frame[at..]) {
            bump(&c.dma_faults, 1);
            dev.strict.record("7.2.3.2.2", || {
                format!("TX queue {q} descriptor {idx}: buffer address outside DMA memory ({e})")
            });
            ok = false;
        }
    }
    if context_only || dp.frame.is_empty() {
        return rs;
    }
    if !ok {
        bump(&c.tx_dropped, 1);
        return rs;
    }
    let hl = dev.regs.get(off::HLREG0);
    // CRC: the MAC appends it when IFCS (and HLREG0.TXCRCEN);
    // otherwise the buffer's last four bytes are the frame check sequence
    if !(ifcs && hl & HLREG0_TXCRCEN != 0) {
        let n = dp.frame.len();
        let fcs_ok =
            n >= 4 && crc32fast::hash(&dp.frame[..n - 4]).to_le_bytes() == dp.frame[n - 4..];
        if !fcs_ok {
            bump(&c.tx_dropped, 1);
            return rs;
        }
        dp.frame.truncate(n - 4);
    }
    let first = first.unwrap_or(0);
    if crate::offload::asks(first) {
        // Checksums, segmentation, a tag: each frame it makes goes out
        // as below.
        let mut frames = std::mem::take(&mut dp.out);
        let ok = crate::offload::apply(dp, dev, q, first, ifcs, &mut frames);
        if !ok {
            bump(&c.tx_dropped, 1);
        }
        for f in frames.iter_mut() {
            put_on_wire(dev, q, peer, f);
        }
        frames.clear();
        dp.out = frames;
        return rs;
    }
    if let Some(got) = crate::offload::paylen(first).filter(|&p| p != dp.frame.len()) {
        let len = dp.frame.len();
        dev.strict.record("7.2.3.2.4", || {
            format!("TX queue {q}: PAYLEN {got} is not the packet's length {len} (without TSE it is the whole packet)")
        });
    }
    let mut frame = std::mem::take(&mut dp.frame);
    put_on_wire(dev, q, peer, &mut frame);
    dp.frame = frame;
    rs
}

/// Pad (HLREG0.TXPADEN), count and transmit one frame.
fn put_on_wire(dev: &Device, q: usize, peer: &PeerNow, frame: &mut Vec<u8>) {
    if dev.regs.get(off::HLREG0) & HLREG0_TXPADEN != 0 && frame.len() < MIN_FRAME {
        frame.resize(MIN_FRAME, 0);
    }
    count_transmitted(dev, q, frame);
    wire::transmit(dev, peer, frame);
}

/// Transmit statistics (§8.2.3.23; byte counts include the CRC) and the
/// per-queue counters mapped by TQSM (§8.2.3.9.14).
fn count_transmitted(dev: &Device, q: usize, frame: &[u8]) {
    let r = &dev.regs;
    let wire_len = frame.len() as u64 + 4;
    r.count(off::TPT, 1);
    r.count(off::GPTC, 1);
    r.count64(off::GOTCL, wire_len);
    if frame[0..6] == [0xFF; 6] {
        r.count(off::BPTC, 1);
    } else if frame[0] & 1 != 0 {
        r.count(off::MPTC, 1);
    }
    r.count(size_bucket(off::PTC64, wire_len), 1);
    let stat = ((r.get(off::tqsm(q / 4)) >> (8 * (q % 4))) & 0x7F) as usize;
    if stat < 16 {
        r.count(off::qptc(stat), 1);
        r.count64(off::qbtc_l(stat), wire_len);
    }
    bump(&dev.counters.tx_frames, 1);
    bump(&dev.counters.tx_bytes, frame.len() as u64);
}
