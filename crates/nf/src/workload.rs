//! The traffic each NF is measured and demonstrated with (`nfkit bench
//! nfs`, `nfkit nf` on simulated ports): one UDP frame per flow in the
//! direction that creates the NF's state, and the options that make the
//! NF accept it.

use std::net::Ipv4Addr;
use std::time::Duration;

use nfkit_packet::{FrameBuilder, MacAddr};

use crate::config::ConfigError;
use crate::registry::{build, BoxedNf};
use crate::verdict::PortId;

/// Flows per NF: 90% of the default table capacity of 65,536 (the load
/// TinyNF measured its NFs with).
pub const FLOWS: usize = 60_000;

/// The traffic an NF is measured with.
pub struct Workload {
    pub options: Vec<String>,
    /// Port the traffic arrives on (it leaves by the other).
    pub input: PortId,
    /// One frame per flow, 60 bytes.
    pub frames: Vec<Vec<u8>>,
}

/// The measured traffic of NF `name`: `flows` UDP flows in the direction
/// that creates the NF's state (LAN to WAN for NAT and firewall, clients
/// on the WAN for the LB, WAN to LAN for the policer; the bridge learns a
/// source MAC per flow and floods to an unknown destination; the router
/// routes to a destination per flow).
pub fn workload(name: &str, flows: usize) -> Result<Workload, ConfigError> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let udp = |src: Ipv4Addr, sport: u16, dst: Ipv4Addr| {
        FrameBuilder::udp((src, sport), (dst, 5000)).payload(&[0; 18])
    };
    let host = |i: usize| Ipv4Addr::from(0x0a00_0000 + 2 + i as u32);
    let port_of = |i: usize| 1024 + (i % 50_000) as u16;
    let server = Ipv4Addr::new(198, 51, 100, 1);
    let frames: Vec<Vec<u8>> = (0..flows)
        .map(|i| match name {
            "lb" => udp(
                Ipv4Addr::from(0xc633_0000 + i as u32),
                port_of(i),
                Ipv4Addr::new(192, 0, 2, 10),
            )
            .build(),
            "policer" => udp(server, 53, host(i)).build(),
            "bridge" => udp(host(0), 1, server)
                .macs(
                    MacAddr([2, 1, 0, 0, (i >> 8) as u8, i as u8]),
                    MacAddr([2, 0xee, 0, 0, 0, 1]),
                )
                .build(),
            "router" => udp(host(0), 1, Ipv4Addr::from(0x0800_0000 + i as u32)).build(),
            _ => udp(host(i), port_of(i), server).build(),
        })
        .collect();
    let (options, input) = match name {
        // Two external addresses: RFC 2544's 65,536 flows are one host's
        // source ports, more than one address's 64,512 ports hold.
        "nat" => (
            s(&[
                "--ext-ip",
                "203.0.113.1,203.0.113.2",
                "--ports",
                "1024-65535",
            ]),
            0,
        ),
        "firewall" | "bridge" => (Vec::new(), 0),
        "lb" => (
            s(&[
                "--vip",
                "192.0.2.10",
                "--backend",
                "10.1.0.2@02:00:00:00:b0:02",
                "--backend",
                "10.1.0.3@02:00:00:00:b0:03",
                "--backend",
                "10.1.0.4@02:00:00:00:b0:04",
                "--backend",
                "10.1.0.5@02:00:00:00:b0:05",
            ]),
            1,
        ),
        // Buckets idle for burst/rate (1000 s) expire: none does here.
        "policer" => (s(&["--rate", "1G", "--burst", "1T"]), 1),
        "router" => (
            s(&[
                "--iface",
                "0,10.0.0.1/8,02:00:00:00:01:00",
                "--iface",
                "1,192.0.2.1/24,02:00:00:00:01:01",
                "--route",
                "0.0.0.0/0,1,192.0.2.254",
                "--neighbor",
                "192.0.2.254,02:00:00:00:0f:fe",
            ]),
            0,
        ),
        other => {
            return Err(ConfigError::UnknownNf {
                name: other.into(),
                known: "nat, bridge, lb, policer, firewall, router",
            })
        }
    };
    Ok(Workload {
        options,
        input,
        frames,
    })
}

/// Build NF `name` and fill its tables with one packet per flow.
pub fn prepared(name: &str, w: &Workload) -> Result<BoxedNf, ConfigError> {
    let mut nf = build(name, &w.options)?;
    let mut buf = vec![0u8; 2048];
    for f in &w.frames {
        buf[..f.len()].copy_from_slice(f);
        nf.process(&mut buf, f.len(), w.input, Duration::ZERO);
    }
    Ok(nf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nf_has_a_workload_it_forwards() {
        for (name, _) in crate::NFS {
            let w = workload(name, 100).unwrap();
            assert_eq!(w.frames.len(), 100);
            let nf = prepared(name, &w).unwrap();
            assert_eq!(nf.stats().packets_in, 100, "{name}");
        }
        assert!(workload("nope", 1).is_err());
    }
}
