//! Bridge: learning, flooding, filtering, statics, ageing, full table.

mod common;

use common::*;
use nfkit_nf::{Bridge, BridgeConfig, ConfigError, DropReason, NetworkFunction, PortSet, Verdict};
use nfkit_packet::strategy::arb_any_frame;
use nfkit_packet::{arp_request, FrameBuilder, MacAddr};
use proptest::prelude::*;

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

#[test]
fn learns_then_forwards_instead_of_flooding() {
    let mut b = bridge("--ports 4");
    // Unknown destination: flood everywhere but the input port.
    let f = frame(mac(1), mac(2));
    let (v, _) = run(&mut b, &f, 0, secs(0));
    assert_eq!(
        v,
        Verdict::Flood {
            ports: PortSet::first(4).without(0),
            len: f.len()
        }
    );
    assert_eq!(b.lookup(mac(1)), Some(0));
    // The answer goes straight to port 0, and teaches where mac 2 is.
    let (v, _) = run(&mut b, &frame(mac(2), mac(1)), 3, secs(1));
    assert!(matches!(v, Verdict::Forward { port: 0, .. }));
    let (v, _) = run(&mut b, &frame(mac(1), mac(2)), 0, secs(2));
    assert!(matches!(v, Verdict::Forward { port: 3, .. }));
    let table = b.entries();
    assert_eq!(table.len(), 2);
    assert!(table
        .iter()
        .any(|e| e.mac == mac(2) && e.port == 3 && !e.is_static));
    assert_eq!(b.stats().flooded, 1);
    assert_counts_balance(&b);
}

#[test]
fn broadcast_and_multicast_flood_and_are_not_learned() {
    let mut b = bridge("--ports 3");
    let arp = arp_request(mac(1), ip("10.0.0.1"), ip("10.0.0.2"));
    let (v, o) = run(&mut b, &arp, 1, secs(0));
    assert_eq!(
        v,
        Verdict::Flood {
            ports: PortSet::EMPTY.with(0).with(2),
            len: arp.len()
        }
    );
    assert_eq!(o, arp, "the bridge does not touch frames");
    // Learned from the ARP request's source; a multicast source is never learned.
    let mcast_src = MacAddr([0x01, 0, 0x5e, 0, 0, 1]);
    run(&mut b, &frame(mcast_src, mac(9)), 2, secs(0));
    assert_eq!(b.lookup(mcast_src), None);
    let (v, _) = run(&mut b, &frame(mac(5), mcast_src), 0, secs(0));
    assert!(matches!(v, Verdict::Flood { .. }));
}

#[test]
fn never_back_out_of_the_input_port() {
    let mut b = bridge("--ports 2");
    run(&mut b, &frame(mac(1), mac(9)), 0, secs(0));
    run(&mut b, &frame(mac(2), mac(9)), 0, secs(0));
    // 1 and 2 are both on port 0: a frame between them is filtered.
    assert_eq!(
        run(&mut b, &frame(mac(1), mac(2)), 0, secs(0)).0,
        Verdict::Drop(DropReason::SamePort)
    );
    assert_counts_balance(&b);
}

#[test]
fn stations_move_and_age_out() {
    let mut b = bridge("--ports 3 --expire 10s");
    run(&mut b, &frame(mac(1), mac(9)), 0, secs(0));
    run(&mut b, &frame(mac(1), mac(9)), 2, secs(1));
    assert_eq!(b.lookup(mac(1)), Some(2));
    run(&mut b, &frame(mac(3), mac(9)), 1, secs(5));
    // At 11 s, mac 1 (last seen at 1 s) is gone, mac 3 is not.
    let (v, _) = run(&mut b, &frame(mac(3), mac(1)), 1, secs(11));
    assert!(matches!(v, Verdict::Flood { .. }));
    assert_eq!(b.lookup(mac(1)), None);
    assert_eq!(b.lookup(mac(3)), Some(1));
    assert_eq!(b.stats().flows_expired, 1);
}

#[test]
fn static_entries_win_and_never_age() {
    let mut b = bridge("--ports 3 --expire 1s --static 02:00:00:00:00:07@2");
    let (v, _) = run(&mut b, &frame(mac(1), mac(7)), 0, secs(0));
    assert!(matches!(v, Verdict::Forward { port: 2, .. }));
    // A frame from mac 7 on port 1 does not move the static entry.
    run(&mut b, &frame(mac(7), mac(1)), 1, secs(100));
    assert_eq!(b.lookup(mac(7)), Some(2));
    assert!(b.entries().iter().any(|e| e.is_static && e.mac == mac(7)));
}

#[test]
fn full_table_still_forwards_by_flooding() {
    let mut b = bridge("--ports 2 --capacity 1");
    run(&mut b, &frame(mac(1), mac(9)), 0, secs(0));
    let (v, _) = run(&mut b, &frame(mac(2), mac(9)), 1, secs(0));
    assert!(matches!(v, Verdict::Flood { .. }));
    assert_eq!(b.stats().learn_failed, 1);
    let (v, _) = run(&mut b, &frame(mac(1), mac(2)), 0, secs(0));
    assert!(
        matches!(v, Verdict::Flood { .. }),
        "unknown because not learned"
    );
}

#[test]
fn short_frames_and_bad_config() {
    let mut b = bridge("--ports 2");
    assert_eq!(
        run(&mut b, &[0u8; 13], 0, secs(0)).0,
        Verdict::Drop(DropReason::Malformed)
    );
    assert_eq!(
        "--ports 1".parse::<BridgeConfig>(),
        Err(ConfigError::BridgePorts(1))
    );
    assert_eq!(
        "--ports 65".parse::<BridgeConfig>(),
        Err(ConfigError::BridgePorts(65))
    );
    assert_eq!(
        "--static 02:00:00:00:00:01@5".parse::<BridgeConfig>(),
        Err(ConfigError::PortOutOfRange { port: 5, count: 2 })
    );
    assert!(matches!(
        "--static nope".parse::<BridgeConfig>(),
        Err(ConfigError::BadValue { .. })
    ));
    assert_eq!(
        "--capacity 0".parse::<BridgeConfig>(),
        Err(ConfigError::ZeroCapacity {
            what: "bridge MAC table"
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn never_panics_never_reflects(frames in proptest::collection::vec((arb_any_frame(), 0usize..4), 1..24)) {
        let mut b = bridge("--ports 4 --capacity 4");
        for (i, (f, port)) in frames.iter().enumerate() {
            let (v, _) = run(&mut b, f, *port, secs(i as u64));
            match v {
                Verdict::Forward { port: out, .. } => prop_assert_ne!(out, *port),
                Verdict::Flood { ports, .. } => prop_assert!(!ports.contains(*port)),
                Verdict::Drop(_) => {}
            }
        }
        assert_counts_balance(&b);
    }
}
