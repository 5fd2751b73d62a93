//! Building frames for tests and generators (slow path).
//!
//! Headers are produced with `etherparse`, a second, independent
//! implementation, so tests that build with it and read with this crate's
//! views check one against the other.

use std::net::Ipv4Addr;

use etherparse::{
    Icmpv4Header, Icmpv4Type, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options, TcpHeader, UdpHeader,
};

use crate::ether::{ethertype, MacAddr};
use crate::ipv4::proto;

/// The L4 part of a built frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4 {
    Tcp {
        src_port: u16,
        dst_port: u16,
        seq: u32,
        ack: u32,
        /// FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20.
        flags: u8,
        window: u16,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
        /// false: checksum field 0 ("no checksum", RFC 768).
        checksum: bool,
    },
    IcmpEcho {
        request: bool,
        id: u16,
        seq: u16,
    },
    /// Any other ICMP message; for errors, put the quoted datagram in the payload.
    Icmp {
        icmp_type: u8,
        code: u8,
        rest: [u8; 4],
    },
    /// No L4 header: the payload follows the IPv4 header as is.
    Raw {
        protocol: u8,
    },
}

/// A description of an Ethernet + IPv4 frame; [`FrameBuilder::build`]
/// writes it with correct checksums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameBuilder {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    /// One 802.1Q tag with this TCI.
    pub vlan: Option<u16>,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub ttl: u8,
    pub ident: u16,
    pub dont_fragment: bool,
    pub more_fragments: bool,
    /// In 8-byte units. When non-zero the frame is a later fragment and
    /// carries no L4 header: only `payload`.
    pub frag_offset: u16,
    /// IPv4 options, a multiple of 4 bytes, at most 40.
    pub ip_options: Vec<u8>,
    pub l4: L4,
    pub payload: Vec<u8>,
}

impl FrameBuilder {
    fn with_l4(src_ip: Ipv4Addr, dst_ip: Ipv4Addr, l4: L4) -> FrameBuilder {
        FrameBuilder {
            src_mac: MacAddr([0x02, 0, 0, 0, 0, 0x01]),
            dst_mac: MacAddr([0x02, 0, 0, 0, 0, 0x02]),
            vlan: None,
            src_ip,
            dst_ip,
            ttl: 64,
            ident: 0x1234,
            dont_fragment: false,
            more_fragments: false,
            frag_offset: 0,
            ip_options: Vec::new(),
            l4,
            payload: Vec::new(),
        }
    }

    pub fn udp(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) -> FrameBuilder {
        Self::with_l4(
            src.0,
            dst.0,
            L4::Udp {
                src_port: src.1,
                dst_port: dst.1,
                checksum: true,
            },
        )
    }

    pub fn tcp(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) -> FrameBuilder {
        Self::with_l4(
            src.0,
            dst.0,
            L4::Tcp {
                src_port: src.1,
                dst_port: dst.1,
                seq: 1,
                ack: 0,
                flags: 0x02,
                window: 65535,
            },
        )
    }

    pub fn icmp_echo(src: Ipv4Addr, dst: Ipv4Addr, request: bool, id: u16) -> FrameBuilder {
        Self::with_l4(
            src,
            dst,
            L4::IcmpEcho {
                request,
                id,
                seq: 1,
            },
        )
    }

    pub fn icmp(src: Ipv4Addr, dst: Ipv4Addr, icmp_type: u8, code: u8) -> FrameBuilder {
        Self::with_l4(
            src,
            dst,
            L4::Icmp {
                icmp_type,
                code,
                rest: [0; 4],
            },
        )
    }

    pub fn raw(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8) -> FrameBuilder {
        Self::with_l4(src, dst, L4::Raw { protocol })
    }

    pub fn macs(mut self, src: MacAddr, dst: MacAddr) -> Self {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn ttl(mut self, ttl: u8) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn vlan(mut self, tci: u16) -> Self {
        self.vlan = Some(tci);
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Self {
        self.payload = p.to_vec();
        self
    }

    pub fn ip_options(mut self, o: &[u8]) -> Self {
        self.ip_options = o.to_vec();
        self
    }

    /// Make this a fragment: `more` = MF flag, `offset` in 8-byte units.
    pub fn fragment(mut self, more: bool, offset: u16) -> Self {
        self.more_fragments = more;
        self.frag_offset = offset;
        self
    }

    pub fn protocol(&self) -> u8 {
        match self.l4 {
            L4::Tcp { .. } => proto::TCP,
            L4::Udp { .. } => proto::UDP,
            L4::IcmpEcho { .. } | L4::Icmp { .. } => proto::ICMP,
            L4::Raw { protocol } => protocol,
        }
    }

    /// Write the frame. Panics only on a description that cannot be
    /// encoded (options not a multiple of 4 or over 40 bytes, offset over
    /// 8191, payload over 64 KiB): this is a test/generator helper.
    pub fn build(&self) -> Vec<u8> {
        let l4 = self.l4_bytes();
        let mut ip = Ipv4Header::new(
            l4.len() as u16,
            self.ttl,
            IpNumber(self.protocol()),
            self.src_ip.octets(),
            self.dst_ip.octets(),
        )
        .expect("payload fits in an IPv4 datagram");
        ip.identification = self.ident;
        ip.dont_fragment = self.dont_fragment;
        ip.more_fragments = self.more_fragments;
        ip.fragment_offset = IpFragOffset::try_new(self.frag_offset).expect("offset ≤ 8191");
        ip.options = Ipv4Options::try_from(&self.ip_options[..]).expect("options: 4n ≤ 40 bytes");
        ip.set_payload_len(l4.len()).expect("payload fits");
        ip.header_checksum = ip.calc_header_checksum();
        let l4 = self.l4_bytes_for(&ip);

        let mut out = Vec::with_capacity(22 + ip.header_len() + l4.len());
        out.extend_from_slice(&self.dst_mac.0);
        out.extend_from_slice(&self.src_mac.0);
        if let Some(tci) = self.vlan {
            out.extend_from_slice(&ethertype::VLAN.to_be_bytes());
            out.extend_from_slice(&tci.to_be_bytes());
        }
        out.extend_from_slice(&ethertype::IPV4.to_be_bytes());
        out.extend_from_slice(&ip.to_bytes());
        out.extend_from_slice(&l4);
        out
    }

    /// L4 bytes with a placeholder checksum (only the length matters).
    fn l4_bytes(&self) -> Vec<u8> {
        let ip = Ipv4Header::default();
        self.l4_bytes_for(&ip)
    }

    fn l4_bytes_for(&self, ip: &Ipv4Header) -> Vec<u8> {
        let mut out = Vec::new();
        if self.frag_offset != 0 {
            out.extend_from_slice(&self.payload);
            return out;
        }
        let p = &self.payload[..];
        match self.l4 {
            L4::Tcp {
                src_port,
                dst_port,
                seq,
                ack,
                flags,
                window,
            } => {
                let mut t = TcpHeader::new(src_port, dst_port, seq, window);
                t.fin = flags & 0x01 != 0;
                t.syn = flags & 0x02 != 0;
                t.rst = flags & 0x04 != 0;
                t.psh = flags & 0x08 != 0;
                t.ack = flags & 0x10 != 0;
                t.urg = flags & 0x20 != 0;
                t.acknowledgment_number = ack;
                t.checksum = t.calc_checksum_ipv4(ip, p).expect("segment fits");
                out.extend_from_slice(&t.to_bytes());
            }
            L4::Udp {
                src_port,
                dst_port,
                checksum,
            } => {
                let mut u = UdpHeader::with_ipv4_checksum(src_port, dst_port, ip, p).expect("fits");
                if !checksum {
                    u.checksum = 0;
                }
                out.extend_from_slice(&u.to_bytes());
            }
            L4::IcmpEcho { request, id, seq } => {
                let echo = etherparse::IcmpEchoHeader { id, seq };
                let t = if request {
                    Icmpv4Type::EchoRequest(echo)
                } else {
                    Icmpv4Type::EchoReply(echo)
                };
                out.extend_from_slice(&Icmpv4Header::with_checksum(t, p).to_bytes());
            }
            L4::Icmp {
                icmp_type,
                code,
                rest,
            } => {
                // Written byte by byte: etherparse's typed ICMP variants would
                // reinterpret known types and their `rest` fields.
                let mut h = [icmp_type, code, 0, 0, rest[0], rest[1], rest[2], rest[3]];
                let c = crate::checksum::Sum::ZERO
                    .add_bytes(&h)
                    .add_bytes(p)
                    .checksum();
                h[2..4].copy_from_slice(&c.to_be_bytes());
                out.extend_from_slice(&h);
            }
            L4::Raw { .. } => {}
        }
        out.extend_from_slice(p);
        out
    }
}

/// An ARP request (RFC 826) for `target` from `sender`, broadcast.
pub fn arp_request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&MacAddr::BROADCAST.0);
    f.extend_from_slice(&sender_mac.0);
    f.extend_from_slice(&ethertype::ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet/IPv4, request
    f.extend_from_slice(&sender_mac.0);
    f.extend_from_slice(&sender_ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f.resize(60, 0); // minimum frame without FCS
    f
}

/// Does etherparse accept `frame` as Ethernet/IPv4 with correct IPv4,
/// TCP/UDP/ICMP checksums? Returns a description of the first problem.
/// Later fragments are checked at L3 only; a UDP checksum of 0 is valid.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let p = SlicedPacket::from_ethernet(frame).map_err(|e| format!("etherparse: {e}"))?;
    let ip = match &p.net {
        Some(NetSlice::Ipv4(ip)) => ip,
        _ => return Err("not IPv4".into()),
    };
    let h = ip.header().to_header();
    if h.calc_header_checksum() != h.header_checksum {
        return Err(format!(
            "IPv4 header checksum {:#06x}, expected {:#06x}",
            h.header_checksum,
            h.calc_header_checksum()
        ));
    }
    if h.is_fragmenting_payload() {
        return Ok(());
    }
    let payload = ip.payload().payload;
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            let want = t
                .to_header()
                .calc_checksum_ipv4(&h, t.payload())
                .map_err(|e| e.to_string())?;
            if want != t.checksum() {
                return Err(format!(
                    "TCP checksum {:#06x}, expected {want:#06x}",
                    t.checksum()
                ));
            }
        }
        Some(TransportSlice::Udp(u)) if u.checksum() != 0 => {
            let want = u
                .to_header()
                .calc_checksum_ipv4(&h, u.payload())
                .map_err(|e| e.to_string())?;
            if want != u.checksum() {
                return Err(format!(
                    "UDP checksum {:#06x}, expected {want:#06x}",
                    u.checksum()
                ));
            }
        }
        Some(TransportSlice::Icmpv4(_)) | None
            if h.protocol == IpNumber::ICMP && crate::checksum::checksum(payload) != 0 =>
        {
            return Err("ICMP checksum wrong".into());
        }
        _ => {}
    }
    Ok(())
}
