//! Internet checksums (RFC 1071) for the checksum and tunnel modules:
//! the IPv4 header, and TCP/UDP over IPv4 and IPv6 with their
//! pseudo-headers. Shared helpers; no class here.

/// The ones' complement sum of `b` (16-bit big-endian words, an odd
/// last byte padded), unfolded.
#[inline]
pub fn sum(b: &[u8]) -> u64 {
    let mut s = 0u64;
    let mut c = b.chunks_exact(2);
    for w in &mut c {
        s += u16::from_be_bytes([w[0], w[1]]) as u64;
    }
    if let [x] = c.remainder() {
        s += (*x as u64) << 8;
    }
    s
}

/// Fold and complement.
#[inline]
pub fn finish(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Where the L3 header of a frame starts, and its EtherType, after up to
/// two VLAN tags (802.1Q, 802.1ad).
pub fn l3(d: &[u8]) -> Option<(usize, u16)> {
    let mut at = 12;
    for _ in 0..3 {
        let t = u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]);
        if t == 0x8100 || t == 0x88a8 {
            at += 4;
        } else {
            return Some((at + 2, t));
        }
    }
    None
}

/// A TCP or UDP segment of a frame: (L4 offset, L4 length, protocol,
/// pseudo-header sum). `None` for anything else, truncated headers or
/// lengths that disagree with the frame, and IPv4 fragments.
pub fn l4(d: &[u8]) -> Option<(usize, usize, u8, u64)> {
    let (l3, et) = l3(d)?;
    match et {
        0x0800 => {
            let h = d.get(l3..l3 + 20)?;
            let ihl = (h[0] & 0x0f) as usize * 4;
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            let frag = u16::from_be_bytes([h[6], h[7]]) & 0x3fff;
            let proto = h[9];
            if h[0] >> 4 != 4 || ihl < 20 || total < ihl || l3 + total > d.len() || frag != 0 {
                return None;
            }
            let len = total - ihl;
            let pseudo = sum(&h[12..20]) + proto as u64 + len as u64;
            Some((l3 + ihl, len, proto, pseudo))
        }
        0x86dd => {
            let h = d.get(l3..l3 + 40)?;
            let len = u16::from_be_bytes([h[4], h[5]]) as usize;
            if h[0] >> 4 != 6 || l3 + 40 + len > d.len() {
                return None;
            }
            // Extension headers are not walked: TCP or UDP right after.
            let proto = h[6];
            let pseudo = sum(&h[8..40]) + proto as u64 + len as u64;
            Some((l3 + 40, len, proto, pseudo))
        }
        _ => None,
    }
    .filter(|&(_, len, proto, _)| (proto == 6 && len >= 20) || (proto == 17 && len >= 8))
}

/// Offset of the checksum field in a TCP (16) or UDP (6) header.
pub fn l4_csum_at(proto: u8) -> usize {
    if proto == 6 {
        16
    } else {
        6
    }
}

/// VXLAN's and Geneve's UDP ports, where the checksum modules look for
/// an inner frame.
pub const VXLAN_PORT: u16 = 4789;
pub const GENEVE_PORT: u16 = 6081;

/// Where the inner Ethernet frame of a tunnel starts: UDP to VXLAN's or
/// Geneve's port, with a valid tunnel header (VXLAN: the I flag; Geneve:
/// version 0, Ethernet, its options within the datagram) and a whole
/// inner Ethernet header. `None` for anything else.
pub fn inner(d: &[u8]) -> Option<usize> {
    let (l4, len, proto, _) = l4(d)?;
    if proto != 17 {
        return None;
    }
    let th = l4 + 8;
    let hl = match u16::from_be_bytes([d[l4 + 2], d[l4 + 3]]) {
        VXLAN_PORT => (*d.get(th)? & 0x08 != 0).then_some(8)?,
        GENEVE_PORT => {
            let b0 = *d.get(th)?;
            let proto = u16::from_be_bytes([*d.get(th + 2)?, *d.get(th + 3)?]);
            (b0 >> 6 == 0 && proto == 0x6558).then_some(8 + usize::from(b0 & 0x3f) * 4)?
        }
        _ => return None,
    };
    let at = th + hl;
    (at + 14 <= l4 + len).then_some(at)
}

/// What a checksum check found in one (outer or inner) packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// No such header here (not IPv4, not TCP/UDP).
    Absent,
    Good,
    /// A wrong checksum, or a header cut short.
    Bad,
}
