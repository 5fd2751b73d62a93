//! Every module class nfkit has, created from BESS's argument messages
//! (or with no argument), in-process; bad arguments get BESS's errno.

use nfkit_daemon::mclass::pack;
use nfkit_daemon::{pb, Daemon};
use nfkit_port::{OpenOptions, Port, PortError, PortSpec};
use std::sync::Arc;

fn daemon() -> Daemon {
    Daemon::new(Arc::new(|spec: &str| -> Result<Box<dyn Port>, PortError> {
        let s: PortSpec = spec
            .parse()
            .map_err(|e: nfkit_port::SpecError| PortError::config(spec, e.to_string()))?;
        nfkit_port::open(&s, &OpenOptions::default())
    }))
    .unwrap()
}

fn create(
    d: &mut Daemon,
    name: &str,
    class: &str,
    arg: Option<prost_types::Any>,
) -> Result<(), String> {
    d.create_module(pb::CreateModuleRequest {
        name: name.into(),
        mclass: class.into(),
        arg,
    })
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn bess_arguments_build_every_core_class() {
    let mut d = daemon();
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
    let cases: Vec<(&str, Option<prost_types::Any>)> = vec![
        (
            "Source",
            Some(pack(&pb::SourceArg { pkt_size: 128 }, "SourceArg")),
        ),
        ("Sink", None),
        ("MACSwap", Some(pack(&pb::MacSwapArg {}, "MACSwapArg"))),
        ("Merge", None),
        ("Bypass", Some(pack(&pb::BypassArg::default(), "BypassArg"))),
        (
            "PortInc",
            Some(pack(
                &pb::PortIncArg {
                    port: "p0".into(),
                    prefetch: false,
                },
                "PortIncArg",
            )),
        ),
        (
            "PortOut",
            Some(pack(&pb::PortOutArg { port: "p0".into() }, "PortOutArg")),
        ),
        (
            "QueueInc",
            Some(pack(
                &pb::QueueIncArg {
                    port: "p0".into(),
                    qid: 0,
                    prefetch: false,
                },
                "QueueIncArg",
            )),
        ),
        (
            "QueueOut",
            Some(pack(
                &pb::QueueOutArg {
                    port: "p0".into(),
                    qid: 0,
                },
                "QueueOutArg",
            )),
        ),
        (
            "Queue",
            Some(pack(
                &pb::QueueArg {
                    size: 256,
                    ..Default::default()
                },
                "QueueArg",
            )),
        ),
        (
            "RoundRobin",
            Some(pack(
                &pb::RoundRobinArg {
                    gates: vec![0, 1, 2],
                    mode: "batch".into(),
                },
                "RoundRobinArg",
            )),
        ),
        (
            "Replicate",
            Some(pack(
                &pb::ReplicateArg { gates: vec![0, 1] },
                "ReplicateArg",
            )),
        ),
        (
            "RandomSplit",
            Some(pack(
                &pb::RandomSplitArg {
                    drop_rate: 0.25,
                    gates: vec![0, 2],
                },
                "RandomSplitArg",
            )),
        ),
        (
            "HashLB",
            Some(pack(
                &pb::HashLbArg {
                    gates: vec![0, 1, 2, 3],
                    mode: "l3".into(),
                    fields: vec![],
                },
                "HashLBArg",
            )),
        ),
        (
            "Split",
            Some(pack(
                &pb::SplitArg {
                    size: 2,
                    r#type: Some(pb::split_arg::Type::Offset(12)),
                },
                "SplitArg",
            )),
        ),
        (
            "Update",
            Some(pack(
                &pb::UpdateArg {
                    fields: vec![pb::update_arg::Field {
                        offset: 6,
                        size: 2,
                        value: 0x0800,
                    }],
                },
                "UpdateArg",
            )),
        ),
        (
            "SetMetadata",
            Some(pack(
                &pb::SetMetadataArg {
                    attrs: vec![pb::set_metadata_arg::Attribute {
                        name: "tag".into(),
                        size: 4,
                        value: Some(pb::set_metadata_arg::attribute::Value::ValueInt(7)),
                        ..Default::default()
                    }],
                },
                "SetMetadataArg",
            )),
        ),
        (
            "Timestamp",
            Some(pack(&pb::TimestampArg::default(), "TimestampArg")),
        ),
        (
            "Measure",
            Some(pack(&pb::MeasureArg::default(), "MeasureArg")),
        ),
        (
            "Dump",
            Some(pack(&pb::DumpArg { interval: 1.0 }, "DumpArg")),
        ),
        ("NoOP", None),
        // pybess packs an EmptyArg for a class BESS gives no `<Class>Arg`
        // (MPLSPop), and for Sink, Bypass and the like: the defaults.
        ("MPLSPop", Some(pack(&pb::EmptyArg {}, "EmptyArg"))),
        ("Source", Some(pack(&pb::EmptyArg {}, "EmptyArg"))),
        ("Bypass", Some(pack(&pb::EmptyArg {}, "EmptyArg"))),
    ];
    for (i, (class, arg)) in cases.into_iter().enumerate() {
        create(&mut d, &format!("m{i}"), class, arg).unwrap_or_else(|e| panic!("{class}: {e}"));
    }
    // Default names as BESS makes them.
    let r = d
        .create_module(pb::CreateModuleRequest {
            name: String::new(),
            mclass: "PortInc".into(),
            arg: Some(pack(
                &pb::PortIncArg {
                    port: "p0".into(),
                    prefetch: false,
                },
                "PortIncArg",
            )),
        })
        .unwrap();
    assert_eq!(r.name, "port_inc0");
    let listed = d.list_modules().modules;
    assert!(listed
        .iter()
        .any(|m| m.name == "port_inc0" && m.mclass == "PortInc"));
    // In use: the port cannot go.
    assert_eq!(d.destroy_port("p0").unwrap_err().code, libc::EBUSY);
}

#[test]
fn bad_module_requests_get_errno_and_change_nothing() {
    let mut d = daemon();
    let e = d
        .create_module(pb::CreateModuleRequest {
            name: "x".into(),
            mclass: "NoSuchClass".into(),
            arg: None,
        })
        .unwrap_err();
    assert_eq!(e.code, libc::ENOENT, "{e}");
    create(&mut d, "s", "Sink", None).unwrap();
    let e = d
        .create_module(pb::CreateModuleRequest {
            name: "s".into(),
            mclass: "Sink".into(),
            arg: None,
        })
        .unwrap_err();
    assert_eq!(e.code, libc::EEXIST, "{e}");
    for bad in ["a b", "x/y", "\u{1}", &"n".repeat(300)] {
        let e = create(&mut d, bad, "Sink", None).unwrap_err();
        assert!(e.contains("name"), "{bad:?}: {e}");
    }
    // Wrong Any type, malformed bytes, bad values.
    assert!(create(
        &mut d,
        "a",
        "Source",
        Some(pack(&pb::SinkArg {}, "SinkArg"))
    )
    .unwrap_err()
    .contains("SourceArg"));
    let junk = prost_types::Any {
        type_url: "type.googleapis.com/bess.pb.SourceArg".into(),
        value: vec![0x0a, 0xff],
    };
    assert!(create(&mut d, "a", "Source", Some(junk))
        .unwrap_err()
        .contains("malformed"));
    assert!(create(
        &mut d,
        "a",
        "PortInc",
        Some(pack(
            &pb::PortIncArg {
                port: "nope".into(),
                prefetch: false
            },
            "PortIncArg"
        ))
    )
    .is_err());
    assert!(create(
        &mut d,
        "a",
        "Source",
        Some(pack(&pb::SourceArg { pkt_size: 1 << 20 }, "SourceArg"))
    )
    .is_err());
    assert_eq!(d.list_modules().modules.len(), 1);
    // Ports that cannot open: the opener's reason, nothing created.
    for (driver, spec) in [
        ("NfkitPort", "pcap:/nonexistent/in.pcap"),
        ("NfkitPort", "afpacket:nfkit-no-such-if0"),
        ("PCAPPort", "nfkit-no-such-if0"),
    ] {
        let arg = match driver {
            "NfkitPort" => pack(&pb::NfkitPortArg { spec: spec.into() }, "NfkitPortArg"),
            _ => pack(&pb::PcapPortArg { dev: spec.into() }, "PCAPPortArg"),
        };
        let e = d
            .create_port(pb::CreatePortRequest {
                name: "bad".into(),
                driver: driver.into(),
                arg: Some(arg),
                ..Default::default()
            })
            .unwrap_err();
        assert!(e.code != 0 && !e.msg.is_empty(), "{spec}: {e}");
        assert!(
            e.msg.contains(
                spec.trim_start_matches("pcap:")
                    .trim_start_matches("afpacket:")
            ),
            "{spec}: {e}"
        );
    }
    assert!(d.list_ports().ports.is_empty());
}

/// What BESS's bessctl samples roundrobin, update, arp, mpls_test,
/// l2forward, igate and rxl4checksum ask of these classes: gate lists,
/// commands by BESS's names and argument messages, gates beyond 64, a
/// UDP FlowGen template. (Packets through them: the pipeline's tests.)
#[test]
fn bess_samples_gate_lists_commands_and_gates_beyond_64() {
    let mut d = daemon();
    let cmd = |d: &mut Daemon, name: &str, cmd: &str, arg: prost_types::Any| {
        d.module_command(pb::CommandRequest {
            name: name.into(),
            cmd: cmd.into(),
            arg: Some(arg),
        })
        .map(|_| ())
    };
    let connect = |d: &mut Daemon, m1: &str, og: u64, ig: u64, m2: &str| {
        d.connect(pb::ConnectModulesRequest {
            m1: m1.into(),
            m2: m2.into(),
            ogate: og,
            igate: ig,
            skip_default_hooks: false,
        })
    };
    create(&mut d, "sink", "Merge", None).unwrap();
    // RoundRobin(gates=[0, 2], mode='packet'), then gate 1 connected too.
    let rr = pb::RoundRobinArg {
        gates: vec![0, 2],
        mode: "packet".into(),
    };
    create(&mut d, "rr", "RoundRobin", Some(pack(&rr, "RoundRobinArg"))).unwrap();
    for g in 0..3 {
        connect(&mut d, "rr", g, g, "sink").unwrap();
    }
    let info = d.get_mclass_info("RoundRobin").unwrap();
    assert_eq!(info.cmds, ["set_gates", "set_mode"]);
    let gates = pb::RoundRobinCommandSetGatesArg {
        gates: vec![1, 100],
    };
    cmd(
        &mut d,
        "rr",
        "set_gates",
        pack(&gates, "RoundRobinCommandSetGatesArg"),
    )
    .unwrap();
    let mode = pb::RoundRobinCommandSetModeArg {
        mode: "flow".into(),
    };
    let e = cmd(
        &mut d,
        "rr",
        "set_mode",
        pack(&mode, "RoundRobinCommandSetModeArg"),
    )
    .unwrap_err();
    assert_eq!(e.code, libc::EINVAL, "{e}");
    // ArpResponder add and MPLSPop set: listed as BESS lists them, run
    // with BESS's argument messages.
    let info = d.get_mclass_info("ArpResponder").unwrap();
    assert_eq!(
        (info.cmds, info.cmd_args),
        (vec!["add".to_string()], vec!["ArpResponderArg".to_string()])
    );
    let info = d.get_mclass_info("MPLSPop").unwrap();
    assert_eq!(
        (info.cmds, info.cmd_args),
        (vec!["set".to_string()], vec!["MplsPopArg".to_string()])
    );
    create(&mut d, "arp", "ArpResponder", None).unwrap();
    let add = |ip: &str, mac: &str| pb::ArpResponderArg {
        ip: ip.into(),
        mac_addr: mac.into(),
    };
    cmd(
        &mut d,
        "arp",
        "add",
        pack(&add("1.2.3.4", "A0:22:33:44:55:66"), "ArpResponderArg"),
    )
    .unwrap();
    let e = cmd(
        &mut d,
        "arp",
        "add",
        pack(&add("1.2.3", "A0:22:33:44:55:66"), "ArpResponderArg"),
    )
    .unwrap_err();
    assert_eq!(e.code, libc::EINVAL, "{e}");
    create(
        &mut d,
        "mpls",
        "MPLSPop",
        Some(pack(&pb::EmptyArg {}, "EmptyArg")),
    )
    .unwrap();
    let set = pb::MplsPopArg {
        remove_eth_header: false,
        next_eth_type: 0x0800,
    };
    cmd(&mut d, "mpls", "set", pack(&set, "MplsPopArg")).unwrap();
    // L2Forward() then add 1,000 entries, gates 1..=1000; Bypass input
    // gate 1 to output gate 1 (BESS's MAX_GATES is 8,192).
    create(&mut d, "fib", "L2Forward", None).unwrap();
    let entries = (1..=1000u64)
        .map(|i| pb::l2_forward_command_add_arg::Entry {
            addr: format!("00:00:00:00:{:02x}:{:02x}", i >> 8, i & 0xff),
            gate: i as i64,
        })
        .collect();
    let add = pb::L2ForwardCommandAddArg { entries };
    cmd(&mut d, "fib", "add", pack(&add, "L2ForwardCommandAddArg")).unwrap();
    connect(&mut d, "fib", 1000, 3, "sink").unwrap();
    create(&mut d, "a", "Bypass", None).unwrap();
    connect(&mut d, "a", 1, 4, "sink").unwrap();
    connect(&mut d, "rr", 5, 1, "a").unwrap();
    let e = connect(&mut d, "rr", 6, 8192, "a").unwrap_err();
    assert_eq!(e.code, libc::EINVAL, "{e}");
    assert!(e.msg.contains("has 8192 input gate(s)"), "{e}");
    let info = d.get_module_info("a").unwrap();
    assert_eq!(info.ogates.len(), 1);
    assert_eq!((info.ogates[0].ogate, info.ogates[0].igate), (1, 4));
    // FlowGen from a UDP template (rxl4checksum's).
    // Ethernet, IPv4 (10.0.0.1 -> 10.0.0.2, UDP), UDP 10001 -> 10002 with
    // no checksum, 18 bytes of payload: 60 bytes.
    let mut udp = vec![
        6, 0x16, 0x3e, 0x1b, 0x72, 0x32, 2, 0x1e, 0x67, 0x9f, 0x4d, 0xae, 8, 0,
    ];
    udp.extend([
        0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    udp.extend([0x27, 0x11, 0x27, 0x12, 0, 26, 0, 0]);
    udp.extend(b"hello0123456789012");
    let fg = pb::FlowGenArg {
        template: udp,
        pps: 1e6,
        flow_rate: 1e4,
        flow_duration: 10.0,
        arrival: "exponential".into(),
        duration: "pareto".into(),
        quick_rampup: true,
        ..Default::default()
    };
    create(&mut d, "fg", "FlowGen", Some(pack(&fg, "FlowGenArg"))).unwrap();
    // multicore: one Sink fed by tasks on two workers is refused, naming
    // the module and the workers by wid.
    d.add_worker(pb::AddWorkerRequest {
        wid: 1,
        core: -1,
        scheduler: String::new(),
    })
    .unwrap();
    create(&mut d, "src0", "Source", None).unwrap();
    create(&mut d, "src1", "Source", None).unwrap();
    create(&mut d, "k", "Sink", None).unwrap();
    connect(&mut d, "src0", 0, 0, "k").unwrap();
    connect(&mut d, "src1", 0, 0, "k").unwrap();
    let attach = |d: &mut Daemon, m: &str, wid: i64| {
        d.update_tc_parent(Some(pb::TrafficClass {
            leaf_module_name: m.into(),
            wid,
            ..Default::default()
        }))
    };
    attach(&mut d, "src0", 0).unwrap();
    let e = attach(&mut d, "src1", 1).unwrap_err();
    assert_eq!(e.code, libc::EINVAL, "{e}");
    assert!(
        e.msg.contains("module `k` (Sink)") && e.msg.contains("wid 0") && e.msg.contains("wid 1"),
        "{e}"
    );
}
