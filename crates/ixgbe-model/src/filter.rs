//! Receive filtering and queue selection for a frame arriving from the
//! wire: link and RXCTRL.RXEN, size checks, the destination-address
//! filters (§7.1.1: FCTRL.UPE/MPE/BAM, RAL/RAH exact filters, the MTA
//! multicast hash) and RSS (§7.1.2.8, MRQC/RSSRK/RETA).

use crate::device::{bump, Device};
use crate::regs::{bits::*, off};
use crate::rss;

/// What the filters decided about an accepted frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Class {
    pub queue: u16,
    pub hash: u32,
    pub rss_type: u8,
    /// Packet type for the advanced descriptor (§7.1.6.2): bit 0 IPv4,
    /// bit 2 IPv6, bit 4 TCP, bit 5 UDP.
    pub ptype: u16,
}

const ETH_HDR: usize = 14;
/// Minimum and standard maximum frame sizes with the 4-byte CRC.
const MIN_FRAME: usize = 64;
const MAX_FRAME: usize = 1518 + 4;

/// Decide whether `frame` (without CRC) is received, and into which queue.
/// Drops are counted here.
pub(crate) fn admit(dev: &Device, frame: &[u8]) -> Option<Class> {
    let c = &dev.counters;
    let now = dev.now();
    if !dev.link_up(now) || dev.regs.get(off::RXCTRL) & RXCTRL_RXEN == 0 {
        bump(&c.rx_dropped_other, 1);
        return None;
    }
    let wire_len = frame.len() + 4;
    if wire_len < MIN_FRAME {
        dev.regs.count(off::RUC, 1);
        bump(&c.rx_dropped_other, 1);
        return None;
    }
    let hl = dev.regs.get(off::HLREG0);
    let max = if hl & HLREG0_JUMBOEN != 0 {
        (dev.regs.get(off::MAXFRS) >> 16) as usize
    } else {
        MAX_FRAME
    };
    if wire_len > max {
        dev.regs.count(off::ROC, 1);
        bump(&c.rx_dropped_other, 1);
        return None;
    }
    if !address_match(dev, frame) {
        bump(&c.rx_dropped_filter, 1);
        return None;
    }
    Some(classify(dev, frame))
}

/// §7.1.1.1 destination-address filtering.
fn address_match(dev: &Device, frame: &[u8]) -> bool {
    let fctrl = dev.regs.get(off::FCTRL);
    let dst = &frame[0..6];
    if dst == [0xFF; 6] {
        return fctrl & FCTRL_BAM != 0 || fctrl & FCTRL_MPE != 0;
    }
    if dst[0] & 1 != 0 {
        return fctrl & FCTRL_MPE != 0 || mta_match(dev, dst);
    }
    if fctrl & FCTRL_UPE != 0 {
        return true;
    }
    let lo = u32::from_le_bytes([dst[0], dst[1], dst[2], dst[3]]);
    let hi = u32::from(dst[4]) | u32::from(dst[5]) << 8;
    (0..128).any(|n| {
        let rah = dev.regs.get(off::rah(n));
        rah & RAH_AV != 0 && rah & 0xFFFF == hi && dev.regs.get(off::ral(n)) == lo
    })
}

/// The multicast table array: 4096 bits indexed by 12 bits of the
/// destination address chosen by MCSTCTRL.MO (§8.2.3.7.3, §8.2.3.7.7).
fn mta_match(dev: &Device, dst: &[u8]) -> bool {
    let mcst = dev.regs.get(off::MCSTCTRL);
    if mcst & (1 << 2) == 0 {
        return false; // MFE: multicast table filter disabled
    }
    let a = u16::from(dst[4]) | u16::from(dst[5]) << 8;
    let index = match mcst & 0b11 {
        0 => a >> 4,
        1 => a >> 3,
        2 => a >> 2,
        _ => a,
    } & 0xFFF;
    let word = dev.regs.get(off::mta(usize::from(index >> 5)));
    word & (1 << (index & 0x1F)) != 0
}

/// L3/L4 fields RSS can hash, parsed without allocation.
struct Parsed<'a> {
    ipv4: bool,
    src: &'a [u8],
    dst: &'a [u8],
    /// Ports, if TCP or UDP and not a fragment.
    ports: Option<(&'a [u8], bool)>,
}

fn parse(frame: &[u8]) -> Option<Parsed<'_>> {
    let mut l3 = ETH_HDR;
    let mut ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype == 0x8100 && frame.len() >= 18 {
        ethertype = u16::from_be_bytes([frame[16], frame[17]]);
        l3 += 4;
    }
    let ip = frame.get(l3..)?;
    match ethertype {
        0x0800 if ip.len() >= 20 && ip[0] >> 4 == 4 => {
            let ihl = usize::from(ip[0] & 0xF) * 4;
            let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3FFF != 0;
            let l4 = ip.get(ihl..ihl + 4);
            let ports = match (ip[9], frag, l4) {
                (6, false, Some(p)) => Some((p, true)),
                (17, false, Some(p)) => Some((p, false)),
                _ => None,
            };
            Some(Parsed {
                ipv4: true,
                src: &ip[12..16],
                dst: &ip[16..20],
                ports,
            })
        }
        0x86DD if ip.len() >= 40 => {
            let l4 = ip.get(40..44);
            let ports = match (ip[6], l4) {
                (6, Some(p)) => Some((p, true)),
                (17, Some(p)) => Some((p, false)),
                _ => None,
            };
            Some(Parsed {
                ipv4: false,
                src: &ip[8..24],
                dst: &ip[24..40],
                ports,
            })
        }
        _ => None,
    }
}

/// Queue selection: RSS when MRQC.MRQE says so, else queue 0 (§7.1.2).
fn classify(dev: &Device, frame: &[u8]) -> Class {
    let Some(p) = parse(frame) else {
        return Class::default();
    };
    let ptype = if p.ipv4 { 1 } else { 1 << 2 }
        | match p.ports {
            Some((_, true)) => 1 << 4,
            Some((_, false)) => 1 << 5,
            None => 0,
        };
    let mrqc = dev.regs.get(off::MRQC);
    if mrqc & MRQC_MRQE_MASK != MRQC_MRQE_RSS {
        return Class {
            ptype,
            ..Class::default()
        };
    }
    // which hash function applies (§7.1.2.8.1): L4 if enabled for the
    // protocol, else L3 if enabled, else none
    let (tcp_f, udp_f, ip_f) = if p.ipv4 {
        (MRQC_TCPIPV4, MRQC_UDPIPV4, MRQC_IPV4)
    } else {
        (MRQC_TCPIPV6, MRQC_UDPIPV6, MRQC_IPV6)
    };
    let (l4, rss_type) = match p.ports {
        Some((ports, true)) if mrqc & tcp_f != 0 => (
            Some(ports),
            if p.ipv4 {
                rss::rss_type::TCP_IPV4
            } else {
                rss::rss_type::TCP_IPV6
            },
        ),
        Some((ports, false)) if mrqc & udp_f != 0 => (
            Some(ports),
            if p.ipv4 {
                rss::rss_type::UDP_IPV4
            } else {
                rss::rss_type::UDP_IPV6
            },
        ),
        _ if mrqc & ip_f != 0 => (
            None,
            if p.ipv4 {
                rss::rss_type::IPV4
            } else {
                rss::rss_type::IPV6
            },
        ),
        _ => {
            return Class {
                ptype,
                ..Class::default()
            }
        }
    };
    let mut rssrk = [0u32; 10];
    for (i, k) in rssrk.iter_mut().enumerate() {
        *k = dev.regs.get(off::rssrk(i));
    }
    let key = rss::key_from_registers(rssrk);
    let mut input = [0u8; 36];
    let mut n = 0;
    for part in [p.src, p.dst].into_iter().chain(l4) {
        input[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    let hash = rss::toeplitz(&key, &input[..n]);
    let queue = rss::reta_lookup(|i| dev.regs.get(off::reta(i)), hash);
    Class {
        queue,
        hash,
        rss_type,
        ptype,
    }
}

/// Receive statistics for a frame accepted into the packet buffer
/// (§8.2.3.23: byte counts include the CRC).
pub(crate) fn count_received(dev: &Device, frame: &[u8], _class: &Class) {
    let r = &dev.regs;
    let wire_len = frame.len() as u64 + 4;
    r.count(off::TPR, 1);
    r.count64(off::TORL, wire_len);
    r.count(off::GPRC, 1);
    r.count64(off::GORCL, wire_len);
    if frame[0..6] == [0xFF; 6] {
        r.count(off::BPRC, 1);
    } else if frame[0] & 1 != 0 {
        r.count(off::MPRC, 1);
    }
    r.count(size_bucket(off::PRC64, wire_len), 1);
}

/// The PRC64..PRC1522 / PTC64..PTC1522 register for a frame size.
pub(crate) fn size_bucket(first: usize, wire_len: u64) -> usize {
    let i = match wire_len {
        0..=64 => 0,
        65..=127 => 1,
        128..=255 => 2,
        256..=511 => 3,
        512..=1023 => 4,
        _ => 5,
    };
    first + 4 * i
}
