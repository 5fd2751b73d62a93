//! Offload metadata: what a packet's checksums, segmentation, VLAN tag
//! and tunnel headers need or were found to be, carried beside the
//! packet from the port that received it, through the pipeline, to the
//! port (or software module) that acts on it.
//!
//! One [`Offload`] per packet, kept in the pool beside the packet's
//! metadata area and valid only while the packet's own flag says so
//! ([`crate::PktBuf::offload`]): a packet nobody gave offload state
//! costs nothing (no store per packet; a new or received buffer has no
//! state until a port or module sets one).
//!
//! The fields are the union of what `virtio_net_hdr` (VirtIO 1.1
//! §5.1.6) and the 82599's advanced descriptors (transmit context
//! descriptor §7.2.3.2.3, data descriptor POPTS/DCMD §7.2.3.2.4, receive
//! write-back status and errors §7.1.6.2) say, in the units of neither:
//! header lengths, from which each format's fields follow exactly.
//!
//! | field / flag | `virtio_net_hdr` | 82599 |
//! |---|---|---|
//! | [`L4_CSUM`] with `l4` | `flags` NEEDS_CSUM; `csum_start` = [`Offload::l4_start`]; `csum_offset` = 16 (TCP) or 6 (UDP) | data POPTS.TXSM; context TUCMD.L4T (TCP/UDP), MACLEN = `l2_len`, IPLEN = `l3_len` |
//! | [`IP_CSUM`] | none (software) | POPTS.IXSM; TUCMD.IPV4 |
//! | [`L4_CSUM_GOOD`] | `flags` DATA_VALID (receive) | STATUS.L4I without ERRORS.L4E |
//! | [`L4_CSUM_BAD`] | none (a device does not deliver it) | STATUS.L4I with ERRORS.L4E |
//! | [`IP_CSUM_GOOD`] / [`IP_CSUM_BAD`] | none | STATUS.IPCS without / with ERRORS.IPE |
//! | `gso`, `gso_size` | `gso_type` (TCPV4 1, UDP_L4 5, TCPV6 4), `gso_size`; `hdr_len` = [`Offload::header_len`] | DCMD.TSE; context MSS = `gso_size`, L4LEN = `l4_len`; PAYLEN = frame length - `header_len` |
//! | [`GSO_ECN`] | `gso_type` bit 0x80 | none (TSE keeps the sender's CWR on the first segment) |
//! | [`VLAN_INSERT`], `vlan_tci` | none (software) | DCMD.VLE; context VLAN = `vlan_tci` |
//! | [`VLAN_STRIPPED`], `vlan_tci` | none | STATUS.VP; write-back VLAN Tag |
//! | `tunnel`, `outer_l2_len`, `outer_l3_len`, `tunnel_len` | VirtIO 1.1 has no tunnel fields: `csum_start` points at the inner L4 header | none: the 82599 is not tunnel-aware; [`OUTER_IP_CSUM`] is IXSM with MACLEN/IPLEN of the outer headers, inner checksums are done in software |
//!
//! `l2_len`, `l3_len`, `l4_len` describe the innermost packet (the only
//! one when `tunnel` is [`Tunnel::None`]). [`Offload::check`] tells
//! whether a frame is as long as the lengths claim; the parsing checks
//! that the bytes there are the headers they claim are in
//! `nfkit-packet` (`offload_meta`).

/// Transmit: fill in the IPv4 header checksum of the (inner) packet.
pub const IP_CSUM: u16 = 1 << 0;
/// Transmit: fill in the TCP or UDP checksum of the (inner) packet.
pub const L4_CSUM: u16 = 1 << 1;
/// Transmit: fill in the outer IPv4 header checksum of a tunnel.
pub const OUTER_IP_CSUM: u16 = 1 << 2;
/// Transmit: insert `vlan_tci` as an 802.1Q tag.
pub const VLAN_INSERT: u16 = 1 << 3;
/// Receive: the (inner) IPv4 header checksum was verified good.
pub const IP_CSUM_GOOD: u16 = 1 << 8;
/// Receive: the (inner) IPv4 header checksum was verified bad.
pub const IP_CSUM_BAD: u16 = 1 << 9;
/// Receive: the (inner) TCP or UDP checksum was verified good.
pub const L4_CSUM_GOOD: u16 = 1 << 10;
/// Receive: the (inner) TCP or UDP checksum was verified bad.
pub const L4_CSUM_BAD: u16 = 1 << 11;
/// Receive: the port took an 802.1Q tag off the frame; it is `vlan_tci`.
pub const VLAN_STRIPPED: u16 = 1 << 12;
/// Segmentation: the sender set ECN's CWR on the super-frame.
pub const GSO_ECN: u16 = 1 << 13;

/// The transport header the checksum and segmentation fields refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum L4 {
    #[default]
    None,
    Tcp,
    Udp,
}

impl L4 {
    /// Offset of the checksum field in the header (`csum_offset`).
    pub fn csum_offset(self) -> Option<u16> {
        match self {
            L4::None => None,
            L4::Tcp => Some(16),
            L4::Udp => Some(6),
        }
    }
}

/// The network header of the (inner) packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum L3 {
    #[default]
    None,
    Ipv4,
    Ipv6,
}

/// Segmentation a super-frame asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Gso {
    #[default]
    None,
    /// TCP segmentation (TSO).
    Tcp,
    /// UDP segmentation (`UDP_L4`): one datagram per segment.
    Udp,
}

/// The tunnel whose headers sit in front of the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Tunnel {
    #[default]
    None,
    Vxlan,
    Geneve,
    /// Any other encapsulation (GenericEncap, IPEncap, MPLS).
    Other,
}

/// Per-packet offload state (see the module documentation for how it
/// maps to `virtio_net_hdr` and to the 82599's descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Offload {
    /// The flags above ([`IP_CSUM`], [`L4_CSUM`], ...).
    pub flags: u16,
    pub l3: L3,
    pub l4: L4,
    pub gso: Gso,
    pub tunnel: Tunnel,
    /// Bytes of the (inner) Ethernet header, tags included (MACLEN).
    pub l2_len: u8,
    /// Bytes of the (inner) IP header, options and extensions included
    /// (IPLEN, at most 511).
    pub l3_len: u16,
    /// Bytes of the (inner) TCP or UDP header (L4LEN).
    pub l4_len: u8,
    /// Payload bytes per segment (`gso_size`, MSS).
    pub gso_size: u16,
    /// 802.1Q TCI to insert, or that was stripped.
    pub vlan_tci: u16,
    /// Bytes of the outer Ethernet header of a tunnel (0 without one).
    pub outer_l2_len: u8,
    /// Bytes of the outer IP header of a tunnel.
    pub outer_l3_len: u8,
    /// Bytes from the end of the outer IP header to the inner Ethernet
    /// header (UDP + VXLAN: 16; UDP + Geneve with its options).
    pub tunnel_len: u16,
}

/// Why offload state does not fit its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    #[error("offload headers end past the frame")]
    PastEnd,
    #[error("checksum or segmentation asked without a TCP/UDP header")]
    NoL4,
    #[error("segmentation of a kind that does not match the L4 header")]
    GsoMismatch,
    #[error("segmentation with a segment size of 0")]
    ZeroMss,
    #[error("an IPv4 checksum asked of a packet that is not IPv4")]
    NotIpv4,
    #[error("tunnel lengths without a tunnel, or a tunnel without them")]
    TunnelLengths,
    #[error("a receive verdict that is both good and bad")]
    Verdict,
    #[error("offsets that are not where the frame's headers are")]
    Mismatch,
    #[error("an offload the port cannot do and software cannot do here (segmentation)")]
    Unsupported,
}

impl Offload {
    /// Where the (inner) L3 header starts.
    pub fn l3_start(&self) -> usize {
        usize::from(self.outer_l2_len)
            + usize::from(self.outer_l3_len)
            + usize::from(self.tunnel_len)
            + usize::from(self.l2_len)
    }
    /// Where the (inner) L4 header starts (`csum_start`).
    pub fn l4_start(&self) -> usize {
        self.l3_start() + usize::from(self.l3_len)
    }
    /// Bytes of every header up to the end of the (inner) L4 header
    /// (`hdr_len`).
    pub fn header_len(&self) -> usize {
        self.l4_start() + usize::from(self.l4_len)
    }
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
    /// `n` header bytes were put in front of the frame (an encapsulation,
    /// a VLAN tag, MPLS labels): the same headers are now `n` bytes
    /// further. They count as outer Ethernet (or, for a frame without a
    /// tunnel, as its L2 header: a checksum position is all that a port
    /// needs). False if the lengths cannot say it (the state is then of
    /// no use; [`crate::PktBuf::prepend`] takes it off).
    pub fn front_grown(&mut self, n: usize) -> bool {
        let field = if self.tunnel == Tunnel::None {
            &mut self.l2_len
        } else {
            &mut self.outer_l2_len
        };
        match u8::try_from(usize::from(*field) + n) {
            Ok(v) => {
                *field = v;
                true
            }
            Err(_) => false,
        }
    }
    /// `n` bytes were taken off the front of the frame: a decapsulation
    /// (all of a tunnel's outer headers: the state describes the inner
    /// packet alone), or a tag or label. False when the bytes taken
    /// reach into the headers the state describes: it is of no use then
    /// ([`crate::PktBuf::adj`] takes it off).
    pub fn front_shrunk(&mut self, n: usize) -> bool {
        let outer = usize::from(self.outer_l2_len)
            + usize::from(self.outer_l3_len)
            + usize::from(self.tunnel_len);
        if self.tunnel != Tunnel::None && n == outer {
            self.tunnel = Tunnel::None;
            (self.outer_l2_len, self.outer_l3_len, self.tunnel_len) = (0, 0, 0);
            self.flags &= !OUTER_IP_CSUM;
            return true;
        }
        let field = if self.tunnel == Tunnel::None {
            &mut self.l2_len
        } else {
            &mut self.outer_l2_len
        };
        match u8::try_from(n).ok().and_then(|n| field.checked_sub(n)) {
            Some(v) => {
                *field = v;
                true
            }
            None => false,
        }
    }
    /// Whether this state is consistent in itself and with a frame of
    /// `frame_len` bytes: the headers it names fit, a checksum or
    /// segmentation request has the header it needs, verdicts are not
    /// contradictory. A port or module that meets state failing this
    /// drops the packet and counts the reason.
    pub fn check(&self, frame_len: usize) -> Result<(), OffloadError> {
        let wants_l4 = self.has(L4_CSUM) || self.gso != Gso::None;
        if wants_l4 && self.l4 == L4::None {
            return Err(OffloadError::NoL4);
        }
        match (self.gso, self.l4) {
            (Gso::Tcp, L4::Udp) | (Gso::Udp, L4::Tcp) => return Err(OffloadError::GsoMismatch),
            _ => {}
        }
        if self.gso != Gso::None && self.gso_size == 0 {
            return Err(OffloadError::ZeroMss);
        }
        if self.has(IP_CSUM) && self.l3 != L3::Ipv4 {
            return Err(OffloadError::NotIpv4);
        }
        let tunnel_lengths =
            self.outer_l2_len != 0 || self.outer_l3_len != 0 || self.tunnel_len != 0;
        if (self.tunnel == Tunnel::None) == tunnel_lengths
            || (self.has(OUTER_IP_CSUM) && self.tunnel == Tunnel::None)
        {
            return Err(OffloadError::TunnelLengths);
        }
        let both = |g, b| self.has(g) && self.has(b);
        if both(IP_CSUM_GOOD, IP_CSUM_BAD) || both(L4_CSUM_GOOD, L4_CSUM_BAD) {
            return Err(OffloadError::Verdict);
        }
        let end = if self.l4 == L4::None {
            self.l4_start()
        } else {
            self.header_len()
        };
        if end > frame_len {
            return Err(OffloadError::PastEnd);
        }
        Ok(())
    }
}

pub use super::caps::{cap, Caps};

#[cfg(test)]
mod tests;
