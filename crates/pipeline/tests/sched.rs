//! Scheduler tests on a virtual clock: shares, rate limits, bursts,
//! priorities, throttling.

use nfkit_hw::sim::VirtualClock;
use nfkit_pipeline::sched::{
    Placement, PolicySpec, Resource, SchedClock, Scheduler, TcTree, Usage,
};

fn share(s: u64) -> Placement {
    Placement {
        share: Some(s),
        ..Placement::default()
    }
}

fn prio(p: u32) -> Placement {
    Placement {
        priority: Some(p),
        ..Placement::default()
    }
}

/// Per task: (ns of work, packets, bits) per run.
const COSTS: [(u64, u64, u64); 3] = [
    (100, 32, 32 * 64 * 8),
    (250, 7, 7 * 1500 * 8),
    (40, 13, 13 * 300 * 8),
];

fn run_shares(resource: Resource, rounds: u64) -> [u64; 3] {
    let clock = VirtualClock::new();
    let mut tree = TcTree::new("root", PolicySpec::WeightedFair { resource });
    for (i, s) in [1, 2, 5].into_iter().enumerate() {
        tree.add_leaf(&format!("t{i}"), 0, i, share(s), None)
            .unwrap();
    }
    let mut sched = Scheduler::new(tree, clock.clone());
    let mut used = [0u64; 3];
    for _ in 0..rounds {
        sched.run_once(|task, _| {
            let (ns, p, b) = COSTS[task];
            clock.advance(std::time::Duration::from_nanos(ns));
            used[task] += match resource {
                Resource::Count => 1,
                Resource::Cycle => ns,
                Resource::Packet => p,
                Resource::Bit => b,
            };
            (p, b)
        });
    }
    used
}

#[test]
fn weighted_shares_hold_for_every_resource() {
    for resource in [
        Resource::Count,
        Resource::Cycle,
        Resource::Packet,
        Resource::Bit,
    ] {
        let used = run_shares(resource, 1_000_000);
        let total: u64 = used.iter().sum();
        for (i, want) in [1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0].into_iter().enumerate() {
            let got = used[i] as f64 / total as f64;
            assert!(
                (got - want).abs() / want < 0.01,
                "{resource}: task {i} got {got:.4} of the {resource}s, want {want:.4} ({used:?})"
            );
        }
    }
}

/// Run a rate-limited source for about 20,000 runs' worth of virtual
/// time and return the achieved rate in units per second.
fn rate_limited(resource: Resource, limit: u64, burst: u64) -> f64 {
    let clock = VirtualClock::new();
    let mut tree = TcTree::new(
        "rl",
        PolicySpec::RateLimit {
            resource,
            limit,
            max_burst: Some(burst),
        },
    );
    tree.add_leaf("src", 0, 0, Placement::default(), None)
        .unwrap();
    let (packets, bits) = (32u64, 32 * 1500 * 8);
    let per_run = if resource == Resource::Bit {
        bits
    } else {
        packets
    };
    let horizon = (20_000u128 * per_run as u128 * 1_000_000_000 / limit as u128) as u64;
    let mut sched = Scheduler::new(tree, clock.clone());
    let mut total = 0u64;
    while clock.now_ns() < horizon {
        sched.run_once(|_, _| {
            clock.advance(std::time::Duration::from_nanos(100));
            total += per_run;
            (packets, bits)
        });
    }
    total as f64 * 1e9 / clock.now_ns() as f64
}

#[test]
fn bit_rate_limits_hold_from_1_mbps_to_100_gbps() {
    for limit in [
        1_000_000u64,
        10_000_000,
        100_000_000,
        1_000_000_000,
        10_000_000_000,
        40_000_000_000,
        100_000_000_000,
    ] {
        let got = rate_limited(Resource::Bit, limit, 400_000);
        let err = (got - limit as f64).abs() / limit as f64;
        assert!(
            err < 0.01,
            "limit {limit} bit/s: got {got:.0} ({:.3}% off)",
            err * 100.0
        );
    }
}

#[test]
fn packet_rate_limits_hold_from_1_kpps_to_100_mpps() {
    for limit in [
        1_000u64,
        10_000,
        100_000,
        1_000_000,
        14_880_952,
        100_000_000,
    ] {
        let got = rate_limited(Resource::Packet, limit, 32);
        let err = (got - limit as f64).abs() / limit as f64;
        assert!(
            err < 0.01,
            "limit {limit} pps: got {got:.0} ({:.3}% off)",
            err * 100.0
        );
    }
}

#[test]
fn cycle_rate_limit_bounds_processor_time() {
    let clock = VirtualClock::new();
    // 250 ms of work per second.
    let mut tree = TcTree::new(
        "rl",
        PolicySpec::RateLimit {
            resource: Resource::Cycle,
            limit: 250_000_000,
            max_burst: Some(10_000),
        },
    );
    tree.add_leaf("busy", 0, 0, Placement::default(), None)
        .unwrap();
    let mut sched = Scheduler::new(tree, clock.clone());
    while clock.now_ns() < 1_000_000_000 {
        sched.run_once(|_, _| {
            clock.advance(std::time::Duration::from_nanos(1_000));
            (1, 512)
        });
    }
    let s = sched.stats();
    let share = s.busy_ns as f64 / clock.now_ns() as f64;
    assert!((share - 0.25).abs() < 0.0025, "busy share {share}");
    assert_eq!(
        s.busy_ns + s.idle_ns,
        clock.now_ns(),
        "all time is busy or idle"
    );
}

#[test]
fn a_burst_never_exceeds_the_bucket() {
    let clock = VirtualClock::new();
    let burst = 1_000_000u64;
    let mut tree = TcTree::new(
        "rl",
        PolicySpec::RateLimit {
            resource: Resource::Bit,
            limit: 1_000_000_000,
            max_burst: Some(burst),
        },
    );
    let leaf = tree
        .add_leaf("src", 0, 0, Placement::default(), None)
        .unwrap();
    let mut sched = Scheduler::new(tree, clock.clone());
    // Idle for a long time: the bucket fills, but only to max_burst.
    for _ in 0..1000 {
        sched.run_once(|_, _| {
            clock.advance(std::time::Duration::from_micros(100));
            (0, 0)
        });
    }
    // Then busy: what passes before the first throttle is the bucket plus
    // at most one run's overdraw (and the refill during those runs).
    let run_bits = 32 * 1500 * 8;
    let mut sent = 0u64;
    loop {
        sched.run_once(|_, _| {
            clock.advance(std::time::Duration::from_nanos(10));
            sent += run_bits;
            (32, run_bits)
        });
        if sched.tree.stats()[leaf].throttled > 0 || sched.tree.stats()[0].throttled > 0 {
            break;
        }
    }
    let refill = 1_000_000_000 * (sent / run_bits) * 10 / 1_000_000_000;
    assert!(sent >= burst, "the full bucket is usable: {sent}");
    assert!(
        sent <= burst + run_bits + refill,
        "burst {sent} > {burst} + one run"
    );
}

#[test]
fn strict_priority_always_wins() {
    let clock = VirtualClock::new();
    let mut tree = TcTree::new("root", PolicySpec::Priority);
    tree.add_leaf("low", 0, 1, prio(10), None).unwrap();
    tree.add_leaf("high", 0, 0, prio(1), None).unwrap();
    let mut sched = Scheduler::new(tree, clock.clone());
    let mut runs = [0u64; 2];
    for _ in 0..10_000 {
        sched.run_once(|t, _| {
            runs[t] += 1;
            (32, 1000)
        });
    }
    assert_eq!(runs, [10_000, 0]);
}

#[test]
fn lower_priority_runs_only_while_the_higher_is_throttled() {
    let clock = VirtualClock::new();
    let mut tree = TcTree::new("root", PolicySpec::Priority);
    let rl = tree
        .add_class(
            "rl",
            0,
            PolicySpec::RateLimit {
                resource: Resource::Packet,
                limit: 1_000_000,
                max_burst: Some(32),
            },
            prio(0),
            None,
        )
        .unwrap();
    tree.add_leaf("high", rl, 0, Placement::default(), None)
        .unwrap();
    tree.add_leaf("low", 0, 1, prio(1), None).unwrap();
    let mut sched = Scheduler::new(tree, clock.clone());
    let mut runs = [0u64; 2];
    while clock.now_ns() < 10_000_000 {
        sched.run_once(|t, _| {
            runs[t] += 1;
            clock.advance(std::time::Duration::from_nanos(200));
            (32, 32 * 512)
        });
    }
    // high: 1 Mpps / 32 per run = 31,250 runs/s -> 312 or 313 in 10 ms.
    assert!((312..=313).contains(&runs[0]), "{runs:?}");
    assert!(runs[1] > 40_000, "the low class fills the gaps: {runs:?}");
    assert_eq!(sched.stats().idle_ns, 0, "work-conserving: never idle");
}

#[test]
fn a_throttled_class_resumes_exactly_when_its_tokens_allow() {
    let mut tree = TcTree::new(
        "rl",
        PolicySpec::RateLimit {
            resource: Resource::Packet,
            limit: 1000,
            max_burst: Some(32),
        },
    );
    let leaf = tree
        .add_leaf("src", 0, 0, Placement::default(), None)
        .unwrap();
    assert_eq!(tree.pick(), Some((leaf, 0)));
    let usage = Usage {
        count: 1,
        cycles: 0,
        packets: 32,
        bits: 32 * 512,
    };
    tree.finish(leaf, &usage, 0);
    // 32 packets at 1000 pps: 32 ms of debt.
    assert_eq!(tree.next_wakeup(), Some(32_000_000));
    for t in [1, 1_000_000, 31_999_999] {
        tree.wake(t);
        assert_eq!(tree.pick(), None, "runnable too early at {t} ns");
    }
    tree.wake(32_000_000);
    assert_eq!(tree.pick(), Some((leaf, 0)));
    assert_eq!(tree.stats()[0].throttled, 1);
}

#[test]
fn usage_is_accounted_from_leaf_to_root() {
    let clock = VirtualClock::new();
    let mut tree = TcTree::new("root", PolicySpec::RoundRobin);
    let wf = tree
        .add_class(
            "wf",
            0,
            PolicySpec::WeightedFair {
                resource: Resource::Bit,
            },
            Placement::default(),
            None,
        )
        .unwrap();
    tree.add_leaf("a", wf, 0, share(1), None).unwrap();
    tree.add_leaf("b", 0, 1, Placement::default(), None)
        .unwrap();
    let mut sched = Scheduler::new(tree, clock.clone());
    for _ in 0..100 {
        sched.run_once(|t, _| {
            clock.advance(std::time::Duration::from_nanos(10));
            if t == 0 {
                (2, 100)
            } else {
                (3, 10)
            }
        });
    }
    let s = sched.tree.stats();
    let by = |n: &str| s.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(
        (by("a").count, by("a").packets, by("a").bits),
        (50, 100, 5000)
    );
    assert_eq!((by("wf").count, by("wf").bits), (50, 5000));
    assert_eq!(
        (
            by("root").count,
            by("root").packets,
            by("root").bits,
            by("root").cycles
        ),
        (100, 250, 5500, 1000)
    );
}

#[test]
fn tree_errors_name_the_class() {
    let mut tree = TcTree::new("root", PolicySpec::Priority);
    let e = tree
        .add_leaf("x", 0, 0, Placement::default(), None)
        .unwrap_err();
    assert!(e.to_string().contains("needs priority="), "{e}");
    tree.add_leaf("x", 0, 0, prio(1), None).unwrap();
    let e = tree.add_leaf("y", 0, 1, prio(1), None).unwrap_err();
    assert!(e.to_string().contains("already taken"), "{e}");
    let e = tree.add_leaf("x", 0, 1, prio(2), None).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let e = tree
        .add_class(
            "z",
            0,
            PolicySpec::RateLimit {
                resource: Resource::Bit,
                limit: 0,
                max_burst: None,
            },
            prio(3),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("above 0"), "{e}");
}
