//! NAPT (RFC 3022) with endpoint-independent mapping (RFC 4787 §4.1).
//!
//! - Outbound (LAN → WAN) TCP, UDP and ICMP echo get the source rewritten
//!   to the external IP and a port (ICMP: identifier) from the configured
//!   range. The mapping is keyed by the internal (protocol, address, port)
//!   only, so every destination sees the same external port (REQ-1).
//! - Filtering is endpoint-independent too (REQ-8, "application
//!   transparency"): any WAN host may use a live mapping. Stateful
//!   filtering is the firewall NF's job; chain it in front for that.
//! - Mappings expire after `expire` without traffic in either direction
//!   (REQ-5 asks ≥ 2 min for UDP; the default is 120 s for all protocols;
//!   TCP FIN/RST do not shorten it).
//! - IPv4, TCP and UDP checksums are updated incrementally (RFC 1624): a
//!   packet with a wrong checksum stays wrong, a UDP checksum 0 stays 0.
//! - ICMP errors about a mapped flow (in either direction) get the quoted
//!   datagram translated as well (RFC 3022 §4.3, RFC 5508 REQ-3), fixing the
//!   quoted IPv4/L4 checksums and the ICMP checksum.
//!
//! Choices for other traffic, each a counted drop:
//! - non-IPv4 (ARP included): `not_ipv4`. The NAT answers no ARP; set
//!   `--wan-eth-dest`/`--lan-eth-dest` (next-hop MACs) and give the
//!   external IP's neighbours a static ARP entry, as with Vigor's VigNAT;
//! - later fragments: `fragment` (they carry no ports; no reassembly);
//!   first fragments are translated like whole packets;
//! - other protocols and ICMP types: `unsupported_protocol`;
//! - WAN packets not to the external IP: `not_for_us`; to an unmapped
//!   port: `no_mapping`; truncated headers: `malformed`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::{is_error_type, parse_ipv4, proto, FlowKey, Fragment, MacAddr, PacketError};

use crate::config::{self, for_each_option, lan_wan, ConfigError, PortRange};
use crate::rewrite::{parse_quoted, rewrite_end, rewrite_quoted, set_macs, End};
use crate::table::{KeyIndex, SlotId, Slots, TableKey};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, Verdict};

/// NAT configuration. CLI options: `--ext-ip A` (required), `--lan N`
/// (0), `--wan N` (1), `--ports LO-HI` (1024-65535), `--expire D` (120s),
/// `--capacity N` (65536), `--lan-eth-dest MAC`, `--wan-eth-dest MAC`,
/// `--lan-eth-src MAC`, `--wan-eth-src MAC` (rewrite Ethernet addresses of
/// packets sent on that side; unset: left as received).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatConfig {
    pub lan: PortId,
    pub wan: PortId,
    pub external_ip: Ipv4Addr,
    pub ports: PortRange,
    pub expire: Duration,
    pub capacity: usize,
    pub lan_eth_dest: Option<MacAddr>,
    pub wan_eth_dest: Option<MacAddr>,
    pub lan_eth_src: Option<MacAddr>,
    pub wan_eth_src: Option<MacAddr>,
}

const NAT_OPTIONS: &str = "--ext-ip, --lan, --wan, --ports, --expire, --capacity, \
--lan-eth-dest, --wan-eth-dest, --lan-eth-src, --wan-eth-src";

impl NatConfig {
    pub fn new(external_ip: Ipv4Addr) -> NatConfig {
        NatConfig {
            lan: 0,
            wan: 1,
            external_ip,
            ports: PortRange {
                lo: 1024,
                hi: 65535,
            },
            expire: Duration::from_secs(120),
            capacity: 65536,
            lan_eth_dest: None,
            wan_eth_dest: None,
            lan_eth_src: None,
            wan_eth_src: None,
        }
    }

    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<NatConfig, ConfigError> {
        let mut c = NatConfig::new(Ipv4Addr::UNSPECIFIED);
        let mut ext = None;
        for_each_option(args, |k, v| {
            match k {
                "ext-ip" => ext = Some(config::ip(k, v)?),
                "lan" => c.lan = config::count(k, v)?,
                "wan" => c.wan = config::count(k, v)?,
                "ports" => c.ports = v.parse()?,
                "expire" => c.expire = config::duration(k, v)?,
                "capacity" => c.capacity = config::count(k, v)?,
                "lan-eth-dest" => c.lan_eth_dest = Some(config::mac(k, v)?),
                "wan-eth-dest" => c.wan_eth_dest = Some(config::mac(k, v)?),
                "lan-eth-src" => c.lan_eth_src = Some(config::mac(k, v)?),
                "wan-eth-src" => c.wan_eth_src = Some(config::mac(k, v)?),
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: NAT_OPTIONS,
                    })
                }
            }
            Ok(())
        })?;
        c.external_ip = ext.ok_or(ConfigError::Required("--ext-ip"))?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        lan_wan(self.lan, self.wan, 2)?;
        if self.capacity == 0 {
            return Err(ConfigError::ZeroCapacity { what: "NAT flow" });
        }
        if self.expire.is_zero() {
            return Err(ConfigError::Zero { what: "--expire" });
        }
        PortRange::new(self.ports.lo, self.ports.hi)?;
        Ok(())
    }
}

impl FromStr for NatConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NatConfig::from_args(s.split_whitespace())
    }
}

/// One side of a mapping: (protocol, address, port or ICMP identifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Endpoint {
    ip: u32,
    port: u16,
    protocol: u8,
}

impl TableKey for Endpoint {
    fn hash64(&self, seed: u64) -> u64 {
        nfkit_packet::mix(
            (u64::from(self.ip) << 24 | u64::from(self.port) << 8 | u64::from(self.protocol))
                ^ seed,
        )
    }
}

/// A live NAT mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub protocol: u8,
    pub internal_ip: Ipv4Addr,
    pub internal_port: u16,
    pub external_port: u16,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            protocol: 0,
            internal_ip: Ipv4Addr::UNSPECIFIED,
            internal_port: 0,
            external_port: 0,
        }
    }
}

/// Free external ports of one protocol, reused oldest-freed first.
struct PortPool {
    free: VecDeque<u16>,
}

impl PortPool {
    fn new(r: PortRange) -> PortPool {
        PortPool {
            free: (r.lo..=r.hi).collect(),
        }
    }
}

/// The NAPT network function. Ports: `lan` and `wan` (2 ports).
pub struct Nat {
    cfg: NatConfig,
    mappings: Slots<Mapping>,
    by_internal: KeyIndex<Endpoint>,
    by_external: KeyIndex<Endpoint>,
    /// TCP, UDP, ICMP.
    pools: [PortPool; 3],
    expire_ns: u64,
    stats: NfStats,
}

fn pool_index(protocol: u8) -> usize {
    match protocol {
        proto::TCP => 0,
        proto::UDP => 1,
        _ => 2,
    }
}

/// How a packet relates to mappings, found from its headers.
enum Lookup {
    /// TCP/UDP/ICMP echo: the packet's own endpoint.
    Direct(Endpoint),
    /// ICMP error: the quoted datagram's endpoint.
    Quoted(Endpoint),
}

impl Nat {
    pub fn new(cfg: NatConfig) -> Result<Nat, ConfigError> {
        cfg.validate()?;
        let seed = crate::seed();
        Ok(Nat {
            mappings: Slots::new(cfg.capacity),
            by_internal: KeyIndex::new(cfg.capacity, seed),
            by_external: KeyIndex::new(cfg.capacity, seed ^ 0x5a5a),
            pools: [
                PortPool::new(cfg.ports),
                PortPool::new(cfg.ports),
                PortPool::new(cfg.ports),
            ],
            expire_ns: cfg.expire.as_nanos() as u64,
            cfg,
            stats: NfStats::default(),
        })
    }

    pub fn config(&self) -> &NatConfig {
        &self.cfg
    }

    /// Live mappings, least recently used first.
    pub fn mappings(&self) -> impl Iterator<Item = Mapping> + '_ {
        self.mappings.iter().map(|(_, m)| *m)
    }

    fn expire(&mut self, now: u64) {
        while let Some(id) = self.mappings.oldest_expired(now, self.expire_ns) {
            self.remove(id);
            self.stats.flows_expired += 1;
        }
    }

    fn remove(&mut self, id: SlotId) {
        let m = *self.mappings.get(id);
        self.by_internal.remove(&Endpoint {
            ip: u32::from(m.internal_ip),
            port: m.internal_port,
            protocol: m.protocol,
        });
        self.by_external.remove(&Endpoint {
            ip: 0,
            port: m.external_port,
            protocol: m.protocol,
        });
        self.pools[pool_index(m.protocol)]
            .free
            .push_back(m.external_port);
        self.mappings.free(id);
    }

    /// Find or create the mapping of an internal endpoint.
    fn map_outbound(&mut self, e: Endpoint, now: u64) -> Result<Mapping, DropReason> {
        if let Some(id) = self.by_internal.get(&e) {
            self.mappings.touch(id, now);
            return Ok(*self.mappings.get(id));
        }
        if self.mappings.is_full() {
            return Err(DropReason::TableFull);
        }
        let pool = &mut self.pools[pool_index(e.protocol)];
        let ext_port = pool.free.pop_front().ok_or(DropReason::PortsExhausted)?;
        let m = Mapping {
            protocol: e.protocol,
            internal_ip: Ipv4Addr::from(e.ip),
            internal_port: e.port,
            external_port: ext_port,
        };
        let id = self.mappings.alloc(m, now).ok_or(DropReason::TableFull)?;
        self.by_internal.insert(e, id);
        self.by_external.insert(
            Endpoint {
                ip: 0,
                port: ext_port,
                protocol: e.protocol,
            },
            id,
        );
        self.stats.flows_created += 1;
        Ok(m)
    }

    fn map_inbound(&mut self, protocol: u8, ext_port: u16, now: u64) -> Option<Mapping> {
        let id = self.by_external.get(&Endpoint {
            ip: 0,
            port: ext_port,
            protocol,
        })?;
        self.mappings.touch(id, now);
        Some(*self.mappings.get(id))
    }

    fn outbound(&mut self, f: &mut [u8], now: u64) -> Result<(), DropReason> {
        let l = parse(f)?;
        match classify(f, &l, true)? {
            Lookup::Direct(e) => {
                let m = self.map_outbound(e, now)?;
                rewrite_end(f, &l, End::Src, self.cfg.external_ip, m.external_port);
            }
            Lookup::Quoted(e) => {
                // The quoted datagram went LAN-ward: its destination is internal.
                let id = self.by_internal.get(&e).ok_or(DropReason::NoMapping)?;
                self.mappings.touch(id, now);
                let m = *self.mappings.get(id);
                let q = parse_quoted(f, &l).ok_or(DropReason::Malformed)?;
                rewrite_quoted(f, &l, &q, End::Dst, self.cfg.external_ip, m.external_port);
                set_outer_ip(f, &l, End::Src, self.cfg.external_ip);
            }
        }
        set_macs(f, self.cfg.wan_eth_src, self.cfg.wan_eth_dest);
        Ok(())
    }

    fn inbound(&mut self, f: &mut [u8], now: u64) -> Result<(), DropReason> {
        let l = parse(f)?;
        let dst = Ipv4Addr::new(f[l.l3 + 16], f[l.l3 + 17], f[l.l3 + 18], f[l.l3 + 19]);
        if dst != self.cfg.external_ip {
            return Err(DropReason::NotForUs);
        }
        match classify(f, &l, false)? {
            Lookup::Direct(e) => {
                let m = self
                    .map_inbound(e.protocol, e.port, now)
                    .ok_or(DropReason::NoMapping)?;
                rewrite_end(f, &l, End::Dst, m.internal_ip, m.internal_port);
            }
            Lookup::Quoted(e) => {
                if e.ip != u32::from(self.cfg.external_ip) {
                    return Err(DropReason::NoMapping);
                }
                let m = self
                    .map_inbound(e.protocol, e.port, now)
                    .ok_or(DropReason::NoMapping)?;
                let q = parse_quoted(f, &l).ok_or(DropReason::Malformed)?;
                rewrite_quoted(f, &l, &q, End::Src, m.internal_ip, m.internal_port);
                set_outer_ip(f, &l, End::Dst, m.internal_ip);
            }
        }
        set_macs(f, self.cfg.lan_eth_src, self.cfg.lan_eth_dest);
        Ok(())
    }
}

fn parse(f: &[u8]) -> Result<nfkit_packet::Ipv4Layout, DropReason> {
    let l = parse_ipv4(f).map_err(|e| match e {
        PacketError::NotIpv4(_) => DropReason::NotIpv4,
        _ => DropReason::Malformed,
    })?;
    if l.fragment == Fragment::Later {
        return Err(DropReason::Fragment);
    }
    Ok(l)
}

/// Which endpoint a packet is mapped by. `outbound`: the source endpoint
/// of LAN packets (echo requests only); inbound: the destination endpoint
/// (echo replies only). ICMP errors: the quoted datagram's inner end.
fn classify(f: &[u8], l: &nfkit_packet::Ipv4Layout, outbound: bool) -> Result<Lookup, DropReason> {
    let key = FlowKey::from_frame(f, l).map_err(|_| DropReason::Malformed)?;
    let (ip, port) = if outbound {
        (key.src_ip, key.src_port)
    } else {
        (key.dst_ip, key.dst_port)
    };
    let direct = |port| {
        Ok(Lookup::Direct(Endpoint {
            ip: u32::from(ip),
            port,
            protocol: l.protocol,
        }))
    };
    match l.protocol {
        proto::TCP | proto::UDP => direct(port),
        proto::ICMP => {
            match f[l.l4] {
                8 if outbound => direct(port),
                0 if !outbound => direct(port),
                t if is_error_type(t) => {
                    let q = parse_quoted(f, l).ok_or(DropReason::Malformed)?;
                    // Outbound errors quote an inbound packet (internal = dst);
                    // inbound errors quote an outbound one (external = src).
                    let (ip, port) = if outbound {
                        (q.key.dst_ip, q.key.dst_port)
                    } else {
                        (q.key.src_ip, q.key.src_port)
                    };
                    Ok(Lookup::Quoted(Endpoint {
                        ip: u32::from(ip),
                        port,
                        protocol: q.key.protocol,
                    }))
                }
                _ => Err(DropReason::UnsupportedProtocol),
            }
        }
        _ => Err(DropReason::UnsupportedProtocol),
    }
}

/// Rewrite an outer IPv4 address only (ICMP errors: the ICMP checksum
/// does not cover the IPv4 header).
fn set_outer_ip(f: &mut [u8], l: &nfkit_packet::Ipv4Layout, end: End, ip: Ipv4Addr) {
    if let Ok(mut v) = nfkit_packet::Ipv4::new(&mut f[l.l3..l.end]) {
        match end {
            End::Src => v.set_src(ip),
            End::Dst => v.set_dst(ip),
        }
    }
}

impl NetworkFunction for Nat {
    fn name(&self) -> &'static str {
        "nat"
    }

    fn table(&self) -> Vec<String> {
        let ext = self.config().external_ip;
        self.mappings()
            .map(|m| {
                format!(
                    "mapping proto {} {}:{} -> {ext}:{}",
                    m.protocol, m.internal_ip, m.internal_port, m.external_port
                )
            })
            .collect()
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
        self.expire(now);
        let f = &mut buf[..len];
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
