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
