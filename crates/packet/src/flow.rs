//! Flow keys (the IPv4 5-tuple) and a fast hash for fixed-size tables.

use std::net::Ipv4Addr;

use crate::error::PacketError;
use crate::ipv4::proto;
use crate::l4::{Icmp, Tcp, Udp};
use crate::layout::{Fragment, Ipv4Layout};

/// An IPv4 5-tuple.
///
/// Ports are the TCP/UDP ports; for ICMP echo both ports hold the echo
/// identifier (so a reply's [`FlowKey::reversed`] key equals the request's
/// key reversed); for other protocols, and for later fragments, both are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
}

impl Default for FlowKey {
    fn default() -> Self {
        FlowKey::new(Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::UNSPECIFIED, 0, 0)
    }
}

impl FlowKey {
    pub fn new(
        src_ip: Ipv4Addr,
        src_port: u16,
        dst_ip: Ipv4Addr,
        dst_port: u16,
        protocol: u8,
    ) -> FlowKey {
        FlowKey {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            protocol,
        }
    }

    /// The key of the reply direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }

    /// Read the key of an IPv4 frame whose layout `l` came from
    /// [`crate::parse_ipv4`]. Fails if a TCP/UDP/ICMP header that should be
    /// there (not a later fragment) is truncated.
    pub fn from_frame(frame: &[u8], l: &Ipv4Layout) -> Result<FlowKey, PacketError> {
        let ip = &frame[l.l3..];
        let src_ip = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst_ip = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let (src_port, dst_port) = if l.fragment == Fragment::Later {
            (0, 0)
        } else {
            let seg = &frame[l.l4..l.end];
            match l.protocol {
                proto::TCP => {
                    let t = Tcp::new(seg)?;
                    (t.src_port(), t.dst_port())
                }
                proto::UDP => {
                    let u = Udp::new(seg)?;
                    (u.src_port(), u.dst_port())
                }
                proto::ICMP => {
                    let i = Icmp::new(seg)?;
                    if i.is_echo() {
                        (i.identifier(), i.identifier())
                    } else {
                        (0, 0)
                    }
                }
                _ => (0, 0),
            }
        };
        Ok(FlowKey {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            protocol: l.protocol,
        })
    }

    /// A fast, seeded 64-bit hash of the key.
    ///
    /// Hand-written rather than SipHash (std) because it runs per packet
    /// on a 13-byte key: two multiply-xorshift rounds over two u64 words.
    /// It is not DoS-resistant on its own; tables pick a random seed at
    /// construction so that collisions cannot be predicted offline.
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let a = (u64::from(u32::from(self.src_ip)) << 32) | u64::from(u32::from(self.dst_ip));
        let b = (u64::from(self.src_port) << 32)
            | (u64::from(self.dst_port) << 16)
            | u64::from(self.protocol);
        mix(mix(a ^ seed) ^ b)
    }
}

/// One round of a 64-bit multiply-xorshift mixer (the finaliser
/// constants of SplitMix64).
#[inline]
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} -> {}:{} proto {}",
            self.src_ip, self.src_port, self.dst_ip, self.dst_port, self.protocol
        )
    }
}
