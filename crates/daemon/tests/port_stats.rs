//! GetPortStats on a port a worker holds is served while traffic flows:
//! the worker publishes the port's counters between two rounds, nothing
//! pauses (in process, through the request dispatcher). A ModuleCommand
//! on a module of worker 1 stops worker 1 alone: worker 0 forwards on.
//! And an idle
//! worker sleeps (hybrid polling): almost no CPU, woken by traffic and at
//! once by control requests (root; otherwise SKIP).

#[allow(dead_code)]
#[path = "../../port/tests/common/traffic.rs"]
mod traffic;

use nfkit_daemon::dispatch::dispatch;
use nfkit_daemon::mclass::pack;
use nfkit_daemon::{pb, Daemon};
use nfkit_port::{OpenOptions, Port, PortError, PortSpec};
use prost::Message;
use std::sync::Arc;
use std::time::Duration;

fn open(spec: &str) -> Result<Box<dyn Port>, PortError> {
    let s: PortSpec = spec
        .parse()
        .map_err(|e: nfkit_port::SpecError| PortError::config(spec, e.to_string()))?;
    nfkit_port::open(&s, &OpenOptions::default())
}

fn port_stats(d: &mut Daemon) -> (u64, u64) {
    let bytes = dispatch(
        d,
        "GetPortStats",
        &pb::GetPortStatsRequest { name: "p0".into() }.encode_to_vec(),
    )
    .expect("GetPortStats");
    let r = pb::GetPortStatsResponse::decode(&bytes[..]).unwrap();
    (r.inc.unwrap().packets, r.out.unwrap().packets)
}

#[test]
fn port_stats_are_served_without_pausing_the_workers() {
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    d.create_port(pb::CreatePortRequest {
        name: "p0".into(),
        driver: "NfkitPort".into(),
        arg: Some(pack(
            &pb::NfkitPortArg {
                spec: "null:size=64".into(),
            },
            "NfkitPortArg",
        )),
        ..Default::default()
    })
    .unwrap();
    for (name, class, arg) in [
        (
            "inc",
            "PortInc",
            pack(
                &pb::PortIncArg {
                    port: "p0".into(),
                    prefetch: false,
                },
                "PortIncArg",
            ),
        ),
        (
            "out",
            "PortOut",
            pack(&pb::PortOutArg { port: "p0".into() }, "PortOutArg"),
        ),
    ] {
        d.create_module(pb::CreateModuleRequest {
            name: name.into(),
            mclass: class.into(),
            arg: Some(arg),
        })
        .unwrap();
    }
    d.connect(pb::ConnectModulesRequest {
        m1: "inc".into(),
        m2: "out".into(),
        ..Default::default()
    })
    .unwrap();
    let pauses = d.pauses();
    let mut last = port_stats(&mut d);
    let mut advanced = 0;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(20));
        let now = port_stats(&mut d);
        assert!(now.0 >= last.0 && now.1 >= last.1, "{now:?} after {last:?}");
        if now.0 > last.0 && now.1 > last.1 {
            advanced += 1;
        }
        last = now;
    }
    assert_eq!(d.pauses(), pauses, "GetPortStats paused the workers");
    // Every reading but a few (a loaded machine may not schedule the
    // worker between two) shows the traffic moving.
    assert!(
        advanced >= 10,
        "counters advanced in {advanced} of 20 readings"
    );
    assert!(last.0 > 0 && last.1 > 0);
    let _ = d.shutdown();
}

fn add_port(d: &mut Daemon, name: &str, spec: &str) {
    d.create_port(pb::CreatePortRequest {
        name: name.into(),
        driver: "NfkitPort".into(),
        arg: Some(pack(
            &pb::NfkitPortArg { spec: spec.into() },
            "NfkitPortArg",
        )),
        ..Default::default()
    })
    .unwrap();
}

fn add_module(d: &mut Daemon, name: &str, class: &str, arg: prost_types::Any) {
    d.create_module(pb::CreateModuleRequest {
        name: name.into(),
        mclass: class.into(),
        arg: Some(arg),
    })
    .unwrap();
}

/// A thread's time on a CPU (`/proc/self/task/TID/schedstat`).
fn cpu_time(tid: u32) -> Duration {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    Duration::from_nanos(s.split_whitespace().next().unwrap().parse().unwrap())
}

fn call<T: Message>(d: &mut Daemon, method: &str, req: &T) -> Vec<u8> {
    dispatch(d, method, &req.encode_to_vec()).unwrap_or_else(|e| panic!("{method}: {e}"))
}

#[test]
fn an_idle_worker_sleeps_and_wakes_for_traffic_and_control() {
    nfkit_testkit::require_root!();
    nfkit_testkit::require_tool!("ping");
    let net = nfkit_testkit::TwoHosts::at_default_offloads(1).unwrap();
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    add_port(&mut d, "pa", &format!("afpacket:{}", net.a.host_end));
    add_port(&mut d, "pb", &format!("afpacket:{}", net.b.host_end));
    for (from, to) in [("pa", "pb"), ("pb", "pa")] {
        let (inc, out) = (format!("inc_{from}"), format!("out_{to}"));
        let arg = pb::PortIncArg {
            port: from.into(),
            prefetch: false,
        };
        add_module(&mut d, &inc, "PortInc", pack(&arg, "PortIncArg"));
        let arg = pb::PortOutArg { port: to.into() };
        add_module(&mut d, &out, "PortOut", pack(&arg, "PortOutArg"));
        d.connect(pb::ConnectModulesRequest {
            m1: inc,
            m2: out,
            ..Default::default()
        })
        .unwrap();
    }
    // ARP and the kernel's first frames, then quiet: the default hybrid
    // policy puts the worker to sleep.
    traffic::ping(&net.a.ns, &net.b.ip);
    std::thread::sleep(Duration::from_millis(300));
    let tid = d.worker_tids()[0].expect("the worker runs");
    let (c0, t0) = (cpu_time(tid), std::time::Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let share = (cpu_time(tid) - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    eprintln!("idle pipeline worker: {:.2}% of a core", share * 100.0);
    assert!(share < 0.02, "an idle worker used {:.1}%", share * 100.0);

    // Sleeps that only a packet or a control request end (10 s bound):
    // a request answered promptly, with fresh counters, was woken by the
    // control eventfd, not by the timer.
    d.set_idle(nfkit_port::IdleOptions {
        max_sleep: Duration::from_secs(10),
        ..Default::default()
    })
    .unwrap();
    traffic::ping(&net.a.ns, &net.b.ip);
    assert!(traffic::tcp_transfer(&net.a.ns, &net.b.ns, &net.b.ip) || !nfkit_testkit::skips_fail());
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    let r = pb::GetPortStatsResponse::decode(
        &call(
            &mut d,
            "GetPortStats",
            &pb::GetPortStatsRequest { name: "pa".into() },
        )[..],
    )
    .unwrap();
    let stats_took = t.elapsed();
    let inc = r.inc.unwrap().packets;
    eprintln!("GetPortStats on a sleeping worker: {stats_took:?}, pa inc {inc}");
    assert!(inc >= 6, "the counters the woken worker published: {inc}");
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    call(&mut d, "PauseAll", &pb::EmptyRequest {});
    call(&mut d, "ResumeAll", &pb::EmptyRequest {});
    let pause_took = t.elapsed();
    eprintln!("PauseAll+ResumeAll on a sleeping worker: {pause_took:?}");
    assert!(stats_took < Duration::from_secs(2) && pause_took < Duration::from_secs(2));
    // and traffic still wakes it
    traffic::ping(&net.a.ns, &net.b.ip);
    let w = pb::ListWorkersResponse::decode(&call(&mut d, "ListWorkers", &pb::EmptyRequest {})[..])
        .unwrap();
    let w0 = &w.workers_status[0];
    eprintln!("{w0:?}");
    assert!(
        w0.sleeps > 0 && w0.asleep_ns > 0 && w0.busy_ns > 0,
        "{w0:?}"
    );
    let _ = d.shutdown();
}

fn consumed(d: &Daemon, module: &str) -> u64 {
    let info = d.get_module_info(module).unwrap();
    info.igates.first().map(|g| g.pkts).unwrap_or(0)
}

/// A daemon with worker 0 and worker 1 (no core given).
fn two_workers() -> Daemon {
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    d.add_worker(pb::AddWorkerRequest {
        wid: 1,
        core: -1,
        scheduler: String::new(),
    })
    .unwrap();
    d
}

/// Create module `name` of `class` with `arg`.
fn module(d: &mut Daemon, name: &str, class: &str, arg: Option<prost_types::Any>) {
    d.create_module(pb::CreateModuleRequest {
        name: name.into(),
        mclass: class.into(),
        arg,
    })
    .unwrap();
}

#[test]
fn a_command_on_worker_1_leaves_worker_0_running() {
    let mut d = two_workers();
    let connect = |d: &mut Daemon, m1: &str, m2: &str| {
        d.connect(pb::ConnectModulesRequest {
            m1: m1.into(),
            m2: m2.into(),
            ..Default::default()
        })
        .unwrap();
    };
    // Worker 0: src0 -> sink0. Worker 1: src1 -> drop -> m -> sink1.
    module(&mut d, "src0", "Source", None);
    module(&mut d, "sink0", "Sink", None);
    connect(&mut d, "src0", "sink0");
    module(&mut d, "src1", "Source", None);
    let rate = |r: &str| {
        pack(
            &pb::NfkitArg {
                args: format!("drop_rate={r}"),
            },
            "NfkitArg",
        )
    };
    module(&mut d, "drop", "RandomDrop", Some(rate("0.5")));
    module(&mut d, "m", "Measure", None);
    module(&mut d, "sink1", "Sink", None);
    connect(&mut d, "src1", "drop");
    connect(&mut d, "drop", "m");
    connect(&mut d, "m", "sink1");
    d.add_tc(Some(pb::TrafficClass {
        leaf_module_name: "src1".into(),
        policy: "leaf".into(),
        wid: 1,
        ..Default::default()
    }))
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));

    let (w0, w1) = (d.worker_pauses(0), d.worker_pauses(1));
    let mut advanced = 0;
    for i in 0..20 {
        let r = if i % 2 == 0 { "0.25" } else { "0.75" };
        d.module_command(pb::CommandRequest {
            name: "drop".into(),
            cmd: "set_droprate".into(),
            arg: Some(pack(
                &pb::NfkitCommandArg {
                    text: format!("drop_rate={r}"),
                },
                "NfkitCommandArg",
            )),
        })
        .expect("set_droprate");
        if i % 4 == 0 {
            // Reading a Measure's histogram stops its worker alone too.
            d.module_command(pb::CommandRequest {
                name: "m".into(),
                cmd: "get_summary".into(),
                arg: Some(pack(
                    &pb::MeasureCommandGetSummaryArg::default(),
                    "MeasureCommandGetSummaryArg",
                )),
            })
            .expect("get_summary");
        }
        if moves(&d, "sink0") {
            advanced += 1;
        }
    }
    assert_eq!(
        d.worker_pauses(0),
        w0,
        "a command on worker 1 paused worker 0"
    );
    assert_eq!(
        d.worker_pauses(1),
        w1 + 25,
        "each command paused worker 1 once"
    );
    // Worker 0's sink kept receiving across the commands.
    assert_eq!(
        advanced, 20,
        "sink0 advanced after {advanced} of 20 commands"
    );
    assert!(consumed(&d, "sink1") > 0);

    // PauseWorker stops worker 1 alone, across a command on it;
    // ResumeWorker lets it run; after PauseAll, ResumeWorker(1) runs
    // worker 1 only.
    call(&mut d, "PauseWorker", &pb::PauseWorkerRequest { wid: 1 });
    assert_eq!(running(&mut d), [true, false]);
    assert!(still(&d, "sink1"), "worker 1 ran while paused");
    assert!(moves(&d, "sink0"), "worker 0 stopped with worker 1");
    d.module_command(pb::CommandRequest {
        name: "drop".into(),
        cmd: "set_droprate".into(),
        arg: Some(pack(
            &pb::NfkitCommandArg {
                text: "drop_rate=0.5".into(),
            },
            "NfkitCommandArg",
        )),
    })
    .expect("set_droprate on a paused worker");
    assert!(still(&d, "sink1"), "a command resumed paused worker 1");
    call(&mut d, "ResumeWorker", &pb::ResumeWorkerRequest { wid: 1 });
    assert_eq!(running(&mut d), [true, true]);
    assert!(moves(&d, "sink1"), "worker 1 did not resume");
    call(&mut d, "PauseAll", &pb::EmptyRequest {});
    assert_eq!(running(&mut d), [false, false]);
    call(&mut d, "ResumeWorker", &pb::ResumeWorkerRequest { wid: 1 });
    assert_eq!(running(&mut d), [false, true]);
    assert!(still(&d, "sink0") && moves(&d, "sink1"));
    call(&mut d, "ResumeAll", &pb::EmptyRequest {});
    assert_eq!(running(&mut d), [true, true]);
    assert!(moves(&d, "sink0"));

    // As with bessd, `add_worker(0, core)` is accepted once, and again
    // after ResetAll (bessctl's `daemon reset` before a script); a worker
    // paused alone runs again after it.
    let w0 = pb::AddWorkerRequest {
        wid: 0,
        core: -1,
        scheduler: String::new(),
    };
    d.add_worker(w0.clone()).unwrap();
    assert_eq!(d.add_worker(w0.clone()).unwrap_err().code, libc::EEXIST);
    call(&mut d, "PauseWorker", &pb::PauseWorkerRequest { wid: 0 });
    call(&mut d, "ResetAll", &pb::EmptyRequest {});
    d.add_worker(w0).unwrap();
    assert_eq!(running(&mut d), [true]);
    let _ = d.shutdown();
}

/// ListWorkers' `running`, by wid.
fn running(d: &mut Daemon) -> Vec<bool> {
    let r =
        pb::ListWorkersResponse::decode(&call(d, "ListWorkers", &pb::EmptyRequest {})[..]).unwrap();
    let mut w: Vec<(i64, bool)> = r
        .workers_status
        .iter()
        .map(|w| (w.wid, w.running))
        .collect();
    w.sort();
    w.into_iter().map(|w| w.1).collect()
}

/// Whether `module` received nothing for 30 ms.
fn still(d: &Daemon, module: &str) -> bool {
    let a = consumed(d, module);
    std::thread::sleep(Duration::from_millis(30));
    consumed(d, module) == a
}

/// Whether `module` receives packets within 2 s (a loaded machine may
/// not schedule its worker between two close readings).
fn moves(d: &Daemon, module: &str) -> bool {
    let a = consumed(d, module);
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        if consumed(d, module) > a {
            return true;
        }
    }
    false
}

/// (created, consumed, dropped) of a module, from GetModuleInfo.
fn made_used_dropped(d: &Daemon, module: &str) -> (u64, u64, u64) {
    let info = d.get_module_info(module).unwrap();
    let v = |k: &str| {
        info.desc
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0u64)
    };
    (v("created"), v("consumed"), info.deadends)
}

#[test]
fn a_graph_change_on_worker_1_leaves_worker_0_running() {
    let mut d = two_workers();
    let connect = |d: &mut Daemon, m1: &str, og: u64, m2: &str| {
        d.connect(pb::ConnectModulesRequest {
            m1: m1.into(),
            m2: m2.into(),
            ogate: og,
            igate: 0,
            ..Default::default()
        })
        .unwrap();
    };
    let disconnect = |d: &mut Daemon, m: &str, og: u64| {
        d.disconnect(pb::DisconnectModulesRequest {
            name: m.into(),
            ogate: og,
        })
        .unwrap();
    };
    let limit = |pps: i64| pb::TrafficClass {
        name: "rl".into(),
        policy: "rate_limit".into(),
        resource: "packet".into(),
        limit: std::collections::HashMap::from([("packet".to_string(), pps)]),
        wid: 1,
        ..Default::default()
    };
    // Worker 0: src0 -> sink0. Worker 1: src1 (under a 100 kpps limit)
    // -> sink1.
    module(&mut d, "src0", "Source", None);
    module(&mut d, "sink0", "Sink", None);
    connect(&mut d, "src0", 0, "sink0");
    d.add_tc(Some(limit(100_000))).unwrap();
    module(&mut d, "src1", "Source", None);
    module(&mut d, "sink1", "Sink", None);
    connect(&mut d, "src1", 0, "sink1");
    d.add_tc(Some(pb::TrafficClass {
        leaf_module_name: "src1".into(),
        policy: "leaf".into(),
        parent: "rl".into(),
        wid: 1,
        ..Default::default()
    }))
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));

    let (w0, w1) = (d.worker_pauses(0), d.worker_pauses(1));
    let mut advanced = 0;
    let mut check = |d: &Daemon| {
        if moves(d, "sink0") {
            advanced += 1;
        }
    };
    // Changes of worker 1's part only: a module in the middle, a rate
    // limit, a class, a branch added and removed.
    module(&mut d, "mid", "MACSwap", None);
    check(&d);
    disconnect(&mut d, "src1", 0);
    check(&d);
    connect(&mut d, "src1", 0, "mid");
    check(&d);
    connect(&mut d, "mid", 0, "sink1");
    check(&d);
    d.update_tc_params(Some(limit(50_000))).unwrap();
    check(&d);
    d.add_tc(Some(pb::TrafficClass {
        name: "rr1".into(),
        policy: "round_robin".into(),
        wid: 1,
        ..Default::default()
    }))
    .unwrap();
    check(&d);
    let rep = pack(&pb::ReplicateArg { gates: vec![0, 1] }, "ReplicateArg");
    module(&mut d, "rep", "Replicate", Some(rep));
    module(&mut d, "sink2", "Sink", None);
    disconnect(&mut d, "mid", 0);
    check(&d);
    connect(&mut d, "mid", 0, "rep");
    connect(&mut d, "rep", 0, "sink1");
    connect(&mut d, "rep", 1, "sink2");
    check(&d);
    std::thread::sleep(Duration::from_millis(50));
    disconnect(&mut d, "rep", 1);
    let sink2 = made_used_dropped(&d, "sink2");
    d.destroy_module("sink2").unwrap();
    check(&d);
    assert_eq!(
        d.worker_pauses(0),
        w0,
        "a change of worker 1's part paused worker 0"
    );
    assert!(d.worker_pauses(1) > w1, "worker 1 was never paused");
    assert!(sink2.1 > 0, "the branch carried nothing: {sink2:?}");
    // Worker 0's sink kept receiving across the changes.
    assert_eq!(advanced, 9, "sink0 advanced after {advanced} of 9 changes");

    // Every packet made was consumed or counted as dropped.
    d.pause_all().unwrap();
    let (mut made, mut used, mut dropped) = sink2;
    for m in ["src0", "sink0", "src1", "mid", "rep", "sink1"] {
        let (a, b, c) = made_used_dropped(&d, m);
        made += a;
        used += b;
        dropped += c;
    }
    assert!(made > 0);
    assert_eq!(
        made,
        used + dropped,
        "made {made} = consumed {used} + dropped {dropped}"
    );
    let _ = d.shutdown();
}
