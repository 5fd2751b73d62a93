//! StaticNAT (BESS): one-to-one address translation between ranges.
//! Packets into gate 0 (inside to outside) whose source is in an
//! internal range get the matching external source and leave by gate 1;
//! packets into gate 1 whose destination is in an external range get the
//! matching internal destination and leave by gate 0. The IPv4 and
//! TCP/UDP checksums are patched (RFC 1624). Unmatched packets pass
//! unchanged (as BESS); packets that are not IPv4 are dropped.
//!
//! Arguments: `pairs=[(int_range=(start="10.0.0.1", end="10.0.0.10"),
//! ext_range=(start="192.0.2.1", end="192.0.2.10")), ...]` (ranges of
//! equal size that do not overlap).

use super::classify::{self, ip};
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("StaticNAT" => build);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatPair {
    pub int_start: u32,
    pub ext_start: u32,
    pub size: u64,
}

pub struct StaticNat {
    pairs: Vec<NatPair>,
}

impl StaticNat {
    pub fn new(pairs: Vec<NatPair>) -> StaticNat {
        StaticNat { pairs }
    }
}

/// Rewrite the address at `at` to `new`, patching the checksums.
fn rewrite(d: &mut [u8], at: usize, new: u32, ihl: usize, proto: u8) {
    let old = ip::addr(d, at);
    d[at..at + 4].copy_from_slice(&new.to_be_bytes());
    let c = ip::ETH_LEN + 10;
    let s = ip::csum_update32(u16::from_be_bytes([d[c], d[c + 1]]), old, new);
    d[c..c + 2].copy_from_slice(&s.to_be_bytes());
    if ip::ports(d, ihl, proto).is_none() {
        return;
    }
    let l4 = ip::ETH_LEN + ihl;
    let c = match proto {
        6 => l4 + 16,
        _ => l4 + 6,
    };
    let Some(b) = d.get(c..c + 2) else { return };
    let sum = u16::from_be_bytes([b[0], b[1]]);
    if proto == 17 && sum == 0 {
        return; // no UDP checksum
    }
    let mut s = ip::csum_update32(sum, old, new);
    if proto == 17 && s == 0 {
        s = 0xffff;
    }
    d[c..c + 2].copy_from_slice(&s.to_be_bytes());
}

impl Module for StaticNat {
    fn class(&self) -> &'static str {
        "StaticNAT"
    }
    fn igates(&self) -> usize {
        2
    }
    fn ogates(&self) -> usize {
        2
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        let forward = igate == 0;
        let at = if forward { ip::IP_SRC } else { ip::IP_DST };
        let before = batch.len();
        batch.retain(|p| {
            let d = p.data_mut();
            let Some((ihl, proto)) = ip::header(d) else {
                return false;
            };
            let a = ip::addr(d, at);
            for pr in &self.pairs {
                let (from, to) = if forward {
                    (pr.int_start, pr.ext_start)
                } else {
                    (pr.ext_start, pr.int_start)
                };
                if (a.wrapping_sub(from) as u64) < pr.size {
                    rewrite(d, at, to.wrapping_add(a - from), ihl, proto);
                    break;
                }
            }
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(if forward { 1 } else { 0 }, batch);
    }
}

fn range(r: Option<Vec<Args>>, name: &str) -> Result<(u32, u32), ArgError> {
    let mut r = match r {
        Some(mut v) if v.len() == 1 => v.remove(0),
        _ => {
            return Err(ArgError::new(
                "pairs",
                format!("{name} must be one (start=, end=) record"),
            ))
        }
    };
    let w = |e: ArgError| ArgError::new("pairs", format!("{name}: {e}"));
    let start =
        u32::from(classify::ipv4("start", &r.required_str("start").map_err(w)?).map_err(w)?);
    let end = u32::from(classify::ipv4("end", &r.required_str("end").map_err(w)?).map_err(w)?);
    r.finish(name).map_err(w)?;
    if end < start {
        return Err(ArgError::new(
            "pairs",
            format!("{name}: end is before start"),
        ));
    }
    Ok((start, end))
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut pairs = Vec::new();
    for mut p in args.records("pairs")?.unwrap_or_default() {
        let int = range(p.records("int_range")?, "int_range")?;
        let ext = range(p.records("ext_range")?, "ext_range")?;
        p.finish("a pair")
            .map_err(|e| ArgError::new("pairs", e.to_string()))?;
        if int.1 - int.0 != ext.1 - ext.0 {
            return Err(ArgError::new(
                "pairs",
                "int_range and ext_range differ in size",
            ));
        }
        let pair = NatPair {
            int_start: int.0,
            ext_start: ext.0,
            size: (int.1 - int.0) as u64 + 1,
        };
        let overlaps = |a: u32, b: u32, q: &NatPair| {
            (a as u64) < b as u64 + pair.size && (b as u64) < a as u64 + q.size
        };
        if pairs.iter().any(|q: &NatPair| {
            overlaps(q.int_start, pair.int_start, q) || overlaps(q.ext_start, pair.ext_start, q)
        }) {
            return Err(ArgError::new("pairs", "ranges overlap"));
        }
        pairs.push(pair);
    }
    Ok(Box::new(StaticNat::new(pairs)))
}
