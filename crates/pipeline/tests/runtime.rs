//! Changing a pipeline without a restart: pause, change the graph or
//! the class tree, recompute metadata, resume.

mod common;

use common::{udp, MemPort};
use nfkit_hw::sim::VirtualClock;
use nfkit_pipeline::graph::GraphError;
use nfkit_pipeline::modules::{Measure, Timestamp};
use nfkit_pipeline::sched::{PolicySpec, RealClock, Resource, SchedClock};
use nfkit_pipeline::{parse, BuildOptions, Pipeline, PipelineError};
use std::sync::Arc;
use std::time::Duration;

fn build(src: &str, clock: Arc<dyn SchedClock>) -> Pipeline {
    let opts = BuildOptions {
        clock,
        ..BuildOptions::default()
    };
    parse(src, "t.nfk")
        .unwrap()
        .build_with(&|_| unreachable!(), opts)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The error building `src` gives (it must fail).
fn build_err(src: &str) -> String {
    match parse(src, "t.nfk").unwrap().build(&|_| unreachable!()) {
        Ok(_) => panic!("built, but must be refused:\n{src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_running_pipeline_gains_modules_and_recomputes_metadata() {
    let src = "tc rl = rate_limit(resource=packet, limit=200k)\nsrc::Source() -> out::Sink()\nsrc.attach(tc=rl)\n";
    let mut p = build(src, Arc::new(RealClock::default()));
    p.start().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // Insert Timestamp -> Queue -> Measure before the sink, live.
    p.edit(|g| {
        g.add_module("ts", Box::new(Timestamp::new()))?;
        g.add_module("lat", Box::new(Measure::new()))?;
        g.disconnect("src", 0)?;
        g.connect("src", 0, "ts", 0)?;
        g.connect("ts", 0, "lat", 0)?;
        g.connect("lat", 0, "out", 0)
    })
    .unwrap();
    assert!(p.is_running(), "resumed after the edit");
    std::thread::sleep(Duration::from_millis(50));
    p.pause().unwrap();
    let s = p.stats();
    let lat = s.module("lat").unwrap();
    assert!(lat.received() > 0, "{s}");
    assert_eq!(
        lat.extra.iter().find(|e| e.0 == "count").unwrap().1,
        lat.received()
    );
    let made = s.module("src").unwrap().created;
    assert_eq!(made, s.module("out").unwrap().consumed, "{s}");
    assert!(made > lat.received(), "counters survived the edit");
    for m in &s.modules {
        assert!(m.balanced(), "{m:?}");
    }
}

#[test]
fn a_failed_edit_leaves_the_pipeline_paused_and_fixable() {
    let src = "src::Source() -> out::Sink()\n";
    let mut p = build(src, VirtualClock::new());
    p.step(3).unwrap();
    let e = p
        .edit(|g| {
            g.add_module("lat", Box::new(Measure::new()))?;
            g.disconnect("src", 0)?;
            g.connect("src", 0, "lat", 0)?;
            g.connect("lat", 0, "out", 0)
        })
        .unwrap_err();
    assert!(
        matches!(&e, PipelineError::Graph(GraphError::Metadata(_))),
        "a Measure with no Timestamp upstream: {e}"
    );
    assert!(e.to_string().contains("no upstream writer"), "{e}");
    assert!(
        p.step(1).is_ok(),
        "stepping a paused, uncommitted pipeline does nothing"
    );
    p.edit(|g| {
        g.remove_module("lat")?;
        g.connect("src", 0, "out", 0)
    })
    .unwrap();
    p.step(2).unwrap();
    assert_eq!(p.stats().module("out").unwrap().consumed, 5 * 32);
}

#[test]
fn a_rate_limit_changes_at_run_time() {
    let src = "tc rl = rate_limit(resource=packet, limit=1M, max_burst=32)\nsrc::Source() -> out::Sink()\nsrc.attach(tc=rl)\n";
    let clock = VirtualClock::new();
    let mut p = build(src, clock.clone());
    let run_ms = |p: &mut Pipeline, ms: u64| {
        let start = p.stats().module("out").unwrap().consumed;
        let until = clock.now_ns() + ms * 1_000_000;
        while clock.now_ns() < until {
            p.step(1).unwrap();
        }
        p.stats().module("out").unwrap().consumed - start
    };
    let first = run_ms(&mut p, 10);
    assert!((9_968..=10_032).contains(&first), "{first}");
    p.edit(|g| {
        g.set_tc_policy(
            "rl",
            PolicySpec::RateLimit {
                resource: Resource::Packet,
                limit: 3_000_000,
                max_burst: Some(32),
            },
        )
    })
    .unwrap();
    let second = run_ms(&mut p, 10);
    assert!((29_968..=30_064).contains(&second), "{second}");
}

#[test]
fn any_gate_can_be_captured_to_pcap() {
    let (port, wire) = MemPort::shared("mem", 1);
    let clock = VirtualClock::new();
    let mut g = nfkit_pipeline::Graph::new();
    g.add_module(
        "in",
        Box::new(nfkit_pipeline::modules::PortInc::new(port.clone())),
    )
    .unwrap();
    g.add_module("swap", Box::new(nfkit_pipeline::modules::MacSwap))
        .unwrap();
    g.add_module("out", Box::new(nfkit_pipeline::modules::PortOut::new(port)))
        .unwrap();
    g.connect("in", 0, "swap", 0).unwrap();
    g.connect("swap", 0, "out", 0).unwrap();
    let mut p = Pipeline::new(g, clock).unwrap();
    let before: Vec<Vec<u8>> = (0..5)
        .map(|i| udp([1; 6], [2; 6], i, 9, b"early"))
        .collect();
    wire.lock().rx[0].extend(before.iter().cloned());
    p.step(2).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swap0.pcap");
    p.capture("swap", 0, "cap", &path).unwrap();
    let after: Vec<Vec<u8>> = (0..7).map(|i| udp([1; 6], [2; 6], i, 9, b"late")).collect();
    wire.lock().rx[0].extend(after.iter().cloned());
    p.step(2).unwrap();
    p.edit(|g| {
        // Unplug the capture again; the file is flushed on pause.
        g.remove_module("cap")?;
        g.connect("swap", 0, "out", 0)
    })
    .unwrap();

    let swapped = |f: &[Vec<u8>], tag: &[u8]| -> Vec<Vec<u8>> {
        (0..f.len() as u16)
            .map(|i| udp([2; 6], [1; 6], i, 9, tag))
            .collect()
    };
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut got = Vec::new();
    while let Some(pkt) = r.next_packet() {
        got.push(pkt.unwrap().data.to_vec());
    }
    assert_eq!(
        got,
        swapped(&after, b"late"),
        "only traffic after the capture started"
    );
    let tx = wire.lock().tx[0].clone();
    assert_eq!(
        tx,
        [swapped(&before, b"early"), swapped(&after, b"late")].concat()
    );
}

#[test]
fn a_packet_loop_is_refused_when_built_not_cut_at_run_time() {
    // m -> b -> back into m: packets would circle until the walk is too
    // deep (issue 14: they were all dropped at run time). The loop is a
    // property of the graph, refused when it is committed.
    let src = "src::Source(burst=4) -> m::Merge() -> b::Bypass()\nb -> 1:m\n";
    let opts = BuildOptions {
        clock: VirtualClock::new(),
        ..BuildOptions::default()
    };
    let err = parse(src, "t.nfk")
        .unwrap()
        .build_with(&|_| unreachable!(), opts)
        .err()
        .expect("a loop with no task is refused")
        .to_string();
    assert!(
        err.starts_with(
            "t.nfk:1:25: modules `m` -> `b` -> `m` form a loop with no task (Queue) in it"
        ),
        "{err}"
    );
}

#[test]
fn classes_inherit_their_parents_worker() {
    let src = "worker a\nworker b\ntc top = priority(worker=b)\ntc leafy = round_robin(parent=top, priority=1)\ns::Source() -> Sink()\ns.attach(tc=leafy)\n";
    let mut p = build(src, VirtualClock::new());
    p.step(2).unwrap();
    let s = p.stats();
    assert_eq!(
        s.workers[1]
            .classes
            .iter()
            .find(|c| c.name == "s")
            .unwrap()
            .count,
        2,
        "{s}"
    );
    assert_eq!(s.workers[0].sched.rounds, 0);
}

#[test]
fn a_worker_on_a_missing_core_is_an_error_naming_it() {
    let mut p = build(
        "worker far core=4096\ns::Source() -> Sink()\n",
        VirtualClock::new(),
    );
    let e = p.start().unwrap_err();
    assert!(
        matches!(&e, PipelineError::NoCore { worker, core: 4096, .. } if worker == "far"),
        "{e}"
    );
}

#[test]
fn classes_tasks_and_the_last_worker_can_be_removed_at_run_time() {
    let src = "worker a\nworker b\ntc rl = rate_limit(worker=b, resource=packet, limit=1M)\ns::Source() -> Sink()\ns.attach(tc=rl)\n";
    let mut p = build(src, Arc::new(RealClock::default()));
    p.start().unwrap();
    // Busy: the class has a task, the worker has a class.
    assert!(p.edit(|g| g.remove_tc("rl")).is_err());
    p.edit(|_| Ok(())).unwrap();
    p.start().unwrap();
    assert!(p.remove_worker("b").is_err());
    assert!(p.is_running());
    p.edit(|g| {
        g.detach("s")?;
        g.remove_tc("rl")
    })
    .unwrap();
    assert!(p.graph().tc_list().is_empty());
    p.remove_worker("b").unwrap();
    assert!(p.is_running(), "resumed after removing the worker");
    assert_eq!(p.graph().worker_list().len(), 1);
    assert!(p.remove_worker("a").is_err(), "the first worker stays");
    std::thread::sleep(Duration::from_millis(20));
    let s = p.shutdown().unwrap();
    assert!(s.module("s").unwrap().created > 0, "{s}");
}

#[test]
fn a_reader_without_a_writer_is_refused_unless_allowed() {
    use nfkit_pipeline::Graph;
    let mut g = Graph::new();
    g.add_module("lat", Box::new(Measure::new())).unwrap();
    let e = Pipeline::new(g, VirtualClock::new()).err().unwrap();
    assert!(e.to_string().contains("no upstream writer"), "{e}");
    let mut g = Graph::new();
    g.allow_unwritten_reads(true);
    g.add_module("lat", Box::new(Measure::new())).unwrap();
    let mut p = Pipeline::new(g, VirtualClock::new()).unwrap();
    // A writer arrives later: the reader gets its offset.
    p.edit(|g| {
        g.add_module("ts", Box::new(Timestamp::new()))?;
        g.connect("ts", 0, "lat", 0)
    })
    .unwrap();
}

#[test]
fn packets_for_an_unconnected_gate_do_not_starve_the_connected_ones() {
    use nfkit_pipeline::modules::{Replicate, Sink, Source};
    use nfkit_pipeline::Graph;
    let pool = nfkit_port::software_pool("t", 1024).unwrap();
    let mut g = Graph::new();
    g.add_module("src", Box::new(Source::new(pool.clone(), &[], 60, 32)))
        .unwrap();
    g.add_module("rep", Box::new(Replicate::new(2))).unwrap();
    g.add_module("sink", Box::new(Sink::new(&pool))).unwrap();
    g.connect("src", 0, "rep", 0).unwrap();
    g.connect("rep", 0, "sink", 0).unwrap();
    // rep:1 is unconnected: its copies are dropped, every round.
    let mut p = Pipeline::new(g, VirtualClock::new()).unwrap();
    p.step(20).unwrap();
    let s = p.stats();
    assert_eq!(s.module("sink").unwrap().consumed, 20 * 32, "{s}");
    assert_eq!(s.module("rep").unwrap().dropped, 20 * 32, "{s}");
}

/// BESS's gate numbers: L2Forward to gate 1,000, Bypass from input gate
/// 5,000 to output gate 5,000, RoundRobin over the list [0, 2]. The
/// graph keeps per-gate state only up to the highest gate in use.
#[test]
fn modules_reach_bess_gates_beyond_64() {
    let src = "
        s1::Source(size=60, burst=4, template=[0, 0, 0, 0, 3, 232]) -> fib::L2Forward()
        fib:1000 -> k1000::Sink()
        fib.add(entries=[(addr=\"00:00:00:00:03:e8\", gate=1000)])
        s2::Source(size=60, burst=4) -> 0:b::Bypass():0 -> k0::Sink()
        s3::Source(size=60, burst=4) -> 5000:b:5000 -> k5000::Sink()
        s4::Source(size=60, burst=4) -> rr::RoundRobin(gates=[0, 2], mode=packet)
        rr:0 -> r0::Sink()
        rr:1 -> r1::Sink()
        rr:2 -> r2::Sink()
    ";
    let mut p = build(src, VirtualClock::new());
    p.step(40).unwrap();
    let s = p.stats();
    let consumed = |m: &str| s.module(m).unwrap().consumed;
    for m in ["k1000", "k0", "k5000", "r0", "r2"] {
        assert!(consumed(m) > 0, "{m}: {s}");
    }
    assert_eq!(consumed("r1"), 0, "gate 1 is not in the list: {s}");
    assert_eq!(consumed("r0"), consumed("r2"), "{s}");
    let fib = s.module("fib").unwrap();
    assert_eq!(fib.dropped, 0, "{s}");
    assert_eq!(
        fib.ogates.len(),
        1001,
        "state up to the highest gate in use"
    );
    assert_eq!(fib.ogates[1000].packets, consumed("k1000"));
    let e = build_err("a::Bypass() -> 8192:b::Bypass()\n");
    assert!(
        e.contains("has 8192 input gate(s); gate 8192 does not exist"),
        "{e}"
    );
}

/// A task nobody attached follows the worker that feeds what it feeds
/// (BESS's qtest: the Queue's task goes to the second worker while the
/// other Source into the same Sink is still unattached); two tasks
/// attached on purpose to two workers into one module stay refused.
#[test]
fn an_unattached_task_follows_the_worker_feeding_its_module() {
    let src = "worker a\nworker b\n\
               s1::Source(burst=4) -> q::Queue() -> k::Sink()\n\
               s2::Source(burst=4) -> k\n\
               q.attach(worker=b)\n";
    let mut p = build(src, VirtualClock::new());
    p.step(20).unwrap();
    let s = p.stats();
    assert!(s.module("k").unwrap().consumed > 0, "{s}");
    let e = build_err(&format!("{src}s2.attach(worker=a)\n"));
    assert!(
        e.contains("module `k` gets packets from tasks on workers"),
        "{e}"
    );
}

/// Packets sent to an unconnected gate must not cost the worker one of
/// its spare batches: after many such drops, a deep chain still carries
/// every packet (it used to lose a spare per drop and then drop deep).
#[test]
fn unconnected_gates_do_not_starve_deep_walks() {
    let src = "
        src::Source(size=60, burst=8) -> rr::RoundRobin(gates=2, mode=batch)
        rr:1 -> Bypass() -> Bypass() -> Bypass() -> Bypass() -> Bypass() -> Bypass() -> out::Sink()
    ";
    let mut p = nfkit_pipeline::parse(src, "t.nfk")
        .unwrap()
        .build(&|_| unreachable!())
        .unwrap();
    p.step(1000).unwrap();
    let s = p.stats();
    let made = s.module("src").unwrap().created;
    assert_eq!(made, 8000);
    assert_eq!(
        s.module("out").unwrap().consumed,
        4000,
        "every batch of gate 1 went the whole way"
    );
    assert_eq!(
        s.module("rr").unwrap().dropped,
        4000,
        "gate 0 is unconnected"
    );
}

#[test]
fn an_edit_pauses_only_the_workers_whose_part_changes() {
    // a: s0 -> q (its input side); b: q's task -> out; c: s2 -> out2.
    let src = "worker a\nworker b\nworker c\n\
               tc ra = rate_limit(worker=a, resource=packet, limit=100k)\n\
               tc rc = rate_limit(worker=c, resource=packet, limit=100k)\n\
               s0::Source() -> q::Queue() -> out::Sink()\n\
               s2::Source() -> out2::Sink()\n\
               s0.attach(tc=ra)\nq.attach(worker=b)\ns2.attach(tc=rc)\n";
    let mut p = build(src, Arc::new(RealClock::default()));
    p.start().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let before: Vec<u64> = (0..3).map(|w| p.worker_pauses(w)).collect();
    // A module no task feeds runs nowhere: adding it pauses nothing.
    p.edit(|g| g.add_module("mid", Box::new(Timestamp::new())).map(|_| ()))
        .unwrap();
    assert_eq!(
        (0..3).map(|w| p.worker_pauses(w)).collect::<Vec<_>>(),
        before
    );
    // Worker b's part: q -> mid -> out. q spans a and b (its task half
    // is made from it), so both restart; c runs on.
    p.edit(|g| {
        g.disconnect("q", 0)?;
        g.connect("q", 0, "mid", 0)?;
        g.connect("mid", 0, "out", 0)
    })
    .unwrap();
    let after: Vec<u64> = (0..3).map(|w| p.worker_pauses(w)).collect();
    assert_eq!(after[2], before[2], "worker c was paused");
    assert_eq!(after[1], before[1] + 1, "worker b restarted once");
    assert_eq!(after[0], before[0] + 1, "worker a (q's input side) too");
    // Worker c's rate: only c.
    p.edit(|g| {
        g.set_tc_policy(
            "rc",
            PolicySpec::RateLimit {
                resource: Resource::Packet,
                limit: 50_000,
                max_burst: None,
            },
        )
    })
    .unwrap();
    let last: Vec<u64> = (0..3).map(|w| p.worker_pauses(w)).collect();
    assert_eq!(last, vec![after[0], after[1], after[2] + 1]);
    std::thread::sleep(Duration::from_millis(30));
    let s = p.shutdown().unwrap();
    assert!(s.module("mid").unwrap().received() > 0, "{s}");
    assert!(s.module("out2").unwrap().consumed > 0, "{s}");
    // Every packet made is consumed, dropped or still queued.
    let queued = s
        .module("q")
        .unwrap()
        .extra
        .iter()
        .find(|e| e.0 == "queued")
        .map_or(0, |e| e.1);
    let made: u64 = s.modules.iter().map(|m| m.created).sum();
    let gone: u64 = s.modules.iter().map(|m| m.consumed + m.dropped).sum();
    assert_eq!(made, gone + queued, "{s}");
}

#[test]
fn a_queue_consumer_worker_sleeps_and_its_producer_wakes_it() {
    // Worker a: a Source paced at 200 packets/s into a Queue; worker b
    // runs only the Queue's task and a TSO task behind it (issue 19: a
    // TSO task does not keep its worker polling). b sleeps between
    // packets and the Queue's doorbell wakes it: with the longest sleep
    // at 10 s nothing else could deliver the packets within the second.
    let src = "worker a\nworker b\ntc rl = rate_limit(worker=a, resource=packet, limit=200)\ns::Source(size=60, burst=1) -> q::Queue(size=1024)\nq -> tso::TSO() -> out::Sink()\ns.attach(tc=rl)\nq.attach(worker=b)\ntso.attach(worker=b)\n";
    let mut p = build(src, Arc::new(RealClock::default()));
    p.set_idle(nfkit_port::IdleOptions {
        sleep_after: Some(Duration::from_micros(200)),
        max_sleep: Duration::from_secs(10),
    });
    p.start().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let s = p.shutdown().unwrap();
    let made = s.module("s").unwrap().created;
    let got = s.module("out").unwrap().consumed;
    let b = s.workers.iter().find(|w| w.name == "b").unwrap();
    let total = (b.sched.busy_ns + b.sched.idle_ns + b.sched.asleep_ns).max(1);
    let asleep = b.sched.asleep_ns as f64 / total as f64;
    assert!(made >= 50, "{s}");
    // All but those still in the ring at shutdown (at most a few).
    assert!(got + 8 >= made, "made {made}, delivered {got}: {s}");
    assert!(
        b.sched.sleeps >= 10,
        "worker b slept {} times",
        b.sched.sleeps
    );
    assert!(
        asleep > 0.5,
        "worker b asleep {:.1}% of its time: {s}",
        100.0 * asleep
    );
}
