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
    /// The IP header, and whether it is IPv6.
    l3: usize,
    v6: bool,
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
                l3,
                v6: false,
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
                l3,
                v6: true,
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

/// The segmentation a super-frame asks for (`virtio_net_hdr` `gso_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    /// TCP segmentation (over IPv4 or IPv6).
    Tcp,
    /// UDP segmentation (`UDP_L4`): one datagram per segment.
    Udp,
}

impl GsoKind {
    /// From a `virtio_net_hdr` `gso_type` (the ECN bit ignored); `None`
    /// for no segmentation and for kinds nfkit does not cut (UFO).
    pub fn from_vnet(gso_type: u8) -> Option<GsoKind> {
        match gso_type & !0x80 {
            1 | 4 => Some(GsoKind::Tcp),
            5 => Some(GsoKind::Udp),
            _ => None,
        }
    }
}

/// Why a super-frame could not be cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentError {
    /// Not Ethernet + IPv4/IPv6 + the TCP or UDP the kind says.
    Malformed,
    /// A segment size of 0, or more segments than `max_segments`.
    BadSize,
}

/// Cut the super-frame `frame` (TCP or UDP over IPv4 or IPv6, as a
/// sender with segmentation offload built it) into frames of at most
/// `mss` payload bytes, as the NIC it expected would have: the headers
/// repeated, IPv4 lengths, identifiers and header checksums, TCP sequence
/// numbers and flags (FIN and PSH on the last, CWR on the first only),
/// UDP lengths, and full TCP/UDP checksums. Each segment is built in
/// `scratch` (reused, no allocation once it has grown) and handed to
/// `emit`. Returns how many segments were emitted.
pub fn segment(
    frame: &[u8],
    kind: GsoKind,
    mss: usize,
    max_segments: usize,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, SegmentError> {
    let l4 = locate(frame).ok_or(SegmentError::Malformed)?;
    let end = l4.start + l4.len;
    let hlen = match (kind, l4.proto) {
        (GsoKind::Tcp, TCP) if l4.len >= 20 => {
            let h = usize::from(frame[l4.start + 12] >> 4) * 4;
            if h < 20 || h > l4.len {
                return Err(SegmentError::Malformed);
            }
            h
        }
        (GsoKind::Udp, UDP) if l4.len >= 8 => 8,
        _ => return Err(SegmentError::Malformed),
    };
    let payload = &frame[l4.start + hlen..end];
    if mss == 0 || payload.len().div_ceil(mss) > max_segments {
        return Err(SegmentError::BadSize);
    }
    let headers = &frame[..l4.start + hlen];
    let chunks = payload.len().div_ceil(mss).max(1);
    for i in 0..chunks {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        scratch.clear();
        scratch.extend_from_slice(headers);
        scratch.extend_from_slice(chunk);
        let l4_len = hlen + chunk.len();
        let ip = l4.l3;
        if l4.v6 {
            scratch[ip + 4..ip + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        } else {
            let ihl = l4.start - ip;
            let total = (ihl + l4_len) as u16;
            scratch[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
            let id = u16::from_be_bytes([scratch[ip + 4], scratch[ip + 5]]).wrapping_add(i as u16);
            scratch[ip + 4..ip + 6].copy_from_slice(&id.to_be_bytes());
            scratch[ip + 10..ip + 12].fill(0);
            let c = crate::checksum::checksum(&scratch[ip..ip + ihl]);
            scratch[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        }
        let t = l4.start;
        let csum_at = match kind {
            GsoKind::Tcp => {
                let seq = u32::from_be_bytes(scratch[t + 4..t + 8].try_into().unwrap_or([0; 4]))
                    .wrapping_add((i * mss) as u32);
                scratch[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
                if i + 1 < chunks {
                    scratch[t + 13] &= !0x09; // FIN, PSH: the last segment's
                }
                if i > 0 {
                    scratch[t + 13] &= !0x80; // CWR: the first segment's
                }
                TCP_CSUM_AT
            }
            GsoKind::Udp => {
                scratch[t + 4..t + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                UDP_CSUM_AT
            }
        };
        scratch[t + csum_at..t + csum_at + 2].fill(0);
        let pseudo = if l4.v6 {
            Sum::ZERO
                .add_bytes(&scratch[ip + 8..ip + 40])
                .add_u32(l4_len as u32)
                .add_u16(u16::from(l4.proto))
        } else {
            Sum::ZERO
                .add_bytes(&scratch[ip + 12..ip + 20])
                .add_u16(u16::from(l4.proto))
                .add_u16(l4_len as u16)
        };
        let mut c = pseudo.add_bytes(&scratch[t..]).checksum();
        if c == 0 && kind == GsoKind::Udp {
            c = 0xffff;
        }
        scratch[t + csum_at..t + csum_at + 2].copy_from_slice(&c.to_be_bytes());
        emit(scratch);
    }
    Ok(chunks)
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

    /// A TCP super-frame with PSH|FIN|CWR and a partial checksum, cut
    /// into valid segments whose payloads add up to the original.
    #[test]
    fn super_frames_are_cut_into_valid_segments() {
        // Under miri (`cargo xtask miri`) 3 segments of each kind, not 7
        // and 10: the same paths, a third of the bytes.
        let bytes = if cfg!(miri) { 3_000 } else { 10_000u32 };
        let payload: Vec<u8> = (0..bytes).map(|i| (i * 7) as u8).collect();
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut big = FrameBuilder::tcp((a, 1000), (z, 2000))
            .payload(&payload)
            .build();
        let l4 = locate(&big).unwrap();
        big[l4.start + 13] = 0x80 | 0x10 | 0x08 | 0x01; // CWR ACK PSH FIN
        let mut scratch = Vec::new();
        let mut segs = Vec::new();
        let n = segment(&big, GsoKind::Tcp, 1448, 64, &mut scratch, |s| {
            segs.push(s.to_vec())
        })
        .unwrap();
        assert_eq!(n, payload.len().div_ceil(1448));
        let mut got = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            verify_checksums(s).unwrap_or_else(|e| panic!("segment {i}: {e}"));
            let l = locate(s).unwrap();
            let flags = s[l.start + 13];
            assert_eq!(flags & 0x80 != 0, i == 0, "CWR on the first only");
            assert_eq!(flags & 0x09 != 0, i == n - 1, "FIN/PSH on the last only");
            let seq = u32::from_be_bytes(s[l.start + 4..l.start + 8].try_into().unwrap());
            assert_eq!(seq, 1 + (i * 1448) as u32);
            got.extend_from_slice(&s[l.start + 20..]);
        }
        assert_eq!(got, payload);
        // UDP over IPv6: one datagram per segment
        let b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6([1; 16], [2; 16], 64);
        let mut big = Vec::new();
        b.udp(5, 6).write(&mut big, &payload).unwrap();
        let mut count = 0;
        segment(&big, GsoKind::Udp, 1000, 64, &mut scratch, |s| {
            let l = locate(s).unwrap();
            let sum = l.pseudo.add_bytes(&s[l.start..l.start + l.len]);
            assert_eq!(sum.fold(), 0xffff, "UDP/IPv6 checksum verifies");
            assert_eq!(
                usize::from(u16::from_be_bytes([s[l.start + 4], s[l.start + 5]])),
                l.len
            );
            count += 1;
        })
        .unwrap();
        assert_eq!(count, payload.len().div_ceil(1000));
        // hostile sizes
        assert_eq!(
            segment(&big, GsoKind::Udp, 0, 64, &mut scratch, |_| {}),
            Err(SegmentError::BadSize)
        );
        assert_eq!(
            segment(&big, GsoKind::Udp, 1, 64, &mut scratch, |_| {}),
            Err(SegmentError::BadSize)
        );
        assert_eq!(
            segment(&big, GsoKind::Tcp, 1000, 64, &mut scratch, |_| {}),
            Err(SegmentError::Malformed)
        );
        for n in 0..80 {
            let _ = segment(&big[..n], GsoKind::Udp, 100, 64, &mut scratch, |_| {});
        }
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
