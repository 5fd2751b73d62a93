//! Single-core throughput of one NF on synthetic traffic, no I/O.
//!
//! `cargo run --release -p nfkit-nf --example nfbench -- NAME [PACKETS] [FLOWS]`
//! (NAME: nat, bridge, lb, policer, firewall, router). Packets alternate
//! LAN→WAN flows and their WAN→LAN replies where that makes sense.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use nfkit_nf::{build, Verdict};
use nfkit_packet::{FrameBuilder, MacAddr};

fn options(name: &str) -> Vec<&'static str> {
    match name {
        "nat" => vec!["--ext-ip", "203.0.113.1"],
        "lb" => vec![
            "--vip",
            "192.0.2.10",
            "--backend",
            "10.0.0.2@02:00:00:00:00:02",
            "--backend",
            "10.0.0.3@02:00:00:00:00:03",
        ],
        "policer" => vec!["--rate", "1T", "--burst", "1T"],
        "router" => vec![
            "--iface",
            "0,10.0.0.1/8,02:00:00:00:00:01",
            "--iface",
            "1,192.0.2.1/24,02:00:00:00:00:02",
            "--route",
            "0.0.0.0/0,1,192.0.2.254",
            "--neighbor",
            "192.0.2.254,02:00:00:00:00:fe",
        ],
        _ => vec![],
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("nat");
    let packets: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let flows: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let mut nf = match build(name, options(name)) {
        Ok(nf) => nf,
        Err(e) => {
            eprintln!("nfbench: {e}");
            std::process::exit(2);
        }
    };
    let dst = if name == "lb" {
        Ipv4Addr::new(192, 0, 2, 10)
    } else {
        Ipv4Addr::new(8, 8, 8, 8)
    };
    let frames: Vec<(Vec<u8>, usize)> = (0..flows)
        .map(|i| {
            let src = Ipv4Addr::from(0x0a00_0002 + i);
            // Clients arrive on the WAN side for the LB and the policer; the
            // bridge sees stations on both ports, each talking to a station
            // on the other one.
            let port = match name {
                "lb" | "policer" => 1,
                "bridge" => (i % 2) as usize,
                _ => 0,
            };
            let mac = |j: u32| MacAddr([2, 0, 0, 1, (j >> 8) as u8, j as u8]);
            let f = FrameBuilder::udp((src, 1024 + (i % 60000) as u16), (dst, 53))
                .macs(mac(i), mac(i ^ 1))
                .payload(&[0; 18])
                .build();
            (f, port)
        })
        .collect();
    let mut buf = vec![0u8; 2048];
    let start = Instant::now();
    let mut forwarded = 0u64;
    for n in 0..packets {
        let (f, port) = &frames[n % frames.len()];
        buf[..f.len()].copy_from_slice(f);
        let now = Duration::from_nanos((n / 32) as u64 * 1000); // one clock read per batch of 32
        if !matches!(nf.process(&mut buf, f.len(), *port, now), Verdict::Drop(_)) {
            forwarded += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name}: {packets} packets, {flows} flows, {:.2} Mpps ({:.1} ns/packet), {forwarded} forwarded",
        packets as f64 / secs / 1e6,
        secs * 1e9 / packets as f64
    );
}
