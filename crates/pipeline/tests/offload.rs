//! Checksums over tunnels and offload metadata: IPChecksum and
//! L4Checksum set and verify the inner headers of VXLAN and Geneve
//! frames (exact bytes), `hw=1` leaves the work to the output port (done
//! in software by PortOut for a port without the offload), and the
//! properties of issue 18: encapsulate then decapsulate is the identity,
//! computed checksums verify, a verifier accepts exactly the frames
//! whose checksums are right (etherparse as the independent oracle).

mod common;

use common::{MemPort, Wire};
use nfkit_packet::checksum::{checksum, l4_checksum};
use nfkit_packet::{verify_checksums, FrameBuilder};
use nfkit_pipeline::args::Args;
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_pipeline::parse;
use parking_lot::Mutex;
use proptest::prelude::*;
use std::net::Ipv4Addr;
use std::sync::Arc;

fn module(class: &str, args: &str) -> Box<dyn Module> {
    let mut a: Args = parse(&format!("x::Sink()\nx.c({args})"), "t")
        .unwrap()
        .commands[0]
        .args
        .clone();
    let env = BuildEnv {
        ports: Default::default(),
        pool: Harness::new().pool().clone(),
    };
    Registry::default()
        .build(class, &mut a, &env)
        .unwrap_or_else(|e| panic!("{class}({args}): {e}"))
}

fn inner_frame(tcp: bool, sport: u16, payload: &[u8]) -> Vec<u8> {
    let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    if tcp {
        FrameBuilder::tcp((a, sport), (z, 80))
            .payload(payload)
            .build()
    } else {
        FrameBuilder::udp((a, sport), (z, 53))
            .payload(payload)
            .build()
    }
}

/// `inner` in Ethernet, IPv4 (checksum right), UDP to `dport` (checksum
/// 0) and the tunnel header.
fn wrap(inner: &[u8], dport: u16, tunnel: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa, 8, 0];
    let total = (20 + 8 + tunnel.len() + inner.len()) as u16;
    let mut iph = vec![0x45, 0];
    iph.extend_from_slice(&total.to_be_bytes());
    iph.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2]);
    let c = checksum(&iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    f.extend_from_slice(&0xc001u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(tunnel);
    f.extend_from_slice(inner);
    f
}

const VXLAN: [u8; 8] = [0x08, 0, 0, 0, 0, 0, 7, 0];
/// Geneve with one 4-byte option (opt_len 1).
const GENEVE: [u8; 12] = [0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 0x01, 0x02, 0x03, 0];

fn tunnels() -> [(u16, &'static [u8]); 2] {
    [(4789, &VXLAN), (6081, &GENEVE)]
}

/// Inner checksums broken (IPv4 header and TCP/UDP), outer right.
fn broken(inner: &[u8], dport: u16, tunnel: &[u8]) -> Vec<u8> {
    let mut i = inner.to_vec();
    i[14 + 10] ^= 0x11;
    let n = i.len();
    i[n - 1] ^= 0x22; // payload: the L4 checksum no longer matches
    wrap(&i, dport, tunnel)
}

fn inner_of(f: &[u8], tunnel: &[u8]) -> Vec<u8> {
    f[14 + 20 + 8 + tunnel.len()..].to_vec()
}

#[test]
fn checksum_modules_set_and_verify_inner_headers_exactly() {
    for (dport, tunnel) in tunnels() {
        for tcp in [true, false] {
            let good = inner_frame(tcp, 1000, b"inner bytes");
            let bad = broken(&good, dport, tunnel);
            let ok = wrap(&good, dport, tunnel);
            // verify: the outer headers are right, the inner ones are not
            for class in ["IPChecksum", "L4Checksum"] {
                let out = Harness::new().run(
                    &mut *module(class, "verify=1"),
                    0,
                    &[ok.clone(), bad.clone()],
                );
                assert_eq!(out[0], vec![ok.clone()], "{class} {dport}");
                assert_eq!(out[1], vec![bad.clone()], "{class} {dport}");
            }
            // set: inner IPv4 header, then inner TCP/UDP, then the outer UDP
            let mut h = Harness::new();
            let ip = h.run(
                &mut *module("IPChecksum", ""),
                0,
                std::slice::from_ref(&bad),
            );
            let mut want = bad.clone();
            let at = 14 + 20 + 8 + tunnel.len();
            want[at + 14..at + 34].copy_from_slice(&good[14..34]);
            assert_eq!(ip[0], vec![want], "IPChecksum: the inner header only");
            let l4 = h.run(&mut *module("L4Checksum", ""), 0, &ip[0]);
            let f = &l4[0][0];
            let mut want = ok.clone();
            let n = want.len();
            want[n - 1] ^= 0x22; // the payload as it came
            let inner_want = {
                let mut i = good.clone();
                let k = i.len();
                i[k - 1] ^= 0x22;
                let (l4at, csum_at) = (34, if tcp { 16 } else { 6 });
                i[l4at + csum_at..l4at + csum_at + 2].fill(0);
                let c = l4_checksum(
                    [10, 0, 0, 1],
                    [10, 0, 0, 2],
                    if tcp { 6 } else { 17 },
                    &i[l4at..],
                );
                i[l4at + csum_at..l4at + csum_at + 2].copy_from_slice(&c.to_be_bytes());
                i
            };
            want[at..].copy_from_slice(&inner_want);
            let outer_udp = l4_checksum([192, 168, 0, 1], [192, 168, 0, 2], 17, &want[34..]);
            want[40..42].copy_from_slice(&outer_udp.to_be_bytes());
            assert_eq!(f, &want, "L4Checksum {dport} tcp={tcp}");
            verify_checksums(f).unwrap();
            verify_checksums(&inner_of(f, tunnel)).unwrap();
        }
    }
}

/// Run `chain` over a Source of `frame` into port `out`; what left, and
/// the pipeline's PortOut statistics.
fn run_chain(frame: &[u8], chain: &str) -> Vec<Vec<u8>> {
    let bytes: Vec<String> = frame.iter().map(|b| b.to_string()).collect();
    let src = format!(
        "port out = \"out\"\nsrc::Source(size={}, burst=4, template=[{}])\n{chain}",
        frame.len(),
        bytes.join(",")
    );
    let wires: Mutex<Vec<Arc<Mutex<Wire>>>> = Mutex::new(Vec::new());
    let mut p = parse(&src, "t.nfk")
        .unwrap()
        .build(&|spec| {
            let mp = MemPort::new(spec, 1);
            wires.lock().push(mp.wire.clone());
            Ok(Box::new(mp) as Box<dyn nfkit_port::Port>)
        })
        .unwrap();
    p.step(1).unwrap();
    let w = wires.lock();
    let out = w[0].lock().tx[0].clone();
    out
}

/// With `hw=1` the modules only ask; the port cannot, so PortOut does
/// it in software, and the result is the same bytes as without `hw`.
#[test]
fn hw_requests_are_done_by_port_out_when_the_port_cannot() {
    for (dport, tunnel) in tunnels() {
        let good = inner_frame(true, 1000, b"asked of the port");
        let bad = broken(&good, dport, tunnel);
        for plain in [bad.clone(), {
            let mut f = good.clone();
            f[24] ^= 0x40;
            let n = f.len();
            f[n - 2] ^= 1;
            f
        }] {
            let soft = run_chain(
                &plain,
                "src -> IPChecksum() -> L4Checksum() -> PortOut(port=out)",
            );
            let hw = run_chain(
                &plain,
                "src -> IPChecksum(hw=1) -> L4Checksum(hw=1) -> PortOut(port=out)",
            );
            assert_eq!(soft.len(), 4);
            for f in &hw {
                verify_checksums(f).unwrap();
                if f.len() > good.len() {
                    verify_checksums(&inner_of(f, tunnel)).unwrap();
                    // the inner headers are the port's to do; the outer
                    // UDP checksum was left 0
                    assert_eq!(&f[..40], &soft[0][..40]);
                    assert_eq!(&f[42..], &soft[0][42..]);
                } else {
                    assert_eq!(f, &soft[0]);
                }
            }
        }
    }
}

/// Offload state that lies about the frame is dropped and counted.
#[test]
fn port_out_drops_offload_state_that_does_not_fit() {
    use nfkit_hw::pool::offload::{self as ol, Gso, Offload, L3, L4};
    let mut h = Harness::new();
    let f = inner_frame(true, 1, b"x");
    let mut lying = h.packet(&f);
    lying.set_offload(Offload {
        flags: ol::L4_CSUM,
        l3: L3::Ipv4,
        l4: L4::Tcp,
        l2_len: 14,
        l3_len: 20,
        l4_len: 60, // past the end
        ..Offload::default()
    });
    let mut tso = h.packet(&f);
    tso.set_offload(Offload {
        l3: L3::Ipv4,
        l4: L4::Tcp,
        gso: Gso::Tcp,
        gso_size: 1000,
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        ..Offload::default()
    });
    let port = MemPort::new("out", 1);
    let wire = port.wire.clone();
    let mut m = port_out_over(port, h.pool());
    let plain = h.packet(&f);
    let mut batch = nfkit_hw::Batch::new();
    for p in [lying, tso, plain] {
        assert!(batch.push(p).is_none());
    }
    let out = h.process(&mut *m, 0, batch);
    drop(out);
    assert_eq!(wire.lock().tx[0], vec![f]);
    assert_eq!(m.extra_stats(), vec![("bad_offload", 2), ("too_large", 0)]);
}

/// A PortOut module sending on `port` (named `out`).
fn port_out_over(port: MemPort, pool: &nfkit_hw::Mempool) -> Box<dyn Module> {
    let env = BuildEnv {
        ports: [(
            "out".to_string(),
            nfkit_pipeline::ports::SharedPort::new(Box::new(port)),
        )]
        .into_iter()
        .collect(),
        pool: pool.clone(),
    };
    let mut a: Args = parse("x::Sink()\nx.c(port=out)", "t").unwrap().commands[0]
        .args
        .clone();
    Registry::default().build("PortOut", &mut a, &env).unwrap()
}

fn arb_inner() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(tcp, sport, payload)| inner_frame(tcp, sport, &payload))
}

/// Accepted by IPChecksum(verify=1) and L4Checksum(verify=1).
fn accepted(f: &[u8]) -> bool {
    let mut h = Harness::new();
    let ip = h.run(&mut *module("IPChecksum", "verify=1"), 0, &[f.to_vec()]);
    let l4 = h.run(&mut *module("L4Checksum", "verify=1"), 0, &[f.to_vec()]);
    ip[0].len() == 1 && l4[0].len() == 1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Computed checksums verify (by etherparse, outer and inner), and a
    /// frame with one byte changed is accepted exactly when etherparse
    /// finds its checksums right.
    #[test]
    fn computed_checksums_verify_and_verifiers_accept_exactly_right_frames(
        inner in arb_inner(),
        which in 0usize..3,
        flip_at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let frame = match which {
            0 => inner.clone(),
            1 => wrap(&inner, 4789, &VXLAN),
            _ => wrap(&inner, 6081, &GENEVE),
        };
        let mut h = Harness::new();
        let ip = h.run(&mut *module("IPChecksum", ""), 0, &[frame]);
        let set = h.run(&mut *module("L4Checksum", ""), 0, &ip[0]);
        let f = set[0][0].clone();
        prop_assert!(verify_checksums(&f).is_ok());
        let off = f.len() - inner.len();
        prop_assert!(verify_checksums(&f[off..]).is_ok());
        prop_assert!(accepted(&f));
        // change one byte of the inner IPv4 addresses, its checksum, or
        // after (not lengths or protocol: the frame stays what it was)
        let inner_at = off + 14;
        let candidates: Vec<usize> = (inner_at + 10..f.len()).collect();
        let at = candidates[flip_at.index(candidates.len())];
        let mut g = f.clone();
        g[at] ^= flip;
        let right = verify_checksums(&g).is_ok() && verify_checksums(&g[off..]).is_ok();
        prop_assert_eq!(accepted(&g), right, "byte {} of {}", at, g.len());
    }

    /// Encapsulate then decapsulate is the identity (VXLAN, Geneve,
    /// Generic), for any inner frame.
    #[test]
    fn encap_then_decap_is_the_identity(inner in arb_inner(), which in 0usize..3) {
        let (enc, dec) = [
            ("VXLANEncap()", "VXLANDecap()"),
            ("GeneveEncap()", "GeneveDecap()"),
            ("GenericEncap(fields=[(size=4, value=0x01020304)])", "GenericDecap(bytes=4)"),
        ][which];
        let chain = format!(
            "src -> SetMetadata(attribute=tun_ip_src, size=4, value=0x0100a8c0)\n\
             -> SetMetadata(attribute=tun_ip_dst, size=4, value=0x0200a8c0)\n\
             -> SetMetadata(attribute=tun_id, size=4, value=0x56341200)\n\
             -> SetMetadata(attribute=ether_src, size=6, value=0xaa0000000002)\n\
             -> SetMetadata(attribute=ether_dst, size=6, value=0xbb0000000002)\n\
             -> {enc} -> IPEncap() -> EtherEncap() -> L4Checksum() -> IPChecksum(verify=1)\n\
             -> L4Checksum(verify=1) -> EtherDecap_{dec}"
        );
        let chain = if which == 2 {
            format!("src -> {enc} -> {dec} -> PortOut(port=out)")
        } else {
            chain.replace("EtherDecap_", "").replace(dec, &format!("{dec} -> PortOut(port=out)"))
        };
        let back = run_chain(&inner, &chain);
        prop_assert_eq!(back, vec![inner; 4]);
    }
}

/// A port that fills in TCP/UDP checksums itself gets those requests
/// (the field holding the pseudo-header sum, as Linux and VirtIO want);
/// PortOut does only the IPv4 checksum it cannot, and a packet without
/// state passes untouched.
#[test]
fn port_out_leaves_to_the_port_what_it_can_do() {
    use nfkit_hw::pool::offload::{self as ol, cap, Caps};
    let mut h = Harness::new();
    let f = inner_frame(true, 7, b"the port's to finish");
    let mut asked = f.clone();
    asked[24..26].fill(0); // IPv4 checksum to do
    asked[50..52].fill(0x55); // TCP checksum: junk the port overwrites
    let mut p = h.packet(&asked);
    let mut o = nfkit_packet::offload_meta::describe(&f).unwrap();
    o.flags = ol::IP_CSUM | ol::L4_CSUM;
    p.set_offload(o);
    let port = MemPort::new("out", 1);
    let wire = port.wire.clone();
    wire.lock().caps = Caps::new(cap::TX_L4_CSUM, 1518);
    let mut m = port_out_over(port, h.pool());
    let mut batch = nfkit_hw::Batch::new();
    assert!(batch.push(p).is_none());
    assert!(batch.push(h.packet(&f)).is_none());
    drop(h.process(&mut *m, 0, batch));
    let w = wire.lock();
    let (sent, state) = (&w.tx[0], &w.tx_offload);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        &sent[0][24..26],
        &f[24..26],
        "IPv4 checksum done in software"
    );
    let pseudo = nfkit_packet::checksum::Sum::ZERO
        .add_bytes(&f[26..34])
        .add_u16(6)
        .add_u16((f.len() - 34) as u16)
        .fold();
    assert_eq!(
        &sent[0][50..52],
        &pseudo.to_be_bytes(),
        "seeded for the port"
    );
    assert_eq!(state[0].map(|o| o.flags), Some(ol::L4_CSUM));
    assert_eq!((&sent[1], state[1]), (&f, None));
    assert_eq!(m.extra_stats(), vec![("bad_offload", 0), ("too_large", 0)]);
}

// ---- TSO and LRO (issue 19) ----

/// A TCP frame of `payload` bytes with `flags`, plain or in VXLAN or
/// Geneve, checksums right.
fn tcp_frame(payload: &[u8], flags: u8, which: usize, id: u16) -> Vec<u8> {
    let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut inner = FrameBuilder::tcp((a, 40000), (z, 5201))
        .payload(payload)
        .build();
    inner[14 + 4..14 + 6].copy_from_slice(&id.to_be_bytes());
    inner[14 + 6] = 0x40; // DF
    inner[34 + 13] = flags;
    inner[34 + 8..34 + 12].copy_from_slice(&77u32.to_be_bytes()); // ACK number
    let f = match which {
        0 => inner,
        1 => wrap(&inner, 4789, &VXLAN),
        _ => wrap(&inner, 6081, &GENEVE),
    };
    let mut f = f;
    let lay = nfkit_packet::gso::TcpLayout::of(&f).unwrap();
    let sum = nfkit_packet::checksum::Sum::ZERO.add_bytes(&f[lay.header_len()..]);
    let n = f.len();
    nfkit_packet::gso::fix_headers(&mut f, &lay.o, n, 0, sum);
    f
}

/// `frame` as a chain from `h`'s pool, asking for TCP segmentation at `mss`.
fn super_frame(h: &Harness, frame: &[u8], mss: u16) -> nfkit_hw::PktBuf {
    let mut p = h.pool().alloc_frame(frame).unwrap();
    let mut o = nfkit_packet::offload_meta::describe(frame).unwrap();
    o.gso = nfkit_hw::pool::offload::Gso::Tcp;
    o.gso_size = mss;
    o.flags = nfkit_hw::pool::offload::L4_CSUM;
    p.set_offload(o);
    p
}

fn stats(m: &dyn Module) -> std::collections::HashMap<&'static str, u64> {
    m.extra_stats().into_iter().collect()
}

fn bytes(p: &nfkit_hw::PktBuf) -> Vec<u8> {
    let mut v = Vec::new();
    p.copy_frame_to(&mut v);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// TSO then LRO gives back the original frame (plain, VXLAN, Geneve),
    /// every segment's checksums (outer and inner) verify and no segment
    /// carries more than the MSS.
    #[test]
    fn segmenting_then_coalescing_gives_back_the_original(
        len in 0usize..12_000,
        mss in 64u16..1460,
        which in 0usize..3,
        extra in prop::sample::select(vec![0u8, 0x08, 0x01, 0x80, 0x89]),
        id in any::<u16>(),
        seed in any::<u8>(),
    ) {
        let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
        let f = tcp_frame(&payload, 0x10 | extra, which, id);
        prop_assume!(usize::from(mss) <= f.len() && len.div_ceil(usize::from(mss)) <= 60);
        let mut h = Harness::new();
        let mut tso = module("TSO", "");
        let mut b = nfkit_hw::Batch::new();
        let _ = b.push(super_frame(&h, &f, mss));
        let _ = h.process(&mut *tso, 0, b);
        let segs = h.run_task_batch(&mut *tso).remove(0);
        prop_assert_eq!(segs.len(), len.div_ceil(usize::from(mss)).max(1));
        let hl = nfkit_packet::gso::TcpLayout::of(&f).unwrap().header_len();
        let inner_at = f.len() - (14 + 20 + 20 + len);
        for s in segs.iter() {
            prop_assert!(s.pkt_len() <= hl + usize::from(mss));
            prop_assert!(s.offload().is_none());
            let d = bytes(s);
            prop_assert!(verify_checksums(&d).is_ok(), "{:?}", verify_checksums(&d));
            prop_assert!(verify_checksums(&d[inner_at..]).is_ok());
        }
        let mut lro = module("LRO", "");
        let out = h.process(&mut *lro, 0, segs).remove(0);
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(bytes(&out[0]), f);
        if len > usize::from(mss) {
            let o = out[0].offload().unwrap();
            prop_assert_eq!((o.gso, o.gso_size), (nfkit_hw::pool::offload::Gso::Tcp, mss));
        }
    }
}

/// More segments than a batch holds leave over the task's runs; LRO
/// keeps flows apart, sends a flow at a gap and never merges a segment
/// whose checksum is wrong.
#[test]
fn tso_spreads_over_runs_and_lro_keeps_to_gro_rules() {
    let mut h = Harness::new();
    let payload: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let f = tcp_frame(&payload, 0x18, 1, 9);
    let mut tso = module("TSO", "max_segments=128");
    let mut b = nfkit_hw::Batch::new();
    let _ = b.push(super_frame(&h, &f, 900));
    assert!(
        h.process(&mut *tso, 0, b)[0].is_empty(),
        "a task's input side sends nothing"
    );
    let mut segs: Vec<Vec<u8>> = h.run_task_batch(&mut *tso)[0].iter().map(bytes).collect();
    assert_eq!(segs.len(), 64, "one output batch");
    segs.extend(h.run_task(&mut *tso).remove(0));
    assert_eq!(segs.len(), 67);
    assert_eq!(stats(&*tso)["segmented"], 1);
    // Gap: segment 3 missing -> two frames; a corrupted one passes alone.
    let mut lro = module("LRO", "");
    let mut input: Vec<Vec<u8>> = segs[..10].to_vec();
    input.remove(3);
    let mut bad = segs[20].clone();
    let n = bad.len();
    bad[n - 1] ^= 0x5a;
    input.push(bad.clone());
    let out = h.run(&mut *lro, 0, &input);
    assert_eq!(out[0].len(), 3, "0..3, 4..10, the bad one");
    assert_eq!(out[0][2], bad);
    assert_eq!(stats(&*lro)["bad_csum"], 1);
    assert_eq!(stats(&*lro)["merged"], 2 + 5);
}

/// Metadata that lies is dropped and counted with its reason, never cut.
#[test]
fn tso_drops_lying_metadata_with_a_reason() {
    use nfkit_hw::pool::offload::{Gso, L4};
    let mut h = Harness::new();
    let f = tcp_frame(&[7; 3000], 0x10, 0, 1);
    let udp = inner_frame(false, 9, &[1; 3000]);
    type Lie = Box<dyn Fn(&mut nfkit_hw::pool::offload::Offload)>;
    let cases: Vec<(Vec<u8>, Lie, &str)> = vec![
        (f.clone(), Box::new(|o| o.l2_len = 200), "bad_offsets"),
        (f.clone(), Box::new(|o| o.l3_len = 24), "bad_offsets"),
        (f.clone(), Box::new(|o| o.gso_size = 0), "bad_mss"),
        (f.clone(), Box::new(|o| o.gso_size = 9000), "bad_mss"),
        (udp, Box::new(|o| o.l4 = L4::Tcp), "not_tcp"),
        (f[..40].to_vec(), Box::new(|_| {}), "truncated"),
        (
            f.clone(),
            Box::new(|o| o.gso_size = 10),
            "too_many_segments",
        ),
    ];
    for (frame, lie, reason) in cases {
        let mut tso = module("TSO", "");
        let mut p = h.pool().alloc_frame(&frame).unwrap();
        let mut o = nfkit_packet::offload_meta::describe(&f).unwrap();
        o.gso = Gso::Tcp;
        o.gso_size = 1000;
        lie(&mut o);
        p.set_offload(o);
        let mut b = nfkit_hw::Batch::new();
        let _ = b.push(p);
        let _ = h.process(&mut *tso, 0, b);
        let out = h.run_task_batch(&mut *tso);
        assert!(out[0].is_empty(), "{reason}");
        assert_eq!(stats(&*tso)[reason], 1, "{reason}");
    }
    assert_eq!(h.counters().2, 7, "every one counted as dropped");
}
