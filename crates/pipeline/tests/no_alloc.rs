//! The data path allocates nothing: after a warm-up, scheduling rounds
//! that make, rewrite, split, copy, queue and free packets touch the
//! heap zero times.

use nfkit_hw::sim::VirtualClock;
use nfkit_pipeline::{parse, BuildOptions};

#[test]
fn steady_state_rounds_do_not_allocate() {
    let src = "
        tc rl = rate_limit(resource=packet, limit=10M)
        src::Source(size=64, template=[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0])
          -> MACSwap()
          -> Update(offset=[0], size=[1], value=[4])
          -> SetMetadata(attribute=lane, size=1, value=1)
          -> split::Split(attribute=lane, size=1, gates=2)
        split:0 -> Sink()
        split:1 -> rep::Replicate(gates=2)
        rep:0 -> q::Queue(size=256)
        rep:1 -> rr::RoundRobin(gates=2)
        rr:0 -> Sink(); rr:1 -> HashLB(gates=2) -> Merge() -> Sink()
        q -> Sink()
        src.attach(tc=rl)
    ";
    let clock = VirtualClock::new();
    let opts = BuildOptions {
        clock: clock.clone(),
        ..BuildOptions::default()
    };
    let mut p = parse(src, "t.nfk")
        .unwrap()
        .build_with(&|_| unreachable!(), opts)
        .unwrap();
    // Every round costs 100 ns of virtual time, so the limiter refills.
    let run = |p: &mut nfkit_pipeline::Pipeline, rounds: usize| {
        for _ in 0..rounds {
            p.step(1).unwrap();
            clock.advance(std::time::Duration::from_nanos(100));
        }
    };
    run(&mut p, 1000);
    let before = p.stats().module("src").unwrap().created;
    let info = allocation_counter::measure(|| {
        run(&mut p, 10_000);
    });
    let after = p.stats().module("src").unwrap().created;
    assert!(
        after - before >= 9_000,
        "packets flowed: {}",
        after - before
    );
    assert_eq!(
        info.count_total, 0,
        "allocations in 10,000 rounds: {info:?}"
    );
    assert_eq!(p.stats().dropped(), 0);
}

#[test]
fn classifiers_do_not_allocate() {
    let frame = nfkit_packet::FrameBuilder::tcp(
        ("10.0.0.1".parse().unwrap(), 1000),
        ("10.1.2.3".parse().unwrap(), 80),
    )
    .build();
    let mut frame = frame;
    frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
    let bytes: Vec<String> = frame.iter().map(|b| b.to_string()).collect();
    let src = format!(
        r#"
        src::Source(template=[{}])
          -> em::ExactMatch(fields=[(offset=30, num_bytes=4), (offset=36, num_bytes=2)], gates=2)
        em.add(gate=1, fields=[0x0a010203, 80])
        em:0 -> Sink()
        em:1 -> wm::WildcardMatch(fields=[(offset=26, num_bytes=4)], gates=2)
        wm.add(gate=1, priority=1, values=[0x0a000000], masks=[0xff000000])
        wm:0 -> Sink()
        wm:1 -> acl::ACL(gates=1, rules=[(src_ip="10.0.0.0/8", dst_port=80)])
          -> lpm::IPLookup(gates=2)
        lpm.add(prefix="10.1.0.0", prefix_len=16, gate=1)
        lpm:0 -> Sink()
        lpm:1 -> l2::L2Forward(gates=2)
        l2.add(entries=[(addr="02:00:00:00:00:07", gate=1)])
        l2:0 -> Sink()
        l2:1 -> bpf::BPF(gates=2, filters=[(filter="tcp dst port 80 and net 10.0.0.0/8", gate=1)])
        bpf:0 -> Sink()
        bpf:1 -> out::Sink()
    "#,
        bytes.join(", ")
    );
    let mut p = parse(&src, "t.nfk")
        .unwrap()
        .build_with(&|_| unreachable!(), BuildOptions::default())
        .unwrap();
    p.step(1000).unwrap();
    let before = p.stats().module("out").unwrap().consumed;
    let info = allocation_counter::measure(|| {
        p.step(10_000).unwrap();
    });
    let after = p.stats().module("out").unwrap().consumed;
    assert!(
        after - before >= 10_000,
        "packets flowed: {}",
        after - before
    );
    assert_eq!(
        info.count_total, 0,
        "allocations in 10,000 rounds: {info:?}"
    );
    assert_eq!(p.stats().dropped(), 0);
}

#[test]
fn rewriters_and_generators_do_not_allocate() {
    let frame = nfkit_packet::FrameBuilder::tcp(
        ("10.0.0.1".parse().unwrap(), 1000),
        ("10.1.2.3".parse().unwrap(), 80),
    )
    .payload(b"GET / HTTP/1.1\r\nHost: ok.example\r\n\r\n")
    .build();
    let bytes: Vec<String> = frame.iter().map(|b| b.to_string()).collect();
    let src = format!(
        r#"
        gen::FlowGen(template=[{}], pps=10M, flow_rate=100k, flow_duration=0.01,
                     arrival="exponential", duration="pareto", ip_src_range=1000, port_src_range=1000)
          -> UpdateTTL() -> IPSwap() -> IPSwap()
          -> nat::StaticNAT(pairs=[(int_range=(start="10.0.0.0", end="10.0.255.255"), ext_range=(start="192.168.0.0", end="192.168.255.255"))])
        nat:1 -> RandomUpdate(fields=[(offset=34, size=2, min=1, max=65000)])
          -> RandomDrop(drop_rate=0) -> uf::UrlFilter(blacklist=[(host="bad.example", path="/")])
        uf:0 -> Buffer() -> drr::DRR(num_flows=4096) -> out::Sink()
    "#,
        bytes.join(", ")
    );
    let clock = VirtualClock::new();
    let opts = BuildOptions {
        clock: clock.clone(),
        ..BuildOptions::default()
    };
    let mut p = parse(&src, "t.nfk")
        .unwrap()
        .build_with(&|_| unreachable!(), opts)
        .unwrap();
    let run = |p: &mut nfkit_pipeline::Pipeline, rounds: usize| {
        for _ in 0..rounds {
            p.step(1).unwrap();
            clock.advance(std::time::Duration::from_micros(3));
        }
    };
    run(&mut p, 20_000);
    let before = p.stats().module("out").unwrap().consumed;
    let info = allocation_counter::measure(|| run(&mut p, 10_000));
    let after = p.stats().module("out").unwrap().consumed;
    assert!(
        after - before >= 100_000,
        "packets flowed: {}",
        after - before
    );
    assert_eq!(
        info.count_total, 0,
        "allocations in 10,000 rounds: {info:?}"
    );
    assert_eq!(p.stats().dropped(), 0);
}
