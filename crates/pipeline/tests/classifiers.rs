//! The rule-table classifiers (BESS's ExactMatch, WildcardMatch, ACL,
//! IPLookup, L2Forward, BPF): exact frames out of exact gates, module
//! commands (add, delete, clear, set_default_gate) and their errors,
//! which change nothing.

mod common;

use common::MemPort;
use nfkit_packet::FrameBuilder;
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::module::Module;
use nfkit_pipeline::modules::{BuildEnv, Registry};
use nfkit_pipeline::{parse, BuildOptions};
use std::net::Ipv4Addr;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// TCP from `src:sport` to `dst:dport`.
pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    FrameBuilder::tcp((ip(src), sport), (ip(dst), dport)).build()
}

pub fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
    FrameBuilder::udp((ip(src), sport), (ip(dst), dport)).build()
}

fn env() -> BuildEnv {
    let h = Harness::new();
    BuildEnv {
        ports: Default::default(),
        pool: h.pool().clone(),
    }
}

/// Build `class` from `.nfk`-style arguments (`fields=[...]`).
pub fn module(class: &str, args: &str) -> Box<dyn Module> {
    try_module(class, args).unwrap_or_else(|e| panic!("{class}({args}): {e}"))
}

pub fn try_module(class: &str, args: &str) -> Result<Box<dyn Module>, String> {
    let mut a = record(args);
    Registry::default()
        .build(class, &mut a, &env())
        .map_err(|e| e.to_string())
}

/// `name=value, ...` in the config language, as arguments.
pub fn record(src: &str) -> Args {
    let desc = parse(&format!("x::Sink()\nx.c({src})"), "t").expect("arguments parse");
    desc.commands[0].args.clone()
}

/// Run a command given in the config language.
pub fn cmd(m: &mut dyn Module, cmd: &str, args: &str) -> Result<Value, String> {
    m.command(cmd, &mut record(args)).map_err(|e| e.to_string())
}

/// Frames out of each gate, for frames into gate 0.
fn run(m: &mut dyn Module, frames: &[Vec<u8>]) -> Vec<Vec<Vec<u8>>> {
    Harness::new().run(m, 0, frames)
}

/// The gate each frame left by (None: dropped), for one frame at a time.
fn gates(m: &mut dyn Module, frames: &[Vec<u8>]) -> Vec<Option<usize>> {
    frames
        .iter()
        .map(|f| {
            let out = Harness::new().run(m, 0, std::slice::from_ref(f));
            let g = out.iter().position(|g| !g.is_empty());
            if let Some(g) = g {
                assert_eq!(out[g], vec![f.clone()], "the frame leaves unchanged");
            }
            g
        })
        .collect()
}

#[test]
fn exact_match_sends_each_key_to_its_gate() {
    // Destination address and port.
    let mut em = module(
        "ExactMatch",
        "fields=[(offset=30, num_bytes=4), (offset=36, num_bytes=2)], gates=4",
    );
    cmd(&mut *em, "add", "gate=1, fields=[0x0a000002, 80]").unwrap();
    cmd(&mut *em, "add", "gate=2, fields=[[10, 0, 0, 3], 53]").unwrap();
    cmd(
        &mut *em,
        "add",
        "gate=3, fields=[(value_int=0x0a000004), (value_bin=[0, 22])]",
    )
    .unwrap();
    let f = [
        tcp("10.0.0.1", 5000, "10.0.0.2", 80),
        udp("10.0.0.1", 5000, "10.0.0.3", 53),
        tcp("10.0.0.1", 5000, "10.0.0.4", 22),
        tcp("10.0.0.1", 5000, "10.0.0.2", 81),
        vec![0; 20],
    ];
    assert_eq!(gates(&mut *em, &f), [Some(1), Some(2), Some(3), None, None]);
    let out = run(&mut *em, &f);
    assert_eq!(out[1], vec![f[0].clone()]);
    cmd(&mut *em, "set_default_gate", "gate=0").unwrap();
    assert_eq!(
        gates(&mut *em, &f),
        [Some(1), Some(2), Some(3), Some(0), Some(0)]
    );
    cmd(&mut *em, "delete", "fields=[0x0a000002, 80]").unwrap();
    assert_eq!(gates(&mut *em, &f[..1]), [Some(0)]);
    cmd(&mut *em, "clear", "").unwrap();
    assert_eq!(gates(&mut *em, &f[..3]), [Some(0); 3]);
}

#[test]
fn exact_match_masks_and_attributes() {
    // /24 of the destination, by mask.
    let mut em = module(
        "ExactMatch",
        "fields=[(offset=30, num_bytes=4)], masks=[0xffffff00], gates=2",
    );
    cmd(&mut *em, "add", "gate=1, fields=[0x0a000063]").unwrap();
    let f = [
        tcp("1.1.1.1", 1, "10.0.0.9", 2),
        tcp("1.1.1.1", 1, "10.0.1.9", 2),
    ];
    assert_eq!(gates(&mut *em, &f), [Some(1), None]);
}

#[test]
fn exact_match_bad_commands_change_nothing() {
    let mut em = module(
        "ExactMatch",
        "fields=[(offset=30, num_bytes=4)], gates=2, size=2",
    );
    cmd(&mut *em, "add", "gate=1, fields=[1]").unwrap();
    let bad = [
        ("add", "gate=2, fields=[2]", "gate 2 is out of range"),
        (
            "add",
            "gate=1, fields=[0x100000000]",
            "does not fit in 4 bytes",
        ),
        (
            "add",
            "gate=1, fields=[[1, 2, 3]]",
            "3 bytes given for a 4-byte field",
        ),
        ("add", "gate=1, fields=[1, 2]", "2 values for 1 fields"),
        ("add", "gate=\"one\", fields=[2]", "expected an integer"),
        (
            "add",
            "gate=1, fields=[2], colour=3",
            "add has no such argument",
        ),
        ("add", "gate=1", "`fields`: is required"),
        ("delete", "fields=[9]", "no such rule"),
        ("set_default_gate", "gate=7", "out of range"),
        ("flush", "", "no command `flush`"),
    ];
    for (c, a, want) in bad {
        let e = cmd(&mut *em, c, a).unwrap_err();
        assert!(e.contains(want), "{c}({a}): {e}");
    }
    cmd(&mut *em, "add", "gate=0, fields=[2]").unwrap();
    let e = cmd(&mut *em, "add", "gate=0, fields=[3]").unwrap_err();
    assert!(e.contains("table is full (2 rules)"), "{e}");
    cmd(&mut *em, "add", "gate=0, fields=[1]").expect("replacing a rule fits a full table");
    assert_eq!(em.extra_stats(), vec![("rules", 2)]);
    for (args, want) in [
        (
            "fields=[(offset=30, num_bytes=9)]",
            "num_bytes 9 is not 1 to 8",
        ),
        ("fields=[(offset=30)]", "num_bytes 0"),
        (
            "fields=[(offset=1, attr_name=\"x\", num_bytes=2)]",
            "not both",
        ),
        ("fields=[]", "1 to 8 fields"),
        (
            "fields=[(offset=0, num_bytes=1)], gates=8193",
            "out of range 1..=8192",
        ),
        (
            "fields=[(offset=0, num_bytes=1)], masks=[256]",
            "does not fit",
        ),
        ("fields=3", "expected a record"),
    ] {
        let e = try_module("ExactMatch", args).err().unwrap();
        assert!(e.contains(want), "{args}: {e}");
    }
}

#[test]
fn wildcard_match_picks_the_highest_priority() {
    let mut wm = module(
        "WildcardMatch",
        "fields=[(offset=26, num_bytes=4), (offset=30, num_bytes=4), (offset=36, num_bytes=2)], gates=4",
    );
    // Any traffic to 10.0.0.0/8 -> 1; from 192.168.0.0/16 to port 22 -> 2
    // (higher priority); exactly 10.0.0.7:53 -> 3 (highest).
    cmd(
        &mut *wm,
        "add",
        "gate=1, priority=1, values=[0, 0x0a000000, 0], masks=[0, 0xff000000, 0]",
    )
    .unwrap();
    cmd(
        &mut *wm,
        "add",
        "gate=2, priority=5, values=[0xc0a80000, 0, 22], masks=[0xffff0000, 0, 0xffff]",
    )
    .unwrap();
    cmd(
        &mut *wm,
        "add",
        "gate=3, priority=9, values=[0, 0x0a000007, 53], masks=[0, 0xffffffff, 0xffff]",
    )
    .unwrap();
    let f = [
        tcp("1.2.3.4", 9, "10.1.2.3", 80),
        tcp("192.168.1.1", 9, "10.1.2.3", 22),
        tcp("192.168.1.1", 9, "11.1.2.3", 22),
        udp("192.168.1.1", 9, "10.0.0.7", 53),
        udp("1.1.1.1", 9, "11.0.0.7", 53),
    ];
    assert_eq!(
        gates(&mut *wm, &f),
        [Some(1), Some(2), Some(2), Some(3), None]
    );
    assert_eq!(wm.extra_stats(), vec![("rules", 3), ("tuples", 3)]);
    cmd(&mut *wm, "set_default_gate", "gate=0").unwrap();
    cmd(
        &mut *wm,
        "delete",
        "values=[0xc0a80000, 0, 22], masks=[0xffff0000, 0, 0xffff]",
    )
    .unwrap();
    assert_eq!(
        gates(&mut *wm, &f),
        [Some(1), Some(1), Some(0), Some(3), Some(0)]
    );
    assert_eq!(wm.extra_stats(), vec![("rules", 2), ("tuples", 2)]);
    let e = cmd(
        &mut *wm,
        "delete",
        "values=[1, 0, 22], masks=[0xffff0000, 0, 0xffff]",
    )
    .unwrap_err();
    assert!(e.contains("no such rule"), "{e}");
    let e = cmd(&mut *wm, "add", "gate=1, priority=1, values=[0, 0, 0]").unwrap_err();
    assert!(e.contains("`masks`: is required"), "{e}");
    cmd(&mut *wm, "clear", "").unwrap();
    assert_eq!(gates(&mut *wm, &f[..1]), [Some(0)]);
}

#[test]
fn wildcard_match_limits_tuples_and_rules() {
    let mut wm = module(
        "WildcardMatch",
        "fields=[(offset=0, num_bytes=8)], size=20, gates=2",
    );
    for i in 0..16u64 {
        cmd(
            &mut *wm,
            "add",
            &format!("gate=1, values=[0], masks=[{}]", 0xffu64 << (i * 4)),
        )
        .unwrap();
    }
    let e = cmd(&mut *wm, "add", "gate=1, values=[0], masks=[1]").unwrap_err();
    assert!(e.contains("more than 16 distinct mask"), "{e}");
    for i in 1..=4u64 {
        cmd(
            &mut *wm,
            "add",
            &format!("gate=1, values=[{i}], masks=[0xff]"),
        )
        .unwrap();
    }
    let e = cmd(&mut *wm, "add", "gate=1, values=[5], masks=[0xff]").unwrap_err();
    assert!(e.contains("table is full (20 rules)"), "{e}");
}

#[test]
fn acl_first_matching_rule_decides() {
    let mut acl = module(
        "ACL",
        r#"gates=2, rules=[(src_ip="10.0.0.0/8", dst_port=22, drop=1),
                          (src_ip="10.0.0.0/8", dst_ip="192.168.1.0/24"),
                          (dst_ip="172.16.0.1", src_port=53)]"#,
    );
    let f = [
        tcp("10.1.1.1", 999, "192.168.1.5", 22),
        tcp("10.1.1.1", 999, "192.168.1.5", 80),
        udp("8.8.8.8", 53, "172.16.0.1", 4000),
        udp("8.8.8.8", 54, "172.16.0.1", 4000),
        tcp("11.1.1.1", 999, "192.168.1.5", 80),
        FrameBuilder::icmp_echo(ip("10.0.0.1"), ip("192.168.1.1"), true, 1).build(),
        FrameBuilder::icmp_echo(ip("8.8.8.8"), ip("172.16.0.1"), true, 1).build(),
        vec![0xff; 60],
    ];
    assert_eq!(
        gates(&mut *acl, &f),
        [None, Some(0), Some(0), None, None, Some(0), None, None]
    );
    // Out of the gate it came in on.
    let out = Harness::new().run(&mut *acl, 1, &f[1..2]);
    assert_eq!(out, vec![vec![], vec![f[1].clone()]]);
    cmd(
        &mut *acl,
        "delete",
        r#"rules=[(src_ip="10.0.0.0/8", dst_port=22, drop=1)]"#,
    )
    .unwrap();
    assert_eq!(gates(&mut *acl, &f[..1]), [Some(0)]);
    cmd(&mut *acl, "add", r#"rules=[(src_ip="0.0.0.0/0")]"#).unwrap();
    assert_eq!(gates(&mut *acl, &f[3..5]), [Some(0), Some(0)]);
    cmd(&mut *acl, "clear", "").unwrap();
    assert_eq!(gates(&mut *acl, &f[..3]), [None; 3]);
}

#[test]
fn acl_rejects_bad_rules_whole() {
    let mut acl = module("ACL", "max_rules=3");
    cmd(&mut *acl, "add", r#"rules=[(src_ip="10.0.0.0/8")]"#).unwrap();
    for (a, want) in [
        (
            r#"rules=[(dst_ip="1.0.0.0/8"), (src_ip="10.0.0.0/33")]"#,
            "length above 32",
        ),
        (
            r#"rules=[(dst_ip="1.0.0.0/8"), (src_ip="10.0.0.1/8")]"#,
            "host bits are set",
        ),
        (r#"rules=[(src_ip="10.0.0/8")]"#, "not an IPv4 address"),
        (r#"rules=[(dst_port=70000)]"#, "above 65535"),
        (r#"rules=[(drop=2)]"#, "expected a flag"),
        (r#"rules=[(dport=2)]"#, "an ACL rule has no such argument"),
        (
            r#"rules=[(src_ip=""), (src_ip=""), (src_ip="")]"#,
            "table is full",
        ),
        (r#"rules=5"#, "expected a record"),
    ] {
        let e = cmd(&mut *acl, "add", a).unwrap_err();
        assert!(e.contains(want), "{a}: {e}");
    }
    assert_eq!(
        acl.extra_stats(),
        vec![("rules", 1)],
        "nothing half-applied"
    );
}

#[test]
fn nfk_commands_give_initial_entries_and_point_at_errors() {
    let src = r#"
port p0 = "p0"
em::ExactMatch(fields=[(offset=30, num_bytes=4)], gates=3)
em.add(gate=1, fields=[0x0a000002])
em.add(gate=2,
       fields=[[10, 0, 0, 3]])
em.set_default_gate(gate=0)
PortInc(port=p0) -> em
em:0 -> Sink()
em:1 -> PortOut(port=p0)
em:2 -> Sink()
"#;
    let desc = parse(src, "t.nfk").unwrap();
    assert_eq!(desc.commands.len(), 3);
    let slot = std::sync::Mutex::new(None);
    let mut p = desc
        .build_with(
            &|spec| {
                let mp = MemPort::new(spec, 1);
                *slot.lock().unwrap() = Some(mp.wire.clone());
                Ok(Box::new(mp) as Box<dyn nfkit_port::Port>)
            },
            BuildOptions::default(),
        )
        .unwrap();
    let wire = slot.lock().unwrap().clone().unwrap();
    let f = [
        tcp("1.1.1.1", 1, "10.0.0.2", 2),
        tcp("1.1.1.1", 1, "10.0.0.3", 2),
        tcp("1.1.1.1", 1, "10.0.0.4", 2),
    ];
    wire.lock().rx[0].extend(f.iter().cloned());
    p.step(4).unwrap();
    assert_eq!(wire.lock().tx[0], vec![f[0].clone()]);
    // Edited between batches.
    p.command(
        "em",
        "add",
        record("gate=1, fields=[0x0a000004]").into_value(),
    )
    .unwrap();
    wire.lock().rx[0].extend(f.iter().cloned());
    p.step(4).unwrap();
    assert_eq!(
        wire.lock().tx[0],
        vec![f[0].clone(), f[0].clone(), f[2].clone()]
    );
    let s = p.stats();
    assert_eq!(s.module("em").unwrap().extra, vec![("rules", 3)]);
    // A failing command changes nothing and says what is wrong.
    let e = p
        .command("em", "add", record("gate=9, fields=[1]").into_value())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "module `em` command `add`: argument `gate`: gate 9 is out of range (the module has 3 output gates)"
    );
    let e = p
        .command("nope", "clear", Value::Map(vec![]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope"), "{e}");
    let e = p
        .command("em", "clear", Value::Int(3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected a record"), "{e}");

    for (src, want) in [
        (
            "em::ExactMatch(fields=[(offset=30, num_bytes=4)], gates=3)\nem.add(gate=3, fields=[1])",
            "t:2:8: em.add: argument `gate`: gate 3 is out of range",
        ),
        (
            "em::ExactMatch(fields=[(offset=30, num_bytes=4)])\nem.frob()",
            "t:2:4: em.frob: ExactMatch has no command `frob`",
        ),
        ("x.add(gate=1)", "t:1:1: no module named `x` declared before this line"),
    ] {
        let got = match parse(src, "t") {
            Err(e) => e.to_string(),
            Ok(d) => d.build(&|_| unreachable!()).err().unwrap().to_string(),
        };
        assert!(got.starts_with(want), "{src}:\n got {got}\nwant {want}");
    }
}

#[test]
fn ip_lookup_routes_by_longest_prefix() {
    let mut lpm = module("IPLookup", "gates=4, max_rules=4, max_tbl8s=1");
    cmd(
        &mut *lpm,
        "add",
        r#"prefix="10.0.0.0", prefix_len=8, gate=1"#,
    )
    .unwrap();
    cmd(
        &mut *lpm,
        "add",
        r#"prefix="10.1.0.0", prefix_len=16, gate=2"#,
    )
    .unwrap();
    cmd(
        &mut *lpm,
        "add",
        r#"prefix="10.1.2.128", prefix_len=25, gate=3"#,
    )
    .unwrap();
    let f = [
        tcp("1.1.1.1", 1, "10.9.9.9", 2),
        tcp("1.1.1.1", 1, "10.1.9.9", 2),
        tcp("1.1.1.1", 1, "10.1.2.200", 2),
        tcp("1.1.1.1", 1, "10.1.2.100", 2),
        tcp("1.1.1.1", 1, "11.0.0.1", 2),
        vec![0u8; 60],
    ];
    assert_eq!(
        gates(&mut *lpm, &f),
        [Some(1), Some(2), Some(3), Some(2), None, None]
    );
    cmd(
        &mut *lpm,
        "add",
        r#"prefix="0.0.0.0", prefix_len=0, gate=0"#,
    )
    .unwrap();
    assert_eq!(gates(&mut *lpm, &f[4..5]), [Some(0)], "the default route");
    for (c, a, want) in [
        (
            "add",
            r#"prefix="10.0.0.0", prefix_len=33, gate=1"#,
            "longer than an IPv4 address",
        ),
        (
            "add",
            r#"prefix="10.0.0.1", prefix_len=8, gate=1"#,
            "host bits are set",
        ),
        (
            "add",
            r#"prefix="10.0.0.0", prefix_len=8, gate=4"#,
            "out of range",
        ),
        (
            "add",
            r#"prefix="fe80::", prefix_len=8, gate=1"#,
            "not an IPv4 address",
        ),
        (
            "add",
            r#"prefix="12.0.0.0", prefix_len=8, gate=1"#,
            "table is full (4 rules)",
        ),
        (
            "delete",
            r#"prefix="12.0.0.0", prefix_len=8"#,
            "no such rule",
        ),
    ] {
        let e = cmd(&mut *lpm, c, a).unwrap_err();
        assert!(e.contains(want), "{a}: {e}");
    }
    cmd(&mut *lpm, "delete", r#"prefix="10.0.0.0", prefix_len=8"#).unwrap();
    // A second /24 with longer prefixes needs a second tbl8 group.
    let e = cmd(
        &mut *lpm,
        "add",
        r#"prefix="10.2.2.0", prefix_len=30, gate=1"#,
    )
    .unwrap_err();
    assert!(e.contains("raise the tbl8 group limit"), "{e}");
    assert_eq!(
        gates(&mut *lpm, &f[..5]),
        [Some(0), Some(2), Some(3), Some(2), Some(0)],
        "the failed add changed nothing"
    );
    cmd(&mut *lpm, "clear", "").unwrap();
    assert_eq!(gates(&mut *lpm, &f[..2]), [None, None]);
}

fn eth(dst: [u8; 6]) -> Vec<u8> {
    let mut f = FrameBuilder::udp((ip("1.1.1.1"), 1), (ip("2.2.2.2"), 2)).build();
    f[..6].copy_from_slice(&dst);
    f
}

#[test]
fn l2_forward_learns_nothing_but_what_it_is_told() {
    let mut l2 = module("L2Forward", "gates=4, size=8, bucket=2");
    cmd(
        &mut *l2,
        "add",
        r#"entries=[(addr="02:00:00:00:00:01", gate=1), (addr="02:00:00:00:00:02", gate=2)]"#,
    )
    .unwrap();
    let f = [
        eth([2, 0, 0, 0, 0, 1]),
        eth([2, 0, 0, 0, 0, 2]),
        eth([2, 0, 0, 0, 0, 3]),
        vec![2, 0, 0, 0, 0, 1],
    ];
    assert_eq!(gates(&mut *l2, &f), [Some(1), Some(2), None, None]);
    cmd(&mut *l2, "set_default_gate", "gate=3").unwrap();
    assert_eq!(gates(&mut *l2, &f), [Some(1), Some(2), Some(3), None]);
    assert_eq!(
        cmd(
            &mut *l2,
            "lookup",
            r#"addrs=["02:00:00:00:00:02", "02:00:00:00:00:01"]"#
        )
        .unwrap(),
        Value::Map(vec![(
            "gates".into(),
            Value::List(vec![Value::Int(2), Value::Int(1)])
        )])
    );
    for (c, a, want) in [
        (
            "add",
            r#"entries=[(addr="02:00:00:00:00:05", gate=0), (addr="02:00:00:00:01", gate=1)]"#,
            "not a MAC address",
        ),
        (
            "add",
            r#"entries=[(addr="02:00:00:00:00:05", gate=9)]"#,
            "out of range",
        ),
        ("add", r#"entries=[(gate=1)]"#, "`addr`: is required"),
        (
            "delete",
            r#"addrs=["02:00:00:00:00:01", "02:00:00:00:00:09"]"#,
            "no entry for 02:00:00:00:00:09",
        ),
        ("lookup", r#"addrs=["02:00:00:00:00:09"]"#, "no entry"),
        (
            "populate",
            r#"base="02:00:00:00:10:00", count=100, gate_count=2"#,
            "larger than the table",
        ),
        (
            "populate",
            r#"base="02:00:00:00:10:00", count=6, gate_count=0"#,
            "gate_count",
        ),
    ] {
        let e = cmd(&mut *l2, c, a).unwrap_err();
        assert!(e.contains(want), "{a}: {e}");
    }
    assert_eq!(
        l2.extra_stats(),
        vec![("entries", 2)],
        "nothing half-applied"
    );
    // Filling up: 8 slots; some address finds both its buckets full
    // before all 8 are used, and a failed populate adds nothing.
    let e = cmd(
        &mut *l2,
        "populate",
        r#"base="02:00:00:00:10:00", count=8, gate_count=4"#,
    )
    .unwrap_err();
    assert!(e.contains("table is full"), "{e}");
    assert_eq!(l2.extra_stats(), vec![("entries", 2)]);
    cmd(
        &mut *l2,
        "populate",
        r#"base="02:00:00:00:10:00", count=2, gate_count=2"#,
    )
    .unwrap();
    assert_eq!(
        gates(
            &mut *l2,
            &[eth([2, 0, 0, 0, 0x10, 0]), eth([2, 0, 0, 0, 0x10, 1])]
        ),
        [Some(0), Some(1)]
    );
    cmd(&mut *l2, "delete", r#"addrs=["02:00:00:00:00:01"]"#).unwrap();
    assert_eq!(gates(&mut *l2, &f[..1]), [Some(3)]);
    for (a, want) in [
        ("size=12", "not a power of two"),
        ("bucket=3", "not a power of two"),
        ("size=2, bucket=4", "up to the size"),
    ] {
        let e = try_module("L2Forward", a).err().unwrap();
        assert!(e.contains(want), "{a}: {e}");
    }
}

#[test]
fn bpf_sends_each_packet_to_its_highest_priority_filter() {
    let mut bpf = module(
        "BPF",
        r#"gates=4, filters=[(filter="tcp", priority=1, gate=1),
                            (filter="tcp dst port 80", priority=5, gate=2),
                            (filter="udp and src host 10.0.0.9", priority=3, gate=3)]"#,
    );
    let f = [
        tcp("10.0.0.1", 999, "10.0.0.2", 22),
        tcp("10.0.0.1", 999, "10.0.0.2", 80),
        udp("10.0.0.9", 999, "10.0.0.2", 80),
        udp("10.0.0.8", 999, "10.0.0.2", 80),
        vec![0u8; 10],
    ];
    assert_eq!(
        gates(&mut *bpf, &f),
        [Some(1), Some(2), Some(3), Some(0), Some(0)]
    );
    cmd(
        &mut *bpf,
        "delete",
        r#"filters=[(filter="tcp dst port 80", priority=5, gate=2)]"#,
    )
    .unwrap();
    assert_eq!(gates(&mut *bpf, &f[1..2]), [Some(1)]);
    for (a, want) in [
        (
            r#"filters=[(filter="tcp", gate=1), (filter="tcp port", gate=1)]"#,
            "libpcap cannot compile `tcp port`",
        ),
        (r#"filters=[(filter="tcp", gate=4)]"#, "out of range"),
        (r#"filters=[(gate=1)]"#, "`filter`: is required"),
        (
            r#"filters=[(filter="tcp", gate=1, prio=2)]"#,
            "a filter has no such argument",
        ),
    ] {
        let e = cmd(&mut *bpf, "add", a).unwrap_err();
        assert!(e.contains(want), "{a}: {e}");
    }
    assert_eq!(
        bpf.extra_stats(),
        vec![("filters", 2)],
        "nothing half-applied"
    );
    let e = cmd(
        &mut *bpf,
        "delete",
        r#"filters=[(filter="tcp", priority=2, gate=1)]"#,
    )
    .unwrap_err();
    assert!(e.contains("no filter `tcp`"), "{e}");
    cmd(&mut *bpf, "clear", "").unwrap();
    assert_eq!(gates(&mut *bpf, &f[..3]), [Some(0); 3]);
    let e = try_module(
        "BPF",
        r#"max_filters=1, filters=[(filter="tcp"), (filter="udp")]"#,
    )
    .err()
    .unwrap();
    assert!(e.contains("too many filters (1 at most)"), "{e}");
}

#[test]
fn absent_fields_are_zero_as_in_bess_messages() {
    // A BESS message leaves zero fields out: gate 0, prefix_len 0, offset 0.
    let mut lpm = module("IPLookup", "gates=2");
    cmd(&mut *lpm, "add", r#"prefix="0.0.0.0""#).unwrap();
    assert_eq!(
        gates(&mut *lpm, &[tcp("1.1.1.1", 1, "9.9.9.9", 2)]),
        [Some(0)]
    );
    let mut em = module("ExactMatch", "fields=[(num_bytes=1)], gates=2");
    cmd(&mut *em, "add", "fields=[2]").unwrap();
    cmd(&mut *em, "set_default_gate", "gate=1").unwrap();
    let f = tcp("1.1.1.1", 1, "9.9.9.9", 2);
    assert_eq!(
        gates(&mut *em, std::slice::from_ref(&f)),
        [Some(0)],
        "first byte 2 -> gate 0"
    );
    cmd(&mut *em, "set_default_gate", "").unwrap();
    let mut wm = module(
        "WildcardMatch",
        "fields=[(offset=30, num_bytes=4)], gates=2",
    );
    // Negative priorities arrive as numbers (from BESS's int64).
    let add = |wm: &mut dyn Module, gate: u64, prio: f64, v: u64, m: u64| {
        wm.command(
            "add",
            &mut Args::from_pairs(&[
                ("gate", Value::Int(gate)),
                ("priority", Value::Float(prio)),
                ("values", Value::List(vec![Value::Int(v)])),
                ("masks", Value::List(vec![Value::Int(m)])),
            ]),
        )
        .map_err(|e| e.to_string())
    };
    add(&mut *wm, 1, -5.0, 0, 0).unwrap();
    add(&mut *wm, 0, -1.0, 0x0909_0909, 0xffff_ffff).unwrap();
    assert_eq!(gates(&mut *wm, &[f]), [Some(0)], "-1 beats -5");
    let e = add(&mut *wm, 0, 1.5, 0, 1).unwrap_err();
    assert!(e.contains("not an integer"), "{e}");
    cmd(&mut *module("ACL", ""), "add", "").unwrap();
    cmd(&mut *module("BPF", ""), "add", "").unwrap();
}
