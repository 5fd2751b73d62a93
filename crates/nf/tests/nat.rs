//! NAT: crafted packets for each edge, and properties (out and back gives
//! the original flow; checksums verify with etherparse).

mod common;

use common::*;
use nfkit_nf::{ConfigError, DropReason, Nat, NatConfig, NetworkFunction, Verdict};
use nfkit_packet::strategy::arb_any_frame;
use nfkit_packet::{
    arp_request, checksum, icmp_type, parse_ipv4, verify_checksums, FlowKey, FrameBuilder, MacAddr,
};
use proptest::prelude::*;

const LAN: usize = 0;
const WAN: usize = 1;

fn nat() -> Nat {
    Nat::new(
        "--ext-ip 203.0.113.1 --ports 1024-65535 --expire 60s"
            .parse()
            .unwrap(),
    )
    .unwrap()
}

fn key(f: &[u8]) -> FlowKey {
    FlowKey::from_frame(f, &parse_ipv4(f).unwrap()).unwrap()
}

fn fwd(v: Verdict, port: usize) {
    assert!(
        matches!(v, Verdict::Forward { port: p, .. } if p == port),
        "{v:?}"
    );
}

#[test]
fn udp_out_and_back() {
    let mut n = nat();
    let out = FrameBuilder::udp((ip("10.0.0.5"), 5555), (ip("8.8.8.8"), 53))
        .payload(b"query")
        .build();
    let (v, o) = run(&mut n, &out, LAN, secs(1));
    fwd(v, WAN);
    verify_checksums(&o).unwrap();
    let k = key(&o);
    assert_eq!(k.src_ip, ip("203.0.113.1"));
    assert!(k.src_port >= 1024);
    assert_eq!((k.dst_ip, k.dst_port), (ip("8.8.8.8"), 53));

    let reply = FrameBuilder::udp((ip("8.8.8.8"), 53), (k.src_ip, k.src_port))
        .payload(b"answer")
        .build();
    let (v, r) = run(&mut n, &reply, WAN, secs(2));
    fwd(v, LAN);
    verify_checksums(&r).unwrap();
    assert_eq!(
        key(&r),
        FlowKey::new(ip("8.8.8.8"), 53, ip("10.0.0.5"), 5555, 17)
    );
    assert_eq!(n.stats().flows_created, 1);
    assert_counts_balance(&n);
}

#[test]
fn mapping_is_endpoint_independent() {
    let mut n = nat();
    let a = FrameBuilder::tcp((ip("10.0.0.5"), 4000), (ip("1.1.1.1"), 80)).build();
    let b = FrameBuilder::tcp((ip("10.0.0.5"), 4000), (ip("9.9.9.9"), 443)).build();
    let (_, oa) = run(&mut n, &a, LAN, secs(0));
    let (_, ob) = run(&mut n, &b, LAN, secs(0));
    assert_eq!(key(&oa).src_port, key(&ob).src_port);
    // A different internal host or port gets a different external port.
    let c = FrameBuilder::tcp((ip("10.0.0.6"), 4000), (ip("1.1.1.1"), 80)).build();
    let (_, oc) = run(&mut n, &c, LAN, secs(0));
    assert_ne!(key(&oa).src_port, key(&oc).src_port);
    // Endpoint-independent filtering: another remote host may use the mapping.
    let p = key(&oa).src_port;
    let unsolicited = FrameBuilder::tcp((ip("5.5.5.5"), 9), (ip("203.0.113.1"), p)).build();
    let (v, i) = run(&mut n, &unsolicited, WAN, secs(1));
    fwd(v, LAN);
    assert_eq!(key(&i).dst_ip, ip("10.0.0.5"));
    verify_checksums(&i).unwrap();
}

#[test]
fn inbound_without_mapping_or_not_to_us_is_dropped() {
    let mut n = nat();
    let f = FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("203.0.113.1"), 2000)).build();
    assert_eq!(
        run(&mut n, &f, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
    let f = FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("203.0.113.2"), 2000)).build();
    assert_eq!(
        run(&mut n, &f, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NotForUs)
    );
    assert_eq!(n.stats().dropped(DropReason::NoMapping), 1);
    assert_eq!(n.stats().dropped(DropReason::NotForUs), 1);
    assert_counts_balance(&n);
}

#[test]
fn udp_zero_checksum_stays_zero() {
    let mut n = nat();
    let mut b = FrameBuilder::udp((ip("10.0.0.5"), 7), (ip("8.8.8.8"), 53));
    b.l4 = nfkit_packet::L4::Udp {
        src_port: 7,
        dst_port: 53,
        checksum: false,
    };
    let (_, o) = run(&mut n, &b.build(), LAN, secs(0));
    let l = parse_ipv4(&o).unwrap();
    assert_eq!(&o[l.l4 + 6..l.l4 + 8], &[0, 0]);
    verify_checksums(&o).unwrap();
}

#[test]
fn bad_checksum_stays_bad() {
    let mut n = nat();
    let mut f = FrameBuilder::tcp((ip("10.0.0.5"), 7), (ip("8.8.8.8"), 80))
        .payload(b"x")
        .build();
    let l = parse_ipv4(&f).unwrap();
    f[l.l4 + 16] ^= 0x40; // corrupt the TCP checksum
    f[l.l3 + 10] ^= 0x01; // and the IPv4 one
    let (v, o) = run(&mut n, &f, LAN, secs(0));
    fwd(v, WAN);
    assert!(
        verify_checksums(&o).is_err(),
        "a corrupted packet must not be laundered"
    );
    // Fix the IPv4 header only: the TCP checksum is still wrong by the same amount.
    let mut o2 = o.clone();
    nfkit_packet::Ipv4::new(&mut o2[l.l3..])
        .unwrap()
        .fill_checksum();
    let e = verify_checksums(&o2).unwrap_err();
    assert!(e.starts_with("TCP checksum"), "{e}");
}

#[test]
fn icmp_echo_by_identifier() {
    let mut n = nat();
    let req = FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("8.8.8.8"), true, 77)
        .payload(b"ping")
        .build();
    let (v, o) = run(&mut n, &req, LAN, secs(0));
    fwd(v, WAN);
    verify_checksums(&o).unwrap();
    let k = key(&o);
    assert_eq!(k.src_ip, ip("203.0.113.1"));
    let rep = FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("203.0.113.1"), false, k.src_port)
        .payload(b"ping")
        .build();
    let (v, r) = run(&mut n, &rep, WAN, secs(0));
    fwd(v, LAN);
    verify_checksums(&r).unwrap();
    assert_eq!(
        key(&r),
        FlowKey::new(ip("8.8.8.8"), 77, ip("10.0.0.5"), 77, 1)
    );
    // An echo request from the WAN has no mapping to use.
    let req_in = FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("203.0.113.1"), true, 5).build();
    assert_eq!(
        run(&mut n, &req_in, WAN, secs(0)).0,
        Verdict::Drop(DropReason::UnsupportedProtocol)
    );
}

/// An ICMP error from the WAN quoting the translated packet.
fn icmp_error_about(
    translated: &[u8],
    from: &str,
    to: std::net::Ipv4Addr,
    t: u8,
    code: u8,
) -> Vec<u8> {
    let l = parse_ipv4(translated).unwrap();
    let quote_end = (l.l4 + 8).min(l.end).max(l.end.min(l.l4 + 28));
    FrameBuilder::icmp(ip(from), to, t, code)
        .payload(&translated[l.l3..quote_end])
        .build()
}

#[test]
fn icmp_error_from_wan_translates_quoted_datagram() {
    for (mk, quote_all) in [
        (
            FrameBuilder::udp((ip("10.0.0.5"), 5555), (ip("8.8.8.8"), 53)).payload(&[1; 40]),
            true,
        ),
        (
            FrameBuilder::tcp((ip("10.0.0.5"), 6666), (ip("8.8.8.8"), 80)),
            true,
        ),
        (
            FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("8.8.8.8"), true, 99),
            false,
        ),
    ] {
        let mut n = nat();
        let orig = mk.build();
        let (_, o) = run(&mut n, &orig, LAN, secs(0));
        let err = icmp_error_about(
            &o,
            "192.0.2.254",
            ip("203.0.113.1"),
            icmp_type::DEST_UNREACHABLE,
            3,
        );
        let _ = quote_all;
        let (v, e) = run(&mut n, &err, WAN, secs(0));
        fwd(v, LAN);
        verify_checksums(&e).expect("outer IPv4 and ICMP checksums");
        let l = parse_ipv4(&e).unwrap();
        assert_eq!(&e[l.l3 + 16..l.l3 + 20], &[10, 0, 0, 5]);
        let q = l.l4 + 8;
        assert_eq!(checksum::checksum(&e[q..q + 20]), 0, "quoted IPv4 checksum");
        // The quoted datagram is the original, as the LAN host sent it.
        let lo = parse_ipv4(&orig).unwrap();
        let quoted_len = l.end - q;
        assert_eq!(&e[q..q + 10], &orig[lo.l3..lo.l3 + 10]);
        assert_eq!(
            &e[q + 12..q + quoted_len],
            &orig[lo.l3 + 12..lo.l3 + quoted_len]
        );
        assert_counts_balance(&n);
    }
}

#[test]
fn icmp_error_from_lan_translates_quoted_datagram() {
    let mut n = nat();
    let (_, o) = run(
        &mut n,
        &FrameBuilder::udp((ip("10.0.0.5"), 5555), (ip("8.8.8.8"), 53)).build(),
        LAN,
        secs(0),
    );
    let p = key(&o).src_port;
    let (_, inb) = run(
        &mut n,
        &FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("203.0.113.1"), p))
            .payload(&[9; 12])
            .build(),
        WAN,
        secs(0),
    );
    // The LAN host answers with port unreachable, quoting what it received.
    let err = icmp_error_about(
        &inb,
        "10.0.0.5",
        ip("8.8.8.8"),
        icmp_type::DEST_UNREACHABLE,
        3,
    );
    let (v, e) = run(&mut n, &err, LAN, secs(0));
    fwd(v, WAN);
    verify_checksums(&e).unwrap();
    let l = parse_ipv4(&e).unwrap();
    assert_eq!(&e[l.l3 + 12..l.l3 + 16], &[203, 0, 113, 1]);
    let q = l.l4 + 8;
    assert_eq!(
        &e[q + 16..q + 20],
        &[203, 0, 113, 1],
        "quoted destination is external again"
    );
    assert_eq!(u16::from_be_bytes([e[q + 22], e[q + 23]]), p);
    assert_eq!(checksum::checksum(&e[q..q + 20]), 0);
}

#[test]
fn options_vlan_and_fragments() {
    let mut n = nat();
    let f = FrameBuilder::udp((ip("10.0.0.5"), 1000), (ip("8.8.8.8"), 53))
        .vlan(10)
        .ip_options(&[1, 1, 1, 0])
        .fragment(true, 0)
        .payload(&[7; 24])
        .build();
    let (v, o) = run(&mut n, &f, LAN, secs(0));
    fwd(v, WAN);
    verify_checksums(&o).unwrap();
    assert_eq!(key(&o).src_ip, ip("203.0.113.1"));
    let later = FrameBuilder::udp((ip("10.0.0.5"), 1000), (ip("8.8.8.8"), 53))
        .fragment(false, 3)
        .payload(&[7; 8])
        .build();
    // It follows its first fragment (same addresses, protocol and IP ID).
    let (v, o) = run(&mut n, &later, LAN, secs(0));
    fwd(v, WAN);
    let l = parse_ipv4(&o).unwrap();
    assert_eq!(&o[l.l3 + 12..l.l3 + 16], &[203, 0, 113, 1]);
    assert_eq!(checksum::checksum(&o[l.l3..l.l4]), 0);
    // One of another datagram has no first fragment to follow.
    let mut other = FrameBuilder::udp((ip("10.0.0.5"), 1000), (ip("8.8.8.8"), 53))
        .fragment(false, 3)
        .payload(&[7; 8]);
    other.ident = 99;
    assert_eq!(
        run(&mut n, &other.build(), LAN, secs(0)).0,
        Verdict::Drop(DropReason::Fragment)
    );
}

#[test]
fn malformed_and_non_ipv4() {
    let mut n = nat();
    let f = FrameBuilder::tcp((ip("10.0.0.5"), 1), (ip("8.8.8.8"), 2)).build();
    for cut in [10, 20, 40, 50] {
        assert_eq!(
            run(&mut n, &f[..cut], LAN, secs(0)).0,
            Verdict::Drop(DropReason::Malformed),
            "cut {cut}"
        );
    }
    let arp = arp_request(MacAddr([2, 0, 0, 0, 0, 9]), ip("10.0.0.5"), ip("10.0.0.1"));
    assert_eq!(
        run(&mut n, &arp, LAN, secs(0)).0,
        Verdict::Drop(DropReason::NotIpv4)
    );
    assert_eq!(
        run(&mut n, &arp, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NotIpv4)
    );
    let gre = FrameBuilder::raw(ip("10.0.0.5"), ip("8.8.8.8"), 47).build();
    assert_eq!(
        run(&mut n, &gre, LAN, secs(0)).0,
        Verdict::Drop(DropReason::UnsupportedProtocol)
    );
    assert_eq!(
        run(&mut n, &f, 2, secs(0)).0,
        Verdict::Drop(DropReason::UnknownPort)
    );
    assert_counts_balance(&n);
}

#[test]
fn full_table_and_exhausted_ports() {
    let mut n = Nat::new("--ext-ip 203.0.113.1 --capacity 2".parse().unwrap()).unwrap();
    for (i, want) in [(1, None), (2, None), (3, Some(DropReason::TableFull))] {
        let f = FrameBuilder::udp((ip("10.0.0.5"), i), (ip("8.8.8.8"), 53)).build();
        let v = run(&mut n, &f, LAN, secs(0)).0;
        match want {
            None => fwd(v, WAN),
            Some(r) => assert_eq!(v, Verdict::Drop(r)),
        }
    }
    let mut n = Nat::new("--ext-ip 203.0.113.1 --ports 5000-5001".parse().unwrap()).unwrap();
    for i in 1..=2 {
        let f = FrameBuilder::udp((ip("10.0.0.5"), i), (ip("8.8.8.8"), 53)).build();
        fwd(run(&mut n, &f, LAN, secs(0)).0, WAN);
    }
    let f = FrameBuilder::udp((ip("10.0.0.5"), 3), (ip("8.8.8.8"), 53)).build();
    assert_eq!(
        run(&mut n, &f, LAN, secs(0)).0,
        Verdict::Drop(DropReason::PortsExhausted)
    );
    // Ports are per protocol: TCP still has both.
    let t = FrameBuilder::tcp((ip("10.0.0.5"), 3), (ip("8.8.8.8"), 53)).build();
    fwd(run(&mut n, &t, LAN, secs(0)).0, WAN);
    assert_counts_balance(&n);
}

/// The RFC 2544 flows pattern: 65,536 UDP flows of one host, its source
/// port counting through every value. One external address has 64,512
/// ports (1024-65535): the rest are counted as `ports_exhausted` while the
/// mapped flows go on. Two addresses hold them all, and every reply
/// comes back to its flow; a table smaller than the flows counts
/// `table_full`.
#[test]
fn sixty_five_thousand_flows_of_one_host() {
    let host = ip("10.0.0.2");
    let server = ip("198.51.100.1");
    let out = |p: u16| FrameBuilder::udp((host, p), (server, 5000)).build();
    let mut buf = vec![0u8; BUF];
    let mut send = |n: &mut Nat, f: &[u8], port: usize| {
        buf[..f.len()].copy_from_slice(f);
        let v = n.process(&mut buf, f.len(), port, secs(1));
        (v, buf[..f.len()].to_vec())
    };

    let mut one = Nat::new("--ext-ip 203.0.113.1".parse().unwrap()).unwrap();
    for p in 0..=u16::MAX {
        send(&mut one, &out(p), LAN);
    }
    assert_eq!(one.stats().forwarded, 64_512);
    assert_eq!(
        one.stats().drops().collect::<Vec<_>>(),
        [(DropReason::PortsExhausted, 1024)]
    );
    fwd(send(&mut one, &out(0), LAN).0, WAN);
    assert_counts_balance(&one);

    let mut two = Nat::new("--ext-ip 203.0.113.1,203.0.113.2".parse().unwrap()).unwrap();
    let mut seen = std::collections::HashSet::new();
    for p in 0..=u16::MAX {
        let (v, o) = send(&mut two, &out(p), LAN);
        fwd(v, WAN);
        let k = key(&o);
        assert!(seen.insert((k.src_ip, k.src_port)), "{k:?} given twice");
        let r = k.reversed();
        let back = FrameBuilder::udp((r.src_ip, r.src_port), (r.dst_ip, r.dst_port)).build();
        let (v, b) = send(&mut two, &back, WAN);
        fwd(v, LAN);
        assert_eq!(key(&b), FlowKey::new(server, 5000, host, p, 17));
    }
    assert_eq!(two.stats().flows_created, 65_536);
    assert_eq!(two.stats().dropped_total(), 0);

    let mut small = Nat::new("--ext-ip 203.0.113.1 --capacity 1000".parse().unwrap()).unwrap();
    for p in 0..2000 {
        send(&mut small, &out(p), LAN);
    }
    assert_eq!(
        small.stats().drops().collect::<Vec<_>>(),
        [(DropReason::TableFull, 1000)]
    );
    fwd(send(&mut small, &out(999), LAN).0, WAN);
    assert_counts_balance(&small);
}

#[test]
fn mappings_expire_and_ports_return() {
    let mut n = Nat::new(
        "--ext-ip 203.0.113.1 --ports 5000-5000 --expire 10s"
            .parse()
            .unwrap(),
    )
    .unwrap();
    let a = FrameBuilder::udp((ip("10.0.0.5"), 1), (ip("8.8.8.8"), 53)).build();
    let (_, o) = run(&mut n, &a, LAN, secs(0));
    assert_eq!(key(&o).src_port, 5000);
    // Inbound traffic refreshes the mapping.
    let back = FrameBuilder::udp((ip("8.8.8.8"), 53), (ip("203.0.113.1"), 5000)).build();
    fwd(run(&mut n, &back, WAN, secs(9)).0, LAN);
    fwd(run(&mut n, &back, WAN, secs(18)).0, LAN);
    assert_eq!(n.mappings().count(), 1);
    // 10 s idle: gone; its port serves the next flow.
    assert_eq!(
        run(&mut n, &back, WAN, secs(28)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
    assert_eq!(n.stats().flows_expired, 1);
    let b = FrameBuilder::udp((ip("10.0.0.7"), 1), (ip("8.8.8.8"), 53)).build();
    let (_, o) = run(&mut n, &b, LAN, secs(28));
    assert_eq!(key(&o).src_port, 5000);
}

#[test]
fn eth_rewrite_when_configured() {
    let mut n = Nat::new(
        "--ext-ip 203.0.113.1 --wan-eth-dest 02:00:00:00:00:aa --wan-eth-src 02:00:00:00:00:bb"
            .parse()
            .unwrap(),
    )
    .unwrap();
    let f = FrameBuilder::udp((ip("10.0.0.5"), 1), (ip("8.8.8.8"), 53)).build();
    let (_, o) = run(&mut n, &f, LAN, secs(0));
    assert_eq!(&o[0..6], &[2, 0, 0, 0, 0, 0xaa]);
    assert_eq!(&o[6..12], &[2, 0, 0, 0, 0, 0xbb]);
}

#[test]
fn config_errors() {
    assert_eq!(
        "--ports 1024-65535".parse::<NatConfig>(),
        Err(ConfigError::Required("--ext-ip"))
    );
    assert_eq!(
        "--ext-ip 1.2.3.4 --ports 9-1".parse::<NatConfig>(),
        Err(ConfigError::InvertedRange { lo: 9, hi: 1 })
    );
    assert_eq!(
        "--ext-ip 1.2.3.4 --capacity 0".parse::<NatConfig>(),
        Err(ConfigError::ZeroCapacity { what: "NAT flow" })
    );
    assert_eq!(
        "--ext-ip 1.2.3.4 --lan 1 --wan 1".parse::<NatConfig>(),
        Err(ConfigError::SamePort(1))
    );
    assert!(matches!(
        "--ext-ip 1.2.3.4 --bogus 1".parse::<NatConfig>(),
        Err(ConfigError::UnknownOption { .. })
    ));
    assert!(matches!(
        "--ext-ip 1.2.3 ".parse::<NatConfig>(),
        Err(ConfigError::BadValue { .. })
    ));
    let c: NatConfig = "--ext-ip=1.2.3.4 --expire 500ms --lan 1 --wan 0"
        .parse()
        .unwrap();
    assert_eq!(
        (c.lan, c.wan, c.timeouts),
        (
            1,
            0,
            nfkit_nf::NatTimeouts::all(std::time::Duration::from_millis(500))
        )
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Translating out and back yields the original flow, and every
    /// translated packet's checksums verify.
    #[test]
    fn out_and_back_is_identity(flows in proptest::collection::vec(
        (any::<u32>(), 1u16.., any::<u32>(), 1u16.., 0u8..3, proptest::collection::vec(any::<u8>(), 0..64)), 1..16)) {
        let mut n = Nat::new("--ext-ip 203.0.113.1 --ports 2000-2100".parse().unwrap()).unwrap();
        for (i, (sip, sp, dip, dp, kind, payload)) in flows.into_iter().enumerate() {
            let (sip, dip) = (std::net::Ipv4Addr::from(sip), std::net::Ipv4Addr::from(dip));
            let b = match kind {
                0 => FrameBuilder::tcp((sip, sp), (dip, dp)),
                1 => FrameBuilder::udp((sip, sp), (dip, dp)),
                _ => FrameBuilder::icmp_echo(sip, dip, true, sp),
            }.payload(&payload);
            let orig = b.build();
            let (v, o) = run(&mut n, &orig, LAN, secs(i as u64));
            prop_assert!(matches!(v, Verdict::Forward { port: WAN, .. }), "{:?}", v);
            prop_assert_eq!(verify_checksums(&o), Ok(()));
            let k = key(&o);
            prop_assert_eq!(k.src_ip, ip("203.0.113.1"));
            prop_assert!((2000..=2100).contains(&k.src_port));
            // The reply, built as the remote would send it.
            let r = k.reversed();
            let rb = match kind {
                0 => FrameBuilder::tcp((r.src_ip, r.src_port), (r.dst_ip, r.dst_port)),
                1 => FrameBuilder::udp((r.src_ip, r.src_port), (r.dst_ip, r.dst_port)),
                _ => FrameBuilder::icmp_echo(r.src_ip, r.dst_ip, false, r.dst_port),
            }.payload(&payload);
            let (v, back) = run(&mut n, &rb.build(), WAN, secs(i as u64));
            prop_assert!(matches!(v, Verdict::Forward { port: LAN, .. }), "{:?}", v);
            prop_assert_eq!(verify_checksums(&back), Ok(()));
            prop_assert_eq!(key(&back), key(&orig).reversed());
        }
        assert_counts_balance(&n);
    }

    /// No input panics, on either port, and every packet is counted.
    #[test]
    fn never_panics(frames in proptest::collection::vec(arb_any_frame(), 1..16)) {
        let mut n = Nat::new("--ext-ip 203.0.113.1 --capacity 8".parse().unwrap()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let (v, o) = run(&mut n, f, i % 2, secs(i as u64));
            if let Verdict::Forward { .. } = v {
                prop_assert_eq!(o.len(), f.len());
            }
        }
        assert_counts_balance(&n);
    }
}
