//! A running pipeline rewired under traffic through the gRPC service:
//! a module added in the middle, a rate limit changed, a branch added
//! and removed; every packet made is consumed or counted as dropped.

mod common;
use common::*;
use nfkit_daemon::pb;
use std::collections::HashMap;
use std::time::{Duration, Instant};

async fn wait_until(c: &mut Client, module: &str, what: &str, min: u64) {
    let t = Instant::now();
    loop {
        let r = ok!(c.get_module_info(pb::GetModuleInfoRequest {
            name: module.into()
        }));
        if desc_value(&r.desc, what) >= min {
            return;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let mut all = String::new();
            for m in ok!(c.list_modules(pb::EmptyRequest {})).modules {
                let i = ok!(c.get_module_info(pb::GetModuleInfoRequest {
                    name: m.name.clone()
                }));
                all += &format!(
                    "\n  {}: {} ogates={:?}",
                    m.name,
                    i.desc,
                    i.ogates
                        .iter()
                        .map(|o| (o.ogate, o.name.clone()))
                        .collect::<Vec<_>>()
                );
            }
            let w = ok!(c.list_workers(pb::EmptyRequest {}));
            panic!(
                "{module}: {what} stayed below {min}: {}{all}\n{w:?}",
                r.desc
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn rate_limit(name: &str, pps: i64) -> pb::TrafficClass {
    pb::TrafficClass {
        name: name.into(),
        policy: "rate_limit".into(),
        resource: "packet".into(),
        limit: HashMap::from([("packet".to_string(), pps)]),
        wid: -1,
        ..Default::default()
    }
}

/// Paused: every packet the modules made was consumed or counted as
/// dropped; then resumed.
async fn adds_up(c: &mut Client, modules: &[&str]) {
    ok!(c.pause_all(pb::EmptyRequest {}));
    let mut total = Counts::default();
    for m in modules {
        let k = counts(c, m).await;
        total.created += k.created;
        total.consumed += k.consumed;
        total.dropped += k.dropped;
    }
    assert_eq!(
        total.created,
        total.consumed + total.dropped,
        "made = consumed + dropped over {modules:?}: {total:?}"
    );
    ok!(c.resume_all(pb::EmptyRequest {}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewire_a_running_pipeline_without_losing_a_packet_uncounted() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let v = ok!(c.get_version(pb::EmptyRequest {}));
    assert!(v.version.starts_with("nfkit"), "{}", v.version);

    // Source -> Sink, the source under a 200 kpps rate limit.
    ok!(c.add_tc(pb::AddTcRequest {
        class: Some(rate_limit("rl", 200_000))
    }));
    ok!(c.create_module(create(
        "src",
        "Source",
        any(&pb::SourceArg { pkt_size: 60 }, "SourceArg")
    )));
    ok!(c.create_module(create("sink", "Sink", None)));
    ok!(c.connect_modules(connect("src", 0, "sink", 0)));
    ok!(c.update_tc_parent(pb::UpdateTcParentRequest {
        class: Some(pb::TrafficClass {
            leaf_module_name: "src".into(),
            parent: "rl".into(),
            wid: -1,
            ..Default::default()
        })
    }));
    wait_until(&mut c, "sink", "consumed", 1000).await;

    // 1. A module in the middle, while packets flow (no pause: packets
    // the source makes between the disconnect and the connect are
    // dropped, and counted).
    ok!(c.create_module(create("mid", "MACSwap", None)));
    ok!(c.disconnect_modules(pb::DisconnectModulesRequest {
        name: "src".into(),
        ogate: 0
    }));
    ok!(c.connect_modules(connect("src", 0, "mid", 0)));
    ok!(c.connect_modules(connect("mid", 0, "sink", 0)));
    wait_until(&mut c, "mid", "in", 1000).await;
    adds_up(&mut c, &["src", "mid", "sink"]).await;

    // Bad requests in between change nothing.
    let (code, msg) = fails!(c.connect_modules(connect("src", 0, "sink", 0)));
    assert_eq!(code, libc::EBUSY, "{msg}");
    let (code, msg) = fails!(c.destroy_module(pb::DestroyModuleRequest { name: "mid".into() }));
    assert_eq!(code, libc::EBUSY, "{msg}");
    let (code, msg) = fails!(c.connect_modules(connect("mid", 0, "mid", 0)));
    assert_ne!(code, 0, "{msg}");

    // 2. A lower rate limit: the class's packet rate stays under it.
    ok!(c.update_tc_params(pb::UpdateTcParamsRequest {
        class: Some(rate_limit("rl", 20_000))
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s1 = ok!(c.get_tc_stats(pb::GetTcStatsRequest { name: "rl".into() }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s2 = ok!(c.get_tc_stats(pb::GetTcStatsRequest { name: "rl".into() }));
    let rate = (s2.packets - s1.packets) as f64 / (s2.timestamp - s1.timestamp);
    assert!(
        rate < 20_000.0 * 1.25,
        "{rate:.0} pps under a 20 kpps limit"
    );
    assert!(s2.count > s1.count && s2.bits > s1.bits);
    adds_up(&mut c, &["src", "mid", "sink"]).await;

    // 3. A branch: mid -> rep, rep:0 -> sink, rep:1 -> sink2 (paused,
    // so the switch drops nothing) ...
    ok!(c.create_module(create(
        "rep",
        "Replicate",
        any(&pb::ReplicateArg { gates: vec![0, 1] }, "ReplicateArg")
    )));
    ok!(c.create_module(create("sink2", "Sink", None)));
    ok!(c.pause_all(pb::EmptyRequest {}));
    ok!(c.disconnect_modules(pb::DisconnectModulesRequest {
        name: "mid".into(),
        ogate: 0
    }));
    ok!(c.connect_modules(connect("mid", 0, "rep", 0)));
    ok!(c.connect_modules(connect("rep", 0, "sink", 0)));
    ok!(c.connect_modules(connect("rep", 1, "sink2", 0)));
    ok!(c.resume_all(pb::EmptyRequest {}));
    wait_until(&mut c, "sink2", "consumed", 500).await;

    // ... and removed again under traffic: copies for gate 1 are then
    // dropped by rep (counted) until the branch is gone.
    ok!(c.disconnect_modules(pb::DisconnectModulesRequest {
        name: "rep".into(),
        ogate: 1
    }));
    let sink2 = counts(&mut c, "sink2").await;
    ok!(c.destroy_module(pb::DestroyModuleRequest {
        name: "sink2".into()
    }));
    let before = counts(&mut c, "sink").await.consumed;
    wait_until(&mut c, "sink", "consumed", before + 500).await;

    // Every packet made was consumed or counted as dropped.
    ok!(c.pause_all(pb::EmptyRequest {}));
    let mut total = sink2;
    for m in ["src", "mid", "rep", "sink"] {
        let k = counts(&mut c, m).await;
        total.created += k.created;
        total.consumed += k.consumed;
        total.dropped += k.dropped;
    }
    assert!(total.created > 3000, "{total:?}");
    assert_eq!(
        total.created,
        total.consumed + total.dropped,
        "made = consumed + dropped: {total:?}"
    );
    // The source's class saw every packet the source made.
    let src = counts(&mut c, "src").await;
    let leaf = ok!(c.get_tc_stats(pb::GetTcStatsRequest {
        name: "!leaf_src:0".into()
    }));
    assert_eq!(leaf.packets, src.created);
    ok!(c.resume_all(pb::EmptyRequest {}));

    let tcs = ok!(c.list_tcs(pb::ListTcsRequest { wid: -1 }));
    let names: Vec<_> = tcs
        .classes_status
        .iter()
        .filter_map(|s| s.class.as_ref().map(|c| c.name.clone()))
        .collect();
    assert!(
        names.contains(&"rl".to_string()) && names.contains(&"!leaf_src:0".to_string()),
        "{names:?}"
    );

    let st = d.stop().await;
    assert!(st.success(), "{st}");
}
