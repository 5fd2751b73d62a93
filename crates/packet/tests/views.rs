//! The hand-written views read what etherparse wrote, reject what is
//! malformed with typed errors, and never panic.

use std::net::Ipv4Addr;

use nfkit_packet::strategy::{arb_any_frame, arb_frame};
use nfkit_packet::{
    checksum, parse_ipv4, parse_l2, proto, verify_checksums, Ethernet, FlowKey, Fragment,
    FrameBuilder, Header, Icmp, Ipv4, PacketError, Tcp, Udp, L4,
};
use proptest::prelude::*;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn udp_frame_fields() {
    let f = FrameBuilder::udp((ip("10.0.0.1"), 1234), (ip("192.0.2.9"), 53))
        .payload(b"hello")
        .build();
    let l = parse_ipv4(&f).unwrap();
    assert_eq!(
        (l.l3, l.l4, l.end, l.protocol),
        (14, 34, 14 + 20 + 8 + 5, proto::UDP)
    );
    let ipv = Ipv4::new(&f[l.l3..]).unwrap();
    assert_eq!(ipv.src(), ip("10.0.0.1"));
    assert_eq!(ipv.dst(), ip("192.0.2.9"));
    assert!(ipv.checksum_ok());
    let u = Udp::new(&f[l.l4..l.end]).unwrap();
    assert_eq!((u.src_port(), u.dst_port(), u.length()), (1234, 53, 13));
    assert_eq!(u.payload(), b"hello");
    let k = FlowKey::from_frame(&f, &l).unwrap();
    assert_eq!(
        k,
        FlowKey::new(ip("10.0.0.1"), 1234, ip("192.0.2.9"), 53, 17)
    );
    assert_eq!(k.reversed().reversed(), k);
}

#[test]
fn options_and_vlan_shift_offsets() {
    let f = FrameBuilder::tcp((ip("10.0.0.1"), 1), (ip("10.0.0.2"), 2))
        .vlan(0x2064)
        .ip_options(&[1, 1, 1, 1, 1, 1, 1, 0])
        .build();
    let l = parse_ipv4(&f).unwrap();
    assert_eq!(l.l2.vlan_tags, 1);
    assert_eq!((l.l3, l.l4), (18, 18 + 28));
    assert_eq!(Ipv4::new(&f[18..]).unwrap().options().len(), 8);
    let t = Tcp::new(&f[l.l4..l.end]).unwrap();
    assert_eq!((t.src_port(), t.dst_port(), t.flags()), (1, 2, 0x02));
    verify_checksums(&f).unwrap();
}

#[test]
fn later_fragment_has_no_ports() {
    let f = FrameBuilder::udp((ip("10.0.0.1"), 7), (ip("10.0.0.2"), 9))
        .fragment(false, 100)
        .payload(&[0xab; 16])
        .build();
    let l = parse_ipv4(&f).unwrap();
    assert_eq!(l.fragment, Fragment::Later);
    assert!(!l.has_l4_header());
    let k = FlowKey::from_frame(&f, &l).unwrap();
    assert_eq!((k.src_port, k.dst_port), (0, 0));
}

#[test]
fn typed_errors_for_truncation_and_bad_fields() {
    let f = FrameBuilder::tcp((ip("10.0.0.1"), 1), (ip("10.0.0.2"), 2)).build();
    assert_eq!(
        parse_l2(&f[..10]),
        Err(PacketError::Truncated {
            header: Header::Ethernet,
            need: 14,
            have: 10
        })
    );
    assert!(matches!(
        parse_ipv4(&f[..30]),
        Err(PacketError::Truncated {
            header: Header::Ipv4,
            ..
        })
    ));
    let mut bad = f.clone();
    bad[14] = 0x44;
    assert_eq!(parse_ipv4(&bad), Err(PacketError::BadIhl(4)));
    bad[14] = 0x65;
    assert_eq!(parse_ipv4(&bad), Err(PacketError::BadIpVersion(6)));
    let mut bad = f.clone();
    bad[16..18].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(
        parse_ipv4(&bad),
        Err(PacketError::BadTotalLength {
            total: 10,
            header_len: 20
        })
    );
    let l = parse_ipv4(&f).unwrap();
    assert!(matches!(
        Tcp::new(&f[l.l4..l.l4 + 12]),
        Err(PacketError::Truncated {
            header: Header::Tcp,
            ..
        })
    ));
    let mut bad = f.clone();
    bad[l.l4 + 12] = 0x30;
    assert_eq!(
        Tcp::new(&bad[l.l4..]).unwrap_err(),
        PacketError::BadTcpOffset(3)
    );
    let arp = nfkit_packet::arp_request(Default::default(), ip("10.0.0.1"), ip("10.0.0.2"));
    assert_eq!(parse_ipv4(&arp), Err(PacketError::NotIpv4(0x0806)));
}

#[test]
fn setters_keep_checksum_valid() {
    let mut f = FrameBuilder::udp((ip("10.0.0.1"), 1), (ip("10.0.0.2"), 2))
        .ttl(1)
        .build();
    let mut v = Ipv4::new(&mut f[14..]).unwrap();
    v.set_ttl(0);
    v.set_src(ip("203.0.113.77"));
    v.set_dst(ip("255.255.255.255"));
    assert!(v.checksum_ok());
    let mut e = Ethernet::new(&mut f[..]).unwrap();
    e.set_dst(nfkit_packet::MacAddr::BROADCAST);
    assert!(e.dst().is_broadcast());
}

#[test]
fn mac_parse_and_display() {
    let m: nfkit_packet::MacAddr = "02:0a:ff:00:10:01".parse().unwrap();
    assert_eq!(m.to_string(), "02:0a:ff:00:10:01");
    assert!("02:0a:ff:00:10".parse::<nfkit_packet::MacAddr>().is_err());
    assert!("02:0a:ff:00:10:01:02"
        .parse::<nfkit_packet::MacAddr>()
        .is_err());
    assert!("zz:0a:ff:00:10:01"
        .parse::<nfkit_packet::MacAddr>()
        .is_err());
}

proptest! {
    // Under miri (`cargo xtask miri`) a few cases: it runs each about a
    // million times slower.
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

    /// Views read back every field etherparse wrote.
    #[test]
    fn views_agree_with_builder(b in arb_frame()) {
        let f = b.build();
        prop_assert!(verify_checksums(&f).is_ok());
        let l = parse_ipv4(&f).unwrap();
        let v = Ipv4::new(&f[l.l3..]).unwrap();
        prop_assert_eq!(v.src(), b.src_ip);
        prop_assert_eq!(v.dst(), b.dst_ip);
        prop_assert_eq!(v.ttl(), b.ttl);
        prop_assert_eq!(v.ident(), b.ident);
        prop_assert_eq!(v.options(), &b.ip_options[..]);
        prop_assert_eq!(v.frag_offset(), b.frag_offset);
        prop_assert_eq!(v.more_fragments(), b.more_fragments);
        prop_assert!(v.checksum_ok());
        prop_assert_eq!(l.end, f.len());
        if b.frag_offset != 0 {
            return Ok(());
        }
        let seg = &f[l.l4..l.end];
        match b.l4 {
            L4::Tcp { src_port, dst_port, seq, ack, flags, window } => {
                let t = Tcp::new(seg).unwrap();
                prop_assert_eq!((t.src_port(), t.dst_port(), t.seq(), t.ack(), t.flags(), t.window()),
                                (src_port, dst_port, seq, ack, flags, window));
                prop_assert_eq!(checksum::l4_checksum(v.src_bytes(), v.dst_bytes(), 6, seg), 0);
            }
            L4::Udp { src_port, dst_port, .. } => {
                let u = Udp::new(seg).unwrap();
                prop_assert_eq!((u.src_port(), u.dst_port()), (src_port, dst_port));
                prop_assert_eq!(usize::from(u.length()), seg.len());
            }
            L4::IcmpEcho { id, .. } => {
                let i = Icmp::new(seg).unwrap();
                prop_assert_eq!(i.identifier(), id);
                let k = FlowKey::from_frame(&f, &l).unwrap();
                prop_assert_eq!((k.src_port, k.dst_port), (id, id));
            }
            L4::Icmp { icmp_type, code, .. } => {
                let i = Icmp::new(seg).unwrap();
                prop_assert_eq!((i.icmp_type(), i.code()), (icmp_type, code));
                prop_assert_eq!(checksum::checksum(seg), 0);
            }
            L4::Raw { .. } => {}
        }
    }

    /// No input makes the parsers or views panic.
    #[test]
    fn never_panics(f in arb_any_frame()) {
        let _ = parse_l2(&f);
        if let Ok(l) = parse_ipv4(&f) {
            prop_assert!(l.l4 <= l.end && l.end <= f.len());
            let _ = FlowKey::from_frame(&f, &l);
            let seg = &f[l.l4..l.end];
            let _ = Tcp::new(seg).map(|t| (t.src_port(), t.header_len()));
            let _ = Udp::new(seg).map(|u| u.payload().len());
            let _ = Icmp::new(seg).map(|i| i.payload().len());
            let v = Ipv4::new(&f[l.l3..]).unwrap();
            let _ = (v.payload().len(), v.options().len(), v.checksum_ok());
        }
    }

    /// Every prefix of a good frame parses or fails with a typed error.
    #[test]
    fn prefixes_never_panic(b in arb_frame()) {
        let f = b.build();
        // Under miri, the prefixes that end within the headers (Ethernet
        // with VLAN tags, IPv4 and TCP with options: under 150 bytes): a
        // longer one takes the same path.
        let upto = if cfg!(miri) { f.len().min(150) } else { f.len() };
        for n in 0..upto {
            if let Ok(l) = parse_ipv4(&f[..n]) {
                let _ = FlowKey::from_frame(&f[..n], &l);
            }
        }
    }

    /// Incremental address rewrite keeps IPv4 and L4 checksums valid.
    #[test]
    fn incremental_rewrite_verifies(sport in any::<u16>(), new_ip in any::<u32>(), new_port in any::<u16>(),
                                    payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut f = FrameBuilder::udp((ip("10.1.2.3"), sport), (ip("8.8.8.8"), 53)).payload(&payload).build();
        let l = parse_ipv4(&f).unwrap();
        let new_ip = Ipv4Addr::from(new_ip);
        let old_ip = Ipv4::new(&f[l.l3..]).unwrap().src_bytes();
        Ipv4::new(&mut f[l.l3..]).unwrap().set_src(new_ip);
        let mut u = Udp::new(&mut f[l.l4..l.end]).unwrap();
        let c = checksum::udp_update32(u.checksum(), old_ip, new_ip.octets());
        let c = checksum::udp_update16(c, sport, new_port);
        u.set_src_port(new_port);
        u.set_checksum(c);
        prop_assert_eq!(verify_checksums(&f), Ok(()));
    }
}
