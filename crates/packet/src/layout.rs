//! Where the headers of a frame are: one pass over Ethernet, up to two
//! VLAN tags and the IPv4 header, with every length checked.
//!
//! NFs call [`parse_ipv4`] once per packet and then use the offsets with
//! the views ([`crate::Ipv4`], [`crate::Tcp`], ...), so no header is
//! bounds-checked twice.

use crate::error::{need, Header, PacketError};
use crate::ether::ethertype;
use crate::ipv4::{proto, Ipv4};

/// Layer-2 layout: where the L3 header starts and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Layout {
    /// Offset of the L3 header (14, 18 or 22).
    pub l3: usize,
    /// The ethertype after any VLAN tags.
    pub ethertype: u16,
    /// Number of 802.1Q/802.1ad tags (0..=2).
    pub vlan_tags: u8,
}

/// Parse the Ethernet header and up to two VLAN tags (802.1Q, QinQ).
pub fn parse_l2(frame: &[u8]) -> Result<L2Layout, PacketError> {
    need(Header::Ethernet, frame, 14)?;
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([frame[12], frame[13]]);
    let mut tags = 0u8;
    while (et == ethertype::VLAN || et == ethertype::QINQ) && tags < 2 {
        need(Header::Vlan, frame, l3 + 4)?;
        et = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]);
        l3 += 4;
        tags += 1;
    }
    Ok(L2Layout {
        l3,
        ethertype: et,
        vlan_tags: tags,
    })
}

/// Which part of a datagram an IPv4 packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment {
    /// Not fragmented.
    Whole,
    /// The first fragment (offset 0, MF set): it has the L4 header.
    First,
    /// A later fragment (offset > 0): no L4 header, only payload bytes.
    Later,
}

/// Layout of an IPv4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Layout {
    pub l2: L2Layout,
    /// Offset of the IPv4 header.
    pub l3: usize,
    /// Offset of the L4 header (after IPv4 options).
    pub l4: usize,
    /// End of the datagram (`l3 + total_len`); bytes after it are padding.
    pub end: usize,
    pub protocol: u8,
    pub fragment: Fragment,
}

impl Ipv4Layout {
    /// Bytes of L4 header and payload in this packet.
    pub fn l4_len(&self) -> usize {
        self.end - self.l4
    }

    /// True if an L4 header of `proto` can be expected (not a later fragment).
    pub fn has_l4_header(&self) -> bool {
        self.fragment != Fragment::Later
    }
}

/// Parse an Ethernet frame carrying IPv4 (after VLAN tags if any).
///
/// Errors: truncated Ethernet/VLAN/IPv4 headers, a non-IPv4 ethertype
/// ([`PacketError::NotIpv4`]), bad version, IHL or total length.
pub fn parse_ipv4(frame: &[u8]) -> Result<Ipv4Layout, PacketError> {
    let l2 = parse_l2(frame)?;
    if l2.ethertype != ethertype::IPV4 {
        return Err(PacketError::NotIpv4(l2.ethertype));
    }
    let ip = Ipv4::new(&frame[l2.l3..])?;
    let fragment = if ip.is_later_fragment() {
        Fragment::Later
    } else if ip.more_fragments() {
        Fragment::First
    } else {
        Fragment::Whole
    };
    Ok(Ipv4Layout {
        l2,
        l3: l2.l3,
        l4: l2.l3 + ip.header_len(),
        end: l2.l3 + ip.total_len(),
        protocol: ip.protocol(),
        fragment,
    })
}

/// True for the protocols whose first 4 L4 bytes are source and
/// destination ports.
pub fn has_ports(protocol: u8) -> bool {
    protocol == proto::TCP || protocol == proto::UDP
}
