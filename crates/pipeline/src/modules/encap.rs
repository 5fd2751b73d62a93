//! EtherEncap and IPEncap (BESS), building headers from metadata
//! attributes (network byte order, BESS's conventions).
//!
//! * `EtherEncap()`: prepend an Ethernet header from `ether_dst` (6),
//!   `ether_src` (6) and `ether_type` (2).
//! * `IPEncap()`: prepend an IPv4 header (no options, TTL 64, DF, its
//!   checksum) from `ip_src` (4), `ip_dst` (4), `ip_proto` (1); writes
//!   `ip_nexthop` (4, = `ip_dst`) and `ether_type` (2, 0x0800) for an
//!   EtherEncap after it. A packet that would exceed 65535 bytes of IPv4
//!   is dropped.

use super::csum;
use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("EtherEncap" => ether, "IPEncap" => ipv4);

pub struct EtherEncap;

impl Module for EtherEncap {
    fn class(&self) -> &'static str {
        "EtherEncap"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        vec![
            AttrSpec::new("ether_dst", 6, Access::Read),
            AttrSpec::new("ether_src", 6, Access::Read),
            AttrSpec::new("ether_type", 2, Access::Read),
        ]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            let mut h = [0u8; 14];
            for (i, range) in [(0, 0..6), (1, 6..12), (2, 12..14)] {
                let v = ctx.attr(i).bytes(p);
                h[range.clone()][..v.len().min(range.len())].copy_from_slice(&v[..v.len().min(range.len())]);
            }
            match p.prepend(14) {
                Ok(d) => {
                    d.copy_from_slice(&h);
                    true
                }
                Err(_) => false,
            }
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

pub struct IpEncap;

impl Module for IpEncap {
    fn class(&self) -> &'static str {
        "IPEncap"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        vec![
            AttrSpec::new("ip_src", 4, Access::Read),
            AttrSpec::new("ip_dst", 4, Access::Read),
            AttrSpec::new("ip_proto", 1, Access::Read),
            AttrSpec::new("ip_nexthop", 4, Access::Write),
            AttrSpec::new("ether_type", 2, Access::Write),
        ]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            let total = p.pkt_len() + 20;
            if total > u16::MAX as usize {
                return false;
            }
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = 64;
            let proto = ctx.attr(2).bytes(p);
            h[9] = proto.first().copied().unwrap_or(0);
            let (src, dst) = (ctx.attr(0).bytes(p), ctx.attr(1).bytes(p));
            h[12..12 + src.len().min(4)].copy_from_slice(&src[..src.len().min(4)]);
            h[16..16 + dst.len().min(4)].copy_from_slice(&dst[..dst.len().min(4)]);
            let c = csum::finish(csum::sum(&h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            let mut nexthop = [0u8; 4];
            nexthop.copy_from_slice(&h[16..20]);
            match p.prepend(20) {
                Ok(d) => d.copy_from_slice(&h),
                Err(_) => return false,
            }
            ctx.attr(3).set_bytes(p, &nexthop);
            ctx.attr(4).set_bytes(p, &[0x08, 0x00]);
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

fn ether(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(EtherEncap))
}

fn ipv4(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(IpEncap))
}
