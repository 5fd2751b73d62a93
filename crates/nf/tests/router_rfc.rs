//! The router against RFC 1812's forwarding rules, one test per rule,
//! named by its section. Rules not met are listed in
//! `crates/nf/src/router.rs`.

mod common;

use common::*;
use nfkit_nf::{DropReason, NetworkFunction, Router, Verdict};
use nfkit_packet::{
    checksum, icmp_type, parse_ipv4, verify_checksums, FrameBuilder, Icmp, Ipv4, MacAddr,
};

const CFG: &str = "--iface 0,192.168.1.1/24,02:00:00:00:01:01 \
                   --iface 1,10.0.1.1/24,02:00:00:00:02:01 \
                   --route 0.0.0.0/0,1,10.0.1.254 \
                   --neighbor 10.0.1.254,02:00:00:00:aa:01";

const HOST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xbb, 0x50]);
const R0_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);

fn router(extra: &str) -> Router {
    Router::new(format!("{CFG} {extra}").parse().unwrap()).unwrap()
}

fn udp(src: &str, dst: &str, ttl: u8) -> Vec<u8> {
    FrameBuilder::udp((ip(src), 5000), (ip(dst), 53))
        .macs(HOST_MAC, R0_MAC)
        .ttl(ttl)
        .payload(&[0x42; 64])
        .build()
}

fn drop_of(r: &mut Router, f: &[u8]) -> Option<DropReason> {
    match run(r, f, 0, secs(0)).0 {
        Verdict::Drop(d) => Some(d),
        _ => None,
    }
}

#[test]
fn rfc1812_5_2_2_ip_header_validation() {
    let mut r = router("");
    let good = udp("192.168.1.50", "8.8.8.8", 64);
    assert_eq!(drop_of(&mut r, &good), None);
    let mut bad_sum = good.clone();
    bad_sum[14 + 10] ^= 1;
    assert_eq!(drop_of(&mut r, &bad_sum), Some(DropReason::BadChecksum));
    let mut bad_version = good.clone();
    bad_version[14] = 0x65;
    assert!(drop_of(&mut r, &bad_version).is_some());
    let mut short_ihl = good.clone();
    short_ihl[14] = 0x44;
    assert!(drop_of(&mut r, &short_ihl).is_some());
    let mut long_total = good.clone();
    long_total[16..18].copy_from_slice(&4000u16.to_be_bytes());
    assert!(drop_of(&mut r, &long_total).is_some());
    let mut total_below_header = good.clone();
    total_below_header[16..18].copy_from_slice(&12u16.to_be_bytes());
    assert!(drop_of(&mut r, &total_below_header).is_some());
    assert_eq!(r.stats().icmp_generated, 0);
    assert_counts_balance(&r);
}

#[test]
fn rfc1812_5_3_1_ttl_decremented_checksum_updated() {
    let mut r = router("");
    let f = udp("192.168.1.50", "8.8.8.8", 64);
    let (v, o) = run(&mut r, &f, 0, secs(0));
    assert!(matches!(v, Verdict::Forward { port: 1, .. }));
    let l = parse_ipv4(&o).unwrap();
    assert_eq!(Ipv4::new(&o[l.l3..]).unwrap().ttl(), 63);
    verify_checksums(&o).unwrap();
}

fn is_icmp_error(o: &[u8], t: u8, code: u8) {
    verify_checksums(o).unwrap();
    let l = parse_ipv4(o).unwrap();
    let icmp = Icmp::new(&o[l.l4..l.end]).unwrap();
    assert_eq!((icmp.icmp_type(), icmp.code()), (t, code));
}

#[test]
fn rfc1812_5_3_1_ttl_expired_time_exceeded() {
    for ttl in [0, 1] {
        let mut r = router("");
        let (v, o) = run(&mut r, &udp("192.168.1.50", "8.8.8.8", ttl), 0, secs(0));
        assert!(matches!(v, Verdict::Forward { port: 0, .. }));
        is_icmp_error(&o, icmp_type::TIME_EXCEEDED, 0);
    }
    // Addressed to the router itself: never discarded for its TTL.
    let mut r = router("");
    assert_eq!(
        drop_of(&mut r, &udp("192.168.1.50", "10.0.1.1", 1)),
        Some(DropReason::LocalDelivery)
    );
}

#[test]
fn rfc1812_5_2_7_1_no_route_destination_unreachable() {
    let mut r = Router::new(
        "--iface 0,192.168.1.1/24,02:00:00:00:01:01 --iface 1,10.0.1.1/24,02:00:00:00:02:01"
            .parse()
            .unwrap(),
    )
    .unwrap();
    let (v, o) = run(&mut r, &udp("192.168.1.50", "8.8.8.8", 64), 0, secs(0));
    assert!(matches!(v, Verdict::Forward { port: 0, .. }));
    is_icmp_error(&o, icmp_type::DEST_UNREACHABLE, 0);
}

#[test]
fn rfc1812_4_3_2_3_error_quotes_as_much_as_fits_576() {
    let mut r = router("");
    let f = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
        .macs(HOST_MAC, R0_MAC)
        .ttl(1)
        .payload(&[9; 1200])
        .build();
    let (_, o) = run(&mut r, &f, 0, secs(0));
    let l = parse_ipv4(&o).unwrap();
    assert_eq!(l.end - l.l3, 576);
    assert_eq!(&o[l.l4 + 8..l.end], &f[14..14 + 576 - 28]);
}

#[test]
fn rfc1812_4_3_2_4_error_source_is_the_output_interface_address() {
    let mut r = router("");
    let (_, o) = run(&mut r, &udp("192.168.1.50", "8.8.8.8", 1), 0, secs(0));
    let l = parse_ipv4(&o).unwrap();
    let h = Ipv4::new(&o[l.l3..]).unwrap();
    assert_eq!((h.src(), h.dst()), (ip("192.168.1.1"), ip("192.168.1.50")));
    assert_eq!(&o[0..12], &[HOST_MAC.0, R0_MAC.0].concat());
    assert_eq!(checksum::checksum(&o[l.l3..l.l4]), 0);
}

#[test]
fn rfc1812_4_3_2_7_no_error_about_errors_fragments_or_non_unique_sources() {
    let mut r = router("");
    let err = FrameBuilder::icmp(
        ip("192.168.1.50"),
        ip("8.8.8.8"),
        icmp_type::DEST_UNREACHABLE,
        3,
    )
    .macs(HOST_MAC, R0_MAC)
    .ttl(1)
    .payload(&[0x45; 28])
    .build();
    assert_eq!(drop_of(&mut r, &err), Some(DropReason::TtlExceeded));
    let later = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
        .macs(HOST_MAC, R0_MAC)
        .ttl(1)
        .fragment(false, 50)
        .payload(&[0; 16])
        .build();
    assert_eq!(drop_of(&mut r, &later), Some(DropReason::TtlExceeded));
    // A query is not an error: it gets one.
    let ping = FrameBuilder::icmp_echo(ip("192.168.1.50"), ip("8.8.8.8"), true, 1)
        .macs(HOST_MAC, R0_MAC)
        .ttl(1)
        .build();
    assert_eq!(drop_of(&mut r, &ping), None);
    assert_eq!(r.stats().icmp_generated, 1);
}

#[test]
fn rfc1812_4_3_2_8_icmp_error_rate_limit() {
    let mut r = router("--icmp-rate 10");
    let f = udp("192.168.1.50", "8.8.8.8", 1);
    let sent = |r: &mut Router, t| {
        (0..50)
            .filter(|_| matches!(run(r, &f, 0, t).0, Verdict::Forward { .. }))
            .count()
    };
    assert_eq!(sent(&mut r, secs(5)), 10, "a burst of the rate");
    assert_eq!(sent(&mut r, secs(5)), 0);
    assert_eq!(sent(&mut r, std::time::Duration::from_millis(5500)), 5);
    assert_eq!(r.stats().dropped(DropReason::IcmpRateLimited), 135);
    assert_counts_balance(&r);
}

#[test]
fn rfc1812_5_3_7_martian_sources_not_forwarded() {
    let mut r = router("");
    for src in [
        "0.1.2.3",
        "127.0.0.1",
        "224.0.0.5",
        "240.0.0.1",
        "255.255.255.255",
    ] {
        assert_eq!(
            drop_of(&mut r, &udp(src, "8.8.8.8", 64)),
            Some(DropReason::Martian),
            "{src}"
        );
    }
    assert_eq!(r.stats().icmp_generated, 0);
}

#[test]
fn rfc1812_5_3_7_martian_destinations_not_forwarded() {
    let mut r = router("");
    for dst in ["0.0.0.7", "127.0.0.1", "240.0.0.1", "239.1.2.3"] {
        assert_eq!(
            drop_of(&mut r, &udp("192.168.1.50", dst, 64)),
            Some(DropReason::Martian),
            "{dst}"
        );
    }
}

#[test]
fn rfc1812_5_3_5_broadcasts_not_forwarded() {
    let mut r = router("");
    for dst in ["255.255.255.255", "10.0.1.255", "192.168.1.255"] {
        assert_eq!(
            drop_of(&mut r, &udp("192.168.1.50", dst, 64)),
            Some(DropReason::Martian),
            "{dst}"
        );
    }
}

#[test]
fn rfc1812_5_3_4_link_layer_broadcast_not_forwarded() {
    let mut r = router("");
    for mac in [MacAddr::BROADCAST, MacAddr([0x01, 0, 0x5e, 0, 0, 1])] {
        let f = FrameBuilder::udp((ip("192.168.1.50"), 1), (ip("8.8.8.8"), 2))
            .macs(HOST_MAC, mac)
            .build();
        assert_eq!(drop_of(&mut r, &f), Some(DropReason::Martian));
    }
}
