use super::*;

fn tcp4() -> Offload {
    Offload {
        flags: L4_CSUM | IP_CSUM,
        l3: L3::Ipv4,
        l4: L4::Tcp,
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        ..Offload::default()
    }
}

#[test]
fn caps_split_work_between_port_and_software() {
    let o = tcp4();
    let l4_only = Caps::new(cap::TX_L4_CSUM, 1514);
    assert_eq!(l4_only.tx_done_by_port(&o), L4_CSUM);
    assert_eq!(Caps::NONE.tx_done_by_port(&o), 0);
    let t = Offload {
        tunnel: Tunnel::Vxlan,
        outer_l2_len: 14,
        outer_l3_len: 20,
        tunnel_len: 16,
        flags: L4_CSUM | OUTER_IP_CSUM,
        ..o
    };
    // Not tunnel-aware: the inner checksum is software's.
    assert_eq!(l4_only.tx_done_by_port(&t), 0);
    let inner = Caps::new(cap::TX_INNER_L4_CSUM | cap::TX_OUTER_IP_CSUM, 0);
    assert_eq!(inner.tx_done_by_port(&t), L4_CSUM | OUTER_IP_CSUM);
    let tso = Offload {
        gso: Gso::Tcp,
        gso_size: 1448,
        ..o
    };
    assert!(!l4_only.segments(&tso));
    assert!(Caps::new(cap::TX_TSO, 0).segments(&tso));
    assert!(Caps::NONE.segments(&o));
    assert_eq!(
        l4_only.to_string(),
        "tx-l4-csum, max frame 1514",
        "the start-up line's words"
    );
    assert_eq!(Caps::NONE.to_string(), "none");
}

#[test]
fn headers_put_in_front_or_taken_off_move_the_offsets() {
    let mut o = tcp4();
    assert!(o.front_grown(50)); // an encapsulation
    assert_eq!(o.l4_start(), 84);
    assert!(o.front_shrunk(50));
    assert_eq!(o, tcp4());
    assert!(!o.clone().front_grown(250), "no room in l2_len");
    assert!(!o.clone().front_shrunk(20), "into the IP header");
    let mut t = Offload {
        tunnel: Tunnel::Geneve,
        outer_l2_len: 14,
        outer_l3_len: 20,
        tunnel_len: 24,
        flags: L4_CSUM | OUTER_IP_CSUM,
        ..tcp4()
    };
    assert!(t.front_grown(4)); // a tag on the outer frame
    assert_eq!(t.outer_l2_len, 18);
    assert!(t.front_shrunk(18 + 20 + 24)); // decapsulated
    assert_eq!(
        t,
        Offload {
            flags: L4_CSUM,
            ..tcp4()
        }
    );
}

#[test]
fn lengths_add_up_and_lies_are_refused() {
    let o = tcp4();
    assert_eq!((o.l3_start(), o.l4_start(), o.header_len()), (14, 34, 54));
    assert_eq!(o.check(54), Ok(()));
    assert_eq!(o.check(53), Err(OffloadError::PastEnd));
    let t = Offload {
        tunnel: Tunnel::Vxlan,
        outer_l2_len: 14,
        outer_l3_len: 20,
        tunnel_len: 16,
        ..o
    };
    assert_eq!(t.l4_start(), 14 + 20 + 16 + 34);
    assert_eq!(t.check(t.header_len()), Ok(()));
    let bad = [
        (Offload { l4: L4::None, ..o }, OffloadError::NoL4),
        (
            Offload {
                gso: Gso::Udp,
                gso_size: 1000,
                ..o
            },
            OffloadError::GsoMismatch,
        ),
        (Offload { gso: Gso::Tcp, ..o }, OffloadError::ZeroMss),
        (Offload { l3: L3::Ipv6, ..o }, OffloadError::NotIpv4),
        (
            Offload {
                tunnel: Tunnel::None,
                ..t
            },
            OffloadError::TunnelLengths,
        ),
        (
            Offload {
                flags: IP_CSUM_GOOD | IP_CSUM_BAD,
                ..o
            },
            OffloadError::Verdict,
        ),
    ];
    for (b, why) in bad {
        assert_eq!(b.check(1500), Err(why), "{b:?}");
    }
}
