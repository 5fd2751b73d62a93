//! A per-destination policer: one token bucket per destination IPv4
//! address, for WAN → LAN traffic only (LAN → WAN is never policed).
//!
//! Bucket semantics follow the Vigor/TinyNF policer (anchors §2.5):
//! - refill: elapsed × rate / 1 s, capped at `burst` (computed exactly, in
//!   byte·nanoseconds, so no fraction of a token is ever lost);
//! - a packet of a known destination passes iff its bucket holds more than
//!   the packet's size (frame length), which is then taken out;
//! - an unknown destination starts with `burst − size` if `size ≤ burst`,
//!   else the packet is dropped (`over_rate`) and no bucket is made;
//! - a full table drops packets of new destinations (`table_full`).
//!
//! Note the edge this inherits: at a full bucket, a packet of exactly
//! `burst` bytes passes for a new destination but not for a known one.
//!
//! A bucket idle for burst/rate seconds is full again, so it is then
//! expired: a returning destination starts at `burst − size`, as the
//! refilled bucket would have. Non-IPv4 frames from the WAN (ARP) pass
//! unpoliced; malformed IPv4 is dropped.

use std::str::FromStr;

use nfkit_packet::{parse_ipv4, PacketError};

use crate::config::{self, for_each_option, lan_wan, ConfigError};
use crate::table::{FlowTable, IpKey};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, Verdict};

const NS: u128 = 1_000_000_000;

/// Policer configuration. CLI options: `--lan N` (0), `--wan N` (1),
/// `--rate BYTES/S` (375M), `--burst BYTES` (3750M), `--capacity N`
/// (65536). Sizes take decimal suffixes k, M, G, T.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicerConfig {
    pub lan: PortId,
    pub wan: PortId,
    /// Bytes per second.
    pub rate: u64,
    /// Bytes.
    pub burst: u64,
    pub capacity: usize,
}

impl Default for PolicerConfig {
    fn default() -> Self {
        PolicerConfig {
            lan: 0,
            wan: 1,
            rate: 375_000_000,
            burst: 3_750_000_000,
            capacity: 65536,
        }
    }
}

impl PolicerConfig {
    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<PolicerConfig, ConfigError> {
        let mut c = PolicerConfig::default();
        let bytes = |k: &str, v: &str| {
            config::parse_bytes(v).ok_or_else(|| ConfigError::bad(k, v, "a byte count like 375M"))
        };
        for_each_option(args, |k, v| {
            match k {
                "lan" => c.lan = config::count(k, v)?,
                "wan" => c.wan = config::count(k, v)?,
                "rate" => c.rate = bytes(k, v)?,
                "burst" => c.burst = bytes(k, v)?,
                "capacity" => c.capacity = config::count(k, v)?,
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: "--lan, --wan, --rate, --burst, --capacity",
                    })
                }
            }
            Ok(())
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        lan_wan(self.lan, self.wan, 2)?;
        config::check_capacity("policer", self.capacity)?;
        if self.rate == 0 {
            return Err(ConfigError::Zero { what: "--rate" });
        }
        if self.burst == 0 {
            return Err(ConfigError::Zero { what: "--burst" });
        }
        Ok(())
    }
}

impl FromStr for PolicerConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicerConfig::from_args(s.split_whitespace())
    }
}

/// The policer NF (2 ports).
pub struct Policer {
    cfg: PolicerConfig,
    /// Tokens in byte·ns (bytes × 10⁹), last refill = the entry's last-seen time.
    buckets: FlowTable<IpKey, u128>,
    stats: NfStats,
}

impl Policer {
    pub fn new(cfg: PolicerConfig) -> Result<Policer, ConfigError> {
        cfg.validate()?;
        let refill_ns = (u128::from(cfg.burst) * NS).div_ceil(u128::from(cfg.rate));
        let timeout = u64::try_from(refill_ns).unwrap_or(u64::MAX).max(1);
        config::check_memory("policer", FlowTable::<IpKey, u128>::bytes_for(cfg.capacity))?;
        Ok(Policer {
            buckets: FlowTable::new(cfg.capacity, timeout, crate::seed()),
            cfg,
            stats: NfStats::default(),
        })
    }

    /// Tokens (bytes) in the bucket of `dst`, as of its last packet.
    pub fn tokens(&self, dst: std::net::Ipv4Addr) -> Option<u64> {
        let id = self.buckets.get(&IpKey::from(dst))?;
        Some((*self.buckets.value(id) / NS) as u64)
    }

    fn police(&mut self, f: &[u8], now: u64) -> Result<(), DropReason> {
        let l = match parse_ipv4(f) {
            Ok(l) => l,
            Err(PacketError::NotIpv4(_)) => return Ok(()),
            Err(_) => return Err(DropReason::Malformed),
        };
        let dst = IpKey(u32::from_be_bytes([
            f[l.l3 + 16],
            f[l.l3 + 17],
            f[l.l3 + 18],
            f[l.l3 + 19],
        ]));
        let size = f.len() as u128 * NS;
        let burst = u128::from(self.cfg.burst) * NS;
        match self.buckets.get(&dst) {
            Some(id) => {
                let elapsed = u128::from(now.saturating_sub(self.buckets.last_seen(id)));
                let rate = u128::from(self.cfg.rate);
                self.buckets.touch(id, now);
                let tokens = self.buckets.value_mut(id);
                *tokens = (*tokens + elapsed * rate).min(burst);
                if *tokens > size {
                    *tokens -= size;
                    Ok(())
                } else {
                    Err(DropReason::OverRate)
                }
            }
            None if size > burst => Err(DropReason::OverRate),
            None => {
                self.buckets
                    .insert(dst, burst - size, now)
                    .map_err(|_| DropReason::TableFull)?;
                self.stats.flows_created += 1;
                Ok(())
            }
        }
    }
}

impl NetworkFunction for Policer {
    fn name(&self) -> &'static str {
        "policer"
    }

    fn port_count(&self) -> usize {
        2
    }

    fn stats(&self) -> &NfStats {
        &self.stats
    }

    fn stats_mut(&mut self) -> &mut NfStats {
        &mut self.stats
    }

    fn handle(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now: u64) -> Verdict {
        self.stats.flows_expired += self.buckets.expire(now, |_, _| {});
        if in_port == self.cfg.lan {
            return Verdict::Forward {
                port: self.cfg.wan,
                len,
            };
        }
        match self.police(&buf[..len], now) {
            Ok(()) => Verdict::Forward {
                port: self.cfg.lan,
                len,
            },
            Err(r) => Verdict::Drop(r),
        }
    }
}
