//! Router: LPM forwarding, TTL, ICMP errors, neighbours, edges.

mod common;

use common::*;
use nfkit_nf::{ConfigError, DropReason, NetworkFunction, Router, RouterConfig, Verdict};
use nfkit_packet::strategy::arb_any_frame;
use nfkit_packet::{
    checksum, icmp_type, parse_ipv4, verify_checksums, FrameBuilder, Icmp, Ipv4, MacAddr,
};
use proptest::prelude::*;

const CFG: &str = "--iface 0,192.168.1.1/24,02:00:00:00:01:01 \
                   --iface 1,10.0.1.1/24,02:00:00:00:02:01 \
                   --iface 2,10.0.2.1/24,02:00:00:00:03:01 \
                   --route 0.0.0.0/0,1,10.0.1.254 \
                   --route 172.16.0.0/12,2,10.0.2.254 \
                   --route 172.16.5.0/24,1,10.0.1.253 \
                   --route 172.16.5.128/25,2,10.0.2.254 \
                   --neighbor 10.0.1.254,02:00:00:00:aa:01 \
                   --neighbor 10.0.1.253,02:00:00:00:aa:02 \
                   --neighbor 10.0.2.254,02:00:00:00:aa:03 \
                   --neighbor 192.168.1.50,02:00:00:00:bb:50";

const HOST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xbb, 0x50]);
const R0_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);

fn router() -> Router {
    Router::new(CFG.parse().unwrap()).unwrap()
}

fn from_host(dst: &str, ttl: u8) -> Vec<u8> {
    FrameBuilder::udp((ip("192.168.1.50"), 5000), (ip(dst), 53))
        .macs(HOST_MAC, R0_MAC)
        .ttl(ttl)
        .payload(&[0x42; 100])
        .build()
}

fn fwd_to(v: Verdict) -> usize {
    match v {
        Verdict::Forward { port, .. } => port,
        other => panic!("expected forward, got {other:?}"),
    }
}

#[test]
fn longest_prefix_wins() {
    let mut r = router();
    for (dst, port, mac) in [
        ("8.8.8.8", 1, [2, 0, 0, 0, 0xaa, 1]),
        ("172.20.0.1", 2, [2, 0, 0, 0, 0xaa, 3]),
        ("172.16.5.1", 1, [2, 0, 0, 0, 0xaa, 2]),
        ("172.16.5.200", 2, [2, 0, 0, 0, 0xaa, 3]),
        ("192.168.1.50", 0, [2, 0, 0, 0, 0xbb, 0x50]), // connected, via the neighbour table
    ] {
        let f = from_host(dst, 64);
        let (v, o) = run(&mut r, &f, 0, secs(0));
        assert_eq!(fwd_to(v), port, "{dst}");
        assert_eq!(&o[0..6], &mac, "{dst}: next-hop MAC");
        let out_mac = [[2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 1], [2, 0, 0, 0, 3, 1]][port];
        assert_eq!(&o[6..12], &out_mac, "{dst}: interface MAC");
        let l = parse_ipv4(&o).unwrap();
        assert_eq!(Ipv4::new(&o[l.l3..]).unwrap().ttl(), 63);
        verify_checksums(&o).unwrap();
        // Nothing else changed: MACs, TTL and the header checksum only.
        let mut expect = f.clone();
        expect[0..12].copy_from_slice(&o[0..12]);
        expect[l.l3 + 8] = 63;
        expect[l.l3 + 10..l.l3 + 12].copy_from_slice(&o[l.l3 + 10..l.l3 + 12]);
        assert_eq!(o, expect);
    }
    assert_counts_balance(&r);
}

#[test]
fn connected_host_without_neighbour_entry() {
    let mut r = router();
    assert_eq!(
        run(&mut r, &from_host("10.0.2.77", 64), 0, secs(0)).0,
        Verdict::Drop(DropReason::NoNeighbour)
    );
}

fn check_icmp_error(o: &[u8], original: &[u8], t: u8) {
    verify_checksums(o).unwrap();
    let l = parse_ipv4(o).unwrap();
    let ipv = Ipv4::new(&o[l.l3..]).unwrap();
    assert_eq!(ipv.src(), ip("192.168.1.1"), "from the input interface");
    assert_eq!(ipv.dst(), ip("192.168.1.50"), "to the original source");
    assert_eq!(ipv.dscp_ecn(), 0xc0);
    assert!(l.end - l.l3 <= 576);
    let icmp = Icmp::new(&o[l.l4..l.end]).unwrap();
    assert_eq!((icmp.icmp_type(), icmp.code()), (t, 0));
    assert_eq!(checksum::checksum(&o[l.l4..l.end]), 0);
    let lo = parse_ipv4(original).unwrap();
    let quoted = icmp.payload();
    assert_eq!(
        quoted,
        &original[lo.l3..lo.l3 + quoted.len()],
        "quotes the original datagram"
    );
    assert!(quoted.len() >= 28);
    assert_eq!(&o[0..6], &HOST_MAC.0);
    assert_eq!(&o[6..12], &R0_MAC.0);
}

#[test]
fn ttl_one_and_zero_give_time_exceeded() {
    for ttl in [0, 1] {
        let mut r = router();
        let f = from_host("8.8.8.8", ttl);
        let (v, o) = run(&mut r, &f, 0, secs(0));
        assert_eq!(fwd_to(v), 0, "back out of the input port");
        check_icmp_error(&o, &f, icmp_type::TIME_EXCEEDED);
        assert_eq!(r.stats().icmp_generated, 1);
    }
    // TTL 2 is forwarded with TTL 1.
    let mut r = router();
    assert_eq!(
        fwd_to(run(&mut r, &from_host("8.8.8.8", 2), 0, secs(0)).0),
        1
    );
}

#[test]
fn no_route_gives_net_unreachable_and_big_packets_are_cut_to_576() {
    let cfg = "--iface 0,192.168.1.1/24,02:00:00:00:01:01 --iface 1,10.0.1.1/24,02:00:00:00:02:01";
    let mut r = Router::new(cfg.parse().unwrap()).unwrap();
    let f = FrameBuilder::udp((ip("192.168.1.50"), 5000), (ip("8.8.8.8"), 53))
        .macs(HOST_MAC, R0_MAC)
        .payload(&[7; 1400])
        .build();
    let (v, o) = run(&mut r, &f, 0, secs(0));
    assert_eq!(fwd_to(v), 0);
    check_icmp_error(&o, &f, icmp_type::DEST_UNREACHABLE);
    let l = parse_ipv4(&o).unwrap();
    assert_eq!(l.end - l.l3, 576);
    // A small packet grows: the error is longer than what came in.
    let small = FrameBuilder::udp((ip("192.168.1.50"), 5000), (ip("8.8.8.8"), 53))
        .macs(HOST_MAC, R0_MAC)
        .build();
    let (v, o) = run(&mut r, &small, 0, secs(0));
    assert!(matches!(v, Verdict::Forward { len, .. } if len == small.len() + 28));
    check_icmp_error(&o, &small, icmp_type::DEST_UNREACHABLE);
}

#[test]
fn no_icmp_errors_about_errors_fragments_broadcasts() {
    let cfg = "--iface 0,192.168.1.1/24,02:00:00:00:01:01 --iface 1,10.0.1.1/24,02:00:00:00:02:01";
    let mut r = Router::new(cfg.parse().unwrap()).unwrap();
    let no_route = Verdict::Drop(DropReason::NoRoute);
    let err = FrameBuilder::icmp(
        ip("192.168.1.50"),
        ip("8.8.8.8"),
        icmp_type::DEST_UNREACHABLE,
        3,
    )
    .payload(&[0x45; 28])
    .build();
    assert_eq!(run(&mut r, &err, 0, secs(0)).0, no_route);
    let later = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
        .fragment(false, 50)
        .payload(&[0; 16])
        .build();
    assert_eq!(run(&mut r, &later, 0, secs(0)).0, no_route);
    let bcast_mac = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
        .macs(HOST_MAC, MacAddr::BROADCAST)
        .build();
    // Link-layer broadcasts, martian sources, multicast: never forwarded,
    // and never answered (RFC 1812 §5.3.4, §5.3.7).
    let martian = Verdict::Drop(DropReason::Martian);
    assert_eq!(run(&mut r, &bcast_mac, 0, secs(0)).0, martian);
    let from_zero = FrameBuilder::udp((ip("0.0.0.0"), 68), (ip("8.8.8.8"), 67)).build();
    assert_eq!(run(&mut r, &from_zero, 0, secs(0)).0, martian);
    let mcast = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("239.1.1.1"), 2))
        .ttl(1)
        .build();
    assert_eq!(run(&mut r, &mcast, 0, secs(0)).0, martian);
    // An echo request is a query, not an error: it gets one.
    let ping = FrameBuilder::icmp_echo(ip("192.168.1.50"), ip("8.8.8.8"), true, 1).build();
    assert!(matches!(
        run(&mut r, &ping, 0, secs(0)).0,
        Verdict::Forward { port: 0, .. }
    ));
    assert_eq!(r.stats().icmp_generated, 1);
    assert_counts_balance(&r);
}

#[test]
fn icmp_rate_limit() {
    let mut r = Router::new(format!("{CFG} --icmp-rate 2").parse().unwrap()).unwrap();
    let f = from_host("8.8.8.8", 1);
    let mut sent = 0;
    for _ in 0..5 {
        if matches!(run(&mut r, &f, 0, secs(10)).0, Verdict::Forward { .. }) {
            sent += 1;
        }
    }
    assert_eq!(sent, 2, "burst of 2");
    assert_eq!(r.stats().dropped(DropReason::IcmpRateLimited), 3);
    assert!(matches!(
        run(&mut r, &f, 0, std::time::Duration::from_millis(10_500)).0,
        Verdict::Forward { .. }
    ));
}

#[test]
fn checks_before_forwarding() {
    let mut r = router();
    let mut bad = from_host("8.8.8.8", 64);
    bad[14 + 10] ^= 0xff;
    assert_eq!(
        run(&mut r, &bad, 0, secs(0)).0,
        Verdict::Drop(DropReason::BadChecksum)
    );
    assert_eq!(
        run(&mut r, &from_host("10.0.1.1", 64), 0, secs(0)).0,
        Verdict::Drop(DropReason::LocalDelivery)
    );
    let arp = nfkit_packet::arp_request(HOST_MAC, ip("192.168.1.50"), ip("192.168.1.1"));
    assert_eq!(
        run(&mut r, &arp, 0, secs(0)).0,
        Verdict::Drop(DropReason::NotIpv4)
    );
    assert_eq!(
        run(&mut r, &from_host("8.8.8.8", 64)[..30], 0, secs(0)).0,
        Verdict::Drop(DropReason::Malformed)
    );
    // Options and VLAN tags are kept; only TTL and checksum change.
    let f = FrameBuilder::tcp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
        .vlan(5)
        .ip_options(&[1, 1, 1, 0])
        .build();
    let (v, o) = run(&mut r, &f, 0, secs(0));
    assert_eq!(fwd_to(v), 1);
    verify_checksums(&o).unwrap();
    assert_eq!(&o[12..18], &f[12..18]);
    assert_counts_balance(&r);
}

#[test]
fn config_errors() {
    let e = |s: &str| s.parse::<RouterConfig>().unwrap_err();
    assert!(matches!(e(""), ConfigError::Router(_)));
    assert!(matches!(
        e("--iface 1,10.0.0.1/24,02:00:00:00:00:01"),
        ConfigError::Router(_)
    ));
    assert!(
        matches!(e("--iface 0,10.0.0.1/24,02:00:00:00:00:01 --route 10.1.0.0/16,0,10.0.0.9"), ConfigError::Router(m) if m.contains("--neighbor"))
    );
    assert!(matches!(
        e("--iface 0,10.0.0.1/24,02:00:00:00:00:01 --route 10.1.0.1/16,0"),
        ConfigError::BadPrefix(..)
    ));
    assert!(matches!(
        e("--iface 0,10.0.0.1/24,02:00:00:00:00:01 --route 10.1.0.0/16,3"),
        ConfigError::Router(_)
    ));
    assert!(matches!(
        e("--iface 0,10.0.0.1/24"),
        ConfigError::BadValue { .. }
    ));
    let long = "--iface 0,10.0.0.1/24,02:00:00:00:00:01 --tbl8-groups 1 --route 10.9.0.0/25,0 --route 10.9.1.0/25,0";
    let too_many = Router::new(long.parse().unwrap()).err().unwrap();
    assert!(matches!(too_many, ConfigError::Router(m) if m.contains("/24")));
}

/// Issue 14 item 8: a multicast, broadcast or zero interface MAC, and one
/// address on two interfaces, were accepted.
#[test]
fn interface_macs_are_unicast_and_addresses_distinct() {
    let e = |s: &str| s.parse::<RouterConfig>().unwrap_err().to_string();
    for mac in [
        "01:00:5e:00:00:01",
        "ff:ff:ff:ff:ff:ff",
        "00:00:00:00:00:00",
    ] {
        let m = e(&format!("--iface 0,10.0.0.1/24,{mac}"));
        assert!(m.contains("unicast MAC") && m.contains("port 0"), "{m}");
    }
    let m = e("--iface 0,10.0.0.1/24,02:00:00:00:00:01 --iface 1,10.0.0.1/16,02:00:00:00:00:02");
    assert!(
        m.contains("ports 0 and 1 both have address 10.0.0.1"),
        "{m}"
    );
    for ip in ["0.0.0.0", "224.0.0.1", "255.255.255.255"] {
        let m = e(&format!("--iface 0,{ip}/24,02:00:00:00:00:01"));
        assert!(m.contains("cannot be a host's address"), "{m}");
    }
    let m = e("--iface 0,10.0.0.1/24,02:00:00:00:00:01 --icmp-rate 5 --icmp-rate 6");
    assert!(m.contains("--icmp-rate") && m.contains("twice"), "{m}");
    assert!(
        "--iface 0,10.0.0.1/24,02:00:00:00:00:01 --iface 1,10.0.1.1/24,02:00:00:00:00:02"
            .parse::<RouterConfig>()
            .is_ok()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Every forwarded packet verifies; nothing panics; all counted.
    #[test]
    fn never_panics_and_output_verifies(frames in proptest::collection::vec(arb_any_frame(), 1..16)) {
        let mut r = Router::new(format!("{CFG} --neighbor 0.0.0.0,02:00:00:00:00:99").parse().unwrap()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let (v, o) = run(&mut r, f, i % 3, secs(i as u64));
            if let Verdict::Forward { .. } = v {
                let l = parse_ipv4(&o).unwrap();
                prop_assert!(Ipv4::new(&o[l.l3..]).unwrap().checksum_ok());
            }
        }
        assert_counts_balance(&r);
    }
}
