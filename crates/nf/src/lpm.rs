//! IPv4 longest-prefix match with a DIR-24-8 table (Gupta, Lin, McKeown,
//! "Routing lookups in hardware at memory access speeds", INFOCOM'98).
//!
//! `tbl24` has one 16-bit entry per /24: either a next hop (prefixes up
//! to /24 are expanded into every /24 they cover) or, for /24s with
//! longer prefixes inside, the index of a 256-entry `tbl8` group. A
//! lookup is one load, or two. Hand-written because it is the hot path
//! and simple; it is property-tested against a linear-scan oracle.
//!
//! Entry encoding: bit 15 set = tbl8 group index in bits 14..0; else
//! bits 14..0 = next hop + 1, with 0 meaning "no route".

use crate::config::Ipv4Prefix;

const EXTENDED: u16 = 0x8000;
/// Largest next-hop index a table can hold.
pub const MAX_NEXT_HOP: u16 = 0x7ffe;
/// Largest number of tbl8 groups the encoding allows.
pub const MAX_TBL8_GROUPS: usize = 0x8000;

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LpmError {
    #[error("more than {0} /24 blocks hold prefixes longer than /24 (raise the tbl8 group limit)")]
    TooManyLongPrefixes(usize),
    #[error("next hop {0} is above the maximum {MAX_NEXT_HOP}")]
    NextHopTooLarge(u16),
}

/// A built DIR-24-8 table.
pub struct Dir24_8 {
    tbl24: Vec<u16>,
    tbl8: Vec<u16>,
}

impl Dir24_8 {
    /// Build from (prefix, next hop) pairs. For a prefix given twice the
    /// last one wins. At most `max_tbl8_groups` /24s may contain longer
    /// prefixes. Construction only (allocates); lookups allocate nothing.
    pub fn build(
        routes: &[(Ipv4Prefix, u16)],
        max_tbl8_groups: usize,
    ) -> Result<Dir24_8, LpmError> {
        let max_groups = max_tbl8_groups.min(MAX_TBL8_GROUPS);
        let mut sorted: Vec<(usize, Ipv4Prefix, u16)> = routes
            .iter()
            .enumerate()
            .map(|(i, &(p, nh))| (i, p, nh))
            .collect();
        // Shorter prefixes first, so longer ones overwrite them; among equal
        // prefixes, the later route last.
        sorted.sort_by_key(|&(i, p, _)| (p.len, i));
        let mut t = Dir24_8 {
            tbl24: vec![0; 1 << 24],
            tbl8: Vec::new(),
        };
        for (_, p, nh) in sorted {
            if nh > MAX_NEXT_HOP {
                return Err(LpmError::NextHopTooLarge(nh));
            }
            let addr = u32::from(p.addr);
            let entry = nh + 1;
            if p.len <= 24 {
                let start = (addr >> 8) as usize;
                let count = 1usize << (24 - p.len);
                t.tbl24[start..start + count].fill(entry);
            } else {
                let i24 = (addr >> 8) as usize;
                let group = t.group_of(i24, max_groups)?;
                let start = group * 256 + (addr & 0xff) as usize;
                let count = 1usize << (32 - p.len);
                t.tbl8[start..start + count].fill(entry);
            }
        }
        Ok(t)
    }

    /// The tbl8 group of a /24, creating it (inheriting the /24's entry).
    fn group_of(&mut self, i24: usize, max_groups: usize) -> Result<usize, LpmError> {
        let e = self.tbl24[i24];
        if e & EXTENDED != 0 {
            return Ok(usize::from(e & !EXTENDED));
        }
        let group = self.tbl8.len() / 256;
        if group >= max_groups {
            return Err(LpmError::TooManyLongPrefixes(max_groups));
        }
        self.tbl8.extend(std::iter::repeat_n(e, 256));
        self.tbl24[i24] = EXTENDED | group as u16;
        Ok(group)
    }

    /// The next hop of the longest prefix containing `addr`.
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u16> {
        let mut e = self.tbl24[(addr >> 8) as usize];
        if e & EXTENDED != 0 {
            e = self.tbl8[usize::from(e & !EXTENDED) * 256 + (addr & 0xff) as usize];
        }
        e.checked_sub(1)
    }

    /// tbl8 groups in use.
    pub fn tbl8_groups(&self) -> usize {
        self.tbl8.len() / 256
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    /// The obvious LPM: scan every route, keep the longest match (last wins on ties).
    fn oracle(routes: &[(Ipv4Prefix, u16)], a: u32) -> Option<u16> {
        let mut best: Option<(u8, u16)> = None;
        for &(p, nh) in routes {
            if p.contains(Ipv4Addr::from(a)) && best.is_none_or(|(l, _)| p.len >= l) {
                best = Some((p.len, nh));
            }
        }
        best.map(|(_, nh)| nh)
    }

    /// Prefixes clustered in 10.0.0.0/16 (so they nest and overlap),
    /// any length, plus sometimes a default route.
    fn arb_routes() -> impl Strategy<Value = Vec<(Ipv4Prefix, u16)>> {
        proptest::collection::vec((any::<u16>(), 0u8..=32, 0u16..100), 1..24).prop_map(|v| {
            v.into_iter()
                .map(|(low, len, nh)| {
                    let raw = 0x0a00_0000u32 | u32::from(low);
                    let raw = if len < 8 {
                        raw.rotate_left(u32::from(nh))
                    } else {
                        raw
                    };
                    let addr = Ipv4Addr::from(raw & Ipv4Prefix::mask(len));
                    (Ipv4Prefix::new(addr, len).unwrap(), nh)
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn matches_linear_scan(routes in arb_routes(), probes in proptest::collection::vec(any::<u16>(), 64)) {
            let t = Dir24_8::build(&routes, 64).unwrap();
            // Probe around every prefix boundary and at random points of 10.0/16.
            let mut addrs: Vec<u32> = probes.iter().map(|&p| 0x0a00_0000 | u32::from(p)).collect();
            for (p, _) in &routes {
                let a = u32::from(p.addr);
                let last = a | !Ipv4Prefix::mask(p.len);
                addrs.extend([a, last, a.wrapping_sub(1), last.wrapping_add(1)]);
            }
            for a in addrs {
                prop_assert_eq!(t.lookup(a), oracle(&routes, a), "address {}", Ipv4Addr::from(a));
            }
        }
    }

    #[test]
    fn long_prefix_inherits_covering_route_and_limits() {
        let p = |s: &str| s.parse::<Ipv4Prefix>().unwrap();
        let t = Dir24_8::build(
            &[
                (p("10.0.0.0/8"), 1),
                (p("10.1.2.128/25"), 2),
                (p("10.1.2.200/32"), 3),
            ],
            4,
        )
        .unwrap();
        assert_eq!(t.lookup(u32::from(Ipv4Addr::new(10, 1, 2, 1))), Some(1));
        assert_eq!(t.lookup(u32::from(Ipv4Addr::new(10, 1, 2, 130))), Some(2));
        assert_eq!(t.lookup(u32::from(Ipv4Addr::new(10, 1, 2, 200))), Some(3));
        assert_eq!(t.lookup(u32::from(Ipv4Addr::new(11, 0, 0, 0))), None);
        assert_eq!(t.tbl8_groups(), 1);
        assert_eq!(
            Dir24_8::build(&[(p("10.1.2.128/25"), 2), (p("10.1.3.128/25"), 2)], 1).err(),
            Some(LpmError::TooManyLongPrefixes(1))
        );
    }
}
