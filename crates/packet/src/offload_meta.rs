//! Offload metadata ([`Offload`], defined beside the packet buffer in
//! `nfkit-hw`) from and to a frame's own headers and a `virtio_net_hdr`
//! (VirtIO 1.1 §5.1.6). The 82599's descriptor fields are mapped in
//! `nfkit-ixgbe` (`desc::offload`).
//!
//! [`describe`] finds the header lengths of a frame: Ethernet with up to
//! two VLAN tags, IPv4 (options included, not a fragment) or IPv6 (TCP
//! or UDP right after the fixed header), TCP or UDP, and, for UDP to
//! VXLAN's (4789) or Geneve's (6081) port with a valid tunnel header,
//! the same again inside. [`from_virtio_net_hdr`] checks that the
//! header's offsets are the frame's: metadata that lies about offsets is
//! refused with a reason, never followed.

pub use nfkit_hw::pool::offload::{
    self as flags, cap, Caps, Gso, Offload, OffloadError, Tunnel, L3, L4,
};

/// UDP ports that mark a tunnel.
pub const VXLAN_PORT: u16 = 4789;
pub const GENEVE_PORT: u16 = 6081;

/// Bytes of the legacy `virtio_net_hdr` (without `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;
/// `virtio_net_hdr.flags`.
pub const VNET_F_NEEDS_CSUM: u8 = 1;
pub const VNET_F_DATA_VALID: u8 = 2;
/// `virtio_net_hdr.gso_type`.
pub const VNET_GSO_NONE: u8 = 0;
pub const VNET_GSO_TCPV4: u8 = 1;
pub const VNET_GSO_TCPV6: u8 = 4;
pub const VNET_GSO_UDP_L4: u8 = 5;
pub const VNET_GSO_ECN: u8 = 0x80;

/// Header lengths of one (inner or only) packet from `at`.
#[derive(Debug, Clone, Copy)]
struct Inner {
    l2_len: usize,
    l3: L3,
    l3_len: usize,
    l4: L4,
    l4_len: usize,
    /// UDP destination port, for tunnel detection.
    dport: u16,
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// `d` holds at least the headers of a frame of `len` bytes (all of
/// it, or a prefix): lengths are checked against `len`, bytes are read
/// from `d` (a header past `d` is not found).
fn parse(d: &[u8], len: usize) -> Option<Inner> {
    let mut l2 = 14;
    let mut et = be16(d, 12)?;
    for _ in 0..2 {
        if et != 0x8100 && et != 0x88a8 {
            break;
        }
        et = be16(d, l2 + 2)?;
        l2 += 4;
    }
    let (l3, l3_len, proto) = match et {
        0x0800 => {
            let v = *d.get(l2)?;
            let ihl = usize::from(v & 0x0f) * 4;
            let total = usize::from(be16(d, l2 + 2)?);
            let frag = be16(d, l2 + 6)? & 0x3fff;
            if v >> 4 != 4 || ihl < 20 || total < ihl || l2 + total > len {
                return None;
            }
            let proto = if frag == 0 { *d.get(l2 + 9)? } else { 0 };
            (L3::Ipv4, ihl, proto)
        }
        0x86dd => {
            if *d.get(l2)? >> 4 != 6 || l2 + 40 + usize::from(be16(d, l2 + 4)?) > len {
                return None;
            }
            (L3::Ipv6, 40, *d.get(l2 + 6)?)
        }
        _ => return None,
    };
    let l4at = l2 + l3_len;
    let (l4, l4_len, dport) = match proto {
        6 => {
            let off = usize::from(*d.get(l4at + 12)? >> 4) * 4;
            (off >= 20 && l4at + off <= len.min(d.len())).then_some((L4::Tcp, off, 0))?
        }
        17 if l4at + 8 <= len.min(d.len()) => (L4::Udp, 8, be16(d, l4at + 2)?),
        _ => (l4at <= d.len()).then_some((L4::None, 0, 0))?,
    };
    Some(Inner {
        l2_len: l2,
        l3,
        l3_len,
        l4,
        l4_len,
        dport,
    })
}

/// Bytes of a VXLAN or Geneve header (with Geneve's options) at `at`,
/// if valid: VXLAN with its I flag; Geneve version 0 carrying Ethernet.
fn tunnel_header(d: &[u8], at: usize, kind: Tunnel) -> Option<usize> {
    match kind {
        Tunnel::Vxlan => (*d.get(at)? & 0x08 != 0 && d.len() >= at + 8).then_some(8),
        Tunnel::Geneve => {
            let b0 = *d.get(at)?;
            let len = 8 + usize::from(b0 & 0x3f) * 4;
            (b0 >> 6 == 0 && be16(d, at + 2)? == 0x6558 && d.len() >= at + len).then_some(len)
        }
        _ => None,
    }
}

/// The header lengths of `frame` as offload state (no flags set), seeing
/// through a VXLAN or Geneve tunnel on its standard port. `None` for a
/// frame that is not IPv4 or IPv6 (or whose lengths disagree with it).
pub fn describe(frame: &[u8]) -> Option<Offload> {
    describe_prefix(frame, frame.len())
}

/// [`describe`] of a frame of `len` bytes from `head`, its first bytes
/// (at least its headers: a chain's, copied out): lengths are checked
/// against `len`, and every header found lies within `head`.
pub fn describe_prefix(head: &[u8], len: usize) -> Option<Offload> {
    let frame = head;
    let outer = parse(frame, len)?;
    let mut o = Offload {
        l3: outer.l3,
        l4: outer.l4,
        l2_len: u8::try_from(outer.l2_len).ok()?,
        l3_len: u16::try_from(outer.l3_len).ok()?,
        l4_len: u8::try_from(outer.l4_len).ok()?,
        ..Offload::default()
    };
    let kind = match (outer.l4, outer.dport) {
        (L4::Udp, VXLAN_PORT) => Tunnel::Vxlan,
        (L4::Udp, GENEVE_PORT) => Tunnel::Geneve,
        _ => return Some(o),
    };
    let udp_end = outer.l2_len + outer.l3_len + 8;
    let Some(th) = tunnel_header(frame, udp_end, kind) else {
        return Some(o);
    };
    let Some(inner) = parse(&frame[udp_end + th..], len.saturating_sub(udp_end + th)) else {
        return Some(o);
    };
    o = Offload {
        tunnel: kind,
        outer_l2_len: o.l2_len,
        outer_l3_len: u8::try_from(outer.l3_len).ok()?,
        tunnel_len: u16::try_from(8 + th).ok()?,
        l3: inner.l3,
        l4: inner.l4,
        l2_len: u8::try_from(inner.l2_len).ok()?,
        l3_len: u16::try_from(inner.l3_len).ok()?,
        l4_len: u8::try_from(inner.l4_len).ok()?,
        ..Offload::default()
    };
    Some(o)
}

/// The `virtio_net_hdr` (legacy 10 bytes, little-endian as VirtIO 1.x)
/// that asks a device for what `o` asks, or reports what `o` found.
pub fn to_virtio_net_hdr(o: &Offload) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    if o.has(flags::L4_CSUM) {
        h[0] |= VNET_F_NEEDS_CSUM;
        let start = o.l4_start() as u16;
        let off = o.l4.csum_offset().unwrap_or(0);
        h[6..8].copy_from_slice(&start.to_le_bytes());
        h[8..10].copy_from_slice(&off.to_le_bytes());
    }
    if o.has(flags::L4_CSUM_GOOD) {
        h[0] |= VNET_F_DATA_VALID;
    }
    let gso = match (o.gso, o.l3) {
        (Gso::None, _) => VNET_GSO_NONE,
        (Gso::Tcp, L3::Ipv6) => VNET_GSO_TCPV6,
        (Gso::Tcp, _) => VNET_GSO_TCPV4,
        (Gso::Udp, _) => VNET_GSO_UDP_L4,
    };
    if gso != VNET_GSO_NONE {
        h[1] = gso
            | if o.has(flags::GSO_ECN) {
                VNET_GSO_ECN
            } else {
                0
            };
        h[2..4].copy_from_slice(&(o.header_len() as u16).to_le_bytes());
        h[4..6].copy_from_slice(&o.gso_size.to_le_bytes());
    }
    h
}

/// Offload state from a `virtio_net_hdr` in front of `frame`: `Ok(None)`
/// when it asks and reports nothing. The checksum position must be the
/// (inner) TCP or UDP checksum [`describe`] finds, the segmentation kind
/// must match the frame's headers; anything else is refused.
pub fn from_virtio_net_hdr(hdr: &[u8], frame: &[u8]) -> Result<Option<Offload>, OffloadError> {
    from_virtio_net_hdr_prefix(hdr, frame, frame.len())
}

/// [`from_virtio_net_hdr`] for a frame of `len` bytes of which `head`
/// holds the first (at least its headers: the first buffer of a chain).
pub fn from_virtio_net_hdr_prefix(
    hdr: &[u8],
    head: &[u8],
    len: usize,
) -> Result<Option<Offload>, OffloadError> {
    let h: &[u8; VNET_HDR_LEN] = hdr
        .get(..VNET_HDR_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(OffloadError::PastEnd)?;
    let rd = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    let (vflags, gso_type) = (h[0], h[1]);
    let asks_gso = gso_type & !VNET_GSO_ECN != VNET_GSO_NONE;
    if vflags & (VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID) == 0 && !asks_gso {
        return Ok(None);
    }
    let mut o = describe_prefix(head, len).ok_or(OffloadError::Mismatch)?;
    if vflags & VNET_F_NEEDS_CSUM != 0 {
        o.flags |= flags::L4_CSUM;
        let at_l4 = usize::from(rd(6)) == o.l4_start();
        if !at_l4 || o.l4.csum_offset() != Some(rd(8)) {
            return Err(OffloadError::Mismatch);
        }
    }
    if vflags & VNET_F_DATA_VALID != 0 {
        o.flags |= flags::L4_CSUM_GOOD;
    }
    o.gso = match (gso_type & !VNET_GSO_ECN, o.l3) {
        (VNET_GSO_NONE, _) => Gso::None,
        (VNET_GSO_TCPV4, L3::Ipv4) | (VNET_GSO_TCPV6, L3::Ipv6) => Gso::Tcp,
        (VNET_GSO_UDP_L4, _) => Gso::Udp,
        _ => return Err(OffloadError::Mismatch),
    };
    if o.gso != Gso::None {
        o.gso_size = rd(4);
        if gso_type & VNET_GSO_ECN != 0 {
            o.flags |= flags::GSO_ECN;
        }
    }
    o.check(len)?;
    Ok(Some(o))
}

/// Do in software what a packet's offload state asks of a port that
/// cannot do anything itself: [`finish_for`] with [`Caps::NONE`].
pub fn finish_in_software(p: &mut nfkit_hw::PktBuf) -> Result<(), OffloadError> {
    finish_for(p, Caps::NONE)
}

/// The transmit requests of offload state.
const TX_FLAGS: u16 = flags::IP_CSUM | flags::L4_CSUM | flags::OUTER_IP_CSUM | flags::VLAN_INSERT;

/// Make a packet ready for a port that has `caps`: do in software
/// exactly what its offload state asks and the port cannot do (the IPv4
/// header checksums, the TCP or UDP checksum in full over the
/// pseudo-header, then the 802.1Q tag), and leave on the packet only
/// what the port does itself (its offsets moved past a tag software
/// inserted). Receive verdicts mean nothing to a transmitter and go.
/// A packet with nothing left for the port has no state afterwards.
/// Segmentation cannot be done in one buffer: a super-frame the port
/// cannot segment is refused ([`OffloadError::Unsupported`]), as is
/// state that does not fit the frame; the caller drops and counts it.
pub fn finish_for(p: &mut nfkit_hw::PktBuf, caps: Caps) -> Result<(), OffloadError> {
    let Some(mut o) = p.take_offload() else {
        return Ok(());
    };
    // The headers must be in the first segment (`check` against its
    // length); the checksummed data may run on through a chain.
    o.check(p.len())?;
    let frame_len = p.pkt_len();
    if !caps.segments(&o) {
        return Err(OffloadError::Unsupported);
    }
    let port = caps.tx_done_by_port(&o);
    // A port that segments fills in the checksums of every segment.
    let software = if o.gso != Gso::None {
        o.flags & flags::VLAN_INSERT & !port
    } else {
        o.flags & TX_FLAGS & !port
    };
    let d = p.data_mut();
    if software & flags::OUTER_IP_CSUM != 0 {
        ipv4_csum(d, usize::from(o.outer_l2_len))?;
    }
    if software & flags::IP_CSUM != 0 {
        ipv4_csum(d, o.l3_start())?;
    }
    if software & flags::L4_CSUM != 0 {
        l4_csum(p, &o, frame_len)?;
    }
    if software & flags::VLAN_INSERT != 0 {
        p.prepend(4).map_err(|_| OffloadError::Unsupported)?;
        let d = p.data_mut();
        d.copy_within(4..16, 0);
        d[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        d[14..16].copy_from_slice(&o.vlan_tci.to_be_bytes());
        if o.tunnel == Tunnel::None {
            o.l2_len += 4;
        } else {
            o.outer_l2_len += 4;
        }
    }
    o.flags = (o.flags & TX_FLAGS & !software) | (o.flags & flags::GSO_ECN);
    if o.has(flags::L4_CSUM) {
        // After a tag went in: the frame's length now.
        let frame_len = p.pkt_len();
        seed_pseudo(p.data_mut(), &o, frame_len)?;
    }
    if o.flags & TX_FLAGS != 0 || o.gso != Gso::None {
        p.set_offload(o);
    }
    Ok(())
}

fn ipv4_csum(d: &mut [u8], l3: usize) -> Result<(), OffloadError> {
    let ihl = usize::from(*d.get(l3).ok_or(OffloadError::PastEnd)? & 0x0f) * 4;
    if d[l3] >> 4 != 4 || ihl < 20 || l3 + ihl > d.len() {
        return Err(OffloadError::Mismatch);
    }
    d[l3 + 10..l3 + 12].fill(0);
    let c = crate::checksum::checksum(&d[l3..l3 + ihl]);
    d[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// The pseudo-header sum of the (inner) TCP/UDP header, and where its
/// checksum field and its data end.
/// The pseudo-header sum of the (inner) TCP/UDP segment whose headers
/// are in `d` (the first segment) and whose frame is `frame_len` bytes
/// in all; where its checksum field is, and where the segment ends.
fn l4_pseudo(
    d: &[u8],
    o: &Offload,
    frame_len: usize,
) -> Result<(crate::checksum::Sum, usize, usize), OffloadError> {
    use crate::checksum::Sum;
    let (l3, l4) = (o.l3_start(), o.l4_start());
    let (pseudo, end) = match o.l3 {
        L3::Ipv4 => {
            let total = usize::from(u16::from_be_bytes([d[l3 + 2], d[l3 + 3]]));
            let end = l3 + total;
            let len = end.checked_sub(l4).ok_or(OffloadError::Mismatch)?;
            let proto = d[l3 + 9];
            let s = Sum::ZERO.add_bytes(&d[l3 + 12..l3 + 20]);
            (s.add_u16(u16::from(proto)).add_u16(len as u16), end)
        }
        L3::Ipv6 => {
            let len = usize::from(u16::from_be_bytes([d[l3 + 4], d[l3 + 5]]));
            let end = l3 + 40 + len;
            let proto = d[l3 + 6];
            let s = Sum::ZERO.add_bytes(&d[l3 + 8..l3 + 40]);
            let len = end.checked_sub(l4).ok_or(OffloadError::Mismatch)?;
            (s.add_u32(len as u32).add_u16(u16::from(proto)), end)
        }
        L3::None => return Err(OffloadError::Mismatch),
    };
    let at = l4 + usize::from(o.l4.csum_offset().ok_or(OffloadError::NoL4)?);
    if end > frame_len || end < at + 2 || at + 2 > d.len() {
        return Err(OffloadError::Mismatch);
    }
    Ok((pseudo, at, end))
}

fn l4_csum(p: &mut nfkit_hw::PktBuf, o: &Offload, frame_len: usize) -> Result<(), OffloadError> {
    let (pseudo, at, end) = l4_pseudo(p.data(), o, frame_len)?;
    p.data_mut()[at..at + 2].fill(0);
    let mut c = sum_range(p, o.l4_start(), end, pseudo).checksum();
    if c == 0 && o.l4 == L4::Udp {
        c = 0xffff;
    }
    p.data_mut()[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// `sum` with bytes `from..to` of the frame added, over its segments
/// (a word split between two segments is put together first).
fn sum_range(
    p: &nfkit_hw::PktBuf,
    from: usize,
    to: usize,
    mut sum: crate::checksum::Sum,
) -> crate::checksum::Sum {
    if !p.is_chained() {
        return sum.add_bytes(&p.data()[from..to]);
    }
    let (mut at, mut odd) = (0usize, None::<u8>);
    for seg in p.segments() {
        let (start, end) = (from.max(at), to.min(at + seg.len()));
        if start < end {
            let mut bytes = &seg[start - at..end - at];
            if let Some(hi) = odd.take() {
                sum = sum.add_u16(u16::from_be_bytes([hi, bytes[0]]));
                bytes = &bytes[1..];
            }
            if bytes.len() % 2 == 1 {
                odd = bytes.last().copied();
                bytes = &bytes[..bytes.len() - 1];
            }
            sum = sum.add_bytes(bytes);
        }
        at += seg.len();
    }
    match odd {
        Some(last) => sum.add_bytes(&[last]),
        None => sum,
    }
}

/// Put the pseudo-header sum (folded, not complemented) in the (inner)
/// TCP/UDP checksum field: what a device or kernel that fills the
/// checksum in from `csum_start` adds the rest to (Linux's
/// `CHECKSUM_PARTIAL`, VirtIO's NEEDS_CSUM, the 82599's TXSM). Whatever
/// a module wrote there since (an incremental update after NAT) is
/// replaced.
fn seed_pseudo(d: &mut [u8], o: &Offload, frame_len: usize) -> Result<(), OffloadError> {
    let (pseudo, at, _) = l4_pseudo(d, o, frame_len)?;
    d[at..at + 2].copy_from_slice(&pseudo.fold().to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrameBuilder;
    use std::net::Ipv4Addr;

    fn tcp() -> Vec<u8> {
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        FrameBuilder::tcp((a, 1000), (z, 2000))
            .payload(&[7; 100])
            .build()
    }

    /// `inner` in Ethernet + IPv4 + UDP to `port` + a VXLAN header.
    fn vxlan(inner: &[u8], port: u16) -> Vec<u8> {
        let mut payload = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        payload.extend_from_slice(inner);
        let (a, z) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
        FrameBuilder::udp((a, 50000), (z, port))
            .payload(&payload)
            .build()
    }

    #[test]
    fn lengths_of_plain_and_tunnelled_frames() {
        let f = tcp();
        let o = describe(&f).unwrap();
        assert_eq!(
            (o.l3, o.l4, o.l2_len, o.l3_len, o.l4_len),
            (L3::Ipv4, L4::Tcp, 14, 20, 20)
        );
        assert_eq!(o.tunnel, Tunnel::None);
        let t = vxlan(&f, VXLAN_PORT);
        let o = describe(&t).unwrap();
        assert_eq!(o.tunnel, Tunnel::Vxlan);
        assert_eq!((o.outer_l2_len, o.outer_l3_len, o.tunnel_len), (14, 20, 16));
        assert_eq!(o.l4_start(), 14 + 20 + 16 + 14 + 20);
        assert_eq!(
            &t[o.l4_start()..o.l4_start() + 4],
            &f[34..38],
            "inner ports"
        );
        assert_eq!(describe(&vxlan(&f, 4790)).unwrap().tunnel, Tunnel::None);
    }

    /// The header a kernel would give a frame with checksum and TSO
    /// requests, read and written back unchanged.
    #[test]
    fn virtio_net_hdr_round_trips_and_lies_are_refused() {
        let f = tcp();
        for t in [false, true] {
            let frame = if t { vxlan(&f, VXLAN_PORT) } else { f.clone() };
            let mut o = describe(&frame).unwrap();
            o.flags |= flags::L4_CSUM | flags::GSO_ECN;
            o.gso = Gso::Tcp;
            o.gso_size = 1448;
            let h = to_virtio_net_hdr(&o);
            assert_eq!(h[0], VNET_F_NEEDS_CSUM);
            assert_eq!(h[1], VNET_GSO_TCPV4 | VNET_GSO_ECN);
            assert_eq!(usize::from(u16::from_le_bytes([h[6], h[7]])), o.l4_start());
            assert_eq!(u16::from_le_bytes([h[8], h[9]]), 16);
            assert_eq!(from_virtio_net_hdr(&h, &frame), Ok(Some(o)));
            let mut lie = h;
            lie[6] += 2;
            assert_eq!(
                from_virtio_net_hdr(&lie, &frame),
                Err(OffloadError::Mismatch)
            );
            let mut lie = h;
            lie[1] = VNET_GSO_TCPV6;
            assert_eq!(
                from_virtio_net_hdr(&lie, &frame),
                Err(OffloadError::Mismatch)
            );
            let mut lie = h;
            lie[4..6].fill(0);
            assert_eq!(
                from_virtio_net_hdr(&lie, &frame),
                Err(OffloadError::ZeroMss)
            );
        }
        assert_eq!(from_virtio_net_hdr(&[0; 10], &f), Ok(None));
        assert_eq!(from_virtio_net_hdr(&[1; 3], &f), Err(OffloadError::PastEnd));
        let valid = [VNET_F_DATA_VALID, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let o = from_virtio_net_hdr(&valid, &f).unwrap().unwrap();
        assert!(o.has(flags::L4_CSUM_GOOD));
        assert_eq!(to_virtio_net_hdr(&o), valid);
        for n in 0..f.len() {
            let _ = from_virtio_net_hdr(&to_virtio_net_hdr(&describe(&f).unwrap()), &f[..n]);
            let _ = describe(&f[..n]);
        }
    }

    /// A port that fills in TCP checksums gets the request with the
    /// pseudo-header sum in the field (whatever was there); software
    /// does the IPv4 checksum and the tag the port cannot, and moves the
    /// offsets past the tag. Another finish in software then gives the
    /// frame a checksum that verifies.
    #[test]
    fn finish_for_splits_work_by_capability() {
        let dma = nfkit_hw::sim::SimDma::new();
        let pool = nfkit_hw::Mempool::new(&*dma, "t", 8, 2048).unwrap();
        let f = tcp();
        let mut p = pool.alloc().unwrap();
        p.copy_from(&f).unwrap();
        let d = p.data_mut();
        d[24..26].fill(0xee); // IPv4 checksum to do
        d[50..52].fill(0xee); // TCP checksum field: junk
        let mut o = describe(&f).unwrap();
        o.flags = flags::IP_CSUM | flags::L4_CSUM | flags::VLAN_INSERT | flags::L4_CSUM_GOOD;
        o.vlan_tci = 7;
        p.set_offload(o);
        finish_for(&mut p, Caps::new(cap::TX_L4_CSUM, 0)).unwrap();
        let left = *p.offload().expect("the L4 checksum is the port's");
        assert_eq!(left.flags, flags::L4_CSUM);
        assert_eq!(left.l2_len, 18);
        let d = p.data();
        assert_eq!(&d[12..16], &[0x81, 0, 0, 7]);
        let pseudo = crate::checksum::Sum::ZERO
            .add_bytes(&f[26..34])
            .add_u16(6)
            .add_u16((f.len() - 34) as u16)
            .fold();
        assert_eq!(&d[54..56], &pseudo.to_be_bytes());
        finish_in_software(&mut p).unwrap();
        assert!(p.offload().is_none());
        let mut untagged = p.data()[..12].to_vec();
        untagged.extend_from_slice(&p.data()[16..]);
        assert_eq!(untagged, f, "both checksums as the builder made them");
        // Nothing left for the port: no state afterwards.
        let mut q = pool.alloc().unwrap();
        q.copy_from(&f).unwrap();
        q.set_offload(Offload {
            flags: flags::L4_CSUM_GOOD,
            ..Offload::default()
        });
        finish_for(&mut q, Caps::new(cap::TX_L4_CSUM, 0)).unwrap();
        assert!(q.offload().is_none());
        // Segmentation the port cannot do is refused.
        o.flags = flags::L4_CSUM;
        o.gso = Gso::Tcp;
        o.gso_size = 10;
        q.set_offload(o);
        assert_eq!(
            finish_for(&mut q, Caps::new(cap::TX_L4_CSUM, 0)),
            Err(OffloadError::Unsupported)
        );
        q.set_offload(o);
        finish_for(&mut q, Caps::new(cap::TX_TSO, 0)).unwrap();
        assert_eq!(q.offload().map(|o| o.gso), Some(Gso::Tcp));
    }

    /// A jumbo frame in a chain: its TCP checksum is done over every
    /// segment, in software or, for a port that fills it in, seeded
    /// with the pseudo-header sum of the whole segment's length.
    #[test]
    fn chained_frames_get_checksums_over_every_segment() {
        let dma = nfkit_hw::sim::SimDma::new();
        let pool = nfkit_hw::Mempool::new(&*dma, "t", 32, 2048).unwrap();
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let payload: Vec<u8> = (0..9001u32).map(|i| (i * 7 + 3) as u8).collect();
        let f = FrameBuilder::tcp((a, 1000), (z, 2000))
            .payload(&payload)
            .build();
        let whole = |p: &nfkit_hw::PktBuf| p.segments().flatten().copied().collect::<Vec<u8>>();
        for caps in [Caps::NONE, Caps::new(cap::TX_L4_CSUM, 0)] {
            let mut p = pool.alloc_frame(&f).unwrap();
            assert!(p.is_chained());
            p.data_mut()[50..52].fill(0xee);
            let mut o = describe(&f).unwrap();
            o.flags = flags::L4_CSUM;
            p.set_offload(o);
            finish_for(&mut p, caps).unwrap();
            if p.offload().is_some() {
                finish_in_software(&mut p).unwrap();
            }
            assert_eq!(whole(&p), f, "{caps:?}");
        }
    }
}
