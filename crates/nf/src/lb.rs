//! A Maglev load balancer for one virtual IP.
//!
//! - Clients (WAN port) send TCP/UDP to `vip`. A new flow's backend is
//!   `maglev[hash(5-tuple)]` ([`crate::maglev`]); the flow keeps it in an
//!   affinity table (expiry `flow-expire`) even when the backend set
//!   changes. The packet's destination IP becomes the backend's, its
//!   destination MAC the backend's MAC; it goes out of the LAN port.
//! - Replies (LAN port) from a backend for a live flow get their source IP
//!   set back to `vip` and their destination MAC set to the client-side
//!   MAC the flow came from (or `--wan-eth-dest`).
//! - **Heartbeats.** A backend registers, and stays registered, by
//!   sending a UDP datagram from the LAN side to `vip:heartbeat-port`
//!   (default 9999; any payload). Its source IP and MAC identify it. The
//!   datagram is consumed (counted as `consumed`). [`LoadBalancer::heartbeat`]
//!   does the same from the control plane. A backend is removed when no
//!   heartbeat came for `backend-expire` (default 10 s): the Maglev table is
//!   rebuilt (allocation-free) and only the flows on that backend move;
//!   others keep their affinity. Static backends (`--backend IP@MAC`)
//!   never expire.
//! - Hashes use fixed seeds so that several LB instances pick the same
//!   backend for a flow (the point of Maglev).
//!
//! Other traffic: non-IPv4 `not_ipv4` (the LB answers no ARP: give
//! clients a static neighbour entry for the VIP), ICMP and other protocols
//! `unsupported_protocol`, later fragments `fragment`, WAN packets not to
//! the VIP `not_for_us`, LAN packets of no live flow `no_mapping`.

use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use nfkit_packet::{has_ports, parse_ipv4, proto, FlowKey, Fragment, MacAddr, PacketError};

use crate::config::{self, for_each_option, lan_wan, ConfigError};
use crate::maglev::{MaglevTable, Permutation};
use crate::rewrite::{rewrite_end, set_macs, End};
use crate::table::{FlowTable, IpKey, KeyIndex};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, Verdict};

/// Fixed hash seeds (identical on every LB instance).
const FLOW_SEED: u64 = 0x6d61_676c_6576_0001;
const OFFSET_SEED: u64 = 0x6d61_676c_6576_0002;
const SKIP_SEED: u64 = 0x6d61_676c_6576_0003;

/// A backend given on the command line: `IP@MAC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendSpec {
    pub ip: Ipv4Addr,
    pub mac: MacAddr,
}

impl FromStr for BackendSpec {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::bad("backend", s, "IP@MAC like 10.0.0.2@02:00:00:00:00:02");
        let (i, m) = s.split_once('@').ok_or_else(bad)?;
        Ok(BackendSpec {
            ip: i.parse().map_err(|_| bad())?,
            mac: m.parse().map_err(|_| bad())?,
        })
    }
}

/// Load balancer configuration. CLI options: `--vip A` (required),
/// `--lan N` (0, backends), `--wan N` (1, clients), `--flow-capacity N`
/// (65536), `--flow-expire D` (60s), `--backend-capacity N` (32),
/// `--backend-expire D` (10s), `--table-size P` (65537, prime),
/// `--heartbeat-port P` (9999; 0 = API heartbeats only),
/// `--backend IP@MAC` (static, repeatable), `--lan-eth-src MAC`,
/// `--wan-eth-src MAC`, `--wan-eth-dest MAC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbConfig {
    pub lan: PortId,
    pub wan: PortId,
    pub vip: Ipv4Addr,
    pub flow_capacity: usize,
    pub flow_expire: Duration,
    pub backend_capacity: usize,
    pub backend_expire: Duration,
    pub table_size: usize,
    pub heartbeat_port: u16,
    pub backends: Vec<BackendSpec>,
    pub lan_eth_src: Option<MacAddr>,
    pub wan_eth_src: Option<MacAddr>,
    pub wan_eth_dest: Option<MacAddr>,
}

const LB_OPTIONS: &str = "--vip, --lan, --wan, --flow-capacity, --flow-expire, \
--backend-capacity, --backend-expire, --table-size, --heartbeat-port, --backend, \
--lan-eth-src, --wan-eth-src, --wan-eth-dest";

impl LbConfig {
    pub fn new(vip: Ipv4Addr) -> LbConfig {
        LbConfig {
            lan: 0,
            wan: 1,
            vip,
            flow_capacity: 65536,
            flow_expire: Duration::from_secs(60),
            backend_capacity: 32,
            backend_expire: Duration::from_secs(10),
            table_size: 65537,
            heartbeat_port: 9999,
            backends: Vec::new(),
            lan_eth_src: None,
            wan_eth_src: None,
            wan_eth_dest: None,
        }
    }

    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<LbConfig, ConfigError> {
        let mut c = LbConfig::new(Ipv4Addr::UNSPECIFIED);
        let mut vip = None;
        for_each_option(args, |k, v| {
            match k {
                "vip" => vip = Some(config::ip(k, v)?),
                "lan" => c.lan = config::count(k, v)?,
                "wan" => c.wan = config::count(k, v)?,
                "flow-capacity" => c.flow_capacity = config::count(k, v)?,
                "flow-expire" => c.flow_expire = config::duration(k, v)?,
                "backend-capacity" => c.backend_capacity = config::count(k, v)?,
                "backend-expire" => c.backend_expire = config::duration(k, v)?,
                "table-size" => c.table_size = config::count(k, v)?,
                "heartbeat-port" => c.heartbeat_port = config::value(k, v, "a UDP port")?,
                "backend" => c.backends.push(v.parse()?),
                "lan-eth-src" => c.lan_eth_src = Some(config::mac(k, v)?),
                "wan-eth-src" => c.wan_eth_src = Some(config::mac(k, v)?),
                "wan-eth-dest" => c.wan_eth_dest = Some(config::mac(k, v)?),
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: LB_OPTIONS,
                    })
                }
            }
            Ok(())
        })?;
        c.vip = vip.ok_or(ConfigError::Required("--vip"))?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        lan_wan(self.lan, self.wan, 2)?;
        config::check_capacity("LB flow", self.flow_capacity)?;
        config::check_capacity("LB backend", self.backend_capacity)?;
        if self.flow_expire.is_zero() || self.backend_expire.is_zero() {
            return Err(ConfigError::Zero {
                what: "an expiry time",
            });
        }
        if self.backends.is_empty() && self.heartbeat_port == 0 {
            return Err(ConfigError::EmptyBackends);
        }
        if self.backends.len() > self.backend_capacity {
            return Err(ConfigError::TooManyBackends {
                given: self.backends.len(),
                capacity: self.backend_capacity,
            });
        }
        MaglevTable::new(self.table_size, self.backend_capacity)?;
        Ok(())
    }
}

impl FromStr for LbConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LbConfig::from_args(s.split_whitespace())
    }
}

/// A registered backend, as [`LoadBalancer::backends`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    pub ip: Ipv4Addr,
    pub mac: MacAddr,
    pub is_static: bool,
    pub last_heartbeat: Duration,
}

/// The backend set is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the load balancer already has its maximum of {0} backends")]
pub struct BackendsFull(pub usize);

#[derive(Clone, Copy)]
struct Slot {
    backend: Option<Backend>,
    /// Bumped when the slot's backend leaves, so stale affinities are seen.
    generation: u32,
}

/// A flow's backend choice.
#[derive(Debug, Clone, Copy)]
struct Affinity {
    slot: u16,
    generation: u32,
    client_mac: MacAddr,
}

impl Default for Affinity {
    fn default() -> Self {
        Affinity {
            slot: 0,
            generation: 0,
            client_mac: MacAddr::ZERO,
        }
    }
}

/// The load balancer NF (2 ports).
pub struct LoadBalancer {
    cfg: LbConfig,
    slots: Vec<Slot>,
    by_ip: KeyIndex<IpKey>,
    maglev: MaglevTable,
    /// Scratch for rebuilding the table (capacity = backend capacity).
    perms: Vec<(u16, Permutation)>,
    flows: FlowTable<FlowKey, Affinity>,
    /// No dynamic backend can expire before this time (ns).
    next_expiry: u64,
    stats: NfStats,
}

impl LoadBalancer {
    pub fn new(cfg: LbConfig) -> Result<LoadBalancer, ConfigError> {
        cfg.validate()?;
        config::check_memory(
            "LB",
            FlowTable::<FlowKey, Affinity>::bytes_for(cfg.flow_capacity)
                .saturating_add(KeyIndex::<IpKey>::bytes_for(cfg.backend_capacity)),
        )?;
        let mut lb = LoadBalancer {
            slots: vec![
                Slot {
                    backend: None,
                    generation: 0
                };
                cfg.backend_capacity
            ],
            by_ip: KeyIndex::new(cfg.backend_capacity, crate::seed()),
            maglev: MaglevTable::new(cfg.table_size, cfg.backend_capacity)?,
            perms: Vec::with_capacity(cfg.backend_capacity),
            flows: FlowTable::new(
                cfg.flow_capacity,
                cfg.flow_expire.as_nanos() as u64,
                crate::seed(),
            ),
            next_expiry: u64::MAX,
            stats: NfStats::default(),
            cfg,
        };
        for b in lb.cfg.backends.clone() {
            lb.register(b.ip, b.mac, 0, true)
                .map_err(|e| ConfigError::TooManyBackends {
                    given: lb.cfg.backends.len(),
                    capacity: e.0,
                })?;
        }
        Ok(lb)
    }

    /// A heartbeat from the control plane: register `ip` (reached at
    /// `mac`) or refresh it.
    pub fn heartbeat(
        &mut self,
        ip: Ipv4Addr,
        mac: MacAddr,
        now: Duration,
    ) -> Result<(), BackendsFull> {
        self.register(ip, mac, now.as_nanos() as u64, false)
    }

    /// Remove a backend now (as if its heartbeats had stopped).
    pub fn remove_backend(&mut self, ip: Ipv4Addr) -> bool {
        match self.by_ip.get(&IpKey::from(ip)) {
            Some(s) => {
                self.unregister(s as usize);
                true
            }
            None => false,
        }
    }

    /// Registered backends.
    pub fn backends(&self) -> Vec<Backend> {
        self.slots.iter().filter_map(|s| s.backend).collect()
    }

    /// The backend Maglev gives a new flow (client → VIP key).
    pub fn backend_for(&self, key: &FlowKey) -> Option<Ipv4Addr> {
        let slot = self.maglev.lookup(key.hash(FLOW_SEED))?;
        self.slots[usize::from(slot)].backend.map(|b| b.ip)
    }

    fn register(
        &mut self,
        ip: Ipv4Addr,
        mac: MacAddr,
        now: u64,
        is_static: bool,
    ) -> Result<(), BackendsFull> {
        let t = Duration::from_nanos(now);
        if let Some(s) = self.by_ip.get(&IpKey::from(ip)) {
            if let Some(b) = &mut self.slots[s as usize].backend {
                b.mac = mac;
                b.last_heartbeat = t;
            }
            return Ok(());
        }
        let free = self
            .slots
            .iter()
            .position(|s| s.backend.is_none())
            .ok_or(BackendsFull(self.cfg.backend_capacity))?;
        self.slots[free].backend = Some(Backend {
            ip,
            mac,
            is_static,
            last_heartbeat: t,
        });
        self.by_ip.insert(IpKey::from(ip), free as u32);
        if !is_static {
            self.next_expiry = self
                .next_expiry
                .min(now.saturating_add(self.cfg.backend_expire.as_nanos() as u64));
        }
        self.rebuild();
        Ok(())
    }

    fn unregister(&mut self, slot: usize) {
        if let Some(b) = self.slots[slot].backend.take() {
            self.by_ip.remove(&IpKey::from(b.ip));
            self.slots[slot].generation = self.slots[slot].generation.wrapping_add(1);
            self.rebuild();
        }
    }

    /// Refill the Maglev table from the live backends, in slot order.
    fn rebuild(&mut self) {
        self.perms.clear();
        let m = self.maglev.size();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(b) = s.backend {
                let name = u64::from(u32::from(b.ip));
                let p = Permutation::new(
                    nfkit_packet::mix(name ^ OFFSET_SEED),
                    nfkit_packet::mix(name ^ SKIP_SEED),
                    m,
                );
                self.perms.push((i as u16, p));
            }
        }
        self.maglev.populate(&self.perms);
    }

    fn expire_backends(&mut self, now: u64) {
        if now < self.next_expiry {
            return;
        }
        let timeout = self.cfg.backend_expire.as_nanos() as u64;
        let mut next = u64::MAX;
        for i in 0..self.slots.len() {
            let Some(b) = self.slots[i].backend else {
                continue;
            };
            if b.is_static {
                continue;
            }
            let deadline = (b.last_heartbeat.as_nanos() as u64).saturating_add(timeout);
            if deadline <= now {
                self.unregister(i);
            } else {
                next = next.min(deadline);
            }
        }
        self.next_expiry = next;
    }

    fn live(&self, a: &Affinity) -> Option<Backend> {
        let s = &self.slots[usize::from(a.slot)];
        if s.generation == a.generation {
            s.backend
        } else {
            None
        }
    }

    fn client_packet(&mut self, f: &mut [u8], now: u64) -> Result<(), DropReason> {
        let l = parse(f)?;
        let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
        if key.dst_ip != self.cfg.vip {
            return Err(DropReason::NotForUs);
        }
        if !has_ports(l.protocol) {
            return Err(DropReason::UnsupportedProtocol);
        }
        let client_mac = MacAddr(f[6..12].try_into().unwrap_or_default());
        let existing = self.flows.get(&key);
        let backend = match existing.map(|id| (id, *self.flows.value(id))) {
            Some((id, a)) if self.live(&a).is_some() => {
                self.flows.touch(id, now);
                self.live(&a)
            }
            found => {
                let slot = self
                    .maglev
                    .lookup(key.hash(FLOW_SEED))
                    .ok_or(DropReason::NoBackend)?;
                let a = Affinity {
                    slot,
                    generation: self.slots[usize::from(slot)].generation,
                    client_mac,
                };
                match found {
                    Some((id, _)) => {
                        *self.flows.value_mut(id) = a;
                        self.flows.touch(id, now);
                    }
                    None => {
                        self.flows
                            .insert(key, a, now)
                            .map_err(|_| DropReason::TableFull)?;
                        self.stats.flows_created += 1;
                    }
                }
                self.live(&a)
            }
        };
        let b = backend.ok_or(DropReason::NoBackend)?;
        rewrite_end(f, &l, End::Dst, b.ip, key.dst_port);
        set_macs(f, self.cfg.lan_eth_src, Some(b.mac));
        Ok(())
    }

    /// From the LAN: a heartbeat (Ok(false): consumed) or a reply (Ok(true)).
    fn backend_packet(&mut self, f: &mut [u8], now: u64) -> Result<bool, DropReason> {
        let l = parse(f)?;
        let key = FlowKey::from_frame(f, &l).map_err(|_| DropReason::Malformed)?;
        if key.protocol == proto::UDP
            && key.dst_ip == self.cfg.vip
            && self.cfg.heartbeat_port != 0
            && key.dst_port == self.cfg.heartbeat_port
        {
            let mac = MacAddr(f[6..12].try_into().unwrap_or_default());
            return match self.register(key.src_ip, mac, now, false) {
                Ok(()) => Ok(false),
                Err(_) => Err(DropReason::TableFull),
            };
        }
        if !has_ports(l.protocol) {
            return Err(DropReason::UnsupportedProtocol);
        }
        let client_key = FlowKey::new(
            key.dst_ip,
            key.dst_port,
            self.cfg.vip,
            key.src_port,
            key.protocol,
        );
        let id = self.flows.get(&client_key).ok_or(DropReason::NoMapping)?;
        let a = *self.flows.value(id);
        match self.live(&a) {
            Some(b) if b.ip == key.src_ip => {}
            _ => return Err(DropReason::NoMapping),
        }
        self.flows.touch(id, now);
        rewrite_end(f, &l, End::Src, self.cfg.vip, key.src_port);
        set_macs(
            f,
            self.cfg.wan_eth_src,
            Some(self.cfg.wan_eth_dest.unwrap_or(a.client_mac)),
        );
        Ok(true)
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

impl NetworkFunction for LoadBalancer {
    fn name(&self) -> &'static str {
        "lb"
    }

    fn table(&self) -> Vec<String> {
        self.backends()
            .iter()
            .map(|b| {
                let kind = if b.is_static { "static" } else { "heartbeat" };
                format!("backend {} mac {} {kind}", b.ip, b.mac)
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
        self.expire_backends(now);
        self.stats.flows_expired += self.flows.expire(now, |_, _| {});
        let f = &mut buf[..len];
        if in_port == self.cfg.wan {
            match self.client_packet(f, now) {
                Ok(()) => Verdict::Forward {
                    port: self.cfg.lan,
                    len,
                },
                Err(r) => Verdict::Drop(r),
            }
        } else {
            match self.backend_packet(f, now) {
                Ok(true) => Verdict::Forward {
                    port: self.cfg.wan,
                    len,
                },
                Ok(false) => Verdict::Drop(DropReason::Consumed),
                Err(r) => Verdict::Drop(r),
            }
        }
    }
}
