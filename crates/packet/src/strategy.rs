//! Proptest strategies: arbitrary Ethernet/IPv4 frames with TCP, UDP or
//! ICMP (random addresses, ports, flags, TTL, options, VLAN tag,
//! fragmentation and payload), and malformed variants of them.
//!
//! Enabled by the `proptest` feature.

use std::net::Ipv4Addr;

use proptest::collection::vec;
use proptest::prelude::*;

use crate::builder::{FrameBuilder, L4};
use crate::ether::MacAddr;

pub fn arb_mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

pub fn arb_ipv4() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

/// TCP, UDP (with or without checksum), ICMP echo, or another ICMP message.
pub fn arb_l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            0u8..0x40,
            any::<u16>()
        )
            .prop_map(|(src_port, dst_port, seq, ack, flags, window)| L4::Tcp {
                src_port,
                dst_port,
                seq,
                ack,
                flags,
                window
            }),
        (any::<u16>(), any::<u16>(), prop::bool::weighted(0.9)).prop_map(
            |(src_port, dst_port, checksum)| L4::Udp {
                src_port,
                dst_port,
                checksum
            }
        ),
        (any::<bool>(), any::<u16>(), any::<u16>()).prop_map(|(request, id, seq)| L4::IcmpEcho {
            request,
            id,
            seq
        }),
        (any::<u8>(), any::<u8>(), any::<[u8; 4]>()).prop_map(|(icmp_type, code, rest)| L4::Icmp {
            icmp_type,
            code,
            rest
        }),
    ]
}

/// IPv4 options: NOP-padded, a multiple of 4 bytes, 0..=40.
pub fn arb_ip_options() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(Vec::new()),
        1 => (1usize..=10).prop_map(|words| vec![1u8; words * 4]),
    ]
}

/// A well-formed frame description. Mostly unfragmented; some first and
/// later fragments.
pub fn arb_frame() -> impl Strategy<Value = FrameBuilder> {
    (
        (arb_mac(), arb_mac(), prop::option::weighted(0.1, 0u16..0x1000)),
        (arb_ipv4(), arb_ipv4(), any::<u8>(), any::<u16>(), any::<bool>()),
        arb_ip_options(),
        prop_oneof![8 => Just((false, 0u16)), 1 => Just((true, 0u16)), 1 => (any::<bool>(), 1u16..8191)],
        arb_l4(),
        vec(any::<u8>(), 0..256),
    )
        .prop_map(
            |((smac, dmac, vlan), (sip, dip, ttl, ident, df), opts, (mf, off), l4, payload)| {
                let mut b = FrameBuilder {
                    src_mac: smac,
                    dst_mac: dmac,
                    vlan,
                    src_ip: sip,
                    dst_ip: dip,
                    ttl,
                    ident,
                    dont_fragment: df && !mf && off == 0,
                    more_fragments: mf,
                    frag_offset: off,
                    ip_options: opts,
                    l4,
                    payload,
                };
                if b.frag_offset != 0 && b.payload.is_empty() {
                    b.payload = vec![0; 8];
                }
                b
            },
        )
}

/// The bytes of [`arb_frame`].
pub fn arb_frame_bytes() -> impl Strategy<Value = Vec<u8>> {
    arb_frame().prop_map(|b| b.build())
}

/// How [`arb_malformed`] damages a good frame.
#[derive(Debug, Clone)]
pub enum Damage {
    /// Cut the frame at this fraction of its length (per mille).
    Truncate(u16),
    /// XOR one byte (position per mille) with a non-zero mask.
    Flip(u16, u8),
    /// Overwrite the IPv4 version/IHL byte.
    VersionIhl(u8),
    /// Overwrite the IPv4 total length.
    TotalLen(u16),
    /// Overwrite the TCP data offset byte.
    TcpOffset(u8),
}

fn apply(mut f: Vec<u8>, d: &Damage, l3: usize) -> Vec<u8> {
    let at = |pm: u16, len: usize| (usize::from(pm) * len) / 1000;
    match *d {
        Damage::Truncate(pm) => {
            let n = at(pm, f.len());
            f.truncate(n);
        }
        Damage::Flip(pm, mask) => {
            let i = at(pm, f.len()).min(f.len() - 1);
            f[i] ^= mask.max(1);
        }
        Damage::VersionIhl(v) => f[l3] = v,
        Damage::TotalLen(t) => f[l3 + 2..l3 + 4].copy_from_slice(&t.to_be_bytes()),
        Damage::TcpOffset(o) => {
            let ihl = usize::from(f[l3] & 0x0f) * 4;
            if let Some(b) = f.get_mut(l3 + ihl + 12) {
                *b = o;
            }
        }
    }
    f
}

pub fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (0u16..1000).prop_map(Damage::Truncate),
        (0u16..1000, 1u8..=255).prop_map(|(p, m)| Damage::Flip(p, m)),
        any::<u8>().prop_map(Damage::VersionIhl),
        any::<u16>().prop_map(Damage::TotalLen),
        any::<u8>().prop_map(Damage::TcpOffset),
    ]
}

/// A good frame with one [`Damage`] applied, or plain random bytes.
pub fn arb_malformed() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (arb_frame(), arb_damage()).prop_map(|(b, d)| {
            let l3 = if b.vlan.is_some() { 18 } else { 14 };
            apply(b.build(), &d, l3)
        }),
        1 => vec(any::<u8>(), 0..128),
    ]
}

/// A mix of good and malformed frames, for "never panics" tests.
pub fn arb_any_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![arb_frame_bytes(), arb_malformed()]
}
