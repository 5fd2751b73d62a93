//! VXLANEncap, VXLANDecap (RFC 7348), GeneveEncap, GeneveDecap (RFC
//! 8926), with BESS's metadata conventions (network byte order).
//!
//! * `VXLANEncap(dstport=4789)` / `GeneveEncap(dstport=6081)`: prepend
//!   UDP and the tunnel header (VNI from `tun_id`, 4 bytes, the low 24
//!   bits) to an Ethernet frame; the UDP source port is a hash of the
//!   inner flow in 49152..65535 (RFC 6335), the UDP checksum 0. They
//!   write `ip_src`/`ip_dst` (from `tun_ip_src`/`tun_ip_dst`) and
//!   `ip_proto` (17) for an IPEncap after them, then EtherEncap.
//! * `VXLANDecap()` / `GeneveDecap()`: strip Ethernet, IPv4, UDP and the
//!   tunnel header, writing `tun_ip_src`, `tun_ip_dst`, `tun_id`. Frames
//!   that are not IPv4/UDP with a valid tunnel header (VXLAN: the I flag;
//!   Geneve: version 0, protocol 0x6558 Ethernet, options within the
//!   packet), with lengths that disagree, or whose inner frame is shorter
//!   than an Ethernet header, are dropped and counted, with the reason
//!   (`not_udp`, `bad_length`, `bad_header`, `truncated` statistics).
//!   A chain (a super-frame a port took whole) is decapsulated in its
//!   first buffer, which must hold the headers (else `truncated`); its
//!   offload state follows (the tunnel's taken off).

use super::classify::{ip, FxHasher};
use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;
use std::hash::Hasher;

crate::modules::declare_class!(
    "VXLANEncap" => vxlan_encap,
    "VXLANDecap" => vxlan_decap,
    "GeneveEncap" => geneve_encap,
    "GeneveDecap" => geneve_decap,
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Vxlan,
    Geneve,
}

impl Kind {
    fn name(self, encap: bool) -> &'static str {
        match (self, encap) {
            (Kind::Vxlan, true) => "VXLANEncap",
            (Kind::Vxlan, false) => "VXLANDecap",
            (Kind::Geneve, true) => "GeneveEncap",
            (Kind::Geneve, false) => "GeneveDecap",
        }
    }
}

pub struct TunnelEncap {
    kind: Kind,
    dstport: u16,
}

/// Source port from the inner frame's addresses (and ports, for IPv4).
fn entropy(inner: &[u8]) -> u16 {
    let mut h = FxHasher::default();
    match ip::header(inner) {
        Some((ihl, proto)) => {
            h.write(&inner[ip::IP_SRC..ip::IP_DST + 4]);
            h.write_u64(proto as u64);
            if let Some((s, d)) = ip::ports(inner, ihl, proto) {
                h.write_u64((s as u64) << 16 | d as u64);
            }
        }
        None => h.write(&inner[..12.min(inner.len())]),
    }
    let x = h.finish();
    (x >> 48) as u16 ^ (x >> 32) as u16 | 0xc000
}

impl Module for TunnelEncap {
    fn class(&self) -> &'static str {
        self.kind.name(true)
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        vec![
            AttrSpec::new("tun_ip_src", 4, Access::Read),
            AttrSpec::new("tun_ip_dst", 4, Access::Read),
            AttrSpec::new("tun_id", 4, Access::Read),
            AttrSpec::new("ip_src", 4, Access::Write),
            AttrSpec::new("ip_dst", 4, Access::Write),
            AttrSpec::new("ip_proto", 1, Access::Write),
        ]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            // A chain (a super-frame): its whole length, its first bytes.
            let (inner, len) = (p.data(), p.pkt_len());
            if inner.len() < 14 || len + 16 + 20 > u16::MAX as usize {
                return false;
            }
            let sport = entropy(inner);
            let udp_len = (len + 16) as u16;
            let mut vni = [0u8; 4];
            let id = ctx.attr(2).bytes(p);
            vni[4 - id.len().min(4)..].copy_from_slice(&id[id.len().saturating_sub(4)..]);
            let mut src = [0u8; 4];
            let mut dst = [0u8; 4];
            let (s, d) = (ctx.attr(0).bytes(p), ctx.attr(1).bytes(p));
            src[..s.len().min(4)].copy_from_slice(&s[..s.len().min(4)]);
            dst[..d.len().min(4)].copy_from_slice(&d[..d.len().min(4)]);
            let Ok(h) = p.prepend(16) else { return false };
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&self.dstport.to_be_bytes());
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6..8].fill(0);
            match self.kind {
                Kind::Vxlan => h[8..12].copy_from_slice(&[0x08, 0, 0, 0]),
                Kind::Geneve => h[8..12].copy_from_slice(&[0, 0, 0x65, 0x58]),
            }
            h[12..15].copy_from_slice(&vni[1..4]);
            h[15] = 0;
            ctx.attr(3).set_bytes(p, &src);
            ctx.attr(4).set_bytes(p, &dst);
            ctx.attr(5).set_bytes(p, &[17]);
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

/// Why a frame was not decapsulated (counted in the statistics).
#[derive(Debug, Clone, Copy)]
enum Bad {
    /// Not IPv4 carrying an unfragmented UDP datagram.
    NotUdp = 0,
    /// IPv4 or UDP lengths that disagree with each other or the frame.
    Length = 1,
    /// Not this tunnel's header (flags, version, protocol).
    Header = 2,
    /// Tunnel options or the inner Ethernet header cut short.
    Truncated = 3,
}

pub struct TunnelDecap {
    kind: Kind,
    bad: [u64; 4],
}

impl TunnelDecap {
    /// Bytes to strip, and the VNI, if `d` is a valid `kind` frame of
    /// `len` bytes (`d` its first: a chain's first segment, which must
    /// hold every header stripped and the inner Ethernet header).
    fn parse(kind: Kind, d: &[u8], len: usize) -> Result<(usize, u32), Bad> {
        let (ihl, proto) = ip::header(d).ok_or(Bad::NotUdp)?;
        let total = u16::from_be_bytes([d[ip::ETH_LEN + 2], d[ip::ETH_LEN + 3]]) as usize;
        let frag = u16::from_be_bytes([d[ip::ETH_LEN + 6], d[ip::ETH_LEN + 7]]) & 0x3fff;
        if proto != 17 || frag != 0 {
            return Err(Bad::NotUdp);
        }
        if total < ihl + 16 || ip::ETH_LEN + total > len {
            return Err(Bad::Length);
        }
        let udp = ip::ETH_LEN + ihl;
        if udp + 16 > d.len() {
            return Err(Bad::Truncated);
        }
        let udp_len = u16::from_be_bytes([d[udp + 4], d[udp + 5]]) as usize;
        if udp_len != total - ihl {
            return Err(Bad::Length);
        }
        let t = &d[udp + 8..udp + 16];
        let opts = match kind {
            Kind::Vxlan if t[0] & 0x08 != 0 => 0,
            Kind::Geneve if t[0] >> 6 == 0 && t[2..4] == [0x65, 0x58] => (t[0] & 0x3f) as usize * 4,
            _ => return Err(Bad::Header),
        };
        let strip = udp + 16 + opts;
        let end = ip::ETH_LEN + total;
        if strip + 14 > end || strip + 14 > d.len() {
            return Err(Bad::Truncated);
        }
        Ok((strip, u32::from_be_bytes([0, t[4], t[5], t[6]])))
    }
}

impl Module for TunnelDecap {
    fn class(&self) -> &'static str {
        self.kind.name(false)
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        vec![
            AttrSpec::new("tun_ip_src", 4, Access::Write),
            AttrSpec::new("tun_ip_dst", 4, Access::Write),
            AttrSpec::new("tun_id", 4, Access::Write),
        ]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let (kind, bad) = (self.kind, &mut self.bad);
        batch.retain(|p| {
            let (d, len) = (p.data(), p.pkt_len());
            let (strip, vni) = match Self::parse(kind, d, len) {
                Ok(v) => v,
                Err(why) => {
                    bad[why as usize] += 1;
                    return false;
                }
            };
            let total = u16::from_be_bytes([d[ip::ETH_LEN + 2], d[ip::ETH_LEN + 3]]) as usize;
            let (mut src, mut dst) = ([0u8; 4], [0u8; 4]);
            src.copy_from_slice(&d[ip::IP_SRC..ip::IP_SRC + 4]);
            dst.copy_from_slice(&d[ip::IP_DST..ip::IP_DST + 4]);
            // Ethernet padding after the IPv4 packet goes too. A chain
            // (a super-frame a port took whole) has none.
            let keep = ip::ETH_LEN + total - strip;
            if p.is_chained() {
                if len != ip::ETH_LEN + total {
                    bad[Bad::Length as usize] += 1;
                    return false;
                }
                if p.adj(strip).is_err() {
                    return false;
                }
            } else if p.adj(strip).is_err() || p.set_len(keep).is_err() {
                return false;
            }
            ctx.attr(0).set_bytes(p, &src);
            ctx.attr(1).set_bytes(p, &dst);
            ctx.attr(2).set_bytes(p, &vni.to_be_bytes());
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("not_udp", self.bad[Bad::NotUdp as usize]),
            ("bad_length", self.bad[Bad::Length as usize]),
            ("bad_header", self.bad[Bad::Header as usize]),
            ("truncated", self.bad[Bad::Truncated as usize]),
        ]
    }
}

fn dstport(args: &mut Args, default: u16) -> Result<u16, ArgError> {
    let p = args.u64_or("dstport", default as u64)?;
    u16::try_from(p)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| ArgError::new("dstport", format!("{p} is not a UDP port")))
}

fn vxlan_encap(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(TunnelEncap { kind: Kind::Vxlan, dstport: dstport(args, 4789)? }))
}

fn geneve_encap(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(TunnelEncap { kind: Kind::Geneve, dstport: dstport(args, 6081)? }))
}

fn vxlan_decap(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(TunnelDecap {
        kind: Kind::Vxlan,
        bad: [0; 4],
    }))
}

fn geneve_decap(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(TunnelDecap {
        kind: Kind::Geneve,
        bad: [0; 4],
    }))
}
