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

/// What a port does with offload state itself, in its hardware or
/// through its kernel interface (`Port::capabilities` in `nfkit-port`).
/// A transmit capability means: hand the port a packet whose state asks
/// for this and the port (its NIC or its kernel) does it; whatever a
/// packet asks that its port cannot, software does before the port sees
/// it (PortOut, the queue loop: `nfkit_packet::offload_meta::finish_for`).
/// A receive capability means: the port's received packets may carry
/// this kind of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Caps {
    /// The `cap::*` flags.
    pub flags: u32,
    /// The largest frame the port sends or receives, Ethernet header
    /// included (0: not known).
    pub max_frame: u32,
}

/// [`Caps`] flags.
pub mod cap {
    /// Transmit: fills in the IPv4 header checksum ([`super::IP_CSUM`]).
    pub const TX_IP_CSUM: u32 = 1 << 0;
    /// Transmit: fills in the TCP/UDP checksum of a packet that is not
    /// in a tunnel ([`super::L4_CSUM`]).
    pub const TX_L4_CSUM: u32 = 1 << 1;
    /// Transmit: fills in the TCP/UDP checksum of the inner packet of a
    /// tunnel (a device that starts at any `csum_start`).
    pub const TX_INNER_L4_CSUM: u32 = 1 << 2;
    /// Transmit: fills in the outer IPv4 checksum of a tunnel
    /// ([`super::OUTER_IP_CSUM`]).
    pub const TX_OUTER_IP_CSUM: u32 = 1 << 3;
    /// Transmit: inserts an 802.1Q tag ([`super::VLAN_INSERT`]).
    pub const TX_VLAN_INSERT: u32 = 1 << 4;
    /// Transmit: TCP segmentation (TSO) of a super-frame.
    pub const TX_TSO: u32 = 1 << 5;
    /// Transmit: UDP segmentation (USO).
    pub const TX_USO: u32 = 1 << 6;
    /// Transmit: segmentation of a tunnel's inner TCP packet.
    pub const TX_TUNNEL_TSO: u32 = 1 << 7;
    /// Receive: IPv4 header checksum verdicts ([`super::IP_CSUM_GOOD`],
    /// [`super::IP_CSUM_BAD`]).
    pub const RX_IP_CSUM: u32 = 1 << 16;
    /// Receive: TCP/UDP checksum verdicts ([`super::L4_CSUM_GOOD`],
    /// [`super::L4_CSUM_BAD`]).
    pub const RX_L4_CSUM: u32 = 1 << 17;
    /// Receive: frames whose TCP/UDP checksum is still to be filled in
    /// (the sender's transmit offload, [`super::L4_CSUM`] on receive).
    pub const RX_PARTIAL_CSUM: u32 = 1 << 18;
    /// Receive: an 802.1Q tag taken off the frame ([`super::VLAN_STRIPPED`]).
    pub const RX_VLAN_STRIP: u32 = 1 << 19;
    /// Receive: super-frames made of several received segments (LRO, GRO).
    pub const RX_LRO: u32 = 1 << 20;
    /// Receive: verdicts on the inner packet of a tunnel.
    pub const RX_TUNNEL_CSUM: u32 = 1 << 21;

    /// Names in the order the start-up line lists them.
    pub const NAMES: [(u32, &str); 14] = [
        (TX_IP_CSUM, "tx-ip-csum"),
        (TX_L4_CSUM, "tx-l4-csum"),
        (TX_INNER_L4_CSUM, "tx-inner-l4-csum"),
        (TX_OUTER_IP_CSUM, "tx-outer-ip-csum"),
        (TX_VLAN_INSERT, "tx-vlan-insert"),
        (TX_TSO, "tso"),
        (TX_USO, "uso"),
        (TX_TUNNEL_TSO, "tunnel-tso"),
        (RX_IP_CSUM, "rx-ip-csum"),
        (RX_L4_CSUM, "rx-l4-csum"),
        (RX_PARTIAL_CSUM, "rx-partial-csum"),
        (RX_VLAN_STRIP, "rx-vlan-strip"),
        (RX_LRO, "lro"),
        (RX_TUNNEL_CSUM, "rx-tunnel-csum"),
    ];
}

impl Caps {
    /// A port that does nothing itself: software does everything.
    pub const NONE: Caps = Caps {
        flags: 0,
        max_frame: 0,
    };
    pub const fn new(flags: u32, max_frame: u32) -> Caps {
        Caps { flags, max_frame }
    }
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }
    /// The transmit flags of `o` ([`IP_CSUM`], [`L4_CSUM`],
    /// [`OUTER_IP_CSUM`], [`VLAN_INSERT`]) this port does itself; the
    /// others are software's. Segmentation is separate
    /// ([`Caps::segments`]).
    pub fn tx_done_by_port(&self, o: &Offload) -> u16 {
        let mut f = 0;
        let tunnel = o.tunnel != Tunnel::None;
        if self.has(cap::TX_IP_CSUM) && !tunnel {
            f |= IP_CSUM;
        }
        let l4 = if tunnel {
            cap::TX_INNER_L4_CSUM
        } else {
            cap::TX_L4_CSUM
        };
        if self.has(l4) {
            f |= L4_CSUM;
        }
        if self.has(cap::TX_OUTER_IP_CSUM) && tunnel {
            f |= OUTER_IP_CSUM;
        }
        if self.has(cap::TX_VLAN_INSERT) {
            f |= VLAN_INSERT;
        }
        o.flags & f
    }
    /// Whether the port segments what `o` asks ([`Gso::None`]: true).
    pub fn segments(&self, o: &Offload) -> bool {
        match (o.gso, o.tunnel != Tunnel::None) {
            (Gso::None, _) => true,
            (Gso::Tcp, false) => self.has(cap::TX_TSO),
            (Gso::Tcp, true) => self.has(cap::TX_TUNNEL_TSO),
            (Gso::Udp, false) => self.has(cap::TX_USO),
            (Gso::Udp, true) => false,
        }
    }
}

/// `tx-l4-csum rx-partial-csum ... max-frame 1514`, or `none`.
impl std::fmt::Display for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (flag, name) in cap::NAMES {
            if self.has(flag) {
                write!(f, "{}{name}", if first { "" } else { " " })?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        if self.max_frame != 0 {
            write!(f, ", max frame {}", self.max_frame)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4() -> Offload {
        Offload {
            flags: L4_CSUM | IP_CSUM,
            l3: L3::Ipv4,
            l4: L4::Tcp,
            l2_len: 14,
            l3_len: 20,
            l4_len: 20,
            ..Offload::default()
        }
    }

    #[test]
    fn caps_split_work_between_port_and_software() {
        let o = tcp4();
        let l4_only = Caps::new(cap::TX_L4_CSUM, 1514);
        assert_eq!(l4_only.tx_done_by_port(&o), L4_CSUM);
        assert_eq!(Caps::NONE.tx_done_by_port(&o), 0);
        let t = Offload {
            tunnel: Tunnel::Vxlan,
            outer_l2_len: 14,
            outer_l3_len: 20,
            tunnel_len: 16,
            flags: L4_CSUM | OUTER_IP_CSUM,
            ..o
        };
        // Not tunnel-aware: the inner checksum is software's.
        assert_eq!(l4_only.tx_done_by_port(&t), 0);
        let inner = Caps::new(cap::TX_INNER_L4_CSUM | cap::TX_OUTER_IP_CSUM, 0);
        assert_eq!(inner.tx_done_by_port(&t), L4_CSUM | OUTER_IP_CSUM);
        let tso = Offload {
            gso: Gso::Tcp,
            gso_size: 1448,
            ..o
        };
        assert!(!l4_only.segments(&tso));
        assert!(Caps::new(cap::TX_TSO, 0).segments(&tso));
        assert!(Caps::NONE.segments(&o));
        assert_eq!(
            l4_only.to_string(),
            "tx-l4-csum, max frame 1514",
            "the start-up line's words"
        );
        assert_eq!(Caps::NONE.to_string(), "none");
    }

    #[test]
    fn headers_put_in_front_or_taken_off_move_the_offsets() {
        let mut o = tcp4();
        assert!(o.front_grown(50)); // an encapsulation
        assert_eq!(o.l4_start(), 84);
        assert!(o.front_shrunk(50));
        assert_eq!(o, tcp4());
        assert!(!o.clone().front_grown(250), "no room in l2_len");
        assert!(!o.clone().front_shrunk(20), "into the IP header");
        let mut t = Offload {
            tunnel: Tunnel::Geneve,
            outer_l2_len: 14,
            outer_l3_len: 20,
            tunnel_len: 24,
            flags: L4_CSUM | OUTER_IP_CSUM,
            ..tcp4()
        };
        assert!(t.front_grown(4)); // a tag on the outer frame
        assert_eq!(t.outer_l2_len, 18);
        assert!(t.front_shrunk(18 + 20 + 24)); // decapsulated
        assert_eq!(
            t,
            Offload {
                flags: L4_CSUM,
                ..tcp4()
            }
        );
    }

    #[test]
    fn lengths_add_up_and_lies_are_refused() {
        let o = tcp4();
        assert_eq!((o.l3_start(), o.l4_start(), o.header_len()), (14, 34, 54));
        assert_eq!(o.check(54), Ok(()));
        assert_eq!(o.check(53), Err(OffloadError::PastEnd));
        let t = Offload {
            tunnel: Tunnel::Vxlan,
            outer_l2_len: 14,
            outer_l3_len: 20,
            tunnel_len: 16,
            ..o
        };
        assert_eq!(t.l4_start(), 14 + 20 + 16 + 34);
        assert_eq!(t.check(t.header_len()), Ok(()));
        let bad = [
            (Offload { l4: L4::None, ..o }, OffloadError::NoL4),
            (
                Offload {
                    gso: Gso::Udp,
                    gso_size: 1000,
                    ..o
                },
                OffloadError::GsoMismatch,
            ),
            (Offload { gso: Gso::Tcp, ..o }, OffloadError::ZeroMss),
            (Offload { l3: L3::Ipv6, ..o }, OffloadError::NotIpv4),
            (
                Offload {
                    tunnel: Tunnel::None,
                    ..t
                },
                OffloadError::TunnelLengths,
            ),
            (
                Offload {
                    flags: IP_CSUM_GOOD | IP_CSUM_BAD,
                    ..o
                },
                OffloadError::Verdict,
            ),
        ];
        for (b, why) in bad {
            assert_eq!(b.check(1500), Err(why), "{b:?}");
        }
    }
}
