//! Rewriting addresses and ports in place with incremental checksum
//! updates (RFC 1624), shared by NAT, the load balancer and the router;
//! and reading/rewriting the datagram quoted inside ICMP errors.

use std::net::Ipv4Addr;

use nfkit_packet::checksum::{udp_update16, update16};
use nfkit_packet::{proto, FlowKey, Fragment, Ipv4Layout, MacAddr};

pub(crate) fn read16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

pub(crate) fn write16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Which end of a flow to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Src,
    Dst,
}

/// Where the checksums that cover an L4 port or identifier are.
#[derive(Clone, Copy)]
struct L4Fields {
    /// Offset of the port (or ICMP echo identifier) field.
    port: usize,
    /// Offset of the L4 checksum, and whether the UDP zero rule applies.
    csum: Option<(usize, bool)>,
    /// The L4 checksum covers the IPv4 addresses (TCP/UDP pseudo-header).
    pseudo: bool,
}

fn l4_fields(protocol: u8, l4: usize, end: End, avail: usize) -> Option<L4Fields> {
    let port_off = if end == End::Src { 0 } else { 2 };
    let (port, csum, udp, pseudo) = match protocol {
        proto::TCP => (l4 + port_off, l4 + 16, false, true),
        proto::UDP => (l4 + port_off, l4 + 6, true, true),
        proto::ICMP => (l4 + 4, l4 + 2, false, false),
        _ => return None,
    };
    if port + 2 > avail {
        return None;
    }
    Some(L4Fields {
        port,
        csum: (csum + 2 <= avail).then_some((csum, udp)),
        pseudo,
    })
}

/// Tracks one checksum field while words it covers change.
struct Csum {
    at: usize,
    value: u16,
    udp: bool,
}

impl Csum {
    fn new(f: &[u8], at: usize, udp: bool) -> Csum {
        Csum {
            at,
            value: read16(f, at),
            udp,
        }
    }

    fn update(&mut self, old: u16, new: u16) {
        self.value = if self.udp {
            udp_update16(self.value, old, new)
        } else {
            update16(self.value, old, new)
        };
    }
}

/// Write a 16-bit word and update every checksum in `sums` that covers it.
fn patch(f: &mut [u8], at: usize, new: u16, sums: &mut [&mut Csum]) {
    let old = read16(f, at);
    write16(f, at, new);
    for s in sums.iter_mut() {
        s.update(old, new);
    }
}

/// Store a tracked checksum, itself covered by the checksums in `outer`.
fn store(f: &mut [u8], c: &Csum, outer: &mut [&mut Csum]) {
    patch(f, c.at, c.value, outer);
}

/// Rewrite the address and port (ICMP echo: identifier) of one end of an
/// IPv4 TCP/UDP/ICMP-echo packet whose L4 header was validated, updating
/// the IPv4 and L4 checksums incrementally. A UDP checksum of 0 stays 0.
pub(crate) fn rewrite_end(f: &mut [u8], l: &Ipv4Layout, end: End, ip: Ipv4Addr, port: u16) {
    let ip_at = l.l3 + if end == End::Src { 12 } else { 16 };
    let mut ip_csum = Csum::new(f, l.l3 + 10, false);
    let fields = if l.fragment == Fragment::Later {
        None
    } else {
        l4_fields(l.protocol, l.l4, end, l.end)
    };
    let mut l4_csum = fields.and_then(|x| x.csum.map(|(at, udp)| Csum::new(f, at, udp)));
    let o = ip.octets();
    for (i, w) in [
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    ]
    .into_iter()
    .enumerate()
    {
        match (&mut l4_csum, fields) {
            (Some(c), Some(x)) if x.pseudo => patch(f, ip_at + 2 * i, w, &mut [&mut ip_csum, c]),
            _ => patch(f, ip_at + 2 * i, w, &mut [&mut ip_csum]),
        }
    }
    store(f, &ip_csum, &mut []);
    if let Some(x) = fields {
        match &mut l4_csum {
            Some(c) => {
                patch(f, x.port, port, &mut [c]);
                store(f, c, &mut []);
            }
            None => patch(f, x.port, port, &mut []),
        }
    }
}

/// Set the Ethernet addresses, each only if configured.
pub(crate) fn set_macs(f: &mut [u8], src: Option<MacAddr>, dst: Option<MacAddr>) {
    if let Some(d) = dst {
        f[0..6].copy_from_slice(&d.0);
    }
    if let Some(s) = src {
        f[6..12].copy_from_slice(&s.0);
    }
}

/// The datagram quoted in an ICMP error (RFC 792: its IPv4 header and at
/// least 8 bytes of its payload).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quoted {
    /// Offset of the quoted IPv4 header.
    pub ip: usize,
    /// Offset of the quoted L4 header.
    pub l4: usize,
    /// End of the quoted bytes (end of the ICMP message).
    pub end: usize,
    /// The quoted packet's flow (as it travelled, not reversed).
    pub key: FlowKey,
}

/// Find the quoted TCP/UDP/ICMP-echo datagram of an ICMP error packet
/// (`l.protocol` must be ICMP). None if it is truncated, not IPv4, a later
/// fragment, or of another protocol.
pub(crate) fn parse_quoted(f: &[u8], l: &Ipv4Layout) -> Option<Quoted> {
    let ip = l.l4 + 8;
    let end = l.end;
    if ip + 20 > end || f[ip] >> 4 != 4 {
        return None;
    }
    let hl = usize::from(f[ip] & 0x0f) * 4;
    let l4 = ip + hl;
    if hl < 20 || l4 > end || read16(f, ip + 6) & 0x1fff != 0 {
        return None;
    }
    let protocol = f[ip + 9];
    let (sp, dp) = match protocol {
        proto::TCP | proto::UDP if l4 + 4 <= end => (read16(f, l4), read16(f, l4 + 2)),
        proto::ICMP if l4 + 8 <= end && matches!(f[l4], 0 | 8) => {
            let id = read16(f, l4 + 4);
            (id, id)
        }
        _ => return None,
    };
    let a = |at: usize| Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3]);
    Some(Quoted {
        ip,
        l4,
        end,
        key: FlowKey::new(a(ip + 12), sp, a(ip + 16), dp, protocol),
    })
}

/// Rewrite one end of the quoted datagram, updating the quoted IPv4
/// checksum, the quoted L4 checksum when it was quoted, and the outer ICMP
/// checksum (which covers all of them), incrementally.
pub(crate) fn rewrite_quoted(
    f: &mut [u8],
    l: &Ipv4Layout,
    q: &Quoted,
    end: End,
    ip: Ipv4Addr,
    port: u16,
) {
    let mut icmp = Csum::new(f, l.l4 + 2, false);
    let mut ip_csum = Csum::new(f, q.ip + 10, false);
    let fields = l4_fields(q.key.protocol, q.l4, end, q.end);
    let mut l4_csum = fields
        .and_then(|x| x.csum.map(|(at, udp)| Csum::new(f, at, udp)))
        .unwrap_or(Csum {
            at: 0,
            value: 0,
            udp: true, // never stored: a zero UDP-rule checksum does not change
        });
    let has_l4_csum = fields.is_some_and(|x| x.csum.is_some());
    let pseudo = fields.is_some_and(|x| x.pseudo) && has_l4_csum;
    let ip_at = q.ip + if end == End::Src { 12 } else { 16 };
    let o = ip.octets();
    for (i, w) in [
        u16::from_be_bytes([o[0], o[1]]),
        u16::from_be_bytes([o[2], o[3]]),
    ]
    .into_iter()
    .enumerate()
    {
        if pseudo {
            patch(
                f,
                ip_at + 2 * i,
                w,
                &mut [&mut icmp, &mut ip_csum, &mut l4_csum],
            );
        } else {
            patch(f, ip_at + 2 * i, w, &mut [&mut icmp, &mut ip_csum]);
        }
    }
    store(f, &ip_csum, &mut [&mut icmp]);
    if let Some(x) = fields {
        if has_l4_csum {
            patch(f, x.port, port, &mut [&mut icmp, &mut l4_csum]);
            store(f, &l4_csum, &mut [&mut icmp]);
        } else {
            patch(f, x.port, port, &mut [&mut icmp]);
        }
    }
    store(f, &icmp, &mut []);
}
