//! What a port does with offload state itself ([`Caps`]); the state
//! is in `offload.rs`.

use super::offload::{Gso, Offload, Tunnel, IP_CSUM, L4_CSUM, OUTER_IP_CSUM, VLAN_INSERT};

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
    /// Transmit: fills in the IPv4 header checksum ([`crate::pool::offload::IP_CSUM`]).
    pub const TX_IP_CSUM: u32 = 1 << 0;
    /// Transmit: fills in the TCP/UDP checksum of a packet that is not
    /// in a tunnel ([`crate::pool::offload::L4_CSUM`]).
    pub const TX_L4_CSUM: u32 = 1 << 1;
    /// Transmit: fills in the TCP/UDP checksum of the inner packet of a
    /// tunnel (a device that starts at any `csum_start`).
    pub const TX_INNER_L4_CSUM: u32 = 1 << 2;
    /// Transmit: fills in the outer IPv4 checksum of a tunnel
    /// ([`crate::pool::offload::OUTER_IP_CSUM`]).
    pub const TX_OUTER_IP_CSUM: u32 = 1 << 3;
    /// Transmit: inserts an 802.1Q tag ([`crate::pool::offload::VLAN_INSERT`]).
    pub const TX_VLAN_INSERT: u32 = 1 << 4;
    /// Transmit: TCP segmentation (TSO) of a super-frame.
    pub const TX_TSO: u32 = 1 << 5;
    /// Transmit: UDP segmentation (USO).
    pub const TX_USO: u32 = 1 << 6;
    /// Transmit: segmentation of a tunnel's inner TCP packet.
    pub const TX_TUNNEL_TSO: u32 = 1 << 7;
    /// Receive: IPv4 header checksum verdicts ([`crate::pool::offload::IP_CSUM_GOOD`],
    /// [`crate::pool::offload::IP_CSUM_BAD`]).
    pub const RX_IP_CSUM: u32 = 1 << 16;
    /// Receive: TCP/UDP checksum verdicts ([`crate::pool::offload::L4_CSUM_GOOD`],
    /// [`crate::pool::offload::L4_CSUM_BAD`]).
    pub const RX_L4_CSUM: u32 = 1 << 17;
    /// Receive: frames whose TCP/UDP checksum is still to be filled in
    /// (the sender's transmit offload, [`crate::pool::offload::L4_CSUM`] on receive).
    pub const RX_PARTIAL_CSUM: u32 = 1 << 18;
    /// Receive: an 802.1Q tag taken off the frame ([`crate::pool::offload::VLAN_STRIPPED`]).
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
