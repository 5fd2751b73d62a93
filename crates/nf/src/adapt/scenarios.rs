//! Crafted-packet scenarios that any form of an NF must pass: the same
//! checks run on the NF called directly ([`Direct`]), as agent handlers
//! on 82599 queues and through the agent adapter, in the queue-model loop
//! and as a pipeline module. A form only has to implement [`Exchange`]:
//! put one frame into an NF port, return what came out of which ports.
//!
//! Frames are at least 60 bytes (what a NIC pads to), so a form that
//! goes through a NIC model returns them unpadded.

use std::net::Ipv4Addr;
use std::time::Duration;

use nfkit_packet::{parse_ipv4, verify_checksums, FlowKey, FrameBuilder, Ipv4, MacAddr};

use crate::verdict::{NetworkFunction, PortId, Verdict};

/// One form of an NF, seen from its ports.
pub trait Exchange {
    /// Send `frame` into NF port `port` with the NF's time at `now`;
    /// returns every frame that came out, with its port, in order.
    fn send(&mut self, port: PortId, frame: &[u8], now: Duration) -> Vec<(PortId, Vec<u8>)>;
}

/// The NF called directly: the reference form.
pub struct Direct<'a>(pub &'a mut dyn NetworkFunction);

impl Exchange for Direct<'_> {
    fn send(&mut self, port: PortId, frame: &[u8], now: Duration) -> Vec<(PortId, Vec<u8>)> {
        let mut buf = vec![0u8; 2048.max(frame.len())];
        buf[..frame.len()].copy_from_slice(frame);
        match self.0.process(&mut buf, frame.len(), port, now) {
            Verdict::Drop(_) => Vec::new(),
            Verdict::Forward { port, len } => vec![(port, buf[..len].to_vec())],
            Verdict::Flood { ports, len } => {
                ports.iter().map(|p| (p, buf[..len].to_vec())).collect()
            }
        }
    }
}

/// A named scenario for one NF configuration.
pub struct Scenario {
    pub name: &'static str,
    /// The NF and its options, for [`crate::build`].
    pub nf: &'static str,
    pub options: &'static [&'static str],
    pub run: fn(&mut dyn Exchange) -> Result<(), String>,
}

/// Every scenario: one or more per NF.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "nat translates out and back, drops unknown WAN sources",
        nf: "nat",
        options: &["--ext-ip", "203.0.113.1", "--ports", "1024-65535"],
        run: nat,
    },
    Scenario {
        name: "firewall drops unsolicited WAN traffic, passes LAN-initiated flows",
        nf: "firewall",
        options: &[],
        run: firewall,
    },
    Scenario {
        name: "bridge floods unknown, learns, filters same-port",
        nf: "bridge",
        options: &["--ports", "3"],
        run: bridge,
    },
    Scenario {
        name: "router forwards with TTL-1, answers TTL 1 with time exceeded",
        nf: "router",
        options: &[
            "--iface",
            "0,10.0.0.1/24,02:00:00:00:01:00",
            "--iface",
            "1,192.0.2.1/24,02:00:00:00:01:01",
            "--route",
            "0.0.0.0/0,1,192.0.2.254",
            "--neighbor",
            "192.0.2.254,02:00:00:00:0f:fe",
            "--neighbor",
            "10.0.0.5,02:00:00:00:00:05",
        ],
        run: router,
    },
    Scenario {
        name: "lb registers heartbeats, keeps flows on their backend, rewrites replies",
        nf: "lb",
        options: &["--vip", "192.0.2.10", "--table-size", "251"],
        run: lb,
    },
    Scenario {
        name: "policer passes the burst, drops beyond it, refills at the rate",
        nf: "policer",
        options: &["--rate", "1000", "--burst", "3000"],
        run: policer,
    },
];

const LAN: PortId = 0;
const WAN: PortId = 1;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(format!($($msg)*));
        }
    };
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn mac(last: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, last])
}

fn key(frame: &[u8]) -> Result<FlowKey, String> {
    let l = parse_ipv4(frame).map_err(|e| format!("IPv4: {e}"))?;
    FlowKey::from_frame(frame, &l).map_err(|e| format!("flow key: {e}"))
}

/// Exactly one frame out, on `port`; with valid checksums if IPv4.
fn one_on(out: Vec<(PortId, Vec<u8>)>, port: PortId, what: &str) -> Result<Vec<u8>, String> {
    ensure!(
        out.len() == 1 && out[0].0 == port,
        "{what}: expected one frame on port {port}, got {:?}",
        out.iter().map(|(p, f)| (p, f.len())).collect::<Vec<_>>()
    );
    let f = out.into_iter().next().map(|(_, f)| f).unwrap_or_default();
    if f.len() >= 14 && f[12..14] == [0x08, 0x00] {
        verify_checksums(&f).map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(f)
}

fn nothing(out: Vec<(PortId, Vec<u8>)>, what: &str) -> Result<(), String> {
    ensure!(
        out.is_empty(),
        "{what}: expected a drop, got {} frames",
        out.len()
    );
    Ok(())
}

fn nat(x: &mut dyn Exchange) -> Result<(), String> {
    let ext = ip("203.0.113.1");
    let out = FrameBuilder::udp((ip("10.0.0.5"), 5555), (ip("8.8.8.8"), 53))
        .payload(&[7; 32])
        .build();
    let o = one_on(x.send(LAN, &out, secs(1)), WAN, "LAN UDP")?;
    let k = key(&o)?;
    ensure!(
        k.src_ip == ext && k.src_port >= 1024,
        "not translated: {k:?}"
    );
    ensure!(
        (k.dst_ip, k.dst_port) == (ip("8.8.8.8"), 53),
        "destination changed: {k:?}"
    );
    ensure!(o[o.len() - 32..] == [7; 32], "payload changed");
    let reply = FrameBuilder::udp((ip("8.8.8.8"), 53), (ext, k.src_port))
        .payload(&[9; 32])
        .build();
    let r = one_on(x.send(WAN, &reply, secs(2)), LAN, "WAN reply")?;
    ensure!(
        key(&r)? == FlowKey::new(ip("8.8.8.8"), 53, ip("10.0.0.5"), 5555, 17),
        "reply not translated back: {:?}",
        key(&r)
    );
    // TCP gets its own mapping, with a valid TCP checksum.
    let syn = FrameBuilder::tcp((ip("10.0.0.6"), 40000), (ip("198.51.100.9"), 80))
        .payload(&[1; 20])
        .build();
    let t = one_on(x.send(LAN, &syn, secs(3)), WAN, "LAN TCP")?;
    let tk = key(&t)?;
    ensure!(
        tk.src_ip == ext && tk.src_port >= 1024,
        "TCP mapping: {tk:?}"
    );
    // To a port nobody mapped, and to another address: dropped.
    let unknown_port = if k.src_port == 65535 {
        1024
    } else {
        k.src_port + 1
    };
    let stray = FrameBuilder::udp((ip("8.8.8.8"), 53), (ext, unknown_port))
        .payload(&[0; 32])
        .build();
    nothing(x.send(WAN, &stray, secs(4)), "WAN to an unmapped port")?;
    let other = FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("203.0.113.2"), k.src_port))
        .payload(&[0; 32])
        .build();
    nothing(x.send(WAN, &other, secs(4)), "WAN to another address")
}

fn firewall(x: &mut dyn Exchange) -> Result<(), String> {
    let (inside, outside) = ((ip("10.0.0.5"), 4000), (ip("198.51.100.7"), 80));
    let unsolicited = FrameBuilder::tcp(outside, inside).payload(&[0; 20]).build();
    nothing(x.send(WAN, &unsolicited, secs(1)), "unsolicited WAN TCP")?;
    let ping = FrameBuilder::icmp_echo(outside.0, inside.0, true, 7)
        .payload(&[0; 32])
        .build();
    nothing(x.send(WAN, &ping, secs(1)), "WAN echo request")?;
    let open = FrameBuilder::tcp(inside, outside).payload(&[1; 20]).build();
    let o = one_on(x.send(LAN, &open, secs(2)), WAN, "LAN TCP")?;
    ensure!(o == open, "the firewall changed a frame");
    let back = one_on(x.send(WAN, &unsolicited, secs(3)), LAN, "WAN reply")?;
    ensure!(back == unsolicited, "the firewall changed a reply");
    Ok(())
}

fn eth(src: MacAddr, dst: MacAddr) -> Vec<u8> {
    FrameBuilder::udp((ip("10.0.0.1"), 1), (ip("10.0.0.2"), 2))
        .macs(src, dst)
        .payload(&[0; 32])
        .build()
}

fn bridge(x: &mut dyn Exchange) -> Result<(), String> {
    let (a, b, c) = (mac(0xa), mac(0xb), mac(0xc));
    let sorted = |mut v: Vec<(PortId, Vec<u8>)>| {
        v.sort_by_key(|(p, _)| *p);
        v
    };
    let f = eth(a, b);
    let out = sorted(x.send(0, &f, secs(1)));
    ensure!(
        out == vec![(1, f.clone()), (2, f.clone())],
        "unknown destination: expected a flood to ports 1 and 2, got ports {:?}",
        out.iter().map(|(p, _)| *p).collect::<Vec<_>>()
    );
    let back = eth(b, a);
    let o = one_on(x.send(1, &back, secs(2)), 0, "to a learned station")?;
    ensure!(o == back, "the bridge changed a frame");
    let again = one_on(x.send(0, &f, secs(3)), 1, "once both are learned")?;
    ensure!(again == f, "the bridge changed a frame");
    let bcast = eth(c, MacAddr::BROADCAST);
    let out = sorted(x.send(2, &bcast, secs(4)));
    ensure!(
        out.iter().map(|(p, _)| *p).collect::<Vec<_>>() == [0, 1],
        "broadcast from port 2: {:?}",
        out.iter().map(|(p, _)| *p).collect::<Vec<_>>()
    );
    // A station on port 0 talking to `a`, also on port 0: filtered.
    nothing(
        x.send(0, &eth(mac(0xd), a), secs(5)),
        "same-port destination",
    )
}

fn router(x: &mut dyn Exchange) -> Result<(), String> {
    let host = mac(5);
    let r0 = MacAddr([2, 0, 0, 0, 1, 0]);
    let from_host = |ttl: u8| {
        FrameBuilder::udp((ip("10.0.0.5"), 5000), (ip("8.8.8.8"), 53))
            .macs(host, r0)
            .ttl(ttl)
            .payload(&[0x42; 64])
            .build()
    };
    let o = one_on(x.send(0, &from_host(64), secs(1)), 1, "routed")?;
    let l = Ipv4::new(&o[14..]).map_err(|e| e.to_string())?;
    ensure!(l.ttl() == 63, "TTL {} after one hop", l.ttl());
    ensure!(
        o[0..6] == [2, 0, 0, 0, 0x0f, 0xfe] && o[6..12] == [2, 0, 0, 0, 1, 1],
        "MACs not rewritten to gateway / output interface"
    );
    let e = one_on(x.send(0, &from_host(1), secs(2)), 0, "TTL 1")?;
    let l = Ipv4::new(&e[14..]).map_err(|e| e.to_string())?;
    ensure!(
        l.protocol() == 1 && l.src() == ip("10.0.0.1") && l.dst() == ip("10.0.0.5"),
        "not an ICMP error from the router to the host"
    );
    let icmp = l.payload();
    ensure!(
        icmp[0] == 11 && icmp[1] == 0,
        "ICMP type/code {}/{}",
        icmp[0],
        icmp[1]
    );
    ensure!(
        e[0..6] == host.0,
        "ICMP error not sent back to the host's MAC"
    );
    let reply = FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("10.0.0.5"), 5000))
        .macs(mac(0xfe), MacAddr([2, 0, 0, 0, 1, 1]))
        .payload(&[0; 32])
        .build();
    let r = one_on(x.send(1, &reply, secs(3)), 0, "back to the host")?;
    ensure!(r[0..6] == host.0, "not to the host's MAC");
    Ok(())
}

fn lb(x: &mut dyn Exchange) -> Result<(), String> {
    let vip = ip("192.0.2.10");
    let backend = |i: u8| {
        FrameBuilder::udp((Ipv4Addr::new(10, 0, 0, i), 40000), (vip, 9999))
            .macs(MacAddr([2, 0, 0, 0, 0xb0, i]), mac(0xfe))
            .payload(&[0; 32])
            .build()
    };
    for i in [2, 3] {
        nothing(x.send(LAN, &backend(i), secs(1)), "heartbeat (consumed)")?;
    }
    let client = |port: u16| {
        FrameBuilder::tcp((ip("198.51.100.1"), port), (vip, 80))
            .macs(mac(0xc1), mac(0xfe))
            .payload(&[0; 20])
            .build()
    };
    let mut chosen = Vec::new();
    for port in 1000..1016 {
        let o = one_on(x.send(WAN, &client(port), secs(2)), LAN, "client to VIP")?;
        let k = key(&o)?;
        ensure!(
            [ip("10.0.0.2"), ip("10.0.0.3")].contains(&k.dst_ip),
            "not sent to a backend: {k:?}"
        );
        ensure!(
            o[0..6] == [2, 0, 0, 0, 0xb0, k.dst_ip.octets()[3]],
            "backend MAC"
        );
        chosen.push(k.dst_ip);
    }
    ensure!(
        chosen.iter().any(|&b| b != chosen[0]),
        "16 flows all on one backend"
    );
    for (i, port) in (1000..1016).enumerate() {
        let o = one_on(x.send(WAN, &client(port), secs(3)), LAN, "same flow again")?;
        ensure!(key(&o)?.dst_ip == chosen[i], "flow {port} changed backend");
    }
    let reply = FrameBuilder::tcp((chosen[0], 80), (ip("198.51.100.1"), 1000))
        .macs(
            MacAddr([2, 0, 0, 0, 0xb0, chosen[0].octets()[3]]),
            mac(0xfe),
        )
        .payload(&[0; 20])
        .build();
    let r = one_on(x.send(LAN, &reply, secs(3)), WAN, "backend reply")?;
    ensure!(key(&r)?.src_ip == vip, "reply source not the VIP");
    let elsewhere = FrameBuilder::tcp((ip("198.51.100.1"), 1), (ip("192.0.2.11"), 80))
        .payload(&[0; 20])
        .build();
    nothing(x.send(WAN, &elsewhere, secs(3)), "not to the VIP")
}

fn policer(x: &mut dyn Exchange) -> Result<(), String> {
    // 1000-byte frames; a 3000-byte bucket refilled at 1000 bytes/s.
    let frame = |src: &str, dst: &str| {
        FrameBuilder::udp((ip(src), 1), (ip(dst), 2))
            .payload(&[0; 958])
            .build()
    };
    let down = frame("198.51.100.1", "10.0.0.5");
    let passed = |x: &mut dyn Exchange, now: Duration| -> Result<usize, String> {
        let mut n = 0;
        for _ in 0..5 {
            let out = x.send(WAN, &down, now);
            if !out.is_empty() {
                one_on(out, LAN, "policed")?;
                n += 1;
            }
        }
        Ok(n)
    };
    // New destination: starts at burst - size = 2000, so two pass.
    let first = passed(x, secs(10))?;
    ensure!(
        first == 2,
        "{first} of 5 passed the first burst, expected 2"
    );
    // 2 s refill 2000 bytes: bucket 3000, two more pass.
    let later = passed(x, secs(12))?;
    ensure!(later == 2, "{later} of 5 passed after 2 s, expected 2");
    let up = frame("10.0.0.5", "198.51.100.1");
    for _ in 0..5 {
        one_on(x.send(LAN, &up, secs(12)), WAN, "LAN to WAN is not policed")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_passes_on_the_nf_itself() {
        for s in SCENARIOS {
            let mut nf = crate::build(s.nf, s.options).unwrap();
            (s.run)(&mut Direct(&mut *nf)).unwrap_or_else(|e| panic!("{}: {e}", s.name));
            let st = nf.stats();
            assert_eq!(st.packets_in, st.forwarded + st.dropped_total());
        }
    }

    #[test]
    fn every_nf_has_a_scenario() {
        for (name, _) in crate::NFS {
            assert!(SCENARIOS.iter().any(|s| s.nf == *name), "{name}");
        }
    }
}
