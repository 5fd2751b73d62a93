//! An IPv4 router (RFC 1812): longest-prefix match (DIR-24-8), TTL
//! decrement, next-hop MAC rewrite, ICMP errors.
//!
//! Per packet, in order:
//! 1. non-IPv4 → `not_ipv4` (the router speaks no ARP: neighbours are
//!    static, `--neighbor IP,MAC`); bad headers → `malformed`; wrong
//!    header checksum → `bad_checksum` (§5.2.2 MUST verify);
//! 2. martians → `martian`, silently (§5.3.7; always on, the switch the
//!    RFC allows is not offered): a source in 0/8, 127/8, 224/4 or 240/4
//!    (limited broadcast included); a destination in 0/8, 127/8 or
//!    240/4; the limited broadcast or a connected subnet's broadcast
//!    address (§5.3.5: not forwarded; directed broadcasts off as RFC 2644
//!    asks); a multicast destination (no multicast routing); a frame
//!    received as a link-layer broadcast/multicast (§5.3.4);
//! 3. to one of the router's own addresses → `local_delivery` (no stack);
//! 4. TTL 0 or 1 → ICMP Time Exceeded, code 0 (§5.3.1, RFC 792);
//! 5. no route → ICMP Destination Unreachable, code 0 "net" (§5.2.7.1);
//! 6. next hop = the route's gateway, or the destination for a connected
//!    route; its MAC from the neighbour table, else `no_neighbour`;
//! 7. TTL − 1 with an incremental checksum update (RFC 1624), source MAC =
//!    the output interface's, destination MAC = the next hop's; forward.
//!
//! ICMP errors replace the packet in its buffer (it may grow): IPv4 from
//! the input interface's address to the original source, precedence 6
//! (§4.3.2.5), quoting as much of the original datagram as keeps the
//! error within 576 bytes (§4.3.2.3) and fits the buffer; sent back out
//! of the input port to the original source MAC. No error is sent
//! (§4.3.2.7) about an ICMP error, a later fragment, a link-layer or
//! IP broadcast/multicast, or a source that is not a unique host; those
//! packets are dropped as `ttl_exceeded` / `no_route`. With `--icmp-rate`
//! errors are limited to that many per second (burst of the same
//! number), excess dropped as `icmp_rate_limited` (§4.3.2.8 asks that
//! the rate can be limited; the default is unlimited, an RFC choice).
//!
//! Each rule has a test named by its section in `crates/nf/tests/router_rfc.rs`.
//! RFC 1812 forwarding rules not met, and why: no IP options are
//! processed (source routes, record route: §5.2.4, forwarded unchanged);
//! no fragmentation (§5.2.6: a packet larger than the output MTU is
//! dropped by the port, and no "fragmentation needed" error is sent, as
//! the router knows no MTU); no Redirects (§5.2.7.2, a SHOULD); no ARP
//! (static neighbours).

use std::net::Ipv4Addr;
use std::str::FromStr;

use nfkit_packet::checksum::checksum;
use nfkit_packet::{
    icmp_type, is_error_type, parse_ipv4, proto, Fragment, Ipv4, Ipv4Layout, MacAddr, PacketError,
};

use crate::config::{self, for_each_option, ConfigError, Ipv4Prefix};
use crate::lpm::Dir24_8;
use crate::rewrite::write16;
use crate::table::{IpKey, KeyIndex};
use crate::verdict::{DropReason, NetworkFunction, NfStats, PortId, PortSet, Verdict};

/// An interface: `PORT,IP/LEN,MAC`, e.g. `0,192.168.1.1/24,02:00:00:00:01:01`.
/// It gives the port its address (source of ICMP errors), its MAC
/// (source of forwarded frames) and a connected route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iface {
    pub port: PortId,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub mac: MacAddr,
}

/// A route: `PREFIX,PORT[,GATEWAY]`, e.g. `0.0.0.0/0,1,10.0.1.254`.
/// Without a gateway the destination is on the port's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub prefix: Ipv4Prefix,
    pub port: PortId,
    pub gateway: Option<Ipv4Addr>,
}

/// A static neighbour: `IP,MAC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor {
    pub ip: Ipv4Addr,
    pub mac: MacAddr,
}

fn fields<'a>(
    s: &'a str,
    what: &'static str,
    expected: &'static str,
    n: std::ops::RangeInclusive<usize>,
) -> Result<Vec<&'a str>, ConfigError> {
    let v: Vec<&str> = s.split(',').map(str::trim).collect();
    if !n.contains(&v.len()) {
        return Err(ConfigError::bad(what, s, expected));
    }
    Ok(v)
}

impl FromStr for Iface {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const E: &str = "PORT,IP/LEN,MAC like 0,192.168.1.1/24,02:00:00:00:01:01";
        let v = fields(s, "iface", E, 3..=3)?;
        let (ip, len) = v[1]
            .split_once('/')
            .ok_or_else(|| ConfigError::bad("iface", s, E))?;
        let prefix_len: u8 = config::value("iface", len, "a prefix length")?;
        if prefix_len > 32 {
            return Err(ConfigError::bad("iface", s, E));
        }
        Ok(Iface {
            port: config::count("iface", v[0])?,
            ip: config::ip("iface", ip)?,
            prefix_len,
            mac: config::mac("iface", v[2])?,
        })
    }
}

impl FromStr for Route {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v = fields(
            s,
            "route",
            "PREFIX,PORT[,GATEWAY] like 0.0.0.0/0,1,10.0.1.254",
            2..=3,
        )?;
        Ok(Route {
            prefix: v[0].parse()?,
            port: config::count("route", v[1])?,
            gateway: v.get(2).map(|g| config::ip("route", g)).transpose()?,
        })
    }
}

impl FromStr for Neighbor {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v = fields(
            s,
            "neighbor",
            "IP,MAC like 10.0.1.254,02:00:00:00:02:01",
            2..=2,
        )?;
        Ok(Neighbor {
            ip: config::ip("neighbor", v[0])?,
            mac: config::mac("neighbor", v[1])?,
        })
    }
}

/// Router configuration. CLI options (repeatable): `--iface PORT,IP/LEN,MAC`
/// (one per port, ports 0..N), `--route PREFIX,PORT[,GATEWAY]`,
/// `--neighbor IP,MAC`; and `--icmp-rate N` (ICMP errors per second,
/// default unlimited), `--tbl8-groups N` (4096).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    pub ifaces: Vec<Iface>,
    pub routes: Vec<Route>,
    pub neighbors: Vec<Neighbor>,
    pub icmp_rate: Option<u32>,
    pub tbl8_groups: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            ifaces: Vec::new(),
            routes: Vec::new(),
            neighbors: Vec::new(),
            icmp_rate: None,
            tbl8_groups: 4096,
        }
    }
}

impl RouterConfig {
    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(
        args: I,
    ) -> Result<RouterConfig, ConfigError> {
        let mut c = RouterConfig::default();
        for_each_option(args, |k, v| {
            match k {
                "iface" => c.ifaces.push(v.parse()?),
                "route" => c.routes.push(v.parse()?),
                "neighbor" | "neighbour" => c.neighbors.push(v.parse()?),
                "icmp-rate" => c.icmp_rate = Some(config::value(k, v, "errors per second")?),
                "tbl8-groups" => c.tbl8_groups = config::count(k, v)?,
                _ => {
                    return Err(ConfigError::UnknownOption {
                        option: format!("--{k}"),
                        known: "--iface, --route, --neighbor, --icmp-rate, --tbl8-groups",
                    })
                }
            }
            Ok(())
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::Router(m));
        let n = self.ifaces.len();
        if !(1..=PortSet::MAX_PORTS).contains(&n) {
            return err(format!(
                "needs 1 to 64 --iface options (one per port), got {n}"
            ));
        }
        for p in 0..n {
            match self.ifaces.iter().filter(|i| i.port == p).count() {
                1 => {}
                0 => {
                    return err(format!(
                        "ports must be 0..{n} with one --iface each; port {p} has none"
                    ))
                }
                _ => return err(format!("port {p} has more than one --iface")),
            }
        }
        for (k, i) in self.ifaces.iter().enumerate() {
            if i.mac.is_multicast() || i.mac.0 == [0; 6] {
                return err(format!(
                    "port {}: interface MAC {} is {}; an interface needs a unicast MAC",
                    i.port,
                    i.mac,
                    if i.mac.0 == [0; 6] {
                        "all zeros"
                    } else {
                        "a multicast or broadcast address"
                    }
                ));
            }
            if i.ip.is_unspecified() || i.ip.is_multicast() || i.ip.is_broadcast() {
                return err(format!(
                    "port {}: interface address {} cannot be a host's address",
                    i.port, i.ip
                ));
            }
            if let Some(other) = self.ifaces[..k].iter().find(|o| o.ip == i.ip) {
                return err(format!(
                    "ports {} and {} both have address {}: each interface needs its own",
                    other.port, i.port, i.ip
                ));
            }
        }
        for r in &self.routes {
            if r.port >= n {
                return err(format!(
                    "route {} uses port {}, but there are {n} interfaces",
                    r.prefix, r.port
                ));
            }
            if let Some(g) = r.gateway {
                if !self.neighbors.iter().any(|nb| nb.ip == g) {
                    return err(format!(
                        "route {} via {g}: no --neighbor {g},MAC gives the gateway's MAC",
                        r.prefix
                    ));
                }
            }
        }
        if self.icmp_rate == Some(0) {
            return Err(ConfigError::Zero {
                what: "--icmp-rate",
            });
        }
        Ok(())
    }
}

impl FromStr for RouterConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RouterConfig::from_args(s.split_whitespace())
    }
}

#[derive(Debug, Clone, Copy)]
struct NextHop {
    port: PortId,
    /// Gateway MAC, resolved at build time; None = connected route.
    gateway_mac: Option<MacAddr>,
}

/// ICMP error token bucket: tokens in (errors × 10⁹), refilled at `rate`/s.
struct IcmpLimit {
    rate: u64,
    tokens: u128,
    last: u64,
}

impl IcmpLimit {
    fn take(&mut self, now: u64) -> bool {
        let cap = u128::from(self.rate) * 1_000_000_000;
        let elapsed = u128::from(now.saturating_sub(self.last));
        self.last = now;
        self.tokens = (self.tokens + elapsed * u128::from(self.rate)).min(cap);
        if self.tokens >= 1_000_000_000 {
            self.tokens -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

/// The router NF (one port per interface).
pub struct Router {
    ifaces: Vec<Iface>,
    lpm: Dir24_8,
    next_hops: Vec<NextHop>,
    neighbors: KeyIndex<IpKey>,
    neighbor_macs: Vec<MacAddr>,
    icmp_limit: Option<IcmpLimit>,
    stats: NfStats,
}

/// The largest ICMP error datagram (RFC 1812 §4.3.2.3).
const ICMP_ERROR_MAX: usize = 576;

impl Router {
    pub fn new(cfg: RouterConfig) -> Result<Router, ConfigError> {
        cfg.validate()?;
        let mut ifaces = cfg.ifaces.clone();
        ifaces.sort_by_key(|i| i.port);
        let mut neighbors = KeyIndex::new(cfg.neighbors.len().max(1), crate::seed());
        let mut neighbor_macs = Vec::new();
        for nb in &cfg.neighbors {
            neighbors.insert(IpKey::from(nb.ip), neighbor_macs.len() as u32);
            neighbor_macs.push(nb.mac);
        }
        let mac_of = |ip: Ipv4Addr| {
            neighbors
                .get(&IpKey::from(ip))
                .map(|i| neighbor_macs[i as usize])
        };
        let mut next_hops = Vec::new();
        let mut routes = Vec::new();
        // Connected routes first, so an explicit route for the same prefix wins.
        for i in &ifaces {
            let net = Ipv4Addr::from(u32::from(i.ip) & Ipv4Prefix::mask(i.prefix_len));
            routes.push((Ipv4Prefix::new(net, i.prefix_len)?, next_hops.len() as u16));
            next_hops.push(NextHop {
                port: i.port,
                gateway_mac: None,
            });
        }
        for r in &cfg.routes {
            routes.push((r.prefix, next_hops.len() as u16));
            next_hops.push(NextHop {
                port: r.port,
                gateway_mac: r.gateway.and_then(mac_of),
            });
        }
        let lpm = Dir24_8::build(&routes, cfg.tbl8_groups)
            .map_err(|e| ConfigError::Router(e.to_string()))?;
        Ok(Router {
            ifaces,
            lpm,
            next_hops,
            neighbor_macs,
            neighbors,
            icmp_limit: cfg.icmp_rate.map(|r| IcmpLimit {
                rate: u64::from(r),
                tokens: u128::from(r) * 1_000_000_000,
                last: 0,
            }),
            stats: NfStats::default(),
        })
    }

    /// The route for `dst`: output port and gateway MAC (None: connected).
    pub fn route(&self, dst: Ipv4Addr) -> Option<(PortId, Option<MacAddr>)> {
        let nh = self.next_hops[usize::from(self.lpm.lookup(u32::from(dst))?)];
        Some((nh.port, nh.gateway_mac))
    }

    fn neighbor(&self, ip: Ipv4Addr) -> Option<MacAddr> {
        self.neighbors
            .get(&IpKey::from(ip))
            .map(|i| self.neighbor_macs[i as usize])
    }

    fn route_packet(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now: u64) -> Verdict {
        let f = &buf[..len];
        let l = match parse_ipv4(f) {
            Ok(l) => l,
            Err(PacketError::NotIpv4(_)) => return Verdict::Drop(DropReason::NotIpv4),
            Err(_) => return Verdict::Drop(DropReason::Malformed),
        };
        let Ok(ip) = Ipv4::new(&f[l.l3..l.end]) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        if !ip.checksum_ok() {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        let dst = ip.dst();
        if self.is_martian(f[0] & 1 == 1, ip.src(), dst) {
            return Verdict::Drop(DropReason::Martian);
        }
        if self.ifaces.iter().any(|i| i.ip == dst) {
            return Verdict::Drop(DropReason::LocalDelivery);
        }
        if ip.ttl() <= 1 {
            return self.icmp_error(
                buf,
                len,
                &l,
                in_port,
                now,
                icmp_type::TIME_EXCEEDED,
                DropReason::TtlExceeded,
            );
        }
        let Some((port, gateway_mac)) = self.route(dst) else {
            return self.icmp_error(
                buf,
                len,
                &l,
                in_port,
                now,
                icmp_type::DEST_UNREACHABLE,
                DropReason::NoRoute,
            );
        };
        let Some(next_mac) = gateway_mac.or_else(|| self.neighbor(dst)) else {
            return Verdict::Drop(DropReason::NoNeighbour);
        };
        let f = &mut buf[..len];
        let Ok(mut ipm) = Ipv4::new(&mut f[l.l3..l.end]) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        let ttl = ipm.ttl();
        ipm.set_ttl(ttl - 1);
        f[0..6].copy_from_slice(&next_mac.0);
        f[6..12].copy_from_slice(&self.ifaces[port].mac.0);
        Verdict::Forward { port, len }
    }

    /// RFC 1812 §5.3.7 (martian addresses), §5.3.5 (broadcasts), §5.3.4
    /// (link-layer broadcasts).
    fn is_martian(&self, link_group: bool, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let net = |a: Ipv4Addr| a.octets()[0];
        let bad_src = matches!(net(src), 0 | 127) || src.is_multicast() || net(src) >= 240;
        let bad_dst = matches!(net(dst), 0 | 127) || net(dst) >= 240 || dst.is_multicast();
        let directed_broadcast = self.ifaces.iter().any(|i| {
            i.prefix_len < 31
                && u32::from(dst) | Ipv4Prefix::mask(i.prefix_len) == u32::MAX
                && u32::from(dst) & Ipv4Prefix::mask(i.prefix_len)
                    == u32::from(i.ip) & Ipv4Prefix::mask(i.prefix_len)
        });
        bad_src || bad_dst || directed_broadcast || link_group
    }

    /// Replace the packet with an ICMP error of `kind` (code 0) about it,
    /// or drop it as `otherwise` when no error may be sent.
    #[allow(clippy::too_many_arguments)]
    fn icmp_error(
        &mut self,
        buf: &mut [u8],
        len: usize,
        l: &Ipv4Layout,
        in_port: PortId,
        now: u64,
        kind: u8,
        otherwise: DropReason,
    ) -> Verdict {
        if !may_send_error_about(&buf[..len], l) {
            return Verdict::Drop(otherwise);
        }
        if let Some(lim) = &mut self.icmp_limit {
            if !lim.take(now) {
                return Verdict::Drop(DropReason::IcmpRateLimited);
            }
        }
        let l3 = l.l3;
        let quote = (l.end - l3)
            .min(ICMP_ERROR_MAX - 28)
            .min(buf.len().saturating_sub(l3 + 28));
        let new_len = l3 + 28 + quote;
        let (orig_src, orig_mac) = {
            let f = &buf[..len];
            (
                [f[l3 + 12], f[l3 + 13], f[l3 + 14], f[l3 + 15]],
                MacAddr(f[6..12].try_into().unwrap_or_default()),
            )
        };
        buf.copy_within(l3..l3 + quote, l3 + 28);
        let iface = self.ifaces[in_port];
        let h = &mut buf[l3..l3 + 20];
        h.copy_from_slice(&[
            0x45,
            0xc0,
            0,
            0,
            0,
            0,
            0,
            0,
            64,
            proto::ICMP,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]);
        write16(h, 2, (28 + quote) as u16);
        h[12..16].copy_from_slice(&iface.ip.octets());
        h[16..20].copy_from_slice(&orig_src);
        let c = checksum(h);
        write16(h, 10, c);
        let icmp = &mut buf[l3 + 20..new_len];
        icmp[..8].copy_from_slice(&[kind, 0, 0, 0, 0, 0, 0, 0]);
        let c = checksum(icmp);
        write16(icmp, 2, c);
        buf[0..6].copy_from_slice(&orig_mac.0);
        buf[6..12].copy_from_slice(&iface.mac.0);
        self.stats.icmp_generated += 1;
        Verdict::Forward {
            port: in_port,
            len: new_len,
        }
    }
}

/// RFC 1812 §4.3.2.7: when an ICMP error must not be sent.
fn may_send_error_about(f: &[u8], l: &Ipv4Layout) -> bool {
    let dst_mac_group = f[0] & 1 == 1;
    let src = Ipv4Addr::new(f[l.l3 + 12], f[l.l3 + 13], f[l.l3 + 14], f[l.l3 + 15]);
    let dst = Ipv4Addr::new(f[l.l3 + 16], f[l.l3 + 17], f[l.l3 + 18], f[l.l3 + 19]);
    let about_icmp_error = l.protocol == proto::ICMP
        && l.fragment != Fragment::Later
        && l.l4 < l.end
        && is_error_type(f[l.l4]);
    let bad_src = src.is_unspecified()
        || src.is_loopback()
        || src.is_broadcast()
        || src.is_multicast()
        || u32::from(src) >> 28 == 0xf;
    !(dst_mac_group
        || dst.is_broadcast()
        || dst.is_multicast()
        || l.fragment == Fragment::Later
        || about_icmp_error
        || bad_src)
}

impl NetworkFunction for Router {
    fn name(&self) -> &'static str {
        "router"
    }

    fn port_count(&self) -> usize {
        self.ifaces.len()
    }

    fn stats(&self) -> &NfStats {
        &self.stats
    }

    fn stats_mut(&mut self) -> &mut NfStats {
        &mut self.stats
    }

    fn handle(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now: u64) -> Verdict {
        self.route_packet(buf, len, in_port, now)
    }
}
