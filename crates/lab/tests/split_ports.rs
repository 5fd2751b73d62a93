//! A pipeline whose two workers each own one queue pair of a simulated
//! 82599: the port is split into per-queue parts (no lock between the
//! workers) and every packet is accounted for.

use nfkit_lab::{registry, SimLab, SimWire};
use nfkit_port::{OpenOptions, Port, PortError};
use std::time::Duration;

#[test]
fn two_workers_on_two_queues_of_one_82599_forward_with_no_lock() {
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 256,
        },
        2,
    );
    let reg = registry(lab.clone(), 2);
    let open = |spec: &str| -> Result<Box<dyn Port>, PortError> {
        reg.open_str(spec, &OpenOptions::default())
    };
    let src = "port p0 = \"sim:0\"\nport p1 = \"sim:1\"\nworker a\nworker b\n\
               x::QueueInc(port=p0, qid=0) -> QueueOut(port=p1, qid=0)\n\
               y::QueueInc(port=p0, qid=1) -> QueueOut(port=p1, qid=1)\n\
               x.attach(worker=a)\ny.attach(worker=b)\n";
    let mut p = nfkit_pipeline::parse(src, "split.nfk")
        .unwrap()
        .build(&open)
        .unwrap();
    lab.start_load();
    // Run until both queues have carried traffic (RSS spreads the flows).
    let mut s = p.run_for(Duration::from_millis(300)).unwrap();
    for _ in 0..50 {
        let got = |m: &str| s.module(m).map_or(0, |m| m.created);
        if got("x") > 0 && got("y") > 0 {
            break;
        }
        s = p.run_for(Duration::from_millis(200)).unwrap();
    }
    lab.stop_load();
    p.pause().unwrap();
    let s = p.stats();
    for (name, port) in p.ports() {
        assert!(
            port.is_split(),
            "{name}: split into per-queue parts, no lock"
        );
    }
    for m in &s.modules {
        assert!(m.balanced(), "{}: {m:?}", m.name);
    }
    let (x, y) = (s.module("x").unwrap(), s.module("y").unwrap());
    assert!(
        x.created > 0 && y.created > 0,
        "both queues carried traffic"
    );
    let port = |n: &str| s.ports.iter().find(|(p, _)| p == n).unwrap().1;
    assert_eq!(port("p0").rx_packets, x.created + y.created);
    // A QueueInc hands on at most its adaptive burst a run and keeps the
    // rest of what the port gave it (`queued`, counted in `held`): at a
    // pause up to a batch may wait there, not yet at an output.
    let out: u64 = s
        .modules
        .iter()
        .filter(|m| m.class == "QueueOut")
        .map(|m| m.received())
        .sum();
    assert_eq!(
        out + x.held() + y.held(),
        x.created + y.created,
        "every received packet reached an output or waits in its QueueInc"
    );
    eprintln!(
        "split_ports: created {} + {}, held {} + {}, at the outputs {out}",
        x.created,
        y.created,
        x.held(),
        y.held()
    );
    let outs = s.modules.iter().filter(|m| m.class == "QueueOut");
    let sent: u64 = outs.map(|m| m.consumed).sum();
    assert_eq!(
        port("p1").tx_packets,
        sent,
        "the port sent what the outputs handed it"
    );
    p.shutdown().unwrap();
}
