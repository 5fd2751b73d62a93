//! BESS's rewriters and utilities: exact bytes out of exact gates.

use nfkit_packet::{arp_request, FrameBuilder, MacAddr};
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_pipeline::parse;
use std::net::Ipv4Addr;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> FrameBuilder {
    FrameBuilder::tcp((ip(src), sport), (ip(dst), dport))
}
fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> FrameBuilder {
    FrameBuilder::udp((ip(src), sport), (ip(dst), dport))
}

fn record(src: &str) -> Args {
    parse(&format!("x::Sink()\nx.c({src})"), "t")
        .expect("arguments parse")
        .commands[0]
        .args
        .clone()
}

fn try_module(class: &str, args: &str) -> Result<Box<dyn Module>, String> {
    let env = BuildEnv {
        ports: Default::default(),
        pool: Harness::new().pool().clone(),
    };
    Registry::default()
        .build(class, &mut record(args), &env)
        .map_err(|e| e.to_string())
}

fn module(class: &str, args: &str) -> Box<dyn Module> {
    try_module(class, args).unwrap_or_else(|e| panic!("{class}({args}): {e}"))
}

/// A frame as a `.nfk` byte list (`1,2,3`), for a template argument.
fn byte_list(frame: &[u8]) -> String {
    frame
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Run a task module once per millisecond of virtual time for `ms`
/// milliseconds; every frame it sent out of gate 0.
fn run_ms(m: &mut dyn Module, ms: u64) -> Vec<Vec<u8>> {
    let mut h = Harness::new();
    let mut frames = Vec::new();
    for t in 0..ms {
        h.set_time(t * 1_000_000);
        frames.extend(h.run_task(m).remove(0));
    }
    frames
}

fn cmd(m: &mut dyn Module, c: &str, args: &str) -> Result<Value, String> {
    m.command(c, &mut record(args)).map_err(|e| e.to_string())
}

#[test]
fn update_ttl_decrements_and_patches_the_checksum() {
    let mut h = Harness::new();
    let mut m = module("UpdateTTL", "");
    let input = [
        tcp("10.0.0.1", 1, "10.0.0.2", 2).ttl(64).build(),
        udp("10.0.0.1", 1, "10.0.0.2", 2).ttl(2).build(),
        tcp("10.0.0.1", 1, "10.0.0.2", 2).ttl(1).build(),
        tcp("10.0.0.1", 1, "10.0.0.2", 2).ttl(0).build(),
        arp_request(MacAddr([2, 0, 0, 0, 0, 1]), ip("10.0.0.1"), ip("10.0.0.2")),
    ];
    let out = h.run(&mut *m, 0, &input);
    assert_eq!(
        out[0],
        vec![
            tcp("10.0.0.1", 1, "10.0.0.2", 2).ttl(63).build(),
            udp("10.0.0.1", 1, "10.0.0.2", 2).ttl(1).build(),
        ]
    );
    assert_eq!(h.counters(), (0, 0, 3));
}

#[test]
fn ip_swap_swaps_addresses_and_ports() {
    let mut h = Harness::new();
    let mut m = module("IPSwap", "");
    let icmp = FrameBuilder::icmp_echo(ip("1.1.1.1"), ip("2.2.2.2"), true, 7);
    let out = h.run(
        &mut *m,
        0,
        &[
            tcp("10.0.0.1", 1000, "10.0.0.2", 80).build(),
            udp("10.0.0.1", 53, "10.0.0.9", 4000).build(),
            icmp.build(),
            vec![0; 30],
        ],
    );
    assert_eq!(
        out[0],
        vec![
            tcp("10.0.0.2", 80, "10.0.0.1", 1000).build(),
            udp("10.0.0.9", 4000, "10.0.0.1", 53).build(),
            FrameBuilder::icmp_echo(ip("2.2.2.2"), ip("1.1.1.1"), true, 7).build(),
        ]
    );
    assert_eq!(h.counters(), (0, 0, 1));
}

#[test]
fn static_nat_maps_ranges_both_ways() {
    let mut m = module(
        "StaticNAT",
        r#"pairs=[(int_range=(start="10.0.0.1", end="10.0.0.10"), ext_range=(start="192.0.2.101", end="192.0.2.110"))]"#,
    );
    let mut h = Harness::new();
    let out = h.run(
        &mut *m,
        0,
        &[
            tcp("10.0.0.5", 1000, "8.8.8.8", 80).build(),
            udp("10.0.0.10", 1000, "8.8.8.8", 53).build(),
            udp("10.0.0.11", 1000, "8.8.8.8", 53).build(),
        ],
    );
    assert_eq!(out[0], Vec::<Vec<u8>>::new());
    assert_eq!(
        out[1],
        vec![
            tcp("192.0.2.105", 1000, "8.8.8.8", 80).build(),
            udp("192.0.2.110", 1000, "8.8.8.8", 53).build(),
            udp("10.0.0.11", 1000, "8.8.8.8", 53).build(),
        ],
        "translated with correct checksums; unmatched passes"
    );
    let out = h.run(
        &mut *m,
        1,
        &[tcp("8.8.8.8", 80, "192.0.2.105", 1000).build()],
    );
    assert_eq!(out[0], vec![tcp("8.8.8.8", 80, "10.0.0.5", 1000).build()]);
    for (a, want) in [
        (
            r#"pairs=[(int_range=(start="10.0.0.1", end="10.0.0.10"), ext_range=(start="1.0.0.1", end="1.0.0.2"))]"#,
            "differ in size",
        ),
        (
            r#"pairs=[(int_range=(start="10.0.0.9", end="10.0.0.1"), ext_range=(start="1.0.0.1", end="1.0.0.2"))]"#,
            "end is before start",
        ),
        (
            r#"pairs=[(int_range=(start="10.0.0.1", end="10.0.0.2"), ext_range=(start="1.0.0.1", end="1.0.0.2")), (int_range=(start="10.0.0.2", end="10.0.0.3"), ext_range=(start="2.0.0.1", end="2.0.0.2"))]"#,
            "overlap",
        ),
        (
            r#"pairs=[(int_range=(start="10.0.0.1"), ext_range=(start="1.0.0.1", end="1.0.0.2"))]"#,
            "`end`: is required",
        ),
    ] {
        let e = try_module("StaticNAT", a).err().unwrap();
        assert!(e.contains(want), "{a}: {e}");
    }
}

#[test]
fn rewrite_uses_templates_in_turn() {
    let a = tcp("1.1.1.1", 1, "2.2.2.2", 2).build();
    let b = udp("3.3.3.3", 3, "4.4.4.4", 4).payload(b"hello").build();
    let list = |f: &[u8]| {
        format!(
            "[{}]",
            f.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    let mut m = module(
        "Rewrite",
        &format!("templates=[{}, {}]", list(&a), list(&b)),
    );
    let input: Vec<Vec<u8>> = (0..3).map(|i| vec![i; 100]).collect();
    let out = Harness::new().run(&mut *m, 0, &input);
    assert_eq!(out[0], vec![a.clone(), b.clone(), a.clone()]);
    cmd(&mut *m, "clear", "").unwrap();
    assert_eq!(
        Harness::new().run(&mut *m, 0, &input)[0],
        input,
        "no template: unchanged"
    );
    let e = cmd(&mut *m, "add", "templates=[[1, 2, 3]]").unwrap_err();
    assert!(e.contains("3 bytes is not 14 to"), "{e}");
    cmd(&mut *m, "add", &format!("templates=[{}]", list(&b))).unwrap();
    assert_eq!(Harness::new().run(&mut *m, 0, &input[..1])[0], vec![b]);
}

#[test]
fn random_update_writes_values_in_range() {
    let mut m = module("RandomUpdate", "fields=[(offset=30, size=4, min=0x0a000000, max=0x0a0000ff), (offset=36, size=2, min=80, max=80)], seed=7");
    let input: Vec<Vec<u8>> = (0..64)
        .map(|_| tcp("1.1.1.1", 1, "2.2.2.2", 2).build())
        .collect();
    let out = Harness::new().run(&mut *m, 0, &input);
    let mut seen = std::collections::HashSet::new();
    for f in &out[0] {
        assert_eq!(f[30..33], [10, 0, 0]);
        seen.insert(f[33]);
        assert_eq!(f[36..38], [0, 80]);
        assert_eq!(f[..30], input[0][..30]);
        assert_eq!(f[38..], input[0][38..]);
    }
    assert!(seen.len() > 20, "values spread: {}", seen.len());
    let e = cmd(
        &mut *m,
        "add",
        "fields=[(offset=0, size=1, min=0, max=256)]",
    )
    .unwrap_err();
    assert!(e.contains("do not make a range of 1-byte values"), "{e}");
    cmd(&mut *m, "clear", "").unwrap();
    assert_eq!(Harness::new().run(&mut *m, 0, &input[..1])[0], input[..1]);
    let mut short = module(
        "RandomUpdate",
        "fields=[(offset=100, size=2, min=0, max=1)]",
    );
    let mut h = Harness::new();
    assert!(h.run(&mut *short, 0, &input[..1])[0].is_empty());
    assert_eq!(h.counters(), (0, 0, 1));
}

#[test]
fn random_drop_drops_at_its_rate() {
    let mut m = module("RandomDrop", "drop_rate=0.25, seed=3");
    let input: Vec<Vec<u8>> = (0..4000).map(|i| vec![(i % 251) as u8; 60]).collect();
    let mut h = Harness::new();
    let out = h.run(&mut *m, 0, &input);
    let kept = out[0].len();
    assert!((2800..3200).contains(&kept), "kept {kept} of 4000");
    assert_eq!(h.counters().2 as usize, 4000 - kept);
    cmd(&mut *m, "set_droprate", "drop_rate=0").unwrap();
    assert_eq!(Harness::new().run(&mut *m, 0, &input[..100])[0].len(), 100);
    assert!(cmd(&mut *m, "set_droprate", "drop_rate=1.5")
        .unwrap_err()
        .contains("not between 0 and 1"));
    assert!(try_module("RandomDrop", "")
        .err()
        .unwrap()
        .contains("`drop_rate`: is required"));
}

#[test]
fn buffer_releases_full_batches() {
    let mut m = module("Buffer", "");
    let mut h = Harness::new();
    let input: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 60]).collect();
    assert!(h.run(&mut *m, 0, &input)[0].is_empty());
    assert_eq!(m.extra_stats(), vec![("held", 20)]);
    let more: Vec<Vec<u8>> = (20..40).map(|i| vec![i as u8; 60]).collect();
    let out = h.run(&mut *m, 0, &more);
    let all: Vec<Vec<u8>> = input.iter().chain(&more).cloned().collect();
    assert_eq!(out[0], all[..32]);
    assert_eq!(m.extra_stats(), vec![("held", 8)]);
}

#[test]
fn worker_split_follows_the_worker() {
    let mut m = module("WorkerSplit", "gates=4");
    let mut h = Harness::new();
    h.set_worker(2);
    assert_eq!(h.run(&mut *m, 0, &[vec![1; 60]])[2], vec![vec![1; 60]]);
    let mut m = module("WorkerSplit", "gates=4, worker_gates=[3, 1]");
    h.set_worker(0);
    assert_eq!(h.run(&mut *m, 0, &[vec![1; 60]])[3].len(), 1);
    h.set_worker(5);
    assert!(h
        .run(&mut *m, 0, &[vec![1; 60]])
        .iter()
        .all(|g| g.is_empty()));
    let m2 = try_module("WorkerSplit", "gates=2, worker_gates=(w0=1, w3=0)");
    assert!(m2.is_ok());
    let e = try_module("WorkerSplit", "gates=2, worker_gates=[2]")
        .err()
        .unwrap();
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn arp_responder_answers_configured_addresses() {
    let me = [2, 0, 0, 0, 0, 0x99];
    let mut m = module(
        "ArpResponder",
        r#"ip="10.0.0.1", mac_addr="02:00:00:00:00:99""#,
    );
    let asker = MacAddr([2, 0, 0, 0, 0, 5]);
    let req = arp_request(asker, ip("10.0.0.5"), ip("10.0.0.1"));
    let mut want = Vec::new();
    want.extend_from_slice(&asker.0);
    want.extend_from_slice(&me);
    want.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
    want.extend_from_slice(&me);
    want.extend_from_slice(&[10, 0, 0, 1]);
    want.extend_from_slice(&asker.0);
    want.extend_from_slice(&[10, 0, 0, 5]);
    want.resize(60, 0);
    let mut h = Harness::new();
    let other = arp_request(asker, ip("10.0.0.5"), ip("10.0.0.2"));
    let out = h.run(
        &mut *m,
        0,
        &[
            req.clone(),
            other.clone(),
            tcp("1.1.1.1", 1, "10.0.0.1", 2).build(),
        ],
    );
    assert_eq!(out[0], vec![want]);
    assert_eq!(h.counters(), (0, 0, 2));
    cmd(
        &mut *m,
        "add",
        r#"ip="10.0.0.2", mac_addr="02:00:00:00:00:98""#,
    )
    .unwrap();
    assert_eq!(Harness::new().run(&mut *m, 0, &[other])[0].len(), 1);
    cmd(&mut *m, "delete", r#"ip="10.0.0.1""#).unwrap();
    assert!(Harness::new().run(&mut *m, 0, &[req])[0].is_empty());
    assert!(cmd(
        &mut *m,
        "add",
        r#"ip="10.0.0.300", mac_addr="02:00:00:00:00:98""#
    )
    .unwrap_err()
    .contains("not an IPv4 address"));
    assert!(cmd(
        &mut *m,
        "add",
        r#"ip="10.0.0.3", mac_addr="02:00:00:00:98""#
    )
    .unwrap_err()
    .contains("not a MAC address"));
}

#[test]
fn url_filter_blocks_blacklisted_requests_and_their_connection() {
    let mut m = module(
        "UrlFilter",
        r#"blacklist=[(host="bad.example", path="/private")]"#,
    );
    let get = |path: &str, host: &str| {
        tcp("10.0.0.1", 40000, "10.0.0.2", 80)
            .payload(
                format!("GET {path} HTTP/1.1\r\nUser-Agent: t\r\nHost: {host}\r\n\r\n").as_bytes(),
            )
            .build()
    };
    let ok = [get("/", "bad.example"), get("/private/x", "good.example")];
    let mut h = Harness::new();
    assert_eq!(h.run(&mut *m, 0, &ok)[0], ok);
    let bad = get("/private/secret", "BAD.example");
    let reply = tcp("10.0.0.2", 80, "10.0.0.1", 40000)
        .payload(b"HTTP/1.1 200 OK\r\n")
        .build();
    let other = tcp("10.0.0.1", 40001, "10.0.0.2", 80).build();
    assert!(h.run(&mut *m, 0, &[bad])[0].is_empty());
    assert!(
        h.run(&mut *m, 1, &[reply])[1].is_empty(),
        "the reply of a blocked connection"
    );
    assert!(
        h.run(&mut *m, 0, &[ok[0].clone()])[0].is_empty(),
        "later packets of it"
    );
    assert_eq!(
        h.run(&mut *m, 0, std::slice::from_ref(&other))[0],
        vec![other]
    );
    assert_eq!(m.extra_stats(), vec![("blocked_flows", 1)]);
    assert!(
        cmd(&mut *m, "add", r#"blacklist=[(host="x", path="nope")]"#)
            .unwrap_err()
            .contains("path starting with /")
    );
}

#[test]
fn drr_shares_bytes_between_flows() {
    let mut m = module("DRR", "num_flows=4, quantum=1000, max_flow_queue_size=8");
    let mut h = Harness::new();
    // Flow A: 8 big packets; flow B: 8 small ones; 2 more of A overflow.
    let a = tcp("10.0.0.1", 1, "10.0.0.2", 2)
        .payload(&[0xaa; 900])
        .build();
    let b = tcp("10.0.0.3", 1, "10.0.0.2", 2)
        .payload(&[0xbb; 200])
        .build();
    let mut input = vec![a.clone(); 10];
    input.extend(vec![b.clone(); 8]);
    let out = h.run(&mut *m, 0, &input);
    assert!(out[0].is_empty(), "held until the task runs");
    assert_eq!(h.counters().2, 2, "A's queue holds 8");
    assert_eq!(m.extra_stats(), vec![("flows", 2), ("held", 16)]);
    let mut sent = Vec::new();
    for _ in 0..10 {
        sent.extend(h.run_task(&mut *m).remove(0));
    }
    assert_eq!(sent.len(), 16);
    // Each round: A sends 1 (900 of 1000 bytes), B sends 3-4 (254 bytes each).
    let first: String = sent[..10]
        .iter()
        .map(|f| if f == &a { 'A' } else { 'B' })
        .collect();
    assert_eq!(first, "ABBBABBBBA");
    assert_eq!(m.extra_stats(), vec![("flows", 0), ("held", 0)]);
}

#[test]
fn flowgen_makes_flows_with_syn_ack_fin() {
    let t = tcp("10.0.0.1", 1000, "10.1.0.1", 80).build();
    let list = byte_list(&t);
    // 10 flows/s of 1 s each, 100 pps: about 10 flows of 10 packets.
    let mut m = module(
        "FlowGen",
        &format!("template=[{list}], pps=100, flow_rate=10, flow_duration=1, ip_src_range=200, port_dst_range=1"),
    );
    let frames = run_ms(&mut *m, 3000);
    // 3 s at 100 pps.
    assert!(
        (250..=310).contains(&frames.len()),
        "{} packets",
        frames.len()
    );
    let mut flows: std::collections::HashMap<Vec<u8>, Vec<u8>> = Default::default();
    for f in &frames {
        nfkit_packet::verify_checksums(f).unwrap();
        assert_eq!(f[30..34], [10, 1, 0, 1]);
        assert_eq!(f[36..38], [0, 80]);
        let key = f[26..38].to_vec();
        flows.entry(key).or_default().push(f[47]);
    }
    let complete: Vec<_> = flows.values().filter(|v| v.last() == Some(&0x11)).collect();
    assert!(complete.len() >= 15, "{} flows ended", complete.len());
    for v in complete {
        assert_eq!(v.len(), 10, "{v:?}");
        assert_eq!(v[0], 0x02, "SYN first");
        assert!(v[1..9].iter().all(|&x| x == 0x10), "then ACKs");
    }
    let e = try_module("FlowGen", &format!("template=[{list}], arrival=poisson"))
        .err()
        .unwrap();
    assert!(e.contains("not uniform or exponential"), "{e}");
    let e = try_module("FlowGen", "template=[1, 2, 3]").err().unwrap();
    assert!(e.contains("not an Ethernet/IPv4/TCP or UDP frame"), "{e}");
    let e = try_module(
        "FlowGen",
        &format!("template=[{list}], pps=5, flow_rate=10"),
    )
    .err()
    .unwrap();
    assert!(e.contains("must not exceed pps"), "{e}");
}

#[test]
fn flowgen_makes_udp_flows_from_a_udp_template() {
    // As BESS's rxl4checksum sample: a UDP template, its checksum left 0
    // (none); every packet leaves with right IPv4 and UDP checksums.
    let mut t = udp("10.0.0.1", 10001, "10.0.0.2", 10002)
        .payload(b"hello0123456789")
        .build();
    t[40..42].fill(0);
    let list = byte_list(&t);
    let mut m = module(
        "FlowGen",
        &format!("template=[{list}], pps=1000, flow_rate=100, flow_duration=0.1, ip_dst_range=50, port_src_range=100"),
    );
    let frames = run_ms(&mut *m, 200);
    assert!(frames.len() > 100, "{} packets", frames.len());
    let mut dsts = std::collections::HashSet::new();
    for f in &frames {
        assert_eq!(f.len(), t.len());
        assert_eq!(f[23], 17, "still UDP");
        assert_eq!(f[42..], t[42..], "the payload is the template's");
        assert_ne!(f[40..42], [0, 0], "a UDP checksum is set");
        nfkit_packet::verify_checksums(f).unwrap();
        dsts.insert(f[30..34].to_vec());
    }
    assert!(
        dsts.len() > 5,
        "destinations spread over the range: {}",
        dsts.len()
    );
}

#[test]
fn flowgen_distributions_shape_arrivals_and_durations() {
    let t = tcp("10.0.0.1", 1000, "10.1.0.1", 80).build();
    let list = byte_list(&t);
    let run = |extra: &str| {
        let mut m = module(
            "FlowGen",
            &format!("template=[{list}], pps=1000, flow_rate=100, flow_duration=0.1, ip_src_range=1000000, port_src_range=60000, {extra}"),
        );
        let mut h = Harness::new();
        let mut starts = Vec::new();
        let mut sizes: std::collections::HashMap<Vec<u8>, usize> = Default::default();
        for ms in 0..5000u64 {
            h.set_time(ms * 1_000_000);
            for f in h.run_task(&mut *m).remove(0) {
                if f[47] == 0x02 {
                    starts.push(ms);
                }
                *sizes.entry(f[26..38].to_vec()).or_default() += 1;
            }
        }
        let gaps: Vec<f64> = starts.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        let max_size = *sizes.values().max().unwrap();
        (starts.len(), var.sqrt() / mean, max_size)
    };
    let (n, cv, max) = run(r#"arrival="uniform", duration="uniform""#);
    assert!((480..=520).contains(&n), "{n} flows in 5 s at 100/s");
    assert!(cv < 0.1, "evenly spaced: cv {cv}");
    assert_eq!(max, 10, "every flow lasts 0.1 s at 100 pps per flow");
    let (n, cv, max) = run(r#"arrival="exponential", duration="pareto""#);
    assert!((400..=600).contains(&n), "{n} flows");
    assert!(cv > 0.7, "Poisson arrivals: cv {cv}");
    assert!(
        max > 20,
        "heavy-tailed durations: longest flow {max} packets"
    );
}

#[test]
fn noop_and_metadata_test() {
    let m = module("NoOP", "");
    assert!(m.is_task() && m.igates() == 0 && m.ogates() == 0);
    let mut mt = module(
        "MetadataTest",
        "read=(a=4), write=(b=2), update=(c=8), gates=2",
    );
    assert_eq!(mt.attrs().len(), 3);
    let out = Harness::new().run(&mut *mt, 1, &[vec![7; 60]]);
    assert_eq!(out[1], vec![vec![7; 60]]);
    assert!(try_module("MetadataTest", "read=(a=40)")
        .err()
        .unwrap()
        .contains("not 1 to 32"));
}
