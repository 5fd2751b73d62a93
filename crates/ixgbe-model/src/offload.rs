//! Checksum and segmentation offloads: what the transmit engine does with
//! an advanced context descriptor and the data descriptors that refer to
//! it (§7.2.3.2.3, §7.2.3.2.4, TCP segmentation §7.2.4), and the checksum
//! verdicts the receive engine writes back (§7.1.11, status IPCS/L4I,
//! errors IPE/L4E in the advanced write-back, §7.1.6.2).
//!
//! Context descriptor (§7.2.3.2.3), little endian:
//! - quadword 0 low dword VLAN_MACIP_LENS: IPLEN 8:0, MACLEN 15:9, VLAN
//!   31:16;
//! - quadword 1 low dword TYPE_TUCMD_MLHL: TUCMD 19:9 (IPV4 bit 10, L4T
//!   12:11: 00b UDP, 01b TCP, 10b SCTP), DTYP 23:20 = 0010b, DEXT 29;
//! - quadword 1 high dword MSS_L4LEN_IDX: IDX 6:4, L4LEN 15:8, MSS 31:16.
//!
//! Data descriptor (§7.2.3.2.4), quadword 1: DCMD.VLE 30, DCMD.TSE 31;
//! olinfo (high dword): IDX 6:4, CC 7, POPTS.IXSM 8, POPTS.TXSM 9,
//! PAYLEN 31:14. The offload fields are taken from a packet's first data
//! descriptor.
//!
//! The strict rules here: a data descriptor that asks for an offload
//! names a context that was never set on its queue (since the queue was
//! enabled); an IDX past the queue's two contexts; an IPv4 checksum with
//! TUCMD.IPV4 clear; headers (MACLEN + IPLEN [+ L4LEN]) that end past the
//! packet; with TSE: L4LEN outside 12..=255, an MSS of 0 or a segment
//! (header + MSS) longer than the largest frame, PAYLEN that is not the
//! packet's bytes after the header, no IFCS, L4T not TCP. Each drops the
//! packet (counted in `tx_dropped`): the device would send a bad frame.

use crate::datapath::DataPath;
use crate::device::Device;

const CMD_DEXT: u64 = 1 << 29;
const DCMD_VLE: u64 = 1 << 30;
const DCMD_TSE: u64 = 1 << 31;
const OLINFO_SHIFT: u32 = 32;
const POPTS_IXSM: u64 = 1 << (8 + OLINFO_SHIFT);
const POPTS_TXSM: u64 = 1 << (9 + OLINFO_SHIFT);
const IDX_SHIFT: u32 = 4 + OLINFO_SHIFT;
const PAYLEN_SHIFT: u32 = 14 + OLINFO_SHIFT;
/// Contexts per transmit queue.
pub(crate) const CONTEXTS: usize = 2;

/// One context slot of a transmit queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TxContext {
    pub maclen: usize,
    pub iplen: usize,
    pub vlan: u16,
    pub ipv4: bool,
    /// TUCMD.L4T: 0 UDP, 1 TCP, 2 SCTP.
    pub l4t: u8,
    pub l4len: usize,
    pub mss: usize,
}

/// Whether a data descriptor's quadword 1 asks for TCP segmentation.
pub(crate) fn tse(d1: u64) -> bool {
    d1 & CMD_DEXT != 0 && d1 & DCMD_TSE != 0
}

/// Whether a first data descriptor asks for any offload (and so uses a
/// context).
pub(crate) fn asks(d1: u64) -> bool {
    d1 & CMD_DEXT != 0 && d1 & (DCMD_TSE | DCMD_VLE | POPTS_IXSM | POPTS_TXSM) != 0
}

/// PAYLEN of an advanced data descriptor, `None` for a legacy one.
pub(crate) fn paylen(d1: u64) -> Option<usize> {
    (d1 & CMD_DEXT != 0).then_some(((d1 >> PAYLEN_SHIFT) & 0x3_FFFF) as usize)
}

/// A context descriptor at ring index `idx` fills its slot.
pub(crate) fn set_context(
    slots: &mut [Option<TxContext>; CONTEXTS],
    dev: &Device,
    q: usize,
    idx: u32,
    d0: u64,
    d1: u64,
) {
    let slot = ((d1 >> IDX_SHIFT) & 0x7) as usize;
    if slot >= CONTEXTS {
        dev.strict.record("7.2.3.2.3", || {
            format!("TX queue {q} context descriptor {idx}: IDX {slot}, but a queue has {CONTEXTS} contexts")
        });
        return;
    }
    let lens = d0 as u32;
    let tucmd = d1 as u32;
    let mll = (d1 >> 32) as u32;
    slots[slot] = Some(TxContext {
        iplen: (lens & 0x1FF) as usize,
        maclen: ((lens >> 9) & 0x7F) as usize,
        vlan: (lens >> 16) as u16,
        ipv4: tucmd & (1 << 10) != 0,
        l4t: ((tucmd >> 11) & 0b11) as u8,
        l4len: ((mll >> 8) & 0xFF) as usize,
        mss: (mll >> 16) as usize,
    });
}

/// Carry out what the packet in `dp.frame` (CRC already dealt with),
/// whose first data descriptor is `d1`, asks: the frames to send go to
/// `out`. False (nothing to send) when the request breaks a rule.
pub(crate) fn apply(
    dp: &mut DataPath,
    dev: &Device,
    q: usize,
    d1: u64,
    ifcs: bool,
    out: &mut Vec<Vec<u8>>,
) -> bool {
    let slot = ((d1 >> IDX_SHIFT) & 0x7) as usize;
    let Some(ctx) = dp.tx_ctx[q].get(slot).copied().flatten() else {
        dev.strict.record("7.2.3.2.4", || {
            format!("TX queue {q}: a data descriptor asks for an offload through context {slot}, which was never set (a context descriptor must come first)")
        });
        return false;
    };
    let frame = &mut dp.frame;
    let broken = |rule: String| {
        dev.strict
            .record("7.2.3.2.3", || format!("TX queue {q}: {rule}"));
        false
    };
    let (l3, l4) = (ctx.maclen, ctx.maclen + ctx.iplen);
    let ixsm = d1 & POPTS_IXSM != 0;
    let txsm = d1 & POPTS_TXSM != 0;
    if ixsm && !ctx.ipv4 {
        return broken(
            "POPTS.IXSM with TUCMD.IPV4 clear: an IPv4 checksum of a packet that is not IPv4"
                .into(),
        );
    }
    if (ixsm || txsm || tse(d1)) && (ctx.maclen < 14 || ctx.iplen < 20 || l4 > frame.len()) {
        return broken(format!(
            "MACLEN {} + IPLEN {} end past the packet of {} bytes (or are below an Ethernet and an IP header)",
            ctx.maclen,
            ctx.iplen,
            frame.len()
        ));
    }
    let csum_at = l4 + if ctx.l4t == 1 { 16 } else { 6 };
    if txsm && (ctx.l4t > 1 || csum_at + 2 > frame.len()) {
        return broken(format!(
            "POPTS.TXSM: the L4 checksum at byte {csum_at} is past the packet of {} bytes, or L4T {} is not TCP or UDP",
            frame.len(),
            ctx.l4t
        ));
    }
    let vlan = (d1 & DCMD_VLE != 0).then_some(ctx.vlan);
    if !tse(d1) {
        if ixsm {
            ipv4_checksum(&mut frame[l3..l4]);
        }
        if txsm {
            l4_checksum(frame, l4, csum_at, ctx.l4t == 0, 0);
        }
        out.push(with_tag(frame, vlan));
        return true;
    }
    // TCP segmentation (§7.2.4).
    let hdr = l4 + ctx.l4len;
    let paylen = paylen(d1).unwrap_or(0);
    if !ifcs {
        return broken("DCMD.TSE without DCMD.IFCS: the device appends each segment's CRC".into());
    }
    if ctx.l4t != 1 {
        return broken(format!(
            "DCMD.TSE with L4T {}: the model segments TCP only",
            ctx.l4t
        ));
    }
    if !(12..=255).contains(&ctx.l4len) || hdr > frame.len() {
        return broken(format!(
            "L4LEN {} (12..=255 with TSE) or a header of {hdr} bytes past the packet of {}",
            ctx.l4len,
            frame.len()
        ));
    }
    if ctx.mss == 0 || hdr + ctx.mss > crate::tx::MAX_TX_FRAME {
        return broken(format!(
            "MSS {} with a {hdr}-byte header: a segment must carry payload and fit {} bytes",
            ctx.mss,
            crate::tx::MAX_TX_FRAME
        ));
    }
    if paylen != frame.len() - hdr {
        let len = frame.len();
        dev.strict.record("7.2.3.2.4", || {
            format!("TX queue {q}: PAYLEN {paylen} with TSE must be the bytes after the {hdr}-byte header ({})", len - hdr)
        });
        return false;
    }
    let (header, payload) = frame.split_at(hdr);
    let id0 = u16::from_be_bytes([header[l3 + 4], header[l3 + 5]]);
    let seq0 = u32::from_be_bytes(header[l4 + 4..l4 + 8].try_into().unwrap_or([0; 4]));
    let count = payload.len().div_ceil(ctx.mss).max(1);
    for (k, chunk) in payload
        .chunks(ctx.mss)
        .chain((payload.is_empty()).then_some(&[][..]))
        .enumerate()
    {
        let mut seg = Vec::with_capacity(hdr + chunk.len() + 4);
        seg.extend_from_slice(header);
        seg.extend_from_slice(chunk);
        let ip_len = ctx.iplen + ctx.l4len + chunk.len();
        if ctx.ipv4 {
            seg[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            let id = id0.wrapping_add(k as u16);
            seg[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
            if ixsm {
                ipv4_checksum(&mut seg[l3..l4]);
            }
        } else {
            // IPv6: payload length, the base header's 40 bytes apart.
            let pl = ip_len.saturating_sub(40) as u16;
            seg[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
        }
        let seq = seq0.wrapping_add((k * ctx.mss) as u32);
        seg[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        if k + 1 < count {
            // FIN and PSH only on the last segment (the DTXTCPFLGL reset
            // masks for the first and middle segments).
            seg[l4 + 13] &= !(0x01 | 0x08);
        }
        // The checksum field holds the pseudo-header sum without a
        // length; the device adds each segment's TCP length.
        let tcp_len = ctx.l4len + chunk.len();
        l4_checksum(&mut seg, l4, csum_at, false, tcp_len as u32);
        out.push(with_tag(&seg, vlan));
    }
    true
}

/// `frame`, with an 802.1Q tag carrying `vlan` after its addresses (DCMD.VLE).
fn with_tag(frame: &[u8], vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::with_capacity(frame.len() + 4);
    match vlan {
        Some(tci) if frame.len() >= 12 => {
            f.extend_from_slice(&frame[..12]);
            f.extend_from_slice(&0x8100u16.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
            f.extend_from_slice(&frame[12..]);
        }
        _ => f.extend_from_slice(frame),
    }
    f
}

/// The 16-bit one's complement sum of `bytes` plus `start`, not yet folded.
fn sum(bytes: &[u8], start: u32) -> u64 {
    let mut s = u64::from(start);
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        s += u64::from(*b) << 8;
    }
    s
}

fn fold(mut s: u64) -> u16 {
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

fn ipv4_checksum(ip: &mut [u8]) {
    ip[10..12].fill(0);
    let c = !fold(sum(ip, 0));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Fill the TCP/UDP checksum at `at` from the sum over `l4..` (the field
/// holds the pseudo-header sum software put there) plus `extra`.
fn l4_checksum(frame: &mut [u8], l4: usize, at: usize, udp: bool, extra: u32) {
    let mut c = !fold(sum(&frame[l4..], extra));
    if udp && c == 0 {
        c = 0xFFFF;
    }
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Receive checksum verdicts (§7.1.11) for the advanced write-back's
/// status and errors (low dword of quadword 1): IPCS (bit 6) when an IPv4
/// header checksum was checked, IPE (bit 31) when it was wrong; L4I
/// (bit 5) when a TCP or UDP checksum was checked, L4E (TCPE, bit 30)
/// when it was wrong. Fragments, IPv6 extension headers and UDP without
/// a checksum are not checked.
pub(crate) fn rx_status(f: &[u8]) -> u64 {
    const L4I: u64 = 1 << 5;
    const IPCS: u64 = 1 << 6;
    const L4E: u64 = 1 << 30;
    const IPE: u64 = 1 << 31;
    let mut l3 = 14;
    let mut et = f
        .get(12..14)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    if et == 0x8100 {
        l3 = 18;
        et = f
            .get(16..18)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    }
    let mut status = 0;
    let (proto, l4, end, pseudo) = match et {
        0x0800 => {
            let Some(&vihl) = f.get(l3) else { return 0 };
            let ihl = usize::from(vihl & 0xF) * 4;
            if vihl >> 4 != 4 || ihl < 20 || f.len() < l3 + ihl {
                return 0;
            }
            let ip = &f[l3..l3 + ihl];
            status |= IPCS;
            if fold(sum(ip, 0)) != 0xFFFF {
                status |= IPE;
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3FFF != 0;
            if frag || total < ihl || l3 + total > f.len() {
                return status;
            }
            let len = (total - ihl) as u64;
            let p = sum(&ip[12..20], 0) + u64::from(ip[9]) + len;
            (ip[9], l3 + ihl, l3 + total, p)
        }
        0x86DD if f.len() >= l3 + 40 => {
            let ip = &f[l3..l3 + 40];
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if l3 + 40 + len > f.len() {
                return 0;
            }
            let p = sum(&ip[8..40], 0) + u64::from(ip[6]) + len as u64;
            (ip[6], l3 + 40, l3 + 40 + len, p)
        }
        _ => return 0,
    };
    let at = match proto {
        6 => 16,
        17 => 6,
        _ => return status,
    };
    if l4 + at + 2 > end || (proto == 17 && f[l4 + at..l4 + at + 2] == [0, 0]) {
        return status;
    }
    status |= L4I;
    if fold(sum(&f[l4..end], 0) + pseudo) != 0xFFFF {
        status |= L4E;
    }
    status
}
