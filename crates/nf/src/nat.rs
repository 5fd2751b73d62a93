//! NAPT (RFC 3022) held to the NAT behavioural requirements for UDP
//! (RFC 4787), TCP (RFC 5382) and ICMP (RFC 5508). Each requirement has a
//! test named by its ID in `crates/nf/tests/nat_rfc.rs`.
//!
//! - Outbound (LAN → WAN) TCP, UDP and ICMP echo get the source rewritten
//!   to an external IP and a port (ICMP: identifier) from its ranges. The
//!   mapping is keyed by the internal (protocol, address, port) only, so
//!   every destination sees the same external endpoint
//!   (endpoint-independent mapping: 4787 REQ-1, 5382 REQ-1). No external
//!   (address, port) is ever shared by two internal endpoints (no port
//!   overloading: 4787 REQ-3, 5382 REQ-8). The external port keeps the
//!   internal port's parity while the range has ports of that parity
//!   (4787 REQ-4).
//! - Sizing: at most `--capacity` mappings (65,536) in all, and per
//!   protocol at most the external ports: `--ports` (1024-65535, 64,512
//!   ports) on each of the `--ext-ip` addresses (up to 64). An internal
//!   address maps to one external address, chosen by a hash (paired
//!   pooling, 4787 REQ-2), while that address has ports left; then to the
//!   next address that has. So 65,536 endpoints of one host need two
//!   addresses. A new flow that finds the table full is dropped as
//!   `table_full`, one that finds no port as `ports_exhausted`; live
//!   mappings go on. The work per packet does not grow with the flows:
//!   hash lookups in tables at most half full, ports taken from free
//!   lists, expiry from the heads of LRU lists (and a look through the
//!   external addresses for the destination of WAN packets).
//! - Filtering (4787 REQ-8, 5382 REQ-3; RFC choice): `--filtering
//!   endpoint` (the default, "application transparency"): any remote host
//!   may use a live mapping; `address`: only hosts the mapping has sent
//!   to; `address-port`: only (host, port) pairs it has sent to. Filtered
//!   packets are dropped as `blocked`, silently (an unsolicited SYN gets
//!   no answer: 5382 REQ-4).
//! - Hairpinning (4787 REQ-9, 5382 REQ-9, 5508 REQ-7): a LAN packet to
//!   the external IP is translated out (source: external IP and the
//!   sender's external port, REQ-9a) and back in to the mapping's internal
//!   endpoint, and sent back on the LAN port. ICMP errors hairpin too.
//!   On a real link, set `--lan-eth-dest` (the NAT answers no ARP).
//! - Mapping lifetimes (RFC choice within the RFCs' floors; each
//!   configurable, `--expire D` sets all four): UDP `--udp-timeout`
//!   (300 s; REQ-5 asks ≥ 120 s, recommends ≥ 300 s), TCP established
//!   `--tcp-established-timeout` (2 h 4 min, the 5382 REQ-5 floor), TCP
//!   transitory `--tcp-transitory-timeout` (4 min: before traffic was
//!   seen both ways, after a RST, after FINs both ways), ICMP query
//!   `--icmp-timeout` (60 s, the 5508 REQ-2 floor). Shorter values are
//!   accepted (tests use them) and make the NAT non-conforming. TCP state
//!   is kept per mapping, not per connection (a mapping is shared by the
//!   internal endpoint's connections). Outbound and allowed inbound
//!   packets refresh a mapping (4787 REQ-6); ICMP errors never refresh
//!   nor end one (4787 REQ-12, 5382 REQ-10, 5508 REQ-6).
//! - IPv4, TCP and UDP checksums are updated incrementally (RFC 1624): a
//!   packet with a wrong checksum stays wrong, a UDP checksum 0 stays 0.
//! - ICMP errors (destination unreachable, time exceeded, parameter
//!   problem) about a mapped flow, in either direction, get the quoted
//!   datagram translated back (5508 REQ-3/4/5), type and code unchanged,
//!   the outer destination (inbound) or source (outbound: the external
//!   IP) rewritten, all checksums fixed. An error whose ICMP checksum or
//!   quoted IPv4 checksum is wrong is dropped (`bad_checksum`, REQ-3).
//!   Source quench and redirect are never passed (5508 REQ-10).
//! - Fragments (4787 REQ-14): a first fragment is translated like a whole
//!   packet and remembered (source, destination, protocol, IP ID) for
//!   30 s, so the later fragments that follow it are translated too.
//!
//! Requirements not met, and why:
//! - 4787 REQ-14 / 5382 for fragments that arrive before their first
//!   fragment: dropped (`fragment`); holding them needs buffering, and the
//!   data path owns no packet memory.
//! - 4787 REQ-13 (DF=1 packets larger than the external MTU get ICMP
//!   "fragmentation needed"; DF=0 ones are fragmented): the NAT never
//!   changes a packet's size and knows no MTU; a packet larger than the
//!   WAN port's MTU is dropped by the port.
//! - 4787 REQ-3a (source ports 0-1023 mapped into 0-1023, a SHOULD): the
//!   mapping takes any port of `--ports` (default 1024-65535).
//! - 4787 REQ-7 (dynamic external address): the external IP is static.
//! - 5382 REQ-4 (ICMP port unreachable 6 s after an unsolicited SYN, a
//!   SHOULD): unsolicited SYNs are dropped silently, which REQ-4a allows.
//! - 5508 REQ-8 (ICMP "administratively prohibited" when no mapping can
//!   be made, a SHOULD): counted drops (`table_full`, `ports_exhausted`).
//! - 5508 REQ-1 hairpinned ICMP queries (Basic NAT only) and 5508 REQ-10c
//!   parameter problem are translated like other errors; no ALGs (4787
//!   REQ-10, 5382 REQ-6/7 are met by having none).
//!
//! Choices for other traffic, each a counted drop:
//! - non-IPv4 (ARP included): `not_ipv4`. The NAT answers no ARP; set
//!   `--wan-eth-dest`/`--lan-eth-dest` (next-hop MACs) and give the
//!   external IP's neighbours a static ARP entry, as with Vigor's VigNAT;
//! - other protocols and ICMP types: `unsupported_protocol`;
//! - WAN packets not to the external IP: `not_for_us`; to an unmapped
//!   port: `no_mapping`; filtered: `blocked`; truncated headers:
//!   `malformed`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::checksum::checksum;
use nfkit_packet::{icmp_type, parse_ipv4, proto, FlowKey, Fragment, MacAddr, PacketError};

use crate::config::{self, for_each_option, lan_wan, ConfigError, PortRange};
use crate::rewrite::{parse_quoted, read16, rewrite_end, rewrite_quoted, set_macs, End};
use crate::table::{FlowTable, KeyIndex, SlotId, Slots, TableKey};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, Verdict};

/// Which remote hosts may use a mapping (RFC 4787 §5, RFC 5382 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filtering {
    /// Any remote (ip, port): `endpoint`. The default.
    #[default]
    EndpointIndependent,
    /// Remote hosts the mapping has sent to: `address`.
    AddressDependent,
    /// Remote (ip, port) pairs the mapping has sent to: `address-port`.
    AddressAndPortDependent,
}

impl FromStr for Filtering {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "endpoint" | "endpoint-independent" => Ok(Filtering::EndpointIndependent),
            "address" | "address-dependent" => Ok(Filtering::AddressDependent),
            "address-port" | "address-and-port-dependent" => Ok(Filtering::AddressAndPortDependent),
            _ => Err(ConfigError::bad(
                "filtering",
                s,
                "endpoint, address or address-port",
            )),
        }
    }
}

/// Idle lifetimes of mappings, by protocol and TCP state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatTimeouts {
    pub udp: Duration,
    pub tcp_established: Duration,
    pub tcp_transitory: Duration,
    pub icmp: Duration,
}

impl Default for NatTimeouts {
    fn default() -> Self {
        NatTimeouts {
            udp: Duration::from_secs(300),
            tcp_established: Duration::from_secs(2 * 3600 + 4 * 60),
            tcp_transitory: Duration::from_secs(240),
            icmp: Duration::from_secs(60),
        }
    }
}

impl NatTimeouts {
    /// The same lifetime for everything (`--expire D`).
    pub fn all(d: Duration) -> NatTimeouts {
        NatTimeouts {
            udp: d,
            tcp_established: d,
            tcp_transitory: d,
            icmp: d,
        }
    }

    /// By LRU list: UDP, TCP transitory, TCP established, ICMP.
    fn by_list(&self) -> [u64; LISTS] {
        [
            self.udp,
            self.tcp_transitory,
            self.tcp_established,
            self.icmp,
        ]
        .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
    }

    fn longest(&self) -> Duration {
        self.udp
            .max(self.tcp_established)
            .max(self.tcp_transitory)
            .max(self.icmp)
    }
}

/// One external address and the ports its mappings may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalAddr {
    pub ip: Ipv4Addr,
    /// Port ranges (ICMP: identifiers); empty: [`NatConfig::ports`].
    pub ports: Vec<PortRange>,
}

/// At most this many external addresses.
pub const MAX_EXTERNAL: usize = 64;

/// NAT configuration. CLI options: `--ext-ip A[,B...]` (required, 1 to
/// 64 addresses), `--lan N` (0), `--wan N` (1), `--ports LO-HI`
/// (1024-65535, on every address), `--filtering
/// endpoint|address|address-port` (endpoint), `--udp-timeout D` (300s),
/// `--tcp-established-timeout D` (7440s), `--tcp-transitory-timeout D`
/// (240s), `--icmp-timeout D` (60s), `--expire D` (all four),
/// `--capacity N` (65536), `--lan-eth-dest MAC`, `--wan-eth-dest MAC`,
/// `--lan-eth-src MAC`, `--wan-eth-src MAC` (rewrite Ethernet addresses of
/// packets sent on that side; unset: left as received).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatConfig {
    pub lan: PortId,
    pub wan: PortId,
    /// The external addresses, each with its ports.
    pub external: Vec<ExternalAddr>,
    /// The ports of an address whose own list is empty.
    pub ports: PortRange,
    pub filtering: Filtering,
    pub timeouts: NatTimeouts,
    pub capacity: usize,
    pub lan_eth_dest: Option<MacAddr>,
    pub wan_eth_dest: Option<MacAddr>,
    pub lan_eth_src: Option<MacAddr>,
    pub wan_eth_src: Option<MacAddr>,
}

const NAT_OPTIONS: &str = "--ext-ip, --lan, --wan, --ports, --filtering, --udp-timeout, \
--tcp-established-timeout, --tcp-transitory-timeout, --icmp-timeout, --expire, --capacity, \
--lan-eth-dest, --wan-eth-dest, --lan-eth-src, --wan-eth-src";

impl NatConfig {
    pub fn new(external_ip: Ipv4Addr) -> NatConfig {
        NatConfig {
            lan: 0,
            wan: 1,
            external: vec![ExternalAddr {
                ip: external_ip,
                ports: Vec::new(),
            }],
            ports: PortRange {
                lo: 1024,
                hi: 65535,
            },
            filtering: Filtering::default(),
            timeouts: NatTimeouts::default(),
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
            let t = &mut c.timeouts;
            match k {
                "ext-ip" => ext = Some(external_list(k, v)?),
                "lan" => c.lan = config::count(k, v)?,
                "wan" => c.wan = config::count(k, v)?,
                "ports" => c.ports = v.parse()?,
                "filtering" => c.filtering = v.parse()?,
                "expire" => *t = NatTimeouts::all(config::duration(k, v)?),
                "udp-timeout" => t.udp = config::duration(k, v)?,
                "tcp-established-timeout" => t.tcp_established = config::duration(k, v)?,
                "tcp-transitory-timeout" => t.tcp_transitory = config::duration(k, v)?,
                "icmp-timeout" => t.icmp = config::duration(k, v)?,
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
        c.external = ext.ok_or(ConfigError::Required("--ext-ip"))?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        lan_wan(self.lan, self.wan, 2)?;
        config::check_capacity("NAT flow", self.capacity)?;
        let t = &self.timeouts;
        for (d, what) in [
            (t.udp, "--udp-timeout"),
            (t.tcp_established, "--tcp-established-timeout"),
            (t.tcp_transitory, "--tcp-transitory-timeout"),
            (t.icmp, "--icmp-timeout"),
        ] {
            if d.is_zero() {
                return Err(ConfigError::Zero { what });
            }
        }
        PortRange::new(self.ports.lo, self.ports.hi)?;
        if self.external.is_empty() || self.external.len() > MAX_EXTERNAL {
            return Err(ConfigError::ExternalAddresses(self.external.len()));
        }
        for (i, a) in self.external.iter().enumerate() {
            if self.external[..i].iter().any(|b| b.ip == a.ip) {
                return Err(ConfigError::bad("ext-ip", &a.ip.to_string(), "given once"));
            }
            for r in &a.ports {
                PortRange::new(r.lo, r.hi)?;
            }
        }
        Ok(())
    }

    /// The first external address.
    pub fn external_ip(&self) -> Ipv4Addr {
        self.external
            .first()
            .map_or(Ipv4Addr::UNSPECIFIED, |a| a.ip)
    }

    /// The ports of address `i`, each once, ascending.
    fn ports_of(&self, i: usize) -> Vec<u16> {
        let a = &self.external[i];
        let ranges = if a.ports.is_empty() {
            std::slice::from_ref(&self.ports)
        } else {
            &a.ports[..]
        };
        let mut used = vec![false; 1 << 16];
        for r in ranges {
            for p in r.lo..=r.hi {
                used[usize::from(p)] = true;
            }
        }
        (1..=u16::MAX).filter(|&p| used[usize::from(p)]).collect()
    }

    /// How many mappings of one protocol the external ports allow.
    pub fn port_space(&self) -> usize {
        (0..self.external.len())
            .map(|i| self.ports_of(i).len())
            .sum()
    }
}

/// `--ext-ip A[,B...]`: the addresses, with the `--ports` range.
fn external_list(k: &str, v: &str) -> Result<Vec<ExternalAddr>, ConfigError> {
    v.split(',')
        .map(|a| {
            Ok(ExternalAddr {
                ip: config::ip(k, a.trim())?,
                ports: Vec::new(),
            })
        })
        .collect()
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

/// A remote endpoint a mapping has sent to (address-dependent filtering:
/// port 0), tagged with the mapping's generation so a remote of an expired
/// mapping never opens the next mapping of the same external port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Session {
    generation: u32,
    remote_ip: u32,
    remote_port: u16,
    protocol: u8,
}

impl TableKey for Session {
    fn hash64(&self, seed: u64) -> u64 {
        nfkit_packet::mix(
            (u64::from(self.generation) << 32 | u64::from(self.remote_ip))
                ^ (u64::from(self.remote_port) << 8 | u64::from(self.protocol)).rotate_left(40)
                ^ seed,
        )
    }
}

/// A fragmented datagram whose first fragment was translated:
/// (source, destination, IP ID, protocol) as it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct FragKey {
    src: u32,
    dst: u32,
    id: u16,
    protocol: u8,
    inbound: bool,
}

impl TableKey for FragKey {
    fn hash64(&self, seed: u64) -> u64 {
        nfkit_packet::mix(
            (u64::from(self.src) << 32 | u64::from(self.dst))
                ^ (u64::from(self.id) << 9
                    | u64::from(self.protocol) << 1
                    | u64::from(self.inbound))
                .rotate_left(40)
                ^ seed,
        )
    }
}

/// How long a first fragment's translation is kept for its later fragments.
const FRAGMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A live NAT mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub protocol: u8,
    pub internal_ip: Ipv4Addr,
    pub internal_port: u16,
    pub external_ip: Ipv4Addr,
    pub external_port: u16,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            protocol: 0,
            internal_ip: Ipv4Addr::UNSPECIFIED,
            internal_port: 0,
            external_ip: Ipv4Addr::UNSPECIFIED,
            external_port: 0,
        }
    }
}

/// A mapping and its state.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    m: Mapping,
    /// Index of `m.external_ip` among the external addresses.
    ext: u8,
    generation: u32,
    /// TCP: packets seen outbound / inbound since the last outbound SYN.
    seen_out: bool,
    seen_in: bool,
    /// TCP: FIN seen outbound / inbound, RST seen.
    fin_out: bool,
    fin_in: bool,
    reset: bool,
}

/// LRU lists (one per lifetime).
const LISTS: usize = 4;
const LIST_UDP: u8 = 0;
const LIST_TCP_TRANSITORY: u8 = 1;
const LIST_TCP_ESTABLISHED: u8 = 2;
const LIST_ICMP: u8 = 3;

/// Free external ports of one protocol: per external address, by
/// parity, reused oldest-freed first.
struct PortPool {
    free: Vec<[VecDeque<u16>; 2]>,
    /// Bit `i`: address `i` has a free port.
    left: u64,
}

impl PortPool {
    fn new(ports: &[Vec<u16>]) -> PortPool {
        let mut pool = PortPool {
            free: Vec::with_capacity(ports.len()),
            left: 0,
        };
        for (i, p) in ports.iter().enumerate() {
            pool.free.push([
                p.iter().copied().filter(|p| p % 2 == 0).collect(),
                p.iter().copied().filter(|p| p % 2 == 1).collect(),
            ]);
            if !p.is_empty() {
                pool.left |= 1 << i;
            }
        }
        pool
    }

    /// A port of address `addr` (if it has none left, of the lowest
    /// address that has one) of `parity`'s parity if any is left, else of
    /// the other; with the address it belongs to. O(1).
    fn take(&mut self, addr: usize, parity: u16) -> Option<(usize, u16)> {
        let a = if self.left & 1 << addr != 0 {
            addr
        } else if self.left != 0 {
            self.left.trailing_zeros() as usize
        } else {
            return None;
        };
        let free = &mut self.free[a];
        let p = usize::from(parity % 2);
        let port = free[p].pop_front().or_else(|| free[1 - p].pop_front())?;
        if free[0].is_empty() && free[1].is_empty() {
            self.left &= !(1 << a);
        }
        Some((a, port))
    }

    fn give(&mut self, addr: usize, port: u16) {
        self.free[addr][usize::from(port % 2)].push_back(port);
        self.left |= 1 << addr;
    }
}

/// The NAPT network function. Ports: `lan` and `wan` (2 ports).
pub struct Nat {
    cfg: NatConfig,
    mappings: Slots<Entry>,
    by_internal: KeyIndex<Endpoint>,
    by_external: KeyIndex<Endpoint>,
    /// Remotes each mapping sent to (address[-port]-dependent filtering).
    sessions: Box<FlowTable<Session, ()>>,
    /// First fragments translated, for their later fragments: the address
    /// to write (outbound: none, the external IP; inbound: the internal IP).
    fragments: Box<FlowTable<FragKey, u32>>,
    /// TCP, UDP, ICMP.
    pools: Box<[PortPool; 3]>,
    /// The external addresses, as in the configuration.
    ext_ips: Vec<u32>,
    seed: u64,
    timeouts: [u64; LISTS],
    generation: u32,
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

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

impl Nat {
    pub fn new(cfg: NatConfig) -> Result<Nat, ConfigError> {
        cfg.validate()?;
        let seed = crate::seed();
        let sessions = if cfg.filtering == Filtering::EndpointIndependent {
            1
        } else {
            cfg.capacity
        };
        let ports: Vec<Vec<u16>> = (0..cfg.external.len()).map(|i| cfg.ports_of(i)).collect();
        let port_bytes = 3 * 2 * ports.iter().map(Vec::len).sum::<usize>();
        config::check_memory(
            "NAT",
            Slots::<Entry>::bytes_for(cfg.capacity)
                .saturating_add(KeyIndex::<Endpoint>::bytes_for(cfg.capacity).saturating_mul(2))
                .saturating_add(FlowTable::<Session, ()>::bytes_for(sessions))
                .saturating_add(port_bytes),
        )?;
        Ok(Nat {
            mappings: Slots::with_lists(cfg.capacity, LISTS),
            by_internal: KeyIndex::new(cfg.capacity, seed),
            by_external: KeyIndex::new(cfg.capacity, seed ^ 0x5a5a),
            sessions: Box::new(FlowTable::new(
                sessions,
                cfg.timeouts.longest().as_nanos().min(u128::from(u64::MAX)) as u64,
                seed ^ 0xa5a5,
            )),
            fragments: Box::new(FlowTable::new(
                cfg.capacity.clamp(1, 4096),
                FRAGMENT_TIMEOUT.as_nanos() as u64,
                seed ^ 0x3c3c,
            )),
            pools: Box::new([
                PortPool::new(&ports),
                PortPool::new(&ports),
                PortPool::new(&ports),
            ]),
            ext_ips: cfg.external.iter().map(|a| u32::from(a.ip)).collect(),
            seed,
            timeouts: cfg.timeouts.by_list(),
            generation: 0,
            cfg,
            stats: NfStats::default(),
        })
    }

    pub fn config(&self) -> &NatConfig {
        &self.cfg
    }

    /// Live mappings: UDP, TCP transitory, TCP established, ICMP; least
    /// recently used first in each.
    pub fn mappings(&self) -> impl Iterator<Item = Mapping> + '_ {
        self.mappings.iter().map(|(_, e)| e.m)
    }

    fn expire(&mut self, now: u64) {
        for list in 0..LISTS as u8 {
            while let Some(id) =
                self.mappings
                    .oldest_expired_on(list, now, self.timeouts[usize::from(list)])
            {
                self.remove(id);
                self.stats.flows_expired += 1;
            }
        }
        self.sessions.expire(now, |_, _| {});
        self.fragments.expire(now, |_, _| {});
    }

    fn remove(&mut self, id: SlotId) {
        let Entry { m, ext, .. } = *self.mappings.get(id);
        self.by_internal.remove(&Endpoint {
            ip: u32::from(m.internal_ip),
            port: m.internal_port,
            protocol: m.protocol,
        });
        self.by_external.remove(&Endpoint {
            ip: u32::from(m.external_ip),
            port: m.external_port,
            protocol: m.protocol,
        });
        self.pools[pool_index(m.protocol)].give(usize::from(ext), m.external_port);
        self.mappings.free(id);
    }

    /// Refresh a mapping with a packet of `protocol` (TCP: its `flags`)
    /// going out (`outbound`) or in; TCP moves between lifetimes.
    fn refresh(&mut self, id: SlotId, tcp_flags: Option<u8>, outbound: bool, now: u64) {
        let list = match tcp_flags {
            None if self.mappings.get(id).m.protocol == proto::UDP => LIST_UDP,
            None => LIST_ICMP,
            Some(fl) => {
                let e = self.mappings.get_mut(id);
                if outbound && fl & TCP_SYN != 0 && fl & TCP_ACK == 0 {
                    // A new connection from the internal endpoint.
                    *e = Entry {
                        m: e.m,
                        ext: e.ext,
                        generation: e.generation,
                        ..Entry::default()
                    };
                }
                if fl & TCP_RST != 0 {
                    e.reset = true;
                }
                if fl & TCP_FIN != 0 {
                    if outbound {
                        e.fin_out = true;
                    } else {
                        e.fin_in = true;
                    }
                }
                if outbound {
                    e.seen_out = true;
                } else {
                    e.seen_in = true;
                }
                if e.seen_out && e.seen_in && !e.reset && !(e.fin_out && e.fin_in) {
                    LIST_TCP_ESTABLISHED
                } else {
                    LIST_TCP_TRANSITORY
                }
            }
        };
        self.mappings.move_to(id, list, now);
    }

    fn session_key(&self, generation: u32, protocol: u8, ip: u32, port: u16) -> Session {
        Session {
            generation,
            remote_ip: ip,
            remote_port: if self.cfg.filtering == Filtering::AddressAndPortDependent {
                port
            } else {
                0
            },
            protocol,
        }
    }

    /// Find or create the mapping of an internal endpoint.
    fn map_outbound(&mut self, e: Endpoint, now: u64) -> Result<SlotId, DropReason> {
        if let Some(id) = self.by_internal.get(&e) {
            return Ok(id);
        }
        if self.mappings.is_full() {
            return Err(DropReason::TableFull);
        }
        // Paired pooling (RFC 4787 REQ-2): an internal address maps to
        // one external address while that address has ports left.
        let paired = match self.ext_ips.len() {
            1 => 0,
            n => (nfkit_packet::mix(u64::from(e.ip) ^ self.seed) % n as u64) as usize,
        };
        let (ext, ext_port) = self.pools[pool_index(e.protocol)]
            .take(paired, e.port)
            .ok_or(DropReason::PortsExhausted)?;
        let ext_ip = self.ext_ips[ext];
        self.generation = self.generation.wrapping_add(1);
        let entry = Entry {
            m: Mapping {
                protocol: e.protocol,
                internal_ip: Ipv4Addr::from(e.ip),
                internal_port: e.port,
                external_ip: Ipv4Addr::from(ext_ip),
                external_port: ext_port,
            },
            ext: ext as u8,
            generation: self.generation,
            ..Entry::default()
        };
        let list = match e.protocol {
            proto::UDP => LIST_UDP,
            proto::TCP => LIST_TCP_TRANSITORY,
            _ => LIST_ICMP,
        };
        let Some(id) = self.mappings.alloc_on(list, entry, now) else {
            self.pools[pool_index(e.protocol)].give(ext, ext_port);
            return Err(DropReason::TableFull);
        };
        self.by_internal.insert(e, id);
        self.by_external.insert(
            Endpoint {
                ip: ext_ip,
                port: ext_port,
                protocol: e.protocol,
            },
            id,
        );
        self.stats.flows_created += 1;
        Ok(id)
    }

    /// Is `ip` one of the external addresses?
    fn is_external(&self, ip: u32) -> bool {
        self.ext_ips.contains(&ip)
    }

    /// Remember that mapping `id` sent to the remote (ip, port).
    fn open_session(&mut self, id: SlotId, ip: u32, port: u16, now: u64) {
        if self.cfg.filtering == Filtering::EndpointIndependent {
            return;
        }
        let e = self.mappings.get(id);
        let k = self.session_key(e.generation, e.m.protocol, ip, port);
        match self.sessions.get(&k) {
            Some(s) => self.sessions.touch(s, now),
            None => {
                if self.sessions.insert(k, (), now).is_err() {
                    self.stats.learn_failed += 1;
                }
            }
        }
    }

    /// May the remote (ip, port) use mapping `id`? Refreshes its session.
    fn allowed(&mut self, id: SlotId, ip: u32, port: u16, now: u64) -> bool {
        if self.cfg.filtering == Filtering::EndpointIndependent {
            return true;
        }
        let e = self.mappings.get(id);
        let k = self.session_key(e.generation, e.m.protocol, ip, port);
        match self.sessions.get(&k) {
            Some(s) => {
                self.sessions.touch(s, now);
                true
            }
            None => false,
        }
    }

    /// Translate a LAN packet; true if it is to the external IP (hairpin).
    fn outbound(&mut self, f: &mut [u8], now: u64) -> Result<bool, DropReason> {
        let l = parse(f)?;
        let hairpin = self.is_external(read32(f, l.l3 + 16));
        if l.fragment == Fragment::Later {
            let k = frag_key(f, &l, false);
            let id = self.fragments.get(&k).ok_or(DropReason::Fragment)?;
            let ext = Ipv4Addr::from(*self.fragments.value(id));
            set_outer_ip(f, &l, End::Src, ext);
        } else {
            match classify(f, &l, true)? {
                Lookup::Direct(e) => {
                    let id = self.map_outbound(e, now)?;
                    let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
                    self.open_session(id, u32::from(key.dst_ip), key.dst_port, now);
                    self.refresh(id, tcp_flags(f, &l), true, now);
                    let m = self.mappings.get(id).m;
                    if l.fragment == Fragment::First {
                        let k = frag_key(f, &l, false);
                        if self
                            .fragments
                            .insert(k, u32::from(m.external_ip), now)
                            .is_err()
                        {
                            self.stats.learn_failed += 1;
                        }
                    }
                    rewrite_end(f, &l, End::Src, m.external_ip, m.external_port);
                }
                Lookup::Quoted(e) => {
                    // The quoted datagram went LAN-ward: its destination is
                    // internal. Errors neither refresh nor end a mapping.
                    let id = self.by_internal.get(&e).ok_or(DropReason::NoMapping)?;
                    let m = self.mappings.get(id).m;
                    let q = parse_quoted(f, &l).ok_or(DropReason::Malformed)?;
                    rewrite_quoted(f, &l, &q, End::Dst, m.external_ip, m.external_port);
                    set_outer_ip(f, &l, End::Src, m.external_ip);
                }
            }
        }
        set_macs(f, self.cfg.wan_eth_src, self.cfg.wan_eth_dest);
        Ok(hairpin)
    }

    fn inbound(&mut self, f: &mut [u8], now: u64) -> Result<(), DropReason> {
        let l = parse(f)?;
        if !self.is_external(read32(f, l.l3 + 16)) {
            return Err(DropReason::NotForUs);
        }
        if l.fragment == Fragment::Later {
            let k = frag_key(f, &l, true);
            let id = self.fragments.get(&k).ok_or(DropReason::Fragment)?;
            let internal = Ipv4Addr::from(*self.fragments.value(id));
            set_outer_ip(f, &l, End::Dst, internal);
        } else {
            match classify(f, &l, false)? {
                Lookup::Direct(e) => {
                    let id = self.by_external.get(&e).ok_or(DropReason::NoMapping)?;
                    let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
                    if !self.allowed(id, u32::from(key.src_ip), key.src_port, now) {
                        return Err(DropReason::Blocked);
                    }
                    self.refresh(id, tcp_flags(f, &l), false, now);
                    let m = self.mappings.get(id).m;
                    if l.fragment == Fragment::First {
                        let k = frag_key(f, &l, true);
                        if self
                            .fragments
                            .insert(k, u32::from(m.internal_ip), now)
                            .is_err()
                        {
                            self.stats.learn_failed += 1;
                        }
                    }
                    rewrite_end(f, &l, End::Dst, m.internal_ip, m.internal_port);
                }
                Lookup::Quoted(e) => {
                    let id = self.by_external.get(&e).ok_or(DropReason::NoMapping)?;
                    let m = self.mappings.get(id).m;
                    let q = parse_quoted(f, &l).ok_or(DropReason::Malformed)?;
                    rewrite_quoted(f, &l, &q, End::Src, m.internal_ip, m.internal_port);
                    set_outer_ip(f, &l, End::Dst, m.internal_ip);
                }
            }
        }
        set_macs(f, self.cfg.lan_eth_src, self.cfg.lan_eth_dest);
        Ok(())
    }
}

/// The TCP flags of a TCP packet with its header, else None.
fn tcp_flags(f: &[u8], l: &nfkit_packet::Ipv4Layout) -> Option<u8> {
    (l.protocol == proto::TCP && l.l4 + 14 <= l.end).then(|| f[l.l4 + 13])
}

fn read32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

fn frag_key(f: &[u8], l: &nfkit_packet::Ipv4Layout, inbound: bool) -> FragKey {
    FragKey {
        src: read32(f, l.l3 + 12),
        dst: read32(f, l.l3 + 16),
        id: read16(f, l.l3 + 4),
        protocol: l.protocol,
        inbound,
    }
}

fn parse(f: &[u8]) -> Result<nfkit_packet::Ipv4Layout, DropReason> {
    parse_ipv4(f).map_err(|e| match e {
        PacketError::NotIpv4(_) => DropReason::NotIpv4,
        _ => DropReason::Malformed,
    })
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
                icmp_type::DEST_UNREACHABLE
                | icmp_type::TIME_EXCEEDED
                | icmp_type::PARAMETER_PROBLEM => {
                    // RFC 5508 REQ-3: drop errors whose ICMP checksum (when
                    // the whole message is here) or quoted IPv4 header
                    // checksum is wrong.
                    if l.fragment == Fragment::Whole && checksum(&f[l.l4..l.end]) != 0 {
                        return Err(DropReason::BadChecksum);
                    }
                    let q = parse_quoted(f, l).ok_or(DropReason::Malformed)?;
                    if checksum(&f[q.ip..q.l4]) != 0 {
                        return Err(DropReason::BadChecksum);
                    }
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
        self.mappings()
            .map(|m| {
                format!(
                    "mapping proto {} {}:{} -> {}:{}",
                    m.protocol, m.internal_ip, m.internal_port, m.external_ip, m.external_port
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
            match self.outbound(f, now) {
                // Hairpinning: to the external IP, so back in to the LAN.
                Ok(true) => (self.inbound(f, now), self.cfg.lan),
                r => (r.map(|_| ()), self.cfg.wan),
            }
        } else {
            (self.inbound(f, now), self.cfg.lan)
        };
        match res {
            Ok(()) => Verdict::Forward { port: out, len },
            Err(r) => Verdict::Drop(r),
        }
    }
}
