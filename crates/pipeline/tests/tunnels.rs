//! Checksum, tunnel and VLAN modules (BESS's IPChecksum, L4Checksum,
//! VXLAN/Geneve/Generic encap and decap, EtherEncap, IPEncap, VLANPush,
//! VLANPop, VLANSplit, MPLSPop): exact bytes, encap-then-decap identity,
//! and bad frames dropped and counted.

mod common;

use common::{MemPort, Wire};
use nfkit_packet::checksum::checksum;
use nfkit_packet::{verify_checksums, FrameBuilder};
use nfkit_pipeline::args::Args;
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_pipeline::parse;
use parking_lot::Mutex;
use std::net::Ipv4Addr;
use std::sync::Arc;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn tcp(src: &str, dst: &str) -> Vec<u8> {
    FrameBuilder::tcp((ip(src), 1000), (ip(dst), 80))
        .payload(b"inner payload")
        .build()
}

/// `name=value, ...` in the config language, as arguments.
fn record(args: &str) -> Args {
    parse(&format!("x::Sink()\nx.c({args})"), "t")
        .unwrap()
        .commands[0]
        .args
        .clone()
}

fn module(class: &str, args: &str) -> Box<dyn Module> {
    let mut a = record(args);
    let env = BuildEnv {
        ports: Default::default(),
        pool: Harness::new().pool().clone(),
    };
    Registry::default()
        .build(class, &mut a, &env)
        .unwrap_or_else(|e| panic!("{class}({args}): {e}"))
}

fn tag(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

#[test]
fn vlan_push_pop_split() {
    let f = tcp("10.0.0.1", "10.0.0.2");
    let mut h = Harness::new();
    let out = h.run(
        &mut *module("VLANPush", "tci=0x2005"),
        0,
        &[
            f.clone(),
            tag(&f, 0x8100, 7),
            tag(&tag(&f, 0x8100, 7), 0x88a8, 9),
            vec![1; 10],
        ],
    );
    assert_eq!(
        out[0],
        vec![
            tag(&f, 0x8100, 0x2005),
            tag(&tag(&f, 0x8100, 7), 0x88a8, 0x2005)
        ]
    );
    assert_eq!(h.counters(), (0, 0, 2), "a third tag and a runt are drops");
    let out = Harness::new().run(
        &mut *module("VLANPop", ""),
        0,
        &[
            tag(&f, 0x8100, 5),
            tag(&tag(&f, 0x8100, 5), 0x88a8, 6),
            f.clone(),
        ],
    );
    assert_eq!(out[0], vec![f.clone(), tag(&f, 0x8100, 5), f.clone()]);
    let mut h = Harness::new();
    let out = h.run(
        &mut *module("VLANSplit", "gates=8"),
        0,
        &[tag(&f, 0x8100, 0x3003), f.clone(), tag(&f, 0x8100, 100)],
    );
    assert_eq!(out[3], vec![f.clone()]);
    assert_eq!(out[0], vec![f.clone()]);
    assert_eq!(h.counters(), (0, 0, 1), "VLAN 100 has no gate");
}

#[test]
fn mpls_pop() {
    let f = tcp("10.0.0.1", "10.0.0.2");
    let mut mpls = f[..12].to_vec();
    mpls.extend_from_slice(&[0x88, 0x47, 0x00, 0x01, 0x41, 0x40]);
    mpls.extend_from_slice(&f[14..]);
    let out = Harness::new().run(&mut *module("MPLSPop", ""), 0, &[mpls.clone(), f.clone()]);
    assert_eq!(out[0], vec![f.clone()]);
    assert_eq!(out[1], vec![f.clone()], "not MPLS: gate 1");
    let out = Harness::new().run(
        &mut *module("MPLSPop", "remove_eth_header=1"),
        0,
        &[mpls.clone()],
    );
    assert_eq!(out[0], vec![f[14..].to_vec()]);
    // BESS's `set` command: both settings at once, at run time.
    let mut m = module("MPLSPop", "");
    let mut set = |args: &str| m.command("set", &mut record(args));
    set("remove_eth_header=0, next_eth_type=0x86dd").unwrap();
    assert!(set("next_eth_type=0x10000").is_err(), "not an EtherType");
    assert!(set("label=3").is_err(), "no such argument");
    let out = Harness::new().run(&mut *m, 0, &[mpls.clone()]);
    let mut v6 = f.clone();
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    assert_eq!(out[0], vec![v6], "the failed sets changed nothing");
    m.command("set", &mut record("remove_eth_header=1"))
        .unwrap();
    let out = Harness::new().run(&mut *m, 0, &[mpls]);
    assert_eq!(out[0], vec![f[14..].to_vec()]);
}

fn ipv6_udp() -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .udp(5000, 53);
    let mut out = Vec::new();
    b.write(&mut out, b"v6 payload").unwrap();
    out
}

#[test]
fn checksums_set_and_verify() {
    let good = [
        tcp("10.0.0.1", "10.0.0.2"),
        FrameBuilder::udp((ip("10.0.0.1"), 9), (ip("10.0.0.2"), 53))
            .payload(b"odd")
            .build(),
        tag(&tcp("10.0.0.3", "10.0.0.4"), 0x8100, 3),
        ipv6_udp(),
    ];
    let mut bad: Vec<Vec<u8>> = good.to_vec();
    for f in &mut bad {
        // Break the L4 checksum (last payload byte), and the IPv4 one.
        let n = f.len() - 1;
        f[n] ^= 0x5a;
    }
    let mut broken_ip = good[0].clone();
    broken_ip[14 + 10] ^= 0xff;
    // Verify: good to 0, bad to 1.
    let out = Harness::new().run(
        &mut *module("L4Checksum", "verify=1"),
        0,
        &[good.to_vec(), bad.clone()].concat(),
    );
    assert_eq!(out[0], good.to_vec());
    assert_eq!(out[1], bad);
    let out = Harness::new().run(
        &mut *module("IPChecksum", "verify=1"),
        0,
        &[good[0].clone(), broken_ip.clone(), good[3].clone()],
    );
    assert_eq!(
        out[0],
        vec![good[0].clone(), good[3].clone()],
        "IPv6 passes"
    );
    assert_eq!(out[1], vec![broken_ip.clone()]);
    // Set: the broken ones come out right.
    let out = Harness::new().run(&mut *module("L4Checksum", ""), 0, &bad);
    for f in &out[0] {
        let out = Harness::new().run(
            &mut *module("L4Checksum", "verify=1"),
            0,
            std::slice::from_ref(f),
        );
        assert_eq!(out[0].len(), 1, "fixed");
    }
    let out = Harness::new().run(&mut *module("IPChecksum", ""), 0, &[broken_ip]);
    assert_eq!(out[0], vec![good[0].clone()]);
}

/// A pipeline from a Source of `inner` through `chain`, with a port
/// `out` (and `out2`) to collect what leaves.
fn run_chain(inner: &[u8], chain: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let bytes: Vec<String> = inner.iter().map(|b| b.to_string()).collect();
    let src = format!(
        "port out = \"out\"\nport out2 = \"out2\"\nsrc::Source(size={}, burst=4, template=[{}])\n{chain}",
        inner.len(),
        bytes.join(",")
    );
    let wires: Mutex<Vec<(String, Arc<Mutex<Wire>>)>> = Mutex::new(Vec::new());
    let mut p = parse(&src, "t.nfk")
        .unwrap()
        .build(&|spec| {
            let mp = MemPort::new(spec, 1);
            wires.lock().push((spec.to_string(), mp.wire.clone()));
            Ok(Box::new(mp) as Box<dyn nfkit_port::Port>)
        })
        .unwrap();
    p.step(1).unwrap();
    let w = wires.lock();
    let get = |n: &str| w.iter().find(|(s, _)| s == n).unwrap().1.lock().tx[0].clone();
    (get("out"), get("out2"))
}

const SET_TUNNEL: &str = "
src -> SetMetadata(attribute=tun_ip_src, size=4, value=0x0100a8c0)
    -> SetMetadata(attribute=tun_ip_dst, size=4, value=0x0200a8c0)
    -> SetMetadata(attribute=tun_id, size=4, value=0x56341200)
    -> SetMetadata(attribute=ether_src, size=6, value=0xaa0000000002)
    -> SetMetadata(attribute=ether_dst, size=6, value=0xbb0000000002)
    -> ENC";

fn outer_expected(inner: &[u8], sport: u16, dport: u16, tunnel: [u8; 8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa, 8, 0];
    let total = (20 + 8 + 8 + inner.len()) as u16;
    let mut iph = vec![0x45, 0];
    iph.extend_from_slice(&total.to_be_bytes());
    iph.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2]);
    let c = checksum(&iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&tunnel);
    f.extend_from_slice(inner);
    f
}

#[test]
fn vxlan_and_geneve_encap_exact_bytes_and_decap_identity() {
    for (class, decap, dport, tunnel) in [
        (
            "VXLANEncap",
            "VXLANDecap",
            4789u16,
            [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0],
        ),
        (
            "GeneveEncap",
            "GeneveDecap",
            6081,
            [0, 0, 0x65, 0x58, 0x12, 0x34, 0x56, 0],
        ),
    ] {
        let inner = tcp("10.0.0.1", "10.0.0.2");
        let chain = format!(
            "{}\nenc -> IPEncap() -> EtherEncap() -> rep::Replicate(gates=2)\n\
             rep:0 -> PortOut(port=out)\nrep:1 -> {decap}() -> PortOut(port=out2)",
            SET_TUNNEL.replace("ENC", &format!("enc::{class}()"))
        );
        let (outer, back) = run_chain(&inner, &chain);
        assert_eq!(outer.len(), 4, "{class}");
        let sport = u16::from_be_bytes([outer[0][34], outer[0][35]]);
        assert!(
            sport >= 0xc000,
            "{class}: source port {sport} in the dynamic range"
        );
        for f in &outer {
            assert_eq!(f, &outer_expected(&inner, sport, dport, tunnel), "{class}");
            verify_checksums(f).unwrap();
        }
        assert_eq!(back, vec![inner.clone(); 4], "{decap} undoes {class}");
    }
}

#[test]
fn generic_encap_then_decap_is_the_identity() {
    let inner = tcp("10.0.0.1", "10.0.0.2");
    let chain = "
src -> SetMetadata(attribute=label, size=2, value=0x0201)
  -> GenericEncap(fields=[(size=2, value=0xabcd), (size=2, attribute=label), (size=1, value=[7])])
  -> rep::Replicate(gates=2)
rep:0 -> PortOut(port=out)
rep:1 -> GenericDecap(bytes=5) -> PortOut(port=out2)";
    let (outer, back) = run_chain(&inner, chain);
    let mut want = vec![0xab, 0xcd, 0x01, 0x02, 7];
    want.extend_from_slice(&inner);
    assert_eq!(outer, vec![want; 4]);
    assert_eq!(back, vec![inner; 4]);
}

#[test]
fn decap_then_encap_round_trips_many_frames() {
    // Frames of many lengths from 14 to 300 bytes, random content.
    let mut x = 0x9e37_79b9_u32;
    for len in (14..300usize).step_by(7) {
        let inner: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let chain = format!(
            "{}\nenc -> IPEncap() -> EtherEncap() -> VXLANDecap() -> PortOut(port=out)",
            SET_TUNNEL.replace("ENC", "enc::VXLANEncap()")
        );
        let (back, _) = run_chain(&inner, &chain);
        assert_eq!(back, vec![inner; 4], "length {len}");
    }
}

#[test]
fn decap_drops_bad_tunnel_frames() {
    let inner = tcp("10.0.0.1", "10.0.0.2");
    let good = outer_expected(&inner, 0xc123, 4789, [0x08, 0, 0, 0, 0, 0, 1, 0]);
    let mut no_flag = good.clone();
    no_flag[42] = 0;
    let mut long_udp = good.clone();
    long_udp[39] += 1;
    let mut long_ip = good.clone();
    long_ip[17] += 1;
    let truncated = good[..60].to_vec();
    let not_udp = tcp("192.168.0.1", "192.168.0.2");
    let mut h = Harness::new();
    let mut m = module("VXLANDecap", "");
    let out = h.run(
        &mut *m,
        0,
        &[
            good.clone(),
            no_flag,
            long_udp,
            long_ip,
            truncated,
            not_udp,
            vec![0; 5],
        ],
    );
    assert_eq!(out[0], vec![inner]);
    assert_eq!(h.counters(), (0, 0, 6));
    assert_eq!(
        m.extra_stats(),
        vec![
            ("not_udp", 2),
            ("bad_length", 3),
            ("bad_header", 1),
            ("truncated", 0)
        ]
    );
    let mut padded = good.clone();
    padded.extend_from_slice(&[0; 8]);
    let out = Harness::new().run(&mut *module("GeneveDecap", ""), 0, &[good, padded]);
    assert!(out[0].is_empty(), "VXLAN is not Geneve");
}

/// In-memory wires by port spec.
type Wires = Vec<(String, Arc<Mutex<Wire>>)>;

/// Build a shipped example with in-memory ports; its wires by port spec.
fn example(name: &str) -> (nfkit_pipeline::Pipeline, Wires) {
    let desc =
        nfkit_pipeline::load(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let wires: Mutex<Wires> = Mutex::new(Vec::new());
    let p = desc
        .build(&|spec| {
            let mp = MemPort::new(spec, 1);
            wires.lock().push((spec.to_string(), mp.wire.clone()));
            Ok(Box::new(mp) as Box<dyn nfkit_port::Port>)
        })
        .unwrap();
    (p, wires.into_inner())
}

fn wire(w: &[(String, Arc<Mutex<Wire>>)], spec: &str) -> Arc<Mutex<Wire>> {
    w.iter().find(|(s, _)| s == spec).unwrap().1.clone()
}

#[test]
fn vlan_uplink_example_tags_and_untags() {
    let (mut p, w) = example("vlan_uplink.nfk");
    let f = tcp("10.0.0.1", "10.0.0.2");
    wire(&w, "afpacket:veth10").lock().rx[0].push_back(f.clone());
    wire(&w, "afpacket:vethup").lock().rx[0].extend([
        tag(&f, 0x8100, 20),
        tag(&f, 0x8100, 30),
        f.clone(),
    ]);
    p.step(6).unwrap();
    assert_eq!(
        wire(&w, "afpacket:vethup").lock().tx[0],
        vec![tag(&f, 0x8100, 10)]
    );
    assert_eq!(wire(&w, "afpacket:veth20").lock().tx[0], vec![f.clone()]);
    assert!(wire(&w, "afpacket:veth10").lock().tx[0].is_empty());
}

#[test]
fn vxlan_overlay_example_encapsulates_decapsulates_and_answers_arp() {
    let (mut p, w) = example("vxlan_overlay.nfk");
    let inner = tcp("10.98.0.1", "10.98.0.2");
    let outer = outer_expected(&inner, 0, 4789, [0x08, 0, 0, 0, 0, 0, 42, 0]);
    wire(&w, "afpacket:veth-overlay").lock().rx[0].push_back(inner.clone());
    p.step(4).unwrap();
    let sent = wire(&w, "afpacket:veth-underlay").lock().tx[0].clone();
    assert_eq!(sent.len(), 1);
    let mut want = outer.clone();
    want[..12].copy_from_slice(&[2, 0, 0, 0x98, 0, 2, 2, 0, 0, 0x98, 0, 1]);
    want[26..34].copy_from_slice(&[192, 168, 98, 1, 192, 168, 98, 2]);
    want[24..26].fill(0);
    let c = checksum(&want[14..34]);
    want[24..26].copy_from_slice(&c.to_be_bytes());
    want[34..36].copy_from_slice(&sent[0][34..36]);
    assert_eq!(sent[0], want);
    // Back: the same frame as the far end would send it, and an ARP request.
    let mut back = sent[0].clone();
    back[26..34].copy_from_slice(&[192, 168, 98, 2, 192, 168, 98, 1]);
    let arp = nfkit_packet::arp_request(
        nfkit_packet::MacAddr([2, 0, 0, 0x98, 0, 2]),
        ip("192.168.98.2"),
        ip("192.168.98.1"),
    );
    wire(&w, "afpacket:veth-underlay").lock().rx[0].extend([back, arp]);
    p.step(4).unwrap();
    assert_eq!(wire(&w, "afpacket:veth-overlay").lock().tx[0], vec![inner]);
    let replies = wire(&w, "afpacket:veth-underlay").lock().tx[0].clone();
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[1][20..22], [0, 2], "an ARP reply");
}
