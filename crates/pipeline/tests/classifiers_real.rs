//! ACL, IPLookup, L2Forward and ArpResponder between two namespaces,
//! with rules edited while the pipeline runs (`Pipeline::command`): ARP
//! answered by nfkit for the configured addresses, ping and TCP allowed,
//! denied and routed by the rules in force.
//!
//! ```text
//! ns a --veth--> PortInc(pa) -> BPF "arp" -> ArpResponder(b's address) -> PortOut(pa)
//!                               else -> ACL:0 -> IPLookup(10.99.0.2/32 -> 1) -> PortOut(pb) --> ns b
//! ns b --veth--> PortInc(pb) -> BPF "arp" -> ArpResponder(a's address) -> PortOut(pb)
//!                               else -> ACL:1 -> L2Forward(a's MAC -> 1) -> PortOut(pa)  --> ns a
//! ```

use nfkit_pipeline::args::Args;
use nfkit_pipeline::{parse, Pipeline};
use nfkit_port::{OpenOptions, PortSpec};
use nfkit_testkit::{require_root, require_tool, Netns, TwoHosts};
use std::time::Duration;

fn mac_of(ns: &Netns, dev: &str) -> String {
    let out = ns.run(&["ip", "link", "show", "dev", dev]).unwrap();
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("an Ethernet address")
        .to_string()
}

/// Up to three echo requests half a second apart: true when any is answered
/// (a single request lost to a loaded machine or an ARP retry is not a verdict).
fn ping(from: &Netns, to: &str) -> bool {
    from.command(&["ping", "-c", "3", "-i", "0.5", "-W", "2", to])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Send a line over TCP to `to:port` (an echo server there) and get it back.
fn tcp_echo(from: &Netns, to: &str, port: u16) -> bool {
    let out = from
        .command(&[
            "sh",
            "-c",
            &format!("echo nfkit | socat -T 2 - TCP:{to}:{port},connect-timeout=2"),
        ])
        .output();
    out.is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "nfkit")
}

fn command(p: &mut Pipeline, module: &str, cmd: &str, args: &str) {
    let desc = parse(&format!("x::Sink()\nx.c({args})"), "cmd").unwrap();
    let a: Args = desc.commands[0].args.clone();
    p.command(module, cmd, a.into_value())
        .unwrap_or_else(|e| panic!("{module}.{cmd}({args}): {e}"));
}

#[test]
fn rules_edited_at_run_time_allow_route_and_deny_real_traffic() {
    require_root!();
    require_tool!("ping");
    require_tool!("socat");
    let net = TwoHosts::new().unwrap();
    let (a, b) = (&net.a, &net.b);
    let (mac_a, mac_b) = (mac_of(&a.ns, &a.dev), mac_of(&b.ns, &b.dev));
    // Forget anything learnt before: every ARP answer comes from nfkit.
    for h in [a, b] {
        h.ns.run(&["ip", "neigh", "flush", "dev", &h.dev]).unwrap();
    }
    let src = format!(
        r#"
port pa = "afpacket:{ha}"
port pb = "afpacket:{hb}"
outa::PortOut(port=pa)
outb::PortOut(port=pb)
PortInc(port=pa) -> ca::BPF(gates=2, filters=[(filter="arp", gate=1)])
ca:1 -> arpa::ArpResponder(ip="{ipb}", mac_addr="{mac_b}") -> outa
ca:0 -> 0:acl::ACL(gates=2, rules=[(src_ip="10.99.0.0/24", dst_ip="10.99.0.0/24")])
acl:0 -> lpm::IPLookup(gates=2)
lpm.add(prefix="{ipb}", prefix_len=32, gate=1)
lpm:1 -> outb
PortInc(port=pb) -> cb::BPF(gates=2, filters=[(filter="arp", gate=1)])
cb:1 -> arpb::ArpResponder(ip="{ipa}", mac_addr="{mac_a}") -> outb
cb:0 -> 1:acl
acl:1 -> l2::L2Forward(gates=2)
l2.add(entries=[(addr="{mac_a}", gate=1)])
l2:1 -> outa
"#,
        ha = a.host_end,
        hb = b.host_end,
        ipa = a.ip,
        ipb = b.ip,
    );
    let desc = parse(&src, "real.nfk").unwrap();
    let mut p = desc
        .build(&|s| nfkit_port::open(&s.parse::<PortSpec>().unwrap(), &OpenOptions::default()))
        .unwrap();
    p.start().unwrap();
    let _echo =
        b.ns.spawn(&["socat", "TCP-LISTEN:9000,reuseaddr,fork", "EXEC:/bin/cat"])
            .unwrap();
    std::thread::sleep(Duration::from_millis(300));

    // Allowed and routed.
    assert!(
        ping(&a.ns, &b.ip),
        "ping a -> b through ACL, IPLookup, L2Forward"
    );
    assert!(tcp_echo(&a.ns, &b.ip, 9000), "TCP a -> b");
    let neigh = a.ns.run(&["ip", "neigh", "show", &b.ip]).unwrap();
    assert!(
        neigh.contains(&mac_b),
        "a learnt b's MAC from ArpResponder: {neigh}"
    );

    // Only TCP port 9000 (both directions) from now on.
    command(&mut p, "acl", "clear", "");
    command(
        &mut p,
        "acl",
        "add",
        r#"rules=[(dst_port=9000), (src_port=9000)]"#,
    );
    assert!(!ping(&a.ns, &b.ip), "ping denied");
    assert!(tcp_echo(&a.ns, &b.ip, 9000), "TCP 9000 still allowed");

    // A drop rule in front denies TCP too; ping allowed again.
    command(&mut p, "acl", "clear", "");
    command(
        &mut p,
        "acl",
        "add",
        r#"rules=[(dst_port=9000, drop=1), (src_ip="10.99.0.0/24")]"#,
    );
    assert!(ping(&a.ns, &b.ip), "ping allowed again");
    assert!(!tcp_echo(&a.ns, &b.ip, 9000), "TCP 9000 dropped");

    // Routing: without the route a -> b is dropped; a /24 route restores it.
    command(
        &mut p,
        "lpm",
        "delete",
        &format!(r#"prefix="{}", prefix_len=32"#, b.ip),
    );
    assert!(!ping(&a.ns, &b.ip), "no route");
    command(
        &mut p,
        "lpm",
        "add",
        r#"prefix="10.99.0.0", prefix_len=24, gate=1"#,
    );
    assert!(ping(&a.ns, &b.ip), "routed by the /24");

    // Switching: without a's MAC the replies are dropped.
    command(&mut p, "l2", "delete", &format!(r#"addrs=["{mac_a}"]"#));
    assert!(!ping(&a.ns, &b.ip), "replies not switched");
    command(&mut p, "l2", "set_default_gate", "gate=1");
    assert!(ping(&a.ns, &b.ip), "the default gate switches them");

    // ARP for an address nfkit does not answer for goes unanswered.
    a.ns.run(&["ip", "neigh", "flush", "dev", &a.dev]).unwrap();
    command(&mut p, "arpa", "delete", &format!(r#"ip="{}""#, b.ip));
    assert!(!ping(&a.ns, &b.ip), "no ARP answer, no ping");
    command(
        &mut p,
        "arpa",
        "add",
        &format!(r#"ip="{}", mac_addr="{mac_b}""#, b.ip),
    );
    // The failed resolution left a FAILED neighbour entry: start afresh.
    a.ns.run(&["ip", "neigh", "flush", "dev", &a.dev]).unwrap();
    assert!(ping(&a.ns, &b.ip), "answered again");

    let stats = p.shutdown().unwrap();
    let arp = stats.module("arpa").unwrap();
    assert!(arp.sent() >= 2, "ArpResponder answered: {arp:?}");
    eprintln!("{stats}");
}
