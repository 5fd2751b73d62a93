//! GetPortStats on a port a worker holds is served while traffic flows:
//! the worker publishes the port's counters between two rounds, nothing
//! pauses (in process, through the request dispatcher). A ModuleCommand
//! on a module of worker 1 stops worker 1 alone: worker 0 forwards on.

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

fn consumed(d: &Daemon, module: &str) -> u64 {
    let info = d.get_module_info(module).unwrap();
    info.igates.first().map(|g| g.pkts).unwrap_or(0)
}

#[test]
fn a_command_on_worker_1_leaves_worker_0_running() {
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    d.add_worker(pb::AddWorkerRequest {
        wid: 1,
        core: -1,
        scheduler: String::new(),
    })
    .unwrap();
    let module = |d: &mut Daemon, name: &str, class: &str, arg: Option<prost_types::Any>| {
        d.create_module(pb::CreateModuleRequest {
            name: name.into(),
            mclass: class.into(),
            arg,
        })
        .unwrap();
    };
    let connect = |d: &mut Daemon, m1: &str, m2: &str| {
        d.connect(pb::ConnectModulesRequest {
            m1: m1.into(),
            m2: m2.into(),
            ..Default::default()
        })
        .unwrap();
    };
    // Worker 0: src0 -> sink0. Worker 1: src1 -> drop -> sink1.
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
    module(&mut d, "sink1", "Sink", None);
    connect(&mut d, "src1", "drop");
    connect(&mut d, "drop", "sink1");
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
    let mut last = consumed(&d, "sink0");
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
        std::thread::sleep(Duration::from_millis(10));
        let now = consumed(&d, "sink0");
        if now > last {
            advanced += 1;
        }
        last = now;
    }
    assert_eq!(
        d.worker_pauses(0),
        w0,
        "a command on worker 1 paused worker 0"
    );
    assert_eq!(
        d.worker_pauses(1),
        w1 + 20,
        "each command paused worker 1 once"
    );
    // Worker 0's sink kept receiving across the commands (a loaded
    // machine may not schedule it between two readings every time).
    assert!(
        advanced >= 10,
        "sink0 advanced in {advanced} of 20 readings"
    );
    assert!(consumed(&d, "sink1") > 0);
    let _ = d.shutdown();
}
