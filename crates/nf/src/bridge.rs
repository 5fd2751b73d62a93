//! A learning bridge (IEEE 802.1Q §8.7 learning, §8.8 filtering database).
//!
//! - The source address of every frame with a unicast source is learned on
//!   its input port (moving it if it was elsewhere) and ages out after
//!   `expire` without frames from it (802.1D's default: 300 s).
//! - Broadcast, multicast and unknown unicast destinations are flooded to
//!   every port except the input port; a known destination on the input
//!   port is filtered (`same_port`), never sent back.
//! - Static entries (`--static MAC@PORT`) never age and win over learning.
//! - A full table learns nothing new (counted in `learn_failed`) but still
//!   forwards: frames to unknown addresses are flooded, as on any switch.
//! - Frames to the reserved addresses 01-80-C2-00-00-00 to -0F (802.1D
//!   §7.12.6: BPDUs, pause, LACP, 802.1X, LLDP) are never relayed
//!   (`reserved_address`); the bridge runs no protocol that would consume
//!   them (no spanning tree: loops must be avoided by the topology). Their
//!   source is still learned.
//! - Ageing time (802.1D §7.9.2): `--expire`, default 300 s as the
//!   standard recommends; the standard's range is 10 s to 1 000 000 s,
//!   shorter values are accepted (tests use them).
//! - Each rule has a test named by its clause in
//!   `crates/nf/tests/bridge_8021d.rs`. Not met: the spanning tree
//!   protocol (§17) and port states; per-VLAN learning (802.1Q).
//! - The bridge is L2 only: ARP, IPv6, anything with an Ethernet header
//!   passes; only frames shorter than 14 bytes are dropped (`malformed`).

use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::{Ethernet, MacAddr};

use crate::config::{self, for_each_option, ConfigError};
use crate::table::{FlowTable, KeyIndex};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, PortSet, Verdict};

/// A static filtering entry: `MAC@PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticEntry {
    pub mac: MacAddr,
    pub port: PortId,
}

impl FromStr for StaticEntry {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::bad("static", s, "MAC@PORT like 02:00:00:00:00:01@1");
        let (m, p) = s.split_once('@').ok_or_else(bad)?;
        Ok(StaticEntry {
            mac: m.parse().map_err(|_| bad())?,
            port: p.parse().map_err(|_| bad())?,
        })
    }
}

/// Bridge configuration. CLI options: `--ports N` (2), `--expire D`
/// (300s), `--capacity N` (65536), `--static MAC@PORT` (repeatable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    pub ports: usize,
    pub expire: Duration,
    pub capacity: usize,
    pub statics: Vec<StaticEntry>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            ports: 2,
            expire: Duration::from_secs(300),
            capacity: 65536,
            statics: Vec::new(),
        }
    }
}

impl BridgeConfig {
    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<BridgeConfig, ConfigError> {
        let mut c = BridgeConfig::default();
        for_each_option(args, |k, v| {
            match k {
                "ports" => c.ports = config::count(k, v)?,
                "expire" => c.expire = config::duration(k, v)?,
                "capacity" => c.capacity = config::count(k, v)?,
                "static" => c.statics.push(v.parse()?),
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: "--ports, --expire, --capacity, --static",
                    })
                }
            }
            Ok(())
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(2..=PortSet::MAX_PORTS).contains(&self.ports) {
            return Err(ConfigError::BridgePorts(self.ports));
        }
        config::check_capacity("bridge MAC table", self.capacity)?;
        if self.expire.is_zero() {
            return Err(ConfigError::Zero { what: "--expire" });
        }
        for s in &self.statics {
            if s.port >= self.ports {
                return Err(ConfigError::PortOutOfRange {
                    port: s.port,
                    count: self.ports,
                });
            }
        }
        Ok(())
    }
}

impl FromStr for BridgeConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BridgeConfig::from_args(s.split_whitespace())
    }
}

/// One row of the MAC table, as [`Bridge::entries`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacEntry {
    pub mac: MacAddr,
    pub port: PortId,
    pub is_static: bool,
    /// When a frame from `mac` was last seen (static entries: zero).
    pub last_seen: Duration,
}

/// The learning bridge NF.
pub struct Bridge {
    cfg: BridgeConfig,
    learned: FlowTable<MacAddr, PortId>,
    statics: KeyIndex<MacAddr>,
    stats: NfStats,
}

impl Bridge {
    pub fn new(cfg: BridgeConfig) -> Result<Bridge, ConfigError> {
        cfg.validate()?;
        let seed = crate::seed();
        config::check_memory(
            "bridge",
            FlowTable::<MacAddr, PortId>::bytes_for(cfg.capacity),
        )?;
        let mut statics = KeyIndex::new(cfg.statics.len().max(1), seed ^ 1);
        for s in &cfg.statics {
            statics.insert(s.mac, s.port as u32);
        }
        Ok(Bridge {
            learned: FlowTable::new(cfg.capacity, cfg.expire.as_nanos() as u64, seed),
            statics,
            cfg,
            stats: NfStats::default(),
        })
    }

    /// The MAC table: static entries first, then learned ones, oldest first.
    pub fn entries(&self) -> Vec<MacEntry> {
        let mut v: Vec<MacEntry> = self
            .cfg
            .statics
            .iter()
            .map(|s| MacEntry {
                mac: s.mac,
                port: s.port,
                is_static: true,
                last_seen: Duration::ZERO,
            })
            .collect();
        v.extend(self.learned.iter().map(|(mac, port, seen)| MacEntry {
            mac: *mac,
            port: *port,
            is_static: false,
            last_seen: Duration::from_nanos(seen),
        }));
        v
    }

    /// The port `mac` is on, if known.
    pub fn lookup(&self, mac: MacAddr) -> Option<PortId> {
        self.statics
            .get(&mac)
            .map(|p| p as PortId)
            .or_else(|| self.learned.get(&mac).map(|id| *self.learned.value(id)))
    }

    fn learn(&mut self, src: MacAddr, port: PortId, now: u64) {
        if src.is_multicast() || self.statics.get(&src).is_some() {
            return;
        }
        match self.learned.get(&src) {
            Some(id) => {
                *self.learned.value_mut(id) = port;
                self.learned.touch(id, now);
            }
            None => match self.learned.insert(src, port, now) {
                Ok(_) => self.stats.flows_created += 1,
                Err(_) => self.stats.learn_failed += 1,
            },
        }
    }
}

impl NetworkFunction for Bridge {
    fn name(&self) -> &'static str {
        "bridge"
    }

    fn table(&self) -> Vec<String> {
        self.entries()
            .iter()
            .map(|e| {
                let kind = if e.is_static { "static" } else { "learned" };
                format!("mac {} port {} {kind}", e.mac, e.port)
            })
            .collect()
    }

    fn port_count(&self) -> usize {
        self.cfg.ports
    }

    fn stats(&self) -> &NfStats {
        &self.stats
    }

    fn stats_mut(&mut self) -> &mut NfStats {
        &mut self.stats
    }

    fn handle(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now: u64) -> Verdict {
        self.stats.flows_expired += self.learned.expire(now, |_, _| {});
        let Ok(eth) = Ethernet::new(&buf[..len]) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        let (src, dst) = (eth.src(), eth.dst());
        self.learn(src, in_port, now);
        if dst.0[..5] == [0x01, 0x80, 0xc2, 0x00, 0x00] && dst.0[5] & 0xf0 == 0 {
            return Verdict::Drop(DropReason::ReservedAddress);
        }
        let known = if dst.is_multicast() {
            None
        } else {
            self.lookup(dst)
        };
        match known {
            Some(p) if p == in_port => Verdict::Drop(DropReason::SamePort),
            Some(port) => Verdict::Forward { port, len },
            None => Verdict::Flood {
                ports: PortSet::first(self.cfg.ports).without(in_port),
                len,
            },
        }
    }
}
