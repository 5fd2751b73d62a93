//! The NAT against the behavioural requirements of RFC 4787 (UDP), RFC
//! 5382 (TCP) and RFC 5508 (ICMP), one test per requirement, named by its
//! ID. Requirements the NAT does not meet are listed, with reasons, in
//! `crates/nf/src/nat.rs`.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use nfkit_nf::{DropReason, Filtering, Nat, NatConfig, NatTimeouts, NetworkFunction, Verdict};
use nfkit_packet::{checksum, icmp_type, parse_ipv4, verify_checksums, FlowKey, FrameBuilder, L4};

const LAN: usize = 0;
const WAN: usize = 1;
const EXT: &str = "203.0.113.1";

fn nat_with(opts: &str) -> Nat {
    Nat::new(format!("--ext-ip {EXT} {opts}").parse().unwrap()).unwrap()
}

fn key(f: &[u8]) -> FlowKey {
    FlowKey::from_frame(f, &parse_ipv4(f).unwrap()).unwrap()
}

fn udp(src: (&str, u16), dst: (&str, u16)) -> Vec<u8> {
    FrameBuilder::udp((ip(src.0), src.1), (ip(dst.0), dst.1))
        .payload(b"data")
        .build()
}

fn tcp(src: (&str, u16), dst: (&str, u16), flags: u8) -> Vec<u8> {
    let mut b = FrameBuilder::tcp((ip(src.0), src.1), (ip(dst.0), dst.1));
    if let L4::Tcp { flags: f, .. } = &mut b.l4 {
        *f = flags;
    }
    b.build()
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

/// Send `f` from the LAN; the translated packet (panics unless forwarded to the WAN).
fn out(n: &mut Nat, f: &[u8], t: Duration) -> Vec<u8> {
    let (v, o) = run(n, f, LAN, t);
    assert!(matches!(v, Verdict::Forward { port: WAN, .. }), "{v:?}");
    verify_checksums(&o).unwrap();
    o
}

/// Send `f` from the WAN; the verdict and translated packet.
fn inb(n: &mut Nat, f: &[u8], t: Duration) -> (Verdict, Vec<u8>) {
    run(n, f, WAN, t)
}

fn to_lan(v: Verdict) -> bool {
    matches!(v, Verdict::Forward { port: LAN, .. })
}

/// The external port of a LAN endpoint's packet to `dst`.
fn ext_port(n: &mut Nat, src: (&str, u16), dst: (&str, u16), t: Duration) -> u16 {
    let o = out(n, &udp(src, dst), t);
    assert_eq!(key(&o).src_ip, ip(EXT));
    key(&o).src_port
}

/// An ICMP error of `t`/`code` from `from` to `to` quoting `about` (its
/// IPv4 header and 8 bytes).
fn icmp_error(from: &str, to: Ipv4Addr, t: u8, code: u8, about: &[u8]) -> Vec<u8> {
    let l = parse_ipv4(about).unwrap();
    FrameBuilder::icmp(ip(from), to, t, code)
        .payload(&about[l.l3..(l.l4 + 8).min(l.end)])
        .build()
}

// ---------------------------------------------------------------- RFC 4787

#[test]
fn rfc4787_req_1_endpoint_independent_mapping() {
    let mut n = nat_with("");
    let a = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
    let b = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.2", 53), secs(1));
    let c = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 5353), secs(2));
    assert_eq!((a, a), (b, c), "same mapping for every remote endpoint");
}

#[test]
fn rfc4787_req_2_ip_address_pooling_paired() {
    // One external address: every mapping of an internal host uses it.
    let mut n = nat_with("");
    for p in 1000..1010 {
        let o = out(&mut n, &udp(("10.0.0.5", p), ("198.51.100.1", 53)), secs(0));
        assert_eq!(key(&o).src_ip, ip(EXT));
    }
}

#[test]
fn rfc4787_req_3_no_port_overloading() {
    let mut n = nat_with("--ports 5000-5009");
    let mut seen = std::collections::HashSet::new();
    for h in 0..10u16 {
        let o = out(
            &mut n,
            &udp((&format!("10.0.0.{}", h + 1), 4000), ("198.51.100.1", 53)),
            secs(0),
        );
        assert!(seen.insert(key(&o).src_port), "external port reused");
    }
    // Range exhausted: a new endpoint is refused, never given a used port.
    let (v, _) = run(
        &mut n,
        &udp(("10.0.0.99", 4000), ("198.51.100.1", 53)),
        LAN,
        secs(0),
    );
    assert_eq!(v, Verdict::Drop(DropReason::PortsExhausted));
}

#[test]
fn rfc4787_req_4_port_parity_preserved() {
    let mut n = nat_with("--ports 5000-5003");
    let odd = ext_port(&mut n, ("10.0.0.5", 4001), ("198.51.100.1", 53), secs(0));
    let even = ext_port(&mut n, ("10.0.0.5", 4002), ("198.51.100.1", 53), secs(0));
    assert_eq!((odd % 2, even % 2), (1, 0));
    // Out of odd ports after one more: parity is then given up, not the packet.
    let odd2 = ext_port(&mut n, ("10.0.0.5", 4003), ("198.51.100.1", 53), secs(0));
    assert_eq!(odd2 % 2, 1);
    let odd3 = ext_port(&mut n, ("10.0.0.5", 4005), ("198.51.100.1", 53), secs(0));
    assert_eq!(odd3 % 2, 0);
}

#[test]
fn rfc4787_req_5_udp_mapping_timer_at_least_2_minutes() {
    let d = NatConfig::new(ip(EXT)).timeouts;
    assert!(d.udp >= secs(300), "REQ-5c recommends 5 min or more");
    let mut n = nat_with("");
    let p = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
    let reply = udp(("198.51.100.1", 53), (EXT, p));
    assert!(
        to_lan(inb(&mut n, &reply, secs(299)).0),
        "alive after 299 s idle"
    );
    assert!(to_lan(inb(&mut n, &reply, secs(598)).0));
    let (v, _) = inb(&mut n, &reply, secs(899));
    assert_eq!(
        v,
        Verdict::Drop(DropReason::NoMapping),
        "expired after 301 s idle"
    );
}

#[test]
fn rfc4787_req_6_outbound_refresh() {
    let mut n = nat_with("--udp-timeout 120s");
    let p = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
    for t in [100, 200, 300] {
        assert_eq!(
            ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(t)),
            p
        );
    }
    let reply = udp(("198.51.100.1", 53), (EXT, p));
    assert!(to_lan(inb(&mut n, &reply, secs(419)).0));
    assert_eq!(n.stats().flows_created, 1);
}

#[test]
fn rfc4787_req_8_filtering_behaviour() {
    assert_eq!(
        NatConfig::new(ip(EXT)).filtering,
        Filtering::EndpointIndependent
    );
    for (opt, same_host_other_port, other_host) in [
        ("endpoint", true, true),
        ("address", true, false),
        ("address-port", false, false),
    ] {
        let mut n = nat_with(&format!("--filtering {opt}"));
        let p = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
        let (v, i) = inb(&mut n, &udp(("198.51.100.1", 53), (EXT, p)), secs(1));
        assert!(
            to_lan(v),
            "{opt}: the contacted endpoint always gets through"
        );
        assert_eq!(key(&i).dst_ip, ip("10.0.0.5"));
        let (v, _) = inb(&mut n, &udp(("198.51.100.1", 99), (EXT, p)), secs(1));
        assert_eq!(to_lan(v), same_host_other_port, "{opt}");
        if !same_host_other_port {
            assert_eq!(v, Verdict::Drop(DropReason::Blocked));
        }
        let (v, _) = inb(&mut n, &udp(("198.51.100.7", 53), (EXT, p)), secs(1));
        assert_eq!(to_lan(v), other_host, "{opt}");
        assert_counts_balance(&n);
    }
}

#[test]
fn rfc4787_req_8_filter_forgets_remotes_of_an_expired_mapping() {
    let mut n = nat_with("--filtering address --udp-timeout 120s --ports 5000-5000");
    let p = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
    // The mapping expires; another host gets the same external port.
    let q = ext_port(&mut n, ("10.0.0.6", 4000), ("198.51.100.2", 53), secs(200));
    assert_eq!(p, q);
    let (v, _) = inb(&mut n, &udp(("198.51.100.1", 53), (EXT, q)), secs(201));
    assert_eq!(v, Verdict::Drop(DropReason::Blocked));
}

fn hairpin(n: &mut Nat) {
    // B has a mapping; A sends to B's external endpoint.
    let pb = ext_port(n, ("10.0.0.6", 6000), ("198.51.100.1", 53), secs(0));
    let pa = ext_port(n, ("10.0.0.5", 5000), ("198.51.100.1", 53), secs(0));
    let (v, h) = run(n, &udp(("10.0.0.5", 5000), (EXT, pb)), LAN, secs(1));
    assert!(to_lan(v), "hairpinned back to the LAN: {v:?}");
    verify_checksums(&h).unwrap();
    // REQ-9a: external source IP address and port.
    assert_eq!(key(&h), FlowKey::new(ip(EXT), pa, ip("10.0.0.6"), 6000, 17));
}

#[test]
fn rfc4787_req_9_hairpinning_external_source_ip_and_port() {
    hairpin(&mut nat_with(""));
}

#[test]
fn rfc4787_req_10_no_alg_payload_untouched() {
    // No ALG: an address in the payload is not rewritten.
    let mut n = nat_with("");
    let f = FrameBuilder::udp((ip("10.0.0.5"), 5060), (ip("198.51.100.1"), 5060))
        .payload(b"INVITE sip:x@10.0.0.5")
        .build();
    let o = out(&mut n, &f, secs(0));
    assert!(o.ends_with(b"INVITE sip:x@10.0.0.5"));
}

#[test]
fn rfc4787_req_11_deterministic_under_load() {
    let mut n = nat_with("--ports 5000-5099 --filtering address");
    let p = ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.1", 53), secs(0));
    // Exhaust the range with other hosts: the mapping and its filtering stay.
    for h in 0..200u16 {
        let _ = run(
            &mut n,
            &udp(
                (&format!("10.1.{}.{}", h / 200, h % 200 + 1), 4000),
                ("198.51.100.9", 53),
            ),
            LAN,
            secs(1),
        );
    }
    assert_eq!(
        ext_port(&mut n, ("10.0.0.5", 4000), ("198.51.100.2", 53), secs(2)),
        p
    );
    assert!(to_lan(
        inb(&mut n, &udp(("198.51.100.2", 53), (EXT, p)), secs(2)).0
    ));
    assert_eq!(
        inb(&mut n, &udp(("198.51.100.3", 53), (EXT, p)), secs(2)).0,
        Verdict::Drop(DropReason::Blocked)
    );
}

#[test]
fn rfc4787_req_12_icmp_does_not_terminate_mapping() {
    let mut n = nat_with("");
    let f = udp(("10.0.0.5", 4000), ("198.51.100.1", 53));
    let o = out(&mut n, &f, secs(0));
    let p = key(&o).src_port;
    for (t, code) in [
        (icmp_type::DEST_UNREACHABLE, 3),
        (icmp_type::TIME_EXCEEDED, 0),
    ] {
        let e = icmp_error("192.0.2.1", ip(EXT), t, code, &o);
        assert!(to_lan(inb(&mut n, &e, secs(1)).0));
    }
    assert_eq!(n.mappings().count(), 1);
    assert!(to_lan(
        inb(&mut n, &udp(("198.51.100.1", 53), (EXT, p)), secs(2)).0
    ));
}

#[test]
fn rfc4787_req_14_fragments_in_order() {
    let mut n = nat_with("");
    let first = FrameBuilder::udp((ip("10.0.0.5"), 4000), (ip("198.51.100.1"), 53))
        .fragment(true, 0)
        .payload(&[1; 32])
        .build();
    let o = out(&mut n, &first, secs(0));
    let p = key(&o).src_port;
    let later = FrameBuilder::udp((ip("10.0.0.5"), 4000), (ip("198.51.100.1"), 53))
        .fragment(false, 5)
        .payload(&[2; 16])
        .build();
    let (v, o2) = run(&mut n, &later, LAN, secs(0));
    assert!(matches!(v, Verdict::Forward { port: WAN, .. }));
    assert_eq!(parse_ipv4(&o2).unwrap().l3, 14);
    assert_eq!(&o2[26..30], &[203, 0, 113, 1]);
    // Inbound: the reply's fragments reach the internal host.
    let rfirst = FrameBuilder::udp((ip("198.51.100.1"), 53), (ip(EXT), p))
        .fragment(true, 0)
        .payload(&[3; 32])
        .build();
    let rlater = FrameBuilder::udp((ip("198.51.100.1"), 53), (ip(EXT), p))
        .fragment(false, 5)
        .payload(&[4; 16])
        .build();
    assert!(to_lan(inb(&mut n, &rfirst, secs(1)).0));
    let (v, r) = inb(&mut n, &rlater, secs(1));
    assert!(to_lan(v));
    assert_eq!(&r[30..34], &[10, 0, 0, 5]);
    assert_eq!(checksum::checksum(&r[14..34]), 0);
    // Out of order (a later fragment before its first): not met, a counted drop.
    let mut early = FrameBuilder::udp((ip("10.0.0.5"), 4000), (ip("198.51.100.1"), 53))
        .fragment(false, 5)
        .payload(&[2; 16]);
    early.ident = 7;
    assert_eq!(
        run(&mut n, &early.build(), LAN, secs(2)).0,
        Verdict::Drop(DropReason::Fragment)
    );
}

// ---------------------------------------------------------------- RFC 5382

#[test]
fn rfc5382_req_1_endpoint_independent_mapping() {
    let mut n = nat_with("");
    let a = out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let b = out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.2", 443), SYN),
        secs(0),
    );
    assert_eq!(key(&a).src_port, key(&b).src_port);
}

#[test]
fn rfc5382_req_2_simultaneous_open() {
    for f in ["endpoint", "address", "address-port"] {
        let mut n = nat_with(&format!("--filtering {f}"));
        let o = out(
            &mut n,
            &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN),
            secs(0),
        );
        let p = key(&o).src_port;
        // The remote's own SYN crosses ours, then SYN-ACKs both ways.
        let (v, i) = inb(&mut n, &tcp(("198.51.100.1", 80), (EXT, p), SYN), secs(0));
        assert!(to_lan(v), "{f}: {v:?}");
        assert_eq!(key(&i).dst_ip, ip("10.0.0.5"));
        out(
            &mut n,
            &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN | ACK),
            secs(0),
        );
        assert!(to_lan(
            inb(
                &mut n,
                &tcp(("198.51.100.1", 80), (EXT, p), SYN | ACK),
                secs(0)
            )
            .0
        ));
    }
}

#[test]
fn rfc5382_req_3_filtering_option_tcp() {
    let mut n = nat_with("--filtering address");
    let o = out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let p = key(&o).src_port;
    assert!(to_lan(
        inb(&mut n, &tcp(("198.51.100.1", 81), (EXT, p), SYN), secs(0)).0
    ));
    assert_eq!(
        inb(&mut n, &tcp(("198.51.100.2", 80), (EXT, p), SYN), secs(0)).0,
        Verdict::Drop(DropReason::Blocked)
    );
}

#[test]
fn rfc5382_req_4_unsolicited_syn_silently_dropped() {
    for f in ["endpoint", "address"] {
        let mut n = nat_with(&format!("--filtering {f}"));
        let (v, o) = inb(
            &mut n,
            &tcp(("198.51.100.1", 80), (EXT, 5555), SYN),
            secs(0),
        );
        assert!(matches!(v, Verdict::Drop(_)), "{v:?}");
        assert!(o.is_empty(), "no response");
        assert_eq!(n.stats().icmp_generated, 0);
    }
}

#[test]
fn rfc5382_req_5_established_idle_timeout_2h4m() {
    let d = NatTimeouts::default();
    assert!(d.tcp_established >= secs(2 * 3600 + 4 * 60));
    let mut n = nat_with("");
    let o = out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let p = key(&o).src_port;
    let back = |fl| tcp(("198.51.100.1", 80), (EXT, p), fl);
    assert!(to_lan(inb(&mut n, &back(SYN | ACK), secs(1)).0));
    out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), ACK),
        secs(2),
    );
    // Established: alive after 2 h 3 min idle.
    let t = 2 + 2 * 3600 + 3 * 60;
    assert!(to_lan(inb(&mut n, &back(ACK), secs(t)).0));
    // FINs both ways: transitory (4 min).
    out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), FIN | ACK),
        secs(t),
    );
    assert!(to_lan(inb(&mut n, &back(FIN | ACK), secs(t)).0));
    assert_eq!(
        inb(&mut n, &back(ACK), secs(t + 241)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
    // A SYN never answered is transitory too; a RST makes it transitory.
    let o = out(
        &mut n,
        &tcp(("10.0.0.6", 4000), ("198.51.100.1", 80), SYN),
        secs(t),
    );
    let q = key(&o).src_port;
    assert_eq!(
        inb(
            &mut n,
            &tcp(("198.51.100.1", 80), (EXT, q), ACK),
            secs(t + 241)
        )
        .0,
        Verdict::Drop(DropReason::NoMapping)
    );
    let o = out(
        &mut n,
        &tcp(("10.0.0.7", 4000), ("198.51.100.1", 80), SYN),
        secs(t),
    );
    let r = key(&o).src_port;
    let b7 = |fl| tcp(("198.51.100.1", 80), (EXT, r), fl);
    assert!(to_lan(inb(&mut n, &b7(SYN | ACK), secs(t)).0));
    out(
        &mut n,
        &tcp(("10.0.0.7", 4000), ("198.51.100.1", 80), RST),
        secs(t),
    );
    assert_eq!(
        inb(&mut n, &b7(ACK), secs(t + 241)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
}

#[test]
fn rfc5382_req_8_no_port_overloading() {
    let mut n = nat_with("--ports 6000-6001");
    let a = out(
        &mut n,
        &tcp(("10.0.0.5", 1), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let b = out(
        &mut n,
        &tcp(("10.0.0.6", 1), ("198.51.100.2", 80), SYN),
        secs(0),
    );
    assert_ne!(key(&a).src_port, key(&b).src_port);
    let (v, _) = run(
        &mut n,
        &tcp(("10.0.0.7", 1), ("198.51.100.3", 80), SYN),
        LAN,
        secs(0),
    );
    assert_eq!(v, Verdict::Drop(DropReason::PortsExhausted));
}

#[test]
fn rfc5382_req_9_hairpinning_tcp() {
    let mut n = nat_with("");
    let ob = out(
        &mut n,
        &tcp(("10.0.0.6", 8080), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let pb = key(&ob).src_port;
    let (v, h) = run(
        &mut n,
        &tcp(("10.0.0.5", 5000), (EXT, pb), SYN),
        LAN,
        secs(1),
    );
    assert!(to_lan(v), "{v:?}");
    verify_checksums(&h).unwrap();
    let k = key(&h);
    assert_eq!(
        (k.src_ip, k.dst_ip, k.dst_port),
        (ip(EXT), ip("10.0.0.6"), 8080)
    );
    // The answer hairpins back to A's internal endpoint.
    let (v, back) = run(
        &mut n,
        &tcp(("10.0.0.6", 8080), (EXT, k.src_port), SYN | ACK),
        LAN,
        secs(1),
    );
    assert!(to_lan(v));
    let k2 = key(&back);
    assert_eq!(
        (k2.src_ip, k2.src_port, k2.dst_ip, k2.dst_port),
        (ip(EXT), pb, ip("10.0.0.5"), 5000)
    );
}

#[test]
fn rfc5382_req_10_icmp_dest_unreachable_translated_mapping_kept() {
    let mut n = nat_with("");
    let o = out(
        &mut n,
        &tcp(("10.0.0.5", 4000), ("198.51.100.1", 80), SYN),
        secs(0),
    );
    let e = icmp_error("192.0.2.1", ip(EXT), icmp_type::DEST_UNREACHABLE, 1, &o);
    let (v, i) = inb(&mut n, &e, secs(1));
    assert!(to_lan(v));
    verify_checksums(&i).unwrap();
    let l = parse_ipv4(&i).unwrap();
    assert_eq!(&i[l.l3 + 16..l.l3 + 20], &[10, 0, 0, 5]);
    assert_eq!(n.mappings().count(), 1);
}

// ---------------------------------------------------------------- RFC 5508

#[test]
fn rfc5508_req_1_icmp_query_identifier_translated() {
    let mut n = nat_with("--ports 7000-7000");
    let req = FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("198.51.100.1"), true, 42)
        .payload(b"ping")
        .build();
    let o = out(&mut n, &req, secs(0));
    let k = key(&o);
    assert_eq!((k.src_ip, k.src_port), (ip(EXT), 7000));
    let rep = FrameBuilder::icmp_echo(ip("198.51.100.1"), ip(EXT), false, 7000)
        .payload(b"ping")
        .build();
    let (v, r) = inb(&mut n, &rep, secs(1));
    assert!(to_lan(v));
    verify_checksums(&r).unwrap();
    assert_eq!(key(&r).dst_port, 42);
}

#[test]
fn rfc5508_req_2_query_timer_at_least_60s() {
    assert!(NatTimeouts::default().icmp >= secs(60));
    let mut n = nat_with("");
    let req = FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("198.51.100.1"), true, 42).build();
    let id = key(&out(&mut n, &req, secs(0))).src_port;
    let rep = FrameBuilder::icmp_echo(ip("198.51.100.1"), ip(EXT), false, id).build();
    assert!(to_lan(inb(&mut n, &rep, secs(59)).0));
    assert_eq!(
        inb(&mut n, &rep, secs(120)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
}

#[test]
fn rfc5508_req_3_error_checksums_validated() {
    let mut n = nat_with("");
    let o = out(
        &mut n,
        &udp(("10.0.0.5", 4000), ("198.51.100.1", 53)),
        secs(0),
    );
    let good = icmp_error("192.0.2.1", ip(EXT), icmp_type::DEST_UNREACHABLE, 3, &o);
    let l = parse_ipv4(&good).unwrap();
    let mut bad_icmp = good.clone();
    bad_icmp[l.l4 + 2] ^= 0x10;
    assert_eq!(
        inb(&mut n, &bad_icmp, secs(0)).0,
        Verdict::Drop(DropReason::BadChecksum)
    );
    // A wrong quoted IPv4 checksum, ICMP checksum fixed up to match.
    let mut bad_quote = good.clone();
    bad_quote[l.l4 + 8 + 10] ^= 0x10;
    bad_quote[l.l4 + 2..l.l4 + 4].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&bad_quote[l.l4..l.end]);
    bad_quote[l.l4 + 2..l.l4 + 4].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        inb(&mut n, &bad_quote, secs(0)).0,
        Verdict::Drop(DropReason::BadChecksum)
    );
    assert!(to_lan(inb(&mut n, &good, secs(0)).0));
}

#[test]
fn rfc5508_req_4_error_from_external_translated() {
    let mut n = nat_with("");
    let orig = udp(("10.0.0.5", 4000), ("198.51.100.1", 53));
    let o = out(&mut n, &orig, secs(0));
    let e = icmp_error("192.0.2.1", ip(EXT), icmp_type::TIME_EXCEEDED, 0, &o);
    let (v, i) = inb(&mut n, &e, secs(0));
    assert!(to_lan(v));
    verify_checksums(&i).unwrap();
    let l = parse_ipv4(&i).unwrap();
    assert_eq!(
        &i[l.l4..l.l4 + 2],
        &[icmp_type::TIME_EXCEEDED, 0],
        "type and code kept"
    );
    assert_eq!(
        &i[l.l3 + 16..l.l3 + 20],
        &[10, 0, 0, 5],
        "outer destination"
    );
    let q = l.l4 + 8;
    let lo = parse_ipv4(&orig).unwrap();
    assert_eq!(
        &i[q + 12..q + 28],
        &orig[lo.l3 + 12..lo.l3 + 28],
        "quoted as sent"
    );
    // No mapping for the quoted datagram: dropped.
    let stray = udp(("10.0.0.5", 1), ("198.51.100.1", 53));
    let mut s = out(&mut nat_with(""), &stray, secs(0));
    s[36..38].copy_from_slice(&9999u16.to_be_bytes());
    let e = icmp_error("192.0.2.1", ip(EXT), icmp_type::DEST_UNREACHABLE, 3, &s);
    assert_eq!(
        inb(&mut n, &e, secs(0)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
}

#[test]
fn rfc5508_req_5_error_from_internal_source_is_external_ip() {
    let mut n = nat_with("");
    let o = out(
        &mut n,
        &udp(("10.0.0.5", 4000), ("198.51.100.1", 53)),
        secs(0),
    );
    let p = key(&o).src_port;
    let (_, i) = inb(&mut n, &udp(("198.51.100.1", 53), (EXT, p)), secs(0));
    let e = icmp_error(
        "10.0.0.5",
        ip("198.51.100.1"),
        icmp_type::DEST_UNREACHABLE,
        3,
        &i,
    );
    let w = out(&mut n, &e, secs(0));
    let l = parse_ipv4(&w).unwrap();
    assert_eq!(&w[l.l3 + 12..l.l3 + 16], &[203, 0, 113, 1]);
    assert_eq!(&w[l.l4..l.l4 + 2], &[icmp_type::DEST_UNREACHABLE, 3]);
    let q = l.l4 + 8;
    assert_eq!(&w[q + 16..q + 20], &[203, 0, 113, 1], "quoted destination");
    assert_eq!(&w[q + 22..q + 24], &p.to_be_bytes());
}

#[test]
fn rfc5508_req_6_error_does_not_refresh_query_session() {
    let mut n = nat_with("");
    let req = FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("198.51.100.1"), true, 42).build();
    let o = out(&mut n, &req, secs(0));
    let id = key(&o).src_port;
    let e = icmp_error("192.0.2.1", ip(EXT), icmp_type::DEST_UNREACHABLE, 1, &o);
    assert!(to_lan(inb(&mut n, &e, secs(50)).0));
    // Still expires 60 s after the request, not after the error.
    let rep = FrameBuilder::icmp_echo(ip("198.51.100.1"), ip(EXT), false, id).build();
    assert_eq!(
        inb(&mut n, &rep, secs(61)).0,
        Verdict::Drop(DropReason::NoMapping)
    );
}

#[test]
fn rfc5508_req_7_hairpinned_icmp_error() {
    let mut n = nat_with("");
    let pb = ext_port(&mut n, ("10.0.0.6", 6000), ("198.51.100.1", 53), secs(0));
    let pa = ext_port(&mut n, ("10.0.0.5", 5000), ("198.51.100.1", 53), secs(0));
    let (_, h) = run(&mut n, &udp(("10.0.0.5", 5000), (EXT, pb)), LAN, secs(0));
    // B answers the hairpinned packet with an error, to A's external endpoint.
    let e = icmp_error("10.0.0.6", ip(EXT), icmp_type::DEST_UNREACHABLE, 3, &h);
    let (v, r) = run(&mut n, &e, LAN, secs(0));
    assert!(to_lan(v), "{v:?}");
    verify_checksums(&r).unwrap();
    let l = parse_ipv4(&r).unwrap();
    assert_eq!(&r[l.l3 + 12..l.l3 + 16], &[203, 0, 113, 1], "outer source");
    assert_eq!(
        &r[l.l3 + 16..l.l3 + 20],
        &[10, 0, 0, 5],
        "outer destination: A"
    );
    let q = l.l4 + 8;
    // The quoted datagram as A sent it: from A's internal endpoint to B's external one.
    assert_eq!(&r[q + 12..q + 16], &[10, 0, 0, 5]);
    assert_eq!(&r[q + 20..q + 22], &5000u16.to_be_bytes());
    assert_eq!(&r[q + 16..q + 20], &[203, 0, 113, 1]);
    assert_eq!(&r[q + 22..q + 24], &pb.to_be_bytes());
    let _ = pa;
}

#[test]
fn rfc5508_req_10_error_types_supported_and_refused() {
    let mut n = nat_with("");
    let o = out(
        &mut n,
        &udp(("10.0.0.5", 4000), ("198.51.100.1", 53)),
        secs(0),
    );
    for (t, pass) in [
        (icmp_type::DEST_UNREACHABLE, true),
        (icmp_type::TIME_EXCEEDED, true),
        (icmp_type::PARAMETER_PROBLEM, true),
        (icmp_type::SOURCE_QUENCH, false),
        (icmp_type::REDIRECT, false),
        (6, false), // alternative host address
    ] {
        let e = icmp_error("192.0.2.1", ip(EXT), t, 0, &o);
        let (v, _) = inb(&mut n, &e, secs(0));
        assert_eq!(to_lan(v), pass, "type {t}: {v:?}");
    }
    assert_counts_balance(&n);
}
