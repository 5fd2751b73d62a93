//! UpdateTcParent on inner classes: a class moves, with the classes and
//! tasks under it, to another parent of its worker while traffic flows;
//! loops, unknown parents and other workers are refused with BESS's
//! error shape.

use nfkit_daemon::dispatch::dispatch;
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

fn class(name: &str, parent: &str, policy: &str) -> pb::TrafficClass {
    pb::TrafficClass {
        name: name.into(),
        parent: parent.into(),
        policy: policy.into(),
        ..Default::default()
    }
}

fn move_tc(d: &mut Daemon, name: &str, parent: &str) -> Result<(), nfkit_daemon::Fail> {
    move_with(d, name, parent, None)
}

fn move_with(
    d: &mut Daemon,
    name: &str,
    parent: &str,
    arg: Option<pb::traffic_class::Arg>,
) -> Result<(), nfkit_daemon::Fail> {
    let req = pb::UpdateTcParentRequest {
        class: Some(pb::TrafficClass {
            wid: -1,
            arg,
            ..class(name, parent, "")
        }),
    };
    dispatch(d, "UpdateTcParent", &req.encode_to_vec()).map(|_| ())
}

fn parent_of(d: &Daemon, name: &str) -> String {
    d.list_tcs(-1)
        .unwrap()
        .classes_status
        .into_iter()
        .find(|t| t.class.as_ref().unwrap().name == name)
        .map(|t| t.parent)
        .unwrap_or_else(|| panic!("no class {name}"))
}

fn packets(d: &Daemon) -> u64 {
    d.get_tc_stats("rl").unwrap().packets
}

#[test]
fn inner_classes_move_while_traffic_flows() {
    let mut d = Daemon::new(Arc::new(open)).unwrap();
    for c in [class("a", "", "round_robin"), class("b", "", "round_robin")] {
        d.add_tc(Some(c)).unwrap();
    }
    let mut rl = class("rl", "a", "rate_limit");
    rl.resource = "packet".into();
    rl.limit.insert("packet".into(), 1_000_000);
    d.add_tc(Some(rl)).unwrap();
    for (n, c) in [("src", "Source"), ("sink", "Sink")] {
        d.create_module(pb::CreateModuleRequest {
            name: n.into(),
            mclass: c.into(),
            arg: None,
        })
        .unwrap();
    }
    d.connect(pb::ConnectModulesRequest {
        m1: "src".into(),
        m2: "sink".into(),
        ..Default::default()
    })
    .unwrap();
    d.update_tc_parent(Some(pb::TrafficClass {
        leaf_module_name: "src".into(),
        parent: "rl".into(),
        policy: "leaf".into(),
        ..Default::default()
    }))
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let before = packets(&d);

    move_tc(&mut d, "rl", "b").expect("move rl under b");
    assert_eq!(parent_of(&d, "rl"), "b");
    // A class added later becomes the parent of an earlier one.
    d.add_tc(Some(class("c", "", "priority"))).unwrap();
    // Under a priority class the moved class needs its priority.
    let e = move_tc(&mut d, "b", "c").expect_err("no priority under a priority class");
    assert_eq!(e.code, libc::EINVAL, "{e}");
    assert_eq!(parent_of(&d, "b"), "root");
    move_with(&mut d, "b", "c", Some(pb::traffic_class::Arg::Priority(1))).expect("move b under c");
    assert_eq!(parent_of(&d, "b"), "c");
    std::thread::sleep(Duration::from_millis(100));
    let after = packets(&d);
    assert!(
        after > before,
        "the task under the moved classes stopped ({before} -> {after})"
    );

    // Loops, unknown parents and classes, other workers: refused, nothing changes.
    let e = move_tc(&mut d, "c", "rl").expect_err("c under its own descendant");
    assert_eq!(e.code, libc::EINVAL, "{e}");
    assert!(e.msg.contains("loop"), "{e}");
    let e = move_tc(&mut d, "rl", "nope").expect_err("unknown parent");
    assert_eq!(e.code, libc::ENOENT, "{e}");
    let e = move_tc(&mut d, "nope", "a").expect_err("unknown class");
    assert_eq!(e.code, libc::ENOENT, "{e}");
    let mut other = class("rl", "a", "");
    other.wid = 3;
    let e = d.update_tc_parent(Some(other)).expect_err("another worker");
    assert_eq!(e.code, libc::ENOTSUP, "{e}");
    assert_eq!(parent_of(&d, "rl"), "b");
    assert_eq!(parent_of(&d, "c"), "root");

    // Back to the root.
    move_tc(&mut d, "rl", "").expect("move rl to the root");
    assert_eq!(parent_of(&d, "rl"), "root");
    let _ = d.shutdown();
}
