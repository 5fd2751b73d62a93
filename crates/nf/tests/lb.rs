//! Load balancer: heartbeats, VIP rewriting both ways, affinity, Maglev
//! balance and minimal disruption, expiry of silent backends.

mod common;

use std::collections::HashMap;
use std::net::Ipv4Addr;

use common::*;
use nfkit_nf::{ConfigError, DropReason, LbConfig, LoadBalancer, Verdict};
use nfkit_packet::strategy::arb_any_frame;
use nfkit_packet::{parse_ipv4, verify_checksums, FlowKey, FrameBuilder, MacAddr};
use proptest::prelude::*;

const LAN: usize = 0;
const WAN: usize = 1;
const VIP: &str = "192.0.2.10";

fn backend_mac(i: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0xb0, i])
}

fn backend_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, i)
}

fn heartbeat(i: u8) -> Vec<u8> {
    FrameBuilder::udp((backend_ip(i), 40000), (ip(VIP), 9999))
        .macs(backend_mac(i), MacAddr([2, 0, 0, 0, 0, 0xfe]))
        .payload(b"alive")
        .build()
}

fn client(n: u32, port: u16) -> Vec<u8> {
    FrameBuilder::tcp((Ipv4Addr::from(0x0b00_0000 + n), port), (ip(VIP), 80))
        .macs(
            MacAddr([2, 0, 0, 0, 0xc1, 1]),
            MacAddr([2, 0, 0, 0, 0, 0xfe]),
        )
        .payload(b"GET /")
        .build()
}

fn key(f: &[u8]) -> FlowKey {
    FlowKey::from_frame(f, &parse_ipv4(f).unwrap()).unwrap()
}

fn lb(extra: &str) -> LoadBalancer {
    LoadBalancer::new(
        format!("--vip {VIP} --table-size 4099 {extra}")
            .parse()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn heartbeat_packets_register_backends() {
    let mut l = lb("");
    assert_eq!(
        run(&mut l, &client(1, 1000), WAN, secs(0)).0,
        Verdict::Drop(DropReason::NoBackend)
    );
    assert_eq!(
        run(&mut l, &heartbeat(2), LAN, secs(0)).0,
        Verdict::Drop(DropReason::Consumed)
    );
    let b = l.backends();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].ip, b[0].mac, b[0].is_static),
        (backend_ip(2), backend_mac(2), false)
    );
    assert_counts_balance(&l);
}

#[test]
fn request_and_reply_rewriting() {
    let mut l = lb("");
    run(&mut l, &heartbeat(2), LAN, secs(0));
    let req = client(1, 1000);
    let (v, o) = run(&mut l, &req, WAN, secs(1));
    assert!(matches!(v, Verdict::Forward { port: LAN, .. }), "{v:?}");
    verify_checksums(&o).unwrap();
    let k = key(&o);
    assert_eq!((k.dst_ip, k.dst_port), (backend_ip(2), 80));
    assert_eq!(k.src_ip, key(&req).src_ip);
    assert_eq!(&o[0..6], &backend_mac(2).0);

    let reply = FrameBuilder::tcp((backend_ip(2), 80), (k.src_ip, 1000))
        .macs(backend_mac(2), MacAddr([2, 0, 0, 0, 0, 0xfe]))
        .payload(b"200 OK")
        .build();
    let (v, r) = run(&mut l, &reply, LAN, secs(2));
    assert!(matches!(v, Verdict::Forward { port: WAN, .. }), "{v:?}");
    verify_checksums(&r).unwrap();
    assert_eq!(key(&r), key(&req).reversed());
    assert_eq!(
        &r[0..6],
        &[2, 0, 0, 0, 0xc1, 1],
        "back to the client-side MAC"
    );
    // A reply for no flow, or from the wrong backend, is dropped.
    let stray = FrameBuilder::tcp((backend_ip(2), 80), (k.src_ip, 1001)).build();
    assert_eq!(
        run(&mut l, &stray, LAN, secs(2)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
    assert_counts_balance(&l);
}

#[test]
fn flows_keep_their_backend_when_others_join() {
    let mut l = lb("");
    run(&mut l, &heartbeat(1), LAN, secs(0));
    let mut first: HashMap<u32, Ipv4Addr> = HashMap::new();
    for n in 0..200 {
        let (_, o) = run(&mut l, &client(n, 1000), WAN, secs(0));
        first.insert(n, key(&o).dst_ip);
    }
    for i in 2..=4 {
        l.heartbeat(backend_ip(i), backend_mac(i), secs(1)).unwrap();
    }
    for n in 0..200 {
        let (_, o) = run(&mut l, &client(n, 1000), WAN, secs(2));
        assert_eq!(key(&o).dst_ip, first[&n], "affinity keeps flow {n}");
    }
    // New flows spread over all four.
    let mut seen = std::collections::HashSet::new();
    for n in 1000..1200 {
        let (_, o) = run(&mut l, &client(n, 1000), WAN, secs(2));
        seen.insert(key(&o).dst_ip);
    }
    assert_eq!(seen.len(), 4);
}

#[test]
fn silent_backend_expires_and_only_its_flows_move() {
    let mut l = lb("--backend-expire 10s");
    for i in 1..=3 {
        run(&mut l, &heartbeat(i), LAN, secs(0));
    }
    let mut before = HashMap::new();
    for n in 0..300 {
        let (_, o) = run(&mut l, &client(n, 1000), WAN, secs(1));
        before.insert(n, key(&o).dst_ip);
    }
    // Backends 1 and 2 keep sending heartbeats; 3 goes silent.
    for t in [5, 9, 13] {
        run(&mut l, &heartbeat(1), LAN, secs(t));
        run(&mut l, &heartbeat(2), LAN, secs(t));
    }
    for n in 0..300 {
        let (_, o) = run(&mut l, &client(n, 1000), WAN, secs(14));
        let now = key(&o).dst_ip;
        if before[&n] == backend_ip(3) {
            assert_ne!(now, backend_ip(3));
        } else {
            assert_eq!(now, before[&n], "flow {n} was not on the removed backend");
        }
    }
    assert_eq!(l.backends().len(), 2);
}

/// Maglev table properties, independent of affinity.
#[test]
fn maglev_balance_and_minimal_disruption() {
    let mut l = LoadBalancer::new(format!("--vip {VIP}").parse().unwrap()).unwrap(); // M = 65537
    for i in 1..=5 {
        l.heartbeat(backend_ip(i), backend_mac(i), secs(0)).unwrap();
    }
    let keys: Vec<FlowKey> = (0..20000u32)
        .map(|n| {
            FlowKey::new(
                Ipv4Addr::from(0x0b00_0000 + n * 7919),
                (n % 50000) as u16 + 1024,
                ip(VIP),
                443,
                6,
            )
        })
        .collect();
    let before: Vec<Ipv4Addr> = keys.iter().map(|k| l.backend_for(k).unwrap()).collect();
    let mut count: HashMap<Ipv4Addr, usize> = HashMap::new();
    for b in &before {
        *count.entry(*b).or_default() += 1;
    }
    for (b, c) in &count {
        let share = *c as f64 / keys.len() as f64;
        assert!(
            (share - 0.2).abs() < 0.02,
            "{b} gets {share:.3}, want 0.20 ± 0.02"
        );
    }
    l.remove_backend(backend_ip(5));
    let mut moved_others = 0;
    for (k, b) in keys.iter().zip(&before) {
        let after = l.backend_for(k).unwrap();
        if *b != backend_ip(5) && after != *b {
            moved_others += 1;
        }
    }
    let frac = moved_others as f64 / keys.len() as f64;
    assert!(
        frac < 0.03,
        "{frac:.4} of the flows of remaining backends moved"
    );
}

#[test]
fn edges() {
    let mut l = lb("--flow-capacity 1");
    run(&mut l, &heartbeat(1), LAN, secs(0));
    assert!(matches!(
        run(&mut l, &client(1, 1), WAN, secs(0)).0,
        Verdict::Forward { .. }
    ));
    assert_eq!(
        run(&mut l, &client(2, 1), WAN, secs(0)).0,
        Verdict::Drop(DropReason::TableFull)
    );
    let not_vip = FrameBuilder::tcp((ip("11.0.0.1"), 1), (ip("192.0.2.11"), 80)).build();
    assert_eq!(
        run(&mut l, &not_vip, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NotForUs)
    );
    let ping = FrameBuilder::icmp_echo(ip("11.0.0.1"), ip(VIP), true, 1).build();
    assert_eq!(
        run(&mut l, &ping, WAN, secs(0)).0,
        Verdict::Drop(DropReason::UnsupportedProtocol)
    );
    let frag = FrameBuilder::tcp((ip("11.0.0.1"), 1), (ip(VIP), 80))
        .fragment(false, 20)
        .payload(&[0; 8])
        .build();
    assert_eq!(
        run(&mut l, &frag, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Fragment)
    );
    let arp = nfkit_packet::arp_request(MacAddr([2, 0, 0, 0, 0, 1]), ip("11.0.0.1"), ip(VIP));
    assert_eq!(
        run(&mut l, &arp, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NotIpv4)
    );
    assert_eq!(
        run(&mut l, &client(1, 1)[..40], WAN, secs(0)).0,
        Verdict::Drop(DropReason::Malformed)
    );
    // Static backends need no heartbeat and never expire.
    let mut s = lb("--heartbeat-port 0 --backend 10.0.0.9@02:00:00:00:b0:09 --backend-expire 1s");
    let (v, o) = run(&mut s, &client(1, 1), WAN, secs(1000));
    assert!(matches!(v, Verdict::Forward { .. }));
    assert_eq!(key(&o).dst_ip, backend_ip(9));
    assert_counts_balance(&l);
}

#[test]
fn config_errors() {
    assert_eq!(
        "--table-size 4099".parse::<LbConfig>(),
        Err(ConfigError::Required("--vip"))
    );
    assert_eq!(
        format!("--vip {VIP} --heartbeat-port 0").parse::<LbConfig>(),
        Err(ConfigError::EmptyBackends)
    );
    assert_eq!(
        format!("--vip {VIP} --table-size 4096").parse::<LbConfig>(),
        Err(ConfigError::BadTableSize(4096, 32))
    );
    assert_eq!(
        format!("--vip {VIP} --backend-capacity 0").parse::<LbConfig>(),
        Err(ConfigError::ZeroCapacity { what: "LB backend" })
    );
    assert!(format!("--vip {VIP} --backend 10.0.0.1")
        .parse::<LbConfig>()
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn never_panics(frames in proptest::collection::vec(arb_any_frame(), 1..16)) {
        let mut l = lb("--flow-capacity 4 --backend 10.0.0.9@02:00:00:00:b0:09");
        for (i, f) in frames.iter().enumerate() {
            let (v, o) = run(&mut l, f, i % 2, secs(i as u64));
            if let Verdict::Forward { .. } = v {
                prop_assert_eq!(verify_checksums(&o).is_ok(), verify_checksums(f).is_ok());
            }
        }
        assert_counts_balance(&l);
    }
}
