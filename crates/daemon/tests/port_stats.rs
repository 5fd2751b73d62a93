//! GetPortStats on a port a worker holds is served while traffic flows:
//! the worker publishes the port's counters between two rounds, nothing
//! pauses (in process, through the request dispatcher).

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
