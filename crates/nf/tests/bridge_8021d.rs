//! The bridge against IEEE 802.1D's relay rules (learning §7.8,
//! filtering database and ageing §7.9, forwarding §7.7, reserved
//! addresses §7.12.6), one test per rule, named by its clause.

mod common;

use common::*;
use nfkit_nf::{Bridge, DropReason, NetworkFunction, PortSet, Verdict};
use nfkit_packet::{FrameBuilder, MacAddr};

fn mac(last: u8) -> MacAddr {
    MacAddr([2, 0, 0, 0, 0, last])
}

fn frame(src: MacAddr, dst: MacAddr) -> Vec<u8> {
    FrameBuilder::udp((ip("10.0.0.1"), 1), (ip("10.0.0.2"), 2))
        .macs(src, dst)
        .build()
}

fn bridge(opts: &str) -> Bridge {
    Bridge::new(opts.parse().unwrap()).unwrap()
}

fn flood(n: usize, except: usize, len: usize) -> Verdict {
    Verdict::Flood {
        ports: PortSet::first(n).without(except),
        len,
    }
}

#[test]
fn ieee8021d_7_8_learning_individual_sources_only() {
    let mut b = bridge("--ports 3");
    run(&mut b, &frame(mac(1), mac(9)), 1, secs(0));
    assert_eq!(b.lookup(mac(1)), Some(1));
    // A group source address is never learned.
    let group = MacAddr([3, 0, 0, 0, 0, 1]);
    run(&mut b, &frame(group, mac(9)), 2, secs(0));
    assert_eq!(b.lookup(group), None);
    // A station that moves is learned on its new port.
    run(&mut b, &frame(mac(1), mac(9)), 2, secs(1));
    assert_eq!(b.lookup(mac(1)), Some(2));
}

#[test]
fn ieee8021d_7_7_1_unknown_and_group_destinations_flooded_except_reception_port() {
    let mut b = bridge("--ports 4");
    let f = frame(mac(1), mac(2));
    assert_eq!(run(&mut b, &f, 2, secs(0)).0, flood(4, 2, f.len()));
    let bc = frame(mac(1), MacAddr::BROADCAST);
    assert_eq!(run(&mut b, &bc, 2, secs(0)).0, flood(4, 2, bc.len()));
    let mc = frame(mac(1), MacAddr([0x01, 0, 0x5e, 0, 0, 9]));
    assert_eq!(run(&mut b, &mc, 2, secs(0)).0, flood(4, 2, mc.len()));
}

#[test]
fn ieee8021d_7_7_1_known_destination_forwarded_to_its_port_only() {
    let mut b = bridge("--ports 4");
    run(&mut b, &frame(mac(2), mac(1)), 3, secs(0));
    assert!(matches!(
        run(&mut b, &frame(mac(1), mac(2)), 0, secs(0)).0,
        Verdict::Forward { port: 3, .. }
    ));
}

#[test]
fn ieee8021d_7_7_1_never_relayed_to_the_reception_port() {
    let mut b = bridge("--ports 2");
    run(&mut b, &frame(mac(2), mac(1)), 0, secs(0));
    assert_eq!(
        run(&mut b, &frame(mac(1), mac(2)), 0, secs(0)).0,
        Verdict::Drop(DropReason::SamePort)
    );
}

#[test]
fn ieee8021d_7_9_2_ageing_default_300_s() {
    let mut b = bridge("--ports 3");
    run(&mut b, &frame(mac(2), mac(1)), 1, secs(0));
    let f = frame(mac(1), mac(2));
    assert!(matches!(
        run(&mut b, &f, 0, secs(299)).0,
        Verdict::Forward { port: 1, .. }
    ));
    // mac 2 has been silent for 301 s: aged out, so flooded again.
    assert_eq!(run(&mut b, &f, 0, secs(301)).0, flood(3, 0, f.len()));
    assert_eq!(b.lookup(mac(2)), None);
    assert!(b.stats().flows_expired >= 1);
}

#[test]
fn ieee8021d_7_9_1_static_entries_never_age_and_win_over_learning() {
    let mut b = bridge("--ports 3 --static 02:00:00:00:00:07@2");
    run(&mut b, &frame(mac(7), mac(1)), 1, secs(0));
    assert_eq!(b.lookup(mac(7)), Some(2));
    assert!(matches!(
        run(&mut b, &frame(mac(1), mac(7)), 0, secs(100_000)).0,
        Verdict::Forward { port: 2, .. }
    ));
}

#[test]
fn ieee8021d_7_12_6_reserved_addresses_never_relayed() {
    let mut b = bridge("--ports 3");
    for last in [0x00, 0x01, 0x02, 0x03, 0x0e, 0x0f] {
        let f = frame(mac(1), MacAddr([0x01, 0x80, 0xc2, 0, 0, last]));
        assert_eq!(
            run(&mut b, &f, 0, secs(0)).0,
            Verdict::Drop(DropReason::ReservedAddress),
            "01-80-c2-00-00-{last:02x}"
        );
    }
    // 01-80-C2-00-00-10 (all bridges, outside the reserved block) is flooded.
    let f = frame(mac(1), MacAddr([0x01, 0x80, 0xc2, 0, 0, 0x10]));
    assert_eq!(run(&mut b, &f, 0, secs(0)).0, flood(3, 0, f.len()));
    assert_counts_balance(&b);
}

#[test]
fn ieee8021d_7_7_frames_relayed_unchanged() {
    let mut b = bridge("--ports 2");
    let f = frame(mac(1), mac(2));
    let (_, o) = run(&mut b, &f, 0, secs(0));
    assert_eq!(o, f);
}
