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
