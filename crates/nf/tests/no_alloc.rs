//! The data path allocates nothing: every NF processes new flows, known
//! flows, expiry, table-full drops and generated ICMP errors with zero
//! heap allocations (counted by `allocation-counter`).

mod common;

use std::time::Duration;

use common::*;
use nfkit_nf::{build, BoxedNf};
use nfkit_packet::{arp_request, FrameBuilder, MacAddr};

/// Packets exercising most paths: new and repeated TCP/UDP/ICMP flows in
/// both directions, TTL 1, unknown destinations, ARP, truncated frames.
fn traffic() -> Vec<(Vec<u8>, usize)> {
    let mut v = Vec::new();
    for i in 0..40u16 {
        let lan = ip("10.0.0.5");
        let wan = ip("203.0.113.1");
        v.push((
            FrameBuilder::udp((lan, 1000 + i), (ip("8.8.8.8"), 53)).build(),
            0,
        ));
        v.push((
            FrameBuilder::tcp((lan, 2000 + i), (ip("192.0.2.10"), 80))
                .ttl((i % 3) as u8)
                .build(),
            0,
        ));
        v.push((
            FrameBuilder::udp((ip("8.8.8.8"), 53), (wan, 1024 + i)).build(),
            1,
        ));
        v.push((
            FrameBuilder::tcp((ip("11.0.0.1"), 3000 + i), (ip("192.0.2.10"), 80)).build(),
            1,
        ));
        v.push((
            FrameBuilder::udp((ip("10.0.0.9"), 4000), (ip("192.0.2.10"), 9999))
                .macs(MacAddr([2, 0, 0, 0, 0, 9]), MacAddr::BROADCAST)
                .build(),
            0,
        ));
        v.push((
            FrameBuilder::icmp_echo(lan, ip("8.8.8.8"), true, i).build(),
            0,
        ));
        v.push((
            FrameBuilder::udp((lan, 1), (ip("9.9.9.9"), 2))
                .macs(
                    MacAddr([2, 0, 0, 0, 1, i as u8]),
                    MacAddr([2, 0, 0, 0, 2, i as u8]),
                )
                .build(),
            (i % 2) as usize,
        ));
    }
    v.push((
        arp_request(MacAddr([2, 0, 0, 0, 0, 1]), ip("10.0.0.5"), ip("10.0.0.1")),
        0,
    ));
    v.push((vec![0u8; 20], 1));
    v
}

fn nfs() -> Vec<BoxedNf> {
    vec![
        build(
            "nat",
            [
                "--ext-ip",
                "203.0.113.1",
                "--capacity",
                "16",
                "--expire",
                "1s",
            ],
        )
        .unwrap(),
        build("bridge", ["--capacity", "16", "--expire", "1s"]).unwrap(),
        build(
            "lb",
            [
                "--vip",
                "192.0.2.10",
                "--flow-capacity",
                "16",
                "--flow-expire",
                "1s",
                "--backend-expire",
                "2s",
                "--table-size",
                "251",
            ],
        )
        .unwrap(),
        build(
            "policer",
            ["--capacity", "8", "--rate", "1000", "--burst", "2000"],
        )
        .unwrap(),
        build("firewall", ["--capacity", "16", "--expire", "1s"]).unwrap(),
        build(
            "router",
            [
                "--iface",
                "0,10.0.0.1/24,02:00:00:00:00:01",
                "--iface",
                "1,192.0.2.1/24,02:00:00:00:00:02",
                "--route",
                "8.0.0.0/8,1,192.0.2.254",
                "--neighbor",
                "192.0.2.254,02:00:00:00:00:fe",
                "--neighbor",
                "192.0.2.10,02:00:00:00:00:0a",
                "--icmp-rate",
                "5",
            ],
        )
        .unwrap(),
    ]
}

#[test]
fn data_path_allocates_nothing() {
    // The counter works (so a zero below means something).
    let probe = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 10]);
    });
    assert!(probe.count_total >= 1);
    let traffic = traffic();
    let mut bufs: Vec<Vec<u8>> = traffic.iter().map(|_| vec![0u8; BUF]).collect();
    for mut nf in nfs() {
        let mut rounds = 0u64;
        let info = allocation_counter::measure(|| {
            // Several rounds, 700 ms apart, so entries expire and return.
            for round in 0..5u64 {
                let now = Duration::from_millis(700 * round);
                for ((frame, port), buf) in traffic.iter().zip(bufs.iter_mut()) {
                    buf[..frame.len()].copy_from_slice(frame);
                    nf.process(buf, frame.len(), *port, now);
                }
                rounds += 1;
            }
        });
        assert_eq!(
            info.count_total,
            0,
            "{} allocated on the data path",
            nf.name()
        );
        let s = nf.stats();
        assert_eq!(s.packets_in, rounds * traffic.len() as u64);
        assert_counts_balance(nf.as_ref());
        assert!(s.forwarded > 0, "{}: {s:?}", nf.name());
    }
}
