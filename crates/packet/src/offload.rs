//! Finishing what a kernel left to a NIC that is not there: a TCP or UDP
//! checksum in its *partial* state (Linux `CHECKSUM_PARTIAL`, VirtIO's
//! `NEEDS_CSUM`), where the checksum field holds only the folded sum of
//! the pseudo-header and the sender expected hardware to add the rest.
//! Frames leave an interface with transmit checksum offload on (veth's
//! default) that way; a user-space forwarder must complete them before
//! they reach a receiver, which would otherwise count every segment as a
//! checksum error.

use crate::checksum::Sum;

const ETH_HLEN: usize = 14;
const TCP: u8 = 6;
const UDP: u8 = 17;
/// Offset of the checksum field in a TCP and a UDP header.
const TCP_CSUM_AT: usize = 16;
const UDP_CSUM_AT: usize = 6;

/// Complete the checksum the kernel described with `csum_start` (from the
/// frame's start) and `csum_offset` (from `csum_start`): the one's
/// complement sum from `csum_start` to the end, which already holds the
/// pseudo-header sum in the field, goes into the field. Returns false
/// (frame untouched) when the positions lie outside the frame.
pub fn complete_partial(frame: &mut [u8], csum_start: usize, csum_offset: usize) -> bool {
    let Some(field) = csum_start.checked_add(csum_offset) else {
        return false;
    };
    if field.checked_add(2).is_none_or(|e| e > frame.len()) {
        return false;
    }
    let mut c = Sum::ZERO.add_bytes(&frame[csum_start..]).checksum();
    // UDP sends a computed 0 as 0xFFFF (0 means "no checksum")
    if c == 0 && csum_offset == UDP_CSUM_AT {
        c = 0xffff;
    }
    frame[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Where a frame's TCP or UDP segment lies, with its pseudo-header sum.
struct L4At {
    start: usize,
    len: usize,
    proto: u8,
    pseudo: Sum,
}

/// Ethernet (up to two VLAN tags), then IPv4 (not a fragment) or IPv6
/// (TCP or UDP right after the fixed header), then TCP or UDP.
fn locate(frame: &[u8]) -> Option<L4At> {
    let mut at = ETH_HLEN - 2;
    let mut ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    for _ in 0..2 {
        if ethertype != 0x8100 && ethertype != 0x88a8 {
            break;
        }
        at += 4;
        ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    }
    let l3 = at + 2;
    let ip = frame.get(l3..)?;
    match ethertype {
        0x0800 => {
            let ihl = usize::from(*ip.first()? & 0x0f) * 4;
            if *ip.first()? >> 4 != 4 || ihl < 20 || ip.len() < ihl {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let frag = u16::from_be_bytes([ip[6], ip[7]]);
            if frag & 0x3fff != 0 || total < ihl || total > ip.len() {
                return None; // a fragment, or cut short
            }
            let proto = ip[9];
            let len = total - ihl;
            let pseudo = Sum::ZERO
                .add_bytes(&ip[12..20])
                .add_u16(u16::from(proto))
                .add_u16(len as u16);
            Some(L4At {
                start: l3 + ihl,
                len,
                proto,
                pseudo,
            })
        }
        0x86dd => {
            if ip.len() < 40 || ip[0] >> 4 != 6 {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if 40 + len > ip.len() {
                return None;
            }
            let proto = ip[6];
            let pseudo = Sum::ZERO
                .add_bytes(&ip[8..40])
                .add_u32(len as u32)
                .add_u16(u16::from(proto));
            Some(L4At {
                start: l3 + 40,
                len,
                proto,
                pseudo,
            })
        }
        _ => None,
    }
}

/// For a frame whose kernel did not say (AF_XDP in copy mode): complete
/// a TCP or UDP checksum that is in the partial state. It is in that
/// state when the field holds exactly the folded pseudo-header sum and
/// the checksum does not verify; a frame that verifies, or whose field
/// holds anything else, is left alone. (A frame corrupted on the way
/// that happens to carry its pseudo-header sum, 1 in 65,536 corrupt
/// frames, would be passed on as valid; the paths this serves, veth and
/// XDP copy mode, do not corrupt frames.) Returns whether it changed the
/// frame. Costs a header parse and a few additions per frame, and a pass
/// over the segment only when the field matches.
pub fn complete_if_partial(frame: &mut [u8]) -> bool {
    let Some(l4) = locate(frame) else {
        return false;
    };
    let csum_at = match l4.proto {
        TCP if l4.len >= 20 => TCP_CSUM_AT,
        UDP if l4.len >= 8 => UDP_CSUM_AT,
        _ => return false,
    };
    let field_at = l4.start + csum_at;
    let field = u16::from_be_bytes([frame[field_at], frame[field_at + 1]]);
    if field != l4.pseudo.fold() {
        return false;
    }
    let segment = &frame[l4.start..l4.start + l4.len];
    if l4.pseudo.add_bytes(segment).fold() == 0xffff {
        return false; // already valid
    }
    // Only the segment, not the padding behind it, is summed.
    let end = l4.start + l4.len;
    complete_partial(&mut frame[..end], l4.start, csum_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{verify_checksums, FrameBuilder};
    use std::net::Ipv4Addr;

    fn build(tcp: bool, v6: bool) -> Vec<u8> {
        let payload = [0xa5u8; 333];
        if v6 {
            let b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6([1; 16], [2; 16], 64);
            let mut out = Vec::new();
            if tcp {
                b.tcp(1000, 2000, 7, 4096)
                    .write(&mut out, &payload)
                    .unwrap();
            } else {
                b.udp(1000, 2000).write(&mut out, &payload).unwrap();
            }
            return out;
        }
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let b = if tcp {
            FrameBuilder::tcp((a, 1000), (z, 2000))
        } else {
            FrameBuilder::udp((a, 1000), (z, 2000))
        };
        b.payload(&payload).build()
    }

    /// A valid frame, and the same frame with its L4 checksum put in the
    /// partial state a kernel hands a NIC.
    fn partial(tcp: bool, v6: bool) -> (Vec<u8>, Vec<u8>, usize) {
        let good = build(tcp, v6);
        let loc = locate(&good).unwrap();
        let at = loc.start + if loc.proto == TCP { 16 } else { 6 };
        let mut p = good.clone();
        p[at..at + 2].copy_from_slice(&loc.pseudo.fold().to_be_bytes());
        (good, p, loc.start)
    }

    #[test]
    fn partial_tcp_and_udp_over_ipv4_and_ipv6_are_completed() {
        for tcp in [true, false] {
            for v6 in [false, true] {
                let (good, mut p, _) = partial(tcp, v6);
                assert_ne!(p, good);
                assert!(complete_if_partial(&mut p), "tcp={tcp} v6={v6}");
                assert_eq!(p, good, "tcp={tcp} v6={v6}");
                assert!(!complete_if_partial(&mut p), "already complete");
            }
        }
    }

    #[test]
    fn the_kernels_positions_complete_it_exactly() {
        let (good, mut p, start) = partial(true, false);
        assert!(complete_partial(&mut p, start, 16));
        assert_eq!(p, good);
        assert!(verify_checksums(&p).is_ok());
        assert!(!complete_partial(&mut p, start, 100_000), "outside");
        assert!(!complete_partial(&mut p, usize::MAX, 16), "overflow");
    }

    #[test]
    fn corrupt_or_foreign_frames_are_left_alone() {
        let (good, _, start) = partial(true, false);
        let mut bad = good.clone();
        bad[start + 30] ^= 0xff; // payload corrupted, field is a real checksum
        assert!(!complete_if_partial(&mut bad));
        for n in 0..good.len() {
            let mut cut = good[..n].to_vec();
            let _ = complete_if_partial(&mut cut); // no panic on any prefix
        }
        let mut arp = crate::arp_request(
            crate::MacAddr([2; 6]),
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
        );
        assert!(!complete_if_partial(&mut arp));
    }
}
