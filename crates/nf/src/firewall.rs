//! A stateful firewall: flows started from the LAN are let back in,
//! everything else from the WAN is dropped (`blocked`).
//!
//! - A LAN → WAN packet creates or refreshes the flow of its 5-tuple
//!   (TCP/UDP ports; ICMP echo identifier; other protocols by addresses
//!   and protocol). WAN → LAN packets pass if their reversed 5-tuple is a
//!   live flow, refreshing it. Flows expire after `expire` idle.
//! - ICMP errors from the WAN pass if the datagram they quote belongs to
//!   a live flow; ICMP echo requests from the WAN never pass.
//! - The LAN is trusted: LAN packets always pass, except a new flow when
//!   the table is full (`table_full`). LAN later fragments and ICMP errors
//!   pass without creating state.
//! - WAN later fragments cannot be matched (no ports): `fragment`.
//! - The firewall is a bump in the wire, so ARP passes both ways (or no
//!   host could resolve its peer); other non-IPv4 passes from the LAN and
//!   is dropped from the WAN (`not_ipv4`). Frames are never modified.

use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::{ethertype, icmp_type, is_error_type, parse_ipv4, proto, FlowKey, Fragment};

use crate::config::{self, for_each_option, lan_wan, ConfigError};
use crate::rewrite::parse_quoted;
use crate::table::FlowTable;
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, Verdict};

/// Firewall configuration. CLI options: `--lan N` (0), `--wan N` (1),
/// `--expire D` (60s), `--capacity N` (65536).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConfig {
    pub lan: PortId,
    pub wan: PortId,
    pub expire: Duration,
    pub capacity: usize,
}

impl Default for FirewallConfig {
    fn default() -> Self {
        FirewallConfig {
            lan: 0,
            wan: 1,
            expire: Duration::from_secs(60),
            capacity: 65536,
        }
    }
}

impl FirewallConfig {
    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<FirewallConfig, ConfigError> {
        let mut c = FirewallConfig::default();
        for_each_option(args, |k, v| {
            match k {
                "lan" => c.lan = config::count(k, v)?,
                "wan" => c.wan = config::count(k, v)?,
                "expire" => c.expire = config::duration(k, v)?,
                "capacity" => c.capacity = config::count(k, v)?,
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: "--lan, --wan, --expire, --capacity",
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
        config::check_capacity("firewall flow", self.capacity)?;
        if self.expire.is_zero() {
            return Err(ConfigError::Zero { what: "--expire" });
        }
        Ok(())
    }
}

impl FromStr for FirewallConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FirewallConfig::from_args(s.split_whitespace())
    }
}

/// The firewall NF (2 ports).
pub struct Firewall {
    cfg: FirewallConfig,
    flows: FlowTable<FlowKey, ()>,
    stats: NfStats,
}

impl Firewall {
    pub fn new(cfg: FirewallConfig) -> Result<Firewall, ConfigError> {
        cfg.validate()?;
        config::check_memory(
            "firewall",
            FlowTable::<FlowKey, ()>::bytes_for(cfg.capacity),
        )?;
        Ok(Firewall {
            flows: FlowTable::new(cfg.capacity, cfg.expire.as_nanos() as u64, crate::seed()),
            cfg,
            stats: NfStats::default(),
        })
    }

    /// Live flows, as seen from the LAN (source = LAN host), oldest first.
    pub fn flows(&self) -> impl Iterator<Item = FlowKey> + '_ {
        self.flows.iter().map(|(k, _, _)| *k)
    }

    fn outbound(&mut self, f: &[u8], now: u64) -> Result<(), DropReason> {
        let l = match parse_ipv4(f) {
            Ok(l) => l,
            Err(nfkit_packet::PacketError::NotIpv4(_)) => return Ok(()),
            Err(_) => return Err(DropReason::Malformed),
        };
        let icmp_error = l.protocol == proto::ICMP && l.l4 < l.end && is_error_type(f[l.l4]);
        if l.fragment == Fragment::Later || icmp_error {
            return Ok(());
        }
        let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
        match self.flows.get(&key) {
            Some(id) => self.flows.touch(id, now),
            None => {
                self.flows
                    .insert(key, (), now)
                    .map_err(|_| DropReason::TableFull)?;
                self.stats.flows_created += 1;
            }
        }
        Ok(())
    }

    fn inbound(&mut self, f: &[u8], now: u64) -> Result<(), DropReason> {
        let l = match parse_ipv4(f) {
            Ok(l) => l,
            Err(nfkit_packet::PacketError::NotIpv4(ethertype::ARP)) => return Ok(()),
            Err(nfkit_packet::PacketError::NotIpv4(_)) => return Err(DropReason::NotIpv4),
            Err(_) => return Err(DropReason::Malformed),
        };
        if l.fragment == Fragment::Later {
            return Err(DropReason::Fragment);
        }
        let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
        if l.protocol == proto::ICMP {
            let t = f[l.l4];
            if is_error_type(t) {
                let q = parse_quoted(f, &l).ok_or(DropReason::Blocked)?;
                return match self.flows.get(&q.key) {
                    Some(_) => Ok(()),
                    None => Err(DropReason::Blocked),
                };
            }
            if t == icmp_type::ECHO_REQUEST {
                return Err(DropReason::Blocked);
            }
        }
        let id = self.flows.get(&key.reversed()).ok_or(DropReason::Blocked)?;
        self.flows.touch(id, now);
        Ok(())
    }
}

impl NetworkFunction for Firewall {
    fn name(&self) -> &'static str {
        "firewall"
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
        self.stats.flows_expired += self.flows.expire(now, |_, _| {});
        let f = &buf[..len];
        let (res, out) = if in_port == self.cfg.lan {
            (self.outbound(f, now), self.cfg.wan)
        } else {
            (self.inbound(f, now), self.cfg.lan)
        };
        match res {
            Ok(()) => Verdict::Forward { port: out, len },
            Err(r) => Verdict::Drop(r),
        }
    }
}
