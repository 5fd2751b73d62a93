//! Properties of the graph known when it is built: loops with no task in
//! them and walks deeper than `graph::MAX_DEPTH` are refused, and
//! building stays near-linear in the number of modules.

use nfkit_hw::sim::VirtualClock;
use nfkit_pipeline::graph::MAX_DEPTH;
use nfkit_pipeline::{parse, BuildOptions, Desc, Pipeline};
use std::time::Instant;

fn build(desc: &Desc) -> Result<Pipeline, String> {
    let opts = BuildOptions {
        clock: VirtualClock::new(),
        ..BuildOptions::default()
    };
    desc.build_with(
        &|s| Err(nfkit_port::PortError::config(s, "no ports here")),
        opts,
    )
    .map_err(|e| e.to_string())
}

fn build_src(src: &str) -> Result<Pipeline, String> {
    build(&parse(src, "t.nfk").map_err(|e| e.to_string())?)
}

/// `Source -> n Bypass modules -> Sink`.
fn chain(n: usize) -> String {
    let mut src = String::from("src::Source(size=60)");
    for i in 0..n {
        src += &format!(" -> b{i}::Bypass()");
    }
    src += " -> snk::Sink()\n";
    src
}

#[test]
fn a_loop_without_a_task_is_refused_naming_its_modules() {
    let src = "src::Source() -> a::Bypass(gates=2) -> b::Bypass() -> 1:a\na:1 -> Sink()\n";
    let err = build_src(src)
        .err()
        .expect("a loop with no task is refused");
    assert!(
        err.starts_with(
            "t.nfk:1:18: modules `a` -> `b` -> `a` form a loop with no task (Queue) in it"
        ),
        "{err}"
    );
}

#[test]
fn a_loop_through_a_queue_is_accepted_and_runs() {
    // Packets go round through the queue: each pass is a new walk.
    let src = "src::Source(size=60, burst=1) -> m::Merge() -> r::RandomSplit(gates=[0, 1]) -> q::Queue(size=64) -> 1:m\nr:1 -> out::Sink()\n";
    let mut p = build_src(src).unwrap_or_else(|e| panic!("{e}"));
    p.step(50).unwrap();
    let s = p.stats();
    assert!(s.module("out").is_some_and(|m| m.consumed > 0), "{s}");
}

#[test]
fn walks_up_to_the_limit_run_and_deeper_ones_are_refused() {
    assert_eq!(MAX_DEPTH, 1024);
    // Source + 1023 Bypass + Sink: the batch crosses 1,024 modules.
    let ok = chain(MAX_DEPTH - 1);
    // Deep recursion: run on a thread with a worker's stack.
    std::thread::Builder::new()
        .stack_size(32 << 20)
        .spawn(move || {
            let mut p = build_src(&ok).unwrap_or_else(|e| panic!("{e}"));
            p.step(3).unwrap();
            let s = p.stats();
            let made = s.module("src").unwrap().created;
            assert!(made > 0);
            assert_eq!(
                s.module("snk").unwrap().consumed,
                made,
                "nothing dropped on the way"
            );
            assert_eq!(s.dropped(), 0);
        })
        .unwrap()
        .join()
        .unwrap();
    let err = build_src(&chain(MAX_DEPTH)).err().expect("too deep");
    assert!(
        err.contains("a batch from task `src` would cross more than 1024 modules (the walk reaches `snk` at depth 1025)"),
        "{err}"
    );
    assert!(err.starts_with("t.nfk:1:"), "points at the module: {err}");
}

#[test]
fn twenty_thousand_modules_build_in_near_linear_time() {
    // 4,000 chains of 5 modules, half of the sources attached to classes.
    let mut src = String::from("worker w0\nworker w1\n");
    for c in 0..4 {
        src += &format!("tc t{c} = round_robin(worker=w{})\n", c % 2);
    }
    for i in 0..4000 {
        src += &format!("s{i}::Source(size=60) -> MACSwap() -> Bypass() -> MACSwap() -> Sink()\n");
        if i % 2 == 0 {
            src += &format!("s{i}.attach(tc=t{})\n", i % 4);
        }
    }
    let started = Instant::now();
    let desc = parse(&src, "big.nfk").unwrap_or_else(|e| panic!("{e}"));
    let parsed = started.elapsed();
    let mut p = build(&desc).unwrap_or_else(|e| panic!("{e}"));
    let built = started.elapsed();
    assert_eq!(p.graph().module_names().len(), 20_000);
    p.step(1).unwrap();
    // An edit recommits the whole graph.
    p.edit(|g| g.attach("s1", Some("w1"), "root", Default::default()))
        .unwrap();
    let edited = started.elapsed();
    eprintln!(
        "20,000 modules: parsed in {parsed:?}, built in {:?}, one edit in {:?}",
        built - parsed,
        edited - built
    );
}
