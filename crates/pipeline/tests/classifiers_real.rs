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
    let net = TwoHosts::at_default_offloads(1).unwrap();
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

/// (UDP source port, the gate mark in the source MAC's last byte) of
/// every UDP frame in a pcap file tcpdump wrote.
fn marks(pcap: &std::path::Path) -> Vec<(u16, u8)> {
    let d = std::fs::read(pcap).unwrap_or_default();
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &d[at + 16..(at + 16 + caplen).min(d.len())];
        if f.len() >= 38 && f[12..14] == [8, 0] && f[23] == 17 {
            out.push((u16::from_be_bytes([f[34], f[35]]), f[11]));
        }
        at += 16 + caplen;
    }
    out
}

#[test]
fn steering_and_adaptive_balancing_of_real_flows() {
    // ns a sends 48 UDP flows to b through nfkit: FlowDirector sends the
    // flows it has entries for to gate 1 (marked 9), the rest to
    // AdaptiveLB over gates 0-3 (marked with the gate). Flows stay on
    // their gate; removing gate 1 moves only the flows it had.
    require_root!();
    require_tool!("tcpdump");
    require_tool!("python3");
    // Offloads off on the namespace ends: at the kernel's defaults b's
    // tcpdump misses the last ~15 of each round's 48 UDP frames in about
    // 4 of 10 runs, though nfkit forwards all 148 with no drop and b's
    // interface counts them received (`ip -s link`); found 2026-11-28,
    // not yet explained.
    let net = TwoHosts::new().unwrap();
    let (a, b) = (&net.a, &net.b);
    let mac_b = mac_of(&b.ns, &b.dev);
    a.ns.run(&[
        "ip", "neigh", "replace", &b.ip, "lladdr", &mac_b, "dev", &a.dev,
    ])
    .unwrap();
    let mut src = format!(
        r#"
port pa = "afpacket:{ha}"
port pb = "afpacket:{hb}"
out::PortOut(port=pb)
PortInc(port=pa) -> fd::FlowDirector(gates=2, default_gate=0)
fd:1 -> Update(offset=[11], size=[1], value=[9]) -> out
fd:0 -> lb::AdaptiveLB(gates=[0, 1, 2, 3])
"#,
        ha = a.host_end,
        hb = b.host_end,
    );
    for g in 0..4 {
        src += &format!("lb:{g} -> Update(offset=[11], size=[1], value=[{g}]) -> out\n");
    }
    for sport in [40000, 40001, 40002, 40003] {
        src += &format!(
            "fd.add(src_ip=\"{}\", dst_ip=\"{}\", proto=17, src_port={sport}, dst_port=9, gate=1)\n",
            a.ip, b.ip
        );
    }
    let mut p = parse(&src, "steer.nfk")
        .unwrap()
        .build(&|s| nfkit_port::open(&s.parse::<PortSpec>().unwrap(), &OpenOptions::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    p.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let send = |round: usize| {
        let script = format!(
            "import socket, time\n\
             for r in range(3):\n\
             \x20   for port in range(40000, 40048):\n\
             \x20       s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             \x20       s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             \x20       s.bind(('{}', port))\n\
             \x20       s.sendto(b'round {round}', ('{}', 9))\n\
             \x20       s.close()\n\
             \x20   time.sleep(0.05)\n",
            a.ip, b.ip
        );
        a.ns.run(&["python3", "-c", &script]).unwrap();
    };
    // One capture per phase: (source port -> marks seen).
    let phase = |name: &str, round: usize| -> std::collections::BTreeMap<u16, Vec<u8>> {
        let file = dir.path().join(name);
        let f = file.to_str().unwrap();
        let cap =
            b.ns.spawn(&[
                "tcpdump",
                "-i",
                &b.dev,
                "-U",
                // Each frame to the file as it comes: without it libpcap's
                // ring hands frames over only when a block retires (up to
                // its 1 s timeout), after the capture is stopped here.
                "--immediate-mode",
                "-n",
                "-w",
                f,
                "udp and dst port 9",
            ])
            .unwrap();
        let t = std::time::Instant::now();
        while !file.exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // tcpdump creates the file before it captures.
        std::thread::sleep(Duration::from_millis(1000));
        send(round);
        std::thread::sleep(Duration::from_millis(500));
        drop(cap);
        let mut seen = std::collections::BTreeMap::new();
        for (port, mark) in marks(&file) {
            seen.entry(port).or_insert_with(Vec::new).push(mark);
        }
        seen
    };
    let one = phase("one.pcap", 1);
    assert_eq!(one.len(), 48, "every flow arrived: {one:?}");
    let mut gate_of = std::collections::BTreeMap::new();
    for (port, m) in &one {
        assert!(
            m.iter().all(|x| *x == m[0]),
            "flow {port} changed gate: {m:?}"
        );
        gate_of.insert(*port, m[0]);
    }
    for port in 40000..40004 {
        assert_eq!(gate_of[&port], 9, "flow {port} has a FlowDirector entry");
    }
    let mut per_gate = [0; 4];
    for port in 40004..40048u16 {
        per_gate[gate_of[&port] as usize] += 1;
    }
    assert!(
        per_gate.iter().all(|&n| n > 0),
        "AdaptiveLB used every gate: {per_gate:?}"
    );

    command(&mut p, "lb", "set_gates", "gates=[0, 2, 3]");
    let two = phase("two.pcap", 2);
    assert_eq!(two.len(), 48, "every flow arrived: {two:?}");
    for (port, m) in &two {
        let was = gate_of[port];
        assert!(m.iter().all(|x| *x == m[0]), "flow {port} flapped: {m:?}");
        if was == 1 {
            assert_ne!(m[0], 1, "flow {port} still on the removed gate");
        } else {
            assert_eq!(m[0], was, "flow {port} moved from gate {was}");
        }
    }
    let s = p.shutdown().unwrap();
    let lb = s.module("lb").unwrap();
    let moved = lb.extra.iter().find(|e| e.0 == "moved").unwrap().1;
    // (Plus, at most, the one flow of a's non-IPv4 frames.)
    assert!(
        (per_gate[1]..=per_gate[1] + 1).contains(&moved),
        "only gate 1's {} flows were placed again, not {moved}",
        per_gate[1]
    );
}
