//! What every NF returns and counts: verdicts, drop reasons, statistics,
//! and the [`NetworkFunction`] trait the adapters call.

use std::time::Duration;

/// A port of the NF (0-based). At most [`PortSet::MAX_PORTS`] ports.
pub type PortId = usize;

/// A set of output ports (a bit mask), for flooding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct PortSet(u64);

impl PortSet {
    pub const MAX_PORTS: usize = 64;
    pub const EMPTY: PortSet = PortSet(0);

    /// Ports `0..n`.
    pub fn first(n: usize) -> PortSet {
        if n >= 64 {
            PortSet(u64::MAX)
        } else {
            PortSet((1u64 << n) - 1)
        }
    }

    pub fn with(self, p: PortId) -> PortSet {
        PortSet(self.0 | (1u64 << (p % 64)))
    }

    pub fn without(self, p: PortId) -> PortSet {
        PortSet(self.0 & !(1u64 << (p % 64)))
    }

    pub fn contains(self, p: PortId) -> bool {
        p < 64 && self.0 & (1u64 << p) != 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    /// The ports in ascending order.
    pub fn iter(self) -> impl Iterator<Item = PortId> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                None
            } else {
                let p = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(p)
            }
        })
    }
}

/// What to do with a packet after an NF processed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Do not send; the NF counted it under this reason.
    Drop(DropReason),
    /// Send the first `len` bytes of the buffer on `port`.
    Forward { port: PortId, len: usize },
    /// Send the first `len` bytes of the buffer on every port of `ports`
    /// (never the input port). The caller copies the packet per port.
    Flood { ports: PortSet, len: usize },
}

macro_rules! drop_reasons {
    ($( $(#[$doc:meta])* $name:ident = $s:literal ),* $(,)?) => {
        /// Why an NF dropped a packet. Each NF counts its drops by reason.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason { $( $(#[$doc])* $name ),* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name),*];
            /// Short snake_case name for counters and logs.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$name => $s),* }
            }
        }
    };
}

drop_reasons! {
    /// Truncated or inconsistent headers (Ethernet, VLAN, IPv4, L4).
    Malformed = "malformed",
    /// Not IPv4 (ARP, IPv6, ...) where the NF handles only IPv4.
    NotIpv4 = "not_ipv4",
    /// An IPv4 protocol or ICMP type the NF does not handle.
    UnsupportedProtocol = "unsupported_protocol",
    /// A later fragment (no L4 header) where the NF needs ports.
    Fragment = "fragment",
    /// IPv4 header checksum wrong (router only; other NFs pass checksum
    /// errors through unchanged, incremental updates keep them wrong).
    BadChecksum = "bad_checksum",
    /// A new flow/entry did not fit in the fixed-capacity table.
    TableFull = "table_full",
    /// NAT: no external port left in the configured range.
    PortsExhausted = "ports_exhausted",
    /// NAT/LB: inbound packet matches no mapping or flow.
    NoMapping = "no_mapping",
    /// Addressed to an IP the NF does not serve (NAT external IP, LB VIP).
    NotForUs = "not_for_us",
    /// Firewall: WAN packet that no LAN flow opened.
    Blocked = "blocked",
    /// Policer: over the destination's rate.
    OverRate = "over_rate",
    /// LB: no live backend.
    NoBackend = "no_backend",
    /// Bridge: destination is on the input port (802.1D filtering).
    SamePort = "same_port",
    /// The input port index is not one of the NF's ports.
    UnknownPort = "unknown_port",
    /// The packet length is larger than its buffer.
    BadLength = "bad_length",
    /// Router: TTL expired and no ICMP error may be sent about it.
    TtlExceeded = "ttl_exceeded",
    /// Router: no route and no ICMP error may be sent about it.
    NoRoute = "no_route",
    /// Router: next hop has no entry in the neighbour table.
    NoNeighbour = "no_neighbour",
    /// Router: an ICMP error was due but the ICMP rate limit was reached.
    IcmpRateLimited = "icmp_rate_limited",
    /// Router: addressed to the router itself (it has no local stack).
    LocalDelivery = "local_delivery",
    /// Router: a martian (RFC 1812 §5.3.7: invalid source or destination
    /// address), a broadcast (§5.3.5) or multicast (no multicast routing)
    /// destination, or a link-layer broadcast/multicast frame (§5.3.4).
    Martian = "martian",
    /// Bridge: to an IEEE 802.1D reserved address (01-80-C2-00-00-0x),
    /// which a bridge never relays.
    ReservedAddress = "reserved_address",
    /// A control message the NF consumed (LB heartbeat): not an error.
    Consumed = "consumed",
}

/// Counters of one NF. Invariant: `packets_in == forwarded + dropped_total()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NfStats {
    pub packets_in: u64,
    /// Packets sent (on one port or flooded).
    pub forwarded: u64,
    /// Of `forwarded`, those flooded to several ports.
    pub flooded: u64,
    dropped: [u64; DROP_REASONS],
    /// Flow/mapping/learning entries created and expired.
    pub flows_created: u64,
    pub flows_expired: u64,
    /// Of `forwarded`, ICMP errors generated in place of the packet.
    pub icmp_generated: u64,
    /// Bridge: source addresses not learned because the table was full.
    pub learn_failed: u64,
}

const DROP_REASONS: usize = DropReason::Consumed as usize + 1;

impl NfStats {
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.dropped[r as usize]
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// Non-zero drop counters.
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.dropped(r)))
            .filter(|&(_, n)| n > 0)
    }

    /// Count one packet with its verdict.
    pub fn record(&mut self, v: &Verdict) {
        self.packets_in += 1;
        match v {
            Verdict::Drop(r) => self.dropped[*r as usize] += 1,
            Verdict::Forward { .. } => self.forwarded += 1,
            Verdict::Flood { .. } => {
                self.forwarded += 1;
                self.flooded += 1;
            }
        }
    }
}

/// A network function: pure packet logic, independent of ports and drivers.
///
/// Adapters call [`NetworkFunction::process`] once per packet with the
/// packet's whole buffer (so an NF may grow the packet, e.g. into an ICMP
/// error), its current length, the input port and `now`, a monotonic time
/// read once per batch (for example `nfkit_hw::Clock::now()`). The data
/// path allocates nothing.
pub trait NetworkFunction {
    /// Short name ("nat", "bridge", ...).
    fn name(&self) -> &'static str;
    /// Number of ports; valid input and output ports are `0..port_count()`.
    fn port_count(&self) -> usize;
    fn stats(&self) -> &NfStats;
    fn stats_mut(&mut self) -> &mut NfStats;

    /// The NF's table, one line per entry, for people (bridge MACs, LB
    /// backends, NAT mappings; empty for NFs without one worth printing).
    fn table(&self) -> Vec<String> {
        Vec::new()
    }

    /// The NF's packet logic, without counting. `len <= buf.len()` and
    /// `in_port < port_count()` hold; `now_ns` is `now` in nanoseconds.
    /// Adapters call [`NetworkFunction::process`] instead.
    fn handle(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now_ns: u64) -> Verdict;

    /// Process one packet and count it: `packets_in` and `forwarded` or
    /// `dropped(reason)`.
    fn process(&mut self, buf: &mut [u8], len: usize, in_port: PortId, now: Duration) -> Verdict {
        let v = if len > buf.len() {
            Verdict::Drop(DropReason::BadLength)
        } else if in_port >= self.port_count() {
            Verdict::Drop(DropReason::UnknownPort)
        } else {
            self.handle(buf, len, in_port, now.as_nanos() as u64)
        };
        self.stats_mut().record(&v);
        v
    }
}
