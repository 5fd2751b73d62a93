//! Firewall: LAN-opened flows come back, the rest of the WAN is blocked.

mod common;

use common::*;
use nfkit_nf::{DropReason, Firewall, FirewallConfig, NetworkFunction, Verdict};
use nfkit_packet::strategy::arb_any_frame;
use nfkit_packet::{arp_request, icmp_type, parse_ipv4, FrameBuilder, MacAddr};
use proptest::prelude::*;

const LAN: usize = 0;
const WAN: usize = 1;

fn fw(opts: &str) -> Firewall {
    Firewall::new(opts.parse().unwrap()).unwrap()
}

fn pass(v: Verdict, port: usize) -> bool {
    matches!(v, Verdict::Forward { port: p, .. } if p == port)
}

#[test]
fn replies_pass_unsolicited_blocked() {
    let mut f = fw("");
    let out = FrameBuilder::tcp((ip("10.0.0.5"), 4000), (ip("1.1.1.1"), 443)).build();
    let reply = FrameBuilder::tcp((ip("1.1.1.1"), 443), (ip("10.0.0.5"), 4000)).build();
    let other = FrameBuilder::tcp((ip("1.1.1.1"), 443), (ip("10.0.0.5"), 4001)).build();
    assert_eq!(
        run(&mut f, &reply, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Blocked)
    );
    let (v, o) = run(&mut f, &out, LAN, secs(0));
    assert!(pass(v, WAN));
    assert_eq!(o, out, "the firewall never modifies packets");
    assert!(pass(run(&mut f, &reply, WAN, secs(1)).0, LAN));
    assert_eq!(
        run(&mut f, &other, WAN, secs(1)).0,
        Verdict::Drop(DropReason::Blocked)
    );
    // UDP and other protocols work the same way.
    let gre_out = FrameBuilder::raw(ip("10.0.0.5"), ip("2.2.2.2"), 47).build();
    let gre_in = FrameBuilder::raw(ip("2.2.2.2"), ip("10.0.0.5"), 47).build();
    assert_eq!(
        run(&mut f, &gre_in, WAN, secs(1)).0,
        Verdict::Drop(DropReason::Blocked)
    );
    run(&mut f, &gre_out, LAN, secs(1));
    assert!(pass(run(&mut f, &gre_in, WAN, secs(1)).0, LAN));
    assert_eq!(f.flows().count(), 2);
    assert_counts_balance(&f);
}

#[test]
fn icmp_echo_and_errors() {
    let mut f = fw("");
    let req = FrameBuilder::icmp_echo(ip("10.0.0.5"), ip("8.8.8.8"), true, 7).build();
    let rep = FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("10.0.0.5"), false, 7).build();
    let wrong_id = FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("10.0.0.5"), false, 8).build();
    let inbound_req = FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("10.0.0.5"), true, 7).build();
    run(&mut f, &req, LAN, secs(0));
    assert!(pass(run(&mut f, &rep, WAN, secs(0)).0, LAN));
    assert_eq!(
        run(&mut f, &wrong_id, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Blocked)
    );
    assert_eq!(
        run(&mut f, &inbound_req, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Blocked)
    );

    let udp = FrameBuilder::udp((ip("10.0.0.5"), 5000), (ip("9.9.9.9"), 53)).build();
    run(&mut f, &udp, LAN, secs(0));
    let l = parse_ipv4(&udp).unwrap();
    let err = FrameBuilder::icmp(
        ip("192.0.2.1"),
        ip("10.0.0.5"),
        icmp_type::DEST_UNREACHABLE,
        1,
    )
    .payload(&udp[l.l3..l.end])
    .build();
    assert!(pass(run(&mut f, &err, WAN, secs(0)).0, LAN));
    let stray = FrameBuilder::udp((ip("10.0.0.5"), 5001), (ip("9.9.9.9"), 53)).build();
    let err = FrameBuilder::icmp(
        ip("192.0.2.1"),
        ip("10.0.0.5"),
        icmp_type::DEST_UNREACHABLE,
        1,
    )
    .payload(&stray[l.l3..l.end])
    .build();
    assert_eq!(
        run(&mut f, &err, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Blocked)
    );
}

#[test]
fn flows_expire() {
    let mut f = fw("--expire 10s");
    let out = FrameBuilder::udp((ip("10.0.0.5"), 1), (ip("1.1.1.1"), 2)).build();
    let back = FrameBuilder::udp((ip("1.1.1.1"), 2), (ip("10.0.0.5"), 1)).build();
    run(&mut f, &out, LAN, secs(0));
    assert!(
        pass(run(&mut f, &back, WAN, secs(9)).0, LAN),
        "refreshed by the reply"
    );
    assert!(pass(run(&mut f, &back, WAN, secs(18)).0, LAN));
    assert_eq!(
        run(&mut f, &back, WAN, secs(28)).0,
        Verdict::Drop(DropReason::Blocked)
    );
    assert_eq!(f.stats().flows_expired, 1);
}

#[test]
fn full_table_drops_new_lan_flows() {
    let mut f = fw("--capacity 1");
    let a = FrameBuilder::udp((ip("10.0.0.5"), 1), (ip("1.1.1.1"), 2)).build();
    let b = FrameBuilder::udp((ip("10.0.0.5"), 3), (ip("1.1.1.1"), 2)).build();
    assert!(pass(run(&mut f, &a, LAN, secs(0)).0, WAN));
    assert_eq!(
        run(&mut f, &b, LAN, secs(0)).0,
        Verdict::Drop(DropReason::TableFull)
    );
    assert!(
        pass(run(&mut f, &a, LAN, secs(0)).0, WAN),
        "existing flows still pass"
    );
}

#[test]
fn arp_fragments_and_malformed() {
    let mut f = fw("");
    let arp = arp_request(MacAddr([2, 0, 0, 0, 0, 1]), ip("10.0.0.1"), ip("10.0.0.2"));
    assert!(pass(run(&mut f, &arp, LAN, secs(0)).0, WAN));
    assert!(pass(run(&mut f, &arp, WAN, secs(0)).0, LAN));
    let mut ipv6ish = arp.clone();
    ipv6ish[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert!(pass(run(&mut f, &ipv6ish, LAN, secs(0)).0, WAN));
    assert_eq!(
        run(&mut f, &ipv6ish, WAN, secs(0)).0,
        Verdict::Drop(DropReason::NotIpv4)
    );
    let later = FrameBuilder::udp((ip("1.1.1.1"), 2), (ip("10.0.0.5"), 1))
        .fragment(false, 10)
        .payload(&[0; 8])
        .build();
    assert_eq!(
        run(&mut f, &later, WAN, secs(0)).0,
        Verdict::Drop(DropReason::Fragment)
    );
    let later_out = FrameBuilder::udp((ip("10.0.0.5"), 1), (ip("1.1.1.1"), 2))
        .fragment(false, 10)
        .payload(&[0; 8])
        .build();
    assert!(pass(run(&mut f, &later_out, LAN, secs(0)).0, WAN));
    let tcp = FrameBuilder::tcp((ip("1.1.1.1"), 2), (ip("10.0.0.5"), 1))
        .ip_options(&[1; 8])
        .build();
    assert_eq!(
        run(&mut f, &tcp[..50], WAN, secs(0)).0,
        Verdict::Drop(DropReason::Malformed)
    );
    assert_eq!(
        run(&mut f, &tcp[..50], LAN, secs(0)).0,
        Verdict::Drop(DropReason::Malformed)
    );
    assert_counts_balance(&f);
}

#[test]
fn config_errors() {
    assert!("--lan 0 --wan 0".parse::<FirewallConfig>().is_err());
    assert!("--lan 0 --wan 2".parse::<FirewallConfig>().is_err());
    assert!("--capacity 0".parse::<FirewallConfig>().is_err());
    assert!("--expire 0s".parse::<FirewallConfig>().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn never_panics(frames in proptest::collection::vec(arb_any_frame(), 1..16)) {
        let mut f = fw("--capacity 4");
        for (i, fr) in frames.iter().enumerate() {
            run(&mut f, fr, i % 2, secs(i as u64));
        }
        assert_counts_balance(&f);
    }
}
