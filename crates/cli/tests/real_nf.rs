//! Every NF as the real `nfkit nf` binary between network namespaces over
//! AF_PACKET ports on veth pairs, with real kernel traffic (root; else
//! SKIP): HTTP through the NAT with a capture of the WAN side, the
//! firewall against unsolicited traffic, ping through the bridge with its
//! MAC table, TCP flows over LB backends, a UDP stream through the
//! policer, ping and traceroute through the router.
//!
//! Each test bounds its run (`--seconds`, client timeouts) and removes
//! its namespaces and veths (testkit guards), also when it fails.

mod common;

use common::{drops, frames_of, random_bytes, serial, Host, Nfkit, Proc};
use nfkit_packet::{parse_ipv4, verify_checksums, FlowKey};
use nfkit_testkit::{require_root, require_tool};
use std::time::Duration;

/// The MAC the hosts use for an NF that answers no ARP.
const NF_MAC: &str = "02:00:00:00:99:01";

fn nat_http_download(model: &str) {
    require_root!();
    for tool in ["ethtool", "python3", "curl", "tcpdump"] {
        require_tool!(tool);
    }
    let _one = serial();
    let lan = Host::new("10.0.0.2/24");
    let wan = Host::new("203.0.113.2/24");
    lan.default_route("10.0.0.1");
    lan.neighbour("10.0.0.1", NF_MAC);
    wan.neighbour("203.0.113.1", NF_MAC);
    let dir = tempfile::tempdir().unwrap();
    let blob = random_bytes(2_000_000);
    std::fs::write(dir.path().join("blob"), &blob).unwrap();
    let capture = dir.path().join("wan.pcap");
    let nf = Nfkit::start(
        &[
            "nat",
            "--lan",
            &lan.port(),
            "--wan",
            &wan.port(),
            "--model",
            model,
            "--ext-ip",
            "203.0.113.1",
            "--ports",
            "20000-29999",
            "--lan-eth-dest",
            &lan.mac,
            "--wan-eth-dest",
            &wan.mac,
        ],
        12,
    );
    let tcpdump = Proc::in_ns(
        &wan.ns,
        &[
            "tcpdump",
            "-i",
            &wan.dev,
            "-n",
            "-U",
            "-w",
            capture.to_str().unwrap(),
            "ip",
        ],
    );
    let server = Proc::in_ns(
        &wan.ns,
        &[
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "203.0.113.2",
            "--directory",
            dir.path().to_str().unwrap(),
        ],
    );
    serving(&wan.ns, "http://203.0.113.2:8000/");
    let got = dir.path().join("got");
    lan.ns
        .run(&[
            "curl",
            "-sS",
            "--retry",
            "3",
            "--retry-connrefused",
            "--max-time",
            "20",
            "-o",
            got.to_str().unwrap(),
            "http://203.0.113.2:8000/blob",
        ])
        .unwrap();
    assert!(std::fs::read(&got).unwrap() == blob, "download differs");
    // Unknown WAN sources: datagrams to ports nobody mapped.
    wan.ns
        .run(&[
            "python3", "-c",
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor p in range(29990,29995): s.sendto(b'x'*32,('203.0.113.1',p))",
        ])
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    drop(server);
    tcpdump.interrupt(Duration::from_secs(5));
    let out = nf.finish();
    assert!(drops(&out, "no_mapping") >= 5, "{}", common::summary(&out));
    assert!(
        out.contains("mapping proto 6 10.0.0.2:"),
        "no TCP mapping in the table"
    );

    // What the WAN saw: only the external address from the NAT side, and
    // every translated packet with valid IPv4 and TCP checksums.
    let frames = frames_of(&capture);
    let mut translated = 0;
    for f in &frames {
        let Ok(l) = parse_ipv4(f) else { continue };
        let Ok(k) = FlowKey::from_frame(f, &l) else {
            continue;
        };
        if k.src_ip.to_string() == "203.0.113.2" {
            continue; // the server's own packets
        }
        assert_eq!(k.src_ip.to_string(), "203.0.113.1", "untranslated: {k:?}");
        assert!((20000..=29999).contains(&k.src_port), "{k:?}");
        if let Err(e) = verify_checksums(f) {
            assert!(partial_tcp_checksum(f), "{k:?}: {e}");
        }
        translated += 1;
    }
    // At default offloads the client's veth coalesces the download (GRO), so
    // the client acknowledges a 2 MB download with a few dozen segments, not
    // one per data segment: what is checked is that there are enough of them
    // and that every one of them is translated with valid checksums.
    assert!(translated >= 20, "{translated} translated packets captured");
}

#[test]
fn nat_http_download_queue_model() {
    nat_http_download("queue");
}

#[test]
fn nat_http_download_agent_model() {
    nat_http_download("agent");
}

/// Fetch `url` from `ns` with curl, bounded; whether it succeeded.
/// Wait until the HTTP server at `url` answers inside its own namespace
/// (Python takes over a second to start on a loaded machine), at most
/// 20 s.
fn serving(ns: &nfkit_testkit::Netns, url: &str) {
    let start = std::time::Instant::now();
    while !fetch(ns, url, 1) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{url} never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fetch(ns: &nfkit_testkit::Netns, url: &str, seconds: u32) -> bool {
    ns.run(&[
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "--max-time",
        &seconds.to_string(),
        url,
    ])
    .is_ok()
}

#[test]
fn firewall_drops_unsolicited_wan_traffic() {
    require_root!();
    for tool in ["ethtool", "python3", "curl", "ping"] {
        require_tool!(tool);
    }
    let _one = serial();
    // A bump in the wire: both hosts on one subnet, ARP passes.
    let lan = Host::new("10.98.0.1/24");
    let wan = Host::new("10.98.0.2/24");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("page"), random_bytes(100_000)).unwrap();
    let d = dir.path().to_str().unwrap();
    let nf = Nfkit::start(
        &[
            "firewall",
            "--lan",
            &lan.port(),
            "--wan",
            &wan.port(),
            "--model",
            "agent",
        ],
        10,
    );
    let _wan_server = Proc::in_ns(
        &wan.ns,
        &[
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "10.98.0.2",
            "--directory",
            d,
        ],
    );
    let _lan_server = Proc::in_ns(
        &lan.ns,
        &[
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "10.98.0.1",
            "--directory",
            d,
        ],
    );
    serving(&wan.ns, "http://10.98.0.2:8000/");
    serving(&lan.ns, "http://10.98.0.1:8000/");
    // LAN-initiated: works (ping first, so ARP is resolved both ways).
    lan.ns
        .run(&["ping", "-c", "2", "-i", "0.2", "-W", "2", "10.98.0.2"])
        .unwrap();
    assert!(
        fetch(&lan.ns, "http://10.98.0.2:8000/page", 10),
        "LAN-initiated HTTP failed"
    );
    // WAN-initiated: nothing gets through.
    assert!(
        wan.ns
            .run(&["ping", "-c", "2", "-i", "0.2", "-W", "1", "10.98.0.1"])
            .is_err(),
        "an unsolicited ping got an answer"
    );
    assert!(
        !fetch(&wan.ns, "http://10.98.0.1:8000/page", 2),
        "unsolicited HTTP got through"
    );
    let out = nf.finish();
    assert!(drops(&out, "blocked") >= 3, "{}", common::summary(&out));
}

#[test]
fn bridge_learns_three_namespaces() {
    require_root!();
    for tool in ["ethtool", "ping"] {
        require_tool!(tool);
    }
    let _one = serial();
    let hosts: Vec<Host> = (1..=3)
        .map(|i| Host::new(&format!("10.96.0.{i}/24")))
        .collect();
    let ports: Vec<String> = hosts.iter().map(Host::port).collect();
    let nf = Nfkit::start(
        &[
            "bridge", "--port", &ports[0], "--port", &ports[1], "--port", &ports[2], "--table",
        ],
        8,
    );
    for (a, b) in [(0, 1), (0, 2), (1, 2), (2, 0)] {
        let out = hosts[a]
            .ns
            .run(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &hosts[b].ip]);
        assert!(
            out.is_ok(),
            "ping {} -> {}: {out:?}",
            hosts[a].ip,
            hosts[b].ip
        );
    }
    let out = nf.finish();
    let summary = common::summary(&out);
    for (port, h) in hosts.iter().enumerate() {
        let entry = format!("mac {} port {port} learned", h.mac);
        assert!(
            summary.contains(&entry),
            "`{entry}` not in the table:\n{summary}"
        );
    }
    // The per-second lines showed the table while it was learning.
    assert!(out.contains("table (3 entries)"), "{out}");
}

#[test]
fn router_ping_and_traceroute() {
    require_root!();
    for tool in ["ethtool", "ping", "traceroute"] {
        require_tool!(tool);
    }
    let _one = serial();
    let (r0, r1) = ("02:00:00:00:01:00", "02:00:00:00:01:01");
    let lan = Host::new("10.0.0.2/24");
    let wan = Host::new("192.0.2.2/24");
    lan.default_route("10.0.0.1");
    lan.neighbour("10.0.0.1", r0);
    wan.default_route("192.0.2.1");
    wan.neighbour("192.0.2.1", r1);
    // A network behind the WAN host, one more hop away.
    wan.ns
        .run(&["ip", "addr", "add", "198.18.0.1/32", "dev", "lo"])
        .unwrap();
    wan.ns
        .run(&["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"])
        .unwrap();
    let iface0 = format!("0,10.0.0.1/24,{r0}");
    let iface1 = format!("1,192.0.2.1/24,{r1}");
    let n0 = format!("10.0.0.2,{}", lan.mac);
    let n1 = format!("192.0.2.2,{}", wan.mac);
    let nf = Nfkit::start(
        &[
            "router",
            "--lan",
            &lan.port(),
            "--wan",
            &wan.port(),
            "--iface",
            &iface0,
            "--iface",
            &iface1,
            "--neighbor",
            &n0,
            "--neighbor",
            &n1,
            "--route",
            "198.18.0.0/15,1,192.0.2.2",
        ],
        10,
    );
    for dst in ["192.0.2.2", "198.18.0.1"] {
        let out = lan
            .ns
            .run(&["ping", "-c", "2", "-i", "0.2", "-W", "2", dst]);
        assert!(out.is_ok(), "ping {dst} through the router: {out:?}");
    }
    let trace = lan
        .ns
        .run(&[
            "traceroute",
            "-n",
            "-q",
            "1",
            "-w",
            "2",
            "-m",
            "4",
            "198.18.0.1",
        ])
        .unwrap();
    eprintln!("{trace}");
    let hops: Vec<&str> = trace
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        hops.first(),
        Some(&"10.0.0.1"),
        "hop 1 is the router:\n{trace}"
    );
    assert_eq!(
        hops.last(),
        Some(&"198.18.0.1"),
        "the trace ends at the target:\n{trace}"
    );
    let out = nf.finish();
    let icmp: u64 = out
        .lines()
        .rev()
        .find(|l| l.starts_with("[NF:"))
        .and_then(|l| l.split("icmp errors ").nth(1))
        .and_then(|s| s.split(')').next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        icmp >= 1,
        "no ICMP time exceeded generated:\n{}",
        common::summary(&out)
    );
}

#[test]
fn policer_limits_a_udp_stream() {
    require_root!();
    for tool in ["ethtool", "python3"] {
        require_tool!(tool);
    }
    let _one = serial();
    let lan = Host::new("10.95.0.1/24");
    let wan = Host::new("10.95.0.2/24");
    // 125,000 bytes/s = 1 Mbit/s of frames, 10 kB of burst.
    let rate = 125_000.0;
    let nf = Nfkit::start(
        &[
            "policer",
            "--lan",
            &lan.port(),
            "--wan",
            &wan.port(),
            "--model",
            "agent",
            "--rate",
            "125k",
            "--burst",
            "10k",
        ],
        10,
    );
    // ARP both ways before the stream (ARP passes unpoliced).
    lan.ns.run(&["ping", "-c", "1", "-W", "2", &wan.ip]).ok();
    let receiver = Proc::in_ns(
        &lan.ns,
        &[
            "python3", "-c",
            "import socket,time,json\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('10.95.0.1',6000));s.settimeout(1.5)\n\
             n=0;b=0;t0=t1=None\n\
             try:\n while True:\n  d=s.recv(2048);t=time.monotonic()\n  t0=t0 or t;t1=t;n+=1;b+=len(d)\n\
             except socket.timeout: pass\n\
             print(json.dumps({'n':n,'bytes':b,'secs':(t1-t0) if n>1 else 0}))",
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    // 4 Mbit/s of 1000-byte datagrams (1042-byte frames) for 3 s.
    wan.ns
        .run(&[
            "python3", "-c",
            "import socket,time\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);p=b'x'*1000;t0=time.monotonic();i=0\n\
             while time.monotonic()-t0<3:\n s.sendto(p,('10.95.0.1',6000));i+=1\n while time.monotonic()-t0<i*0.002: time.sleep(0.0005)",
        ])
        .unwrap();
    let got = receiver.wait(Duration::from_secs(10));
    let field = |k: &str| -> f64 {
        got.split(&format!("\"{k}\": "))
            .nth(1)
            .and_then(|s| s.split([',', '}']).next()?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let (n, secs) = (field("n"), field("secs"));
    let measured = n * 1042.0 / secs.max(1e-3);
    eprintln!("policer: {n} datagrams in {secs:.2} s at the receiver = {measured:.0} bytes/s of frames (rate {rate})");
    assert!(n > 10.0, "{got}");
    assert!(
        (0.75 * rate..=1.25 * rate).contains(&measured),
        "received {measured:.0} bytes/s of frames, policed to {rate}"
    );
    let out = nf.finish();
    assert!(drops(&out, "over_rate") > 500, "{}", common::summary(&out));
}

/// Backends behind the LB's LAN port: namespaces on a Linux bridge in a
/// "switch" namespace whose uplink is the veth nfkit opens.
struct BackendLan {
    uplink: nfkit_testkit::Veth,
    backends: Vec<(nfkit_testkit::Netns, nfkit_testkit::Veth, String)>,
    /// Holds the bridge; removed (with its veth ends) on drop.
    _switch: nfkit_testkit::Netns,
}

impl BackendLan {
    fn new(count: u8) -> BackendLan {
        use nfkit_testkit::{ip, Netns, Veth};
        let switch = Netns::new().unwrap();
        switch
            .run(&["ip", "link", "add", "br0", "type", "bridge"])
            .unwrap();
        switch.run(&["ip", "link", "set", "br0", "up"]).unwrap();
        let attach = |dev: &str| {
            ip(&["link", "set", dev, "netns", switch.name()]).unwrap();
            switch
                .run(&["ip", "link", "set", dev, "master", "br0", "up"])
                .unwrap();
        };
        let uplink = Veth::new().unwrap();
        attach(&uplink.a);
        let mut backends = Vec::new();
        for k in 2..2 + count {
            let ns = Netns::new().unwrap();
            let mut v = Veth::new().unwrap();
            let addr = format!("10.1.0.{k}");
            v.move_a(&ns, &format!("{addr}/24")).unwrap();
            ns.run(&["ip", "route", "add", "default", "via", "10.1.0.1"])
                .unwrap();
            ns.run(&[
                "ip",
                "neigh",
                "replace",
                "10.1.0.1",
                "lladdr",
                NF_MAC,
                "dev",
                &v.a,
                "nud",
                "permanent",
            ])
            .unwrap();
            attach(&v.b);
            backends.push((ns, v, addr));
        }
        BackendLan {
            uplink,
            backends,
            _switch: switch,
        }
    }
}

const BACKEND_SERVER: &str = "import socket,threading,sys
name=sys.argv[1].encode()
s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',80));s.listen(64)
def serve(c):
    f=c.makefile('rwb')
    for line in f:
        f.write(name+b'\\n');f.flush()
while True:
    c,_=s.accept();threading.Thread(target=serve,args=(c,),daemon=True).start()";

const HEARTBEAT: &str = "import socket,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
while True:
    s.sendto(b'alive',('192.0.2.10',9999));time.sleep(0.3)";

/// 12 long-lived connections asked who serves them, then (after the test
/// silenced one backend) asked again, then 12 new connections.
const LB_CLIENT: &str = "import socket,time,json
def ask(s):
    s.sendall(b'who\\n');return s.recv(100).decode().strip() or 'closed'
conns=[socket.create_connection(('192.0.2.10',80),timeout=3) for i in range(12)]
first=[ask(s) for s in conns]
print(json.dumps(first),flush=True)
time.sleep(4.5)
second=[]
for s in conns:
    try: second.append(ask(s))
    except Exception: second.append('error')
new=[]
for i in range(12):
    try:
        s=socket.create_connection(('192.0.2.10',80),timeout=3);new.append(ask(s));s.close()
    except Exception: new.append('error')
print(json.dumps(second));print(json.dumps(new),flush=True)";

fn names(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches(['[', ']'])
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

#[test]
fn lb_spreads_sticky_flows_and_drops_a_silent_backend() {
    require_root!();
    for tool in ["ethtool", "python3"] {
        require_tool!(tool);
    }
    let _one = serial();
    let lan = BackendLan::new(3);
    let client = Host::new("198.51.100.1/24");
    client
        .ns
        .run(&["ip", "route", "add", "192.0.2.10/32", "dev", &client.dev])
        .unwrap();
    client.neighbour("192.0.2.10", NF_MAC);
    let uplink = format!("afpacket:{}", lan.uplink.b);
    let nf = Nfkit::start(
        &[
            "lb",
            "--lan",
            &uplink,
            "--wan",
            &client.port(),
            "--vip",
            "192.0.2.10",
            "--backend-expire",
            "2s",
            "--table",
        ],
        14,
    );
    let mut servers = Vec::new();
    let mut heartbeats = Vec::new();
    for (ns, _, addr) in &lan.backends {
        servers.push(Proc::in_ns(ns, &["python3", "-c", BACKEND_SERVER, addr]));
        heartbeats.push(Some(Proc::in_ns(ns, &["python3", "-c", HEARTBEAT])));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let run = Proc::in_ns(&client.ns, &["python3", "-c", LB_CLIENT]);
    std::thread::sleep(Duration::from_millis(1500));
    // Silence the first backend: it must be dropped after 2 s.
    let silent = lan.backends[0].2.clone();
    heartbeats[0] = None;
    let out = run.wait(Duration::from_secs(30));
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 3, "client output: {out}");
    let (first, second, new) = (names(lines[0]), names(lines[1]), names(lines[2]));
    eprintln!("first {first:?}\nsecond {second:?}\nnew {new:?}");
    let distinct: std::collections::BTreeSet<&String> = first.iter().collect();
    assert!(distinct.len() >= 2, "12 flows on one backend: {first:?}");
    assert!(first.iter().all(|n| n.starts_with("10.1.0.")), "{first:?}");
    for (a, b) in first.iter().zip(&second) {
        if *a != silent {
            assert_eq!(a, b, "a flow on a live backend moved or broke");
        }
    }
    assert!(
        new.iter().all(|n| n.starts_with("10.1.0.") && *n != silent),
        "new flows must go to the live backends only: {new:?}"
    );
    // Heartbeats go on until nfkit stops, so the live backends stay.
    let nf_out = nf.finish();
    drop(heartbeats);
    drop(servers);
    let summary = common::summary(&nf_out);
    assert!(
        !summary.contains(&format!("backend {silent} ")),
        "{summary}"
    );
    for (_, _, addr) in &lan.backends[1..] {
        assert!(summary.contains(&format!("backend {addr} ")), "{summary}");
    }
}

/// Whether `f`'s TCP checksum field holds the folded pseudo-header sum
/// that Linux keeps in a CHECKSUM_PARTIAL packet until a NIC (or the
/// receiving kernel, trusting it) completes it. AF_PACKET hands the
/// checksum to the kernel through its vnet header (the port's
/// `tx-l4-csum` capability), so a capture on a veth sees exactly this,
/// as tcpdump shows for any host's offloaded transmissions. A NAT that
/// forgot to rewrite the checksum leaves neither this nor a valid one.
fn partial_tcp_checksum(f: &[u8]) -> bool {
    let Some(ihl) = f.get(14).map(|b| usize::from(b & 0x0f) * 4) else {
        return false;
    };
    if f.len() < 14 + ihl + 18 || f[23] != 6 {
        return false;
    }
    let word = |i: usize| u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
    let l4_len = word(16).saturating_sub(ihl as u32);
    let mut sum = word(26) + word(28) + word(30) + word(32) + 6 + l4_len;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    word(14 + ihl + 16) == sum
}

/// Issue 14: TCP between two namespaces through the `nfkit fwd` binary
/// over AF_PACKET, AF_XDP (copy mode) and TAP, every interface at the
/// settings a user leaves (checksum offload, TSO and GSO on): the file
/// arrives byte-exact both ways and neither kernel counts a checksum error.
#[test]
fn fwd_carries_tcp_at_default_offloads() {
    require_root!();
    for tool in ["socat", "nstat", "ping"] {
        require_tool!(tool);
    }
    let _one = serial();
    for kind in ["afpacket", "afxdp"] {
        let hosts = [Host::new("10.97.0.1/24"), Host::new("10.97.0.2/24")];
        let spec = |h: &Host| match kind {
            "afxdp" => format!("afxdp:{},mode=copy", h.outside),
            _ => format!("afpacket:{}", h.outside),
        };
        let fwd = start_fwd(&spec(&hosts[0]), &spec(&hosts[1]), kind);
        let ends = [(&hosts[0].ns, "10.97.0.1"), (&hosts[1].ns, "10.97.0.2")];
        tcp_both_ways(ends, fwd, kind);
    }
    // TAP: nfkit makes the interfaces; the test moves them into its
    // namespaces and addresses them there.
    use nfkit_testkit::{unique_name, Netns};
    let (na, nb) = (Netns::new().unwrap(), Netns::new().unwrap());
    let (ta, tb) = (unique_name("t"), unique_name("t"));
    let fwd = start_fwd(&format!("tap:{ta}"), &format!("tap:{tb}"), "tap");
    for (tap, ns, ip) in [(&ta, &na, "10.97.0.1/24"), (&tb, &nb, "10.97.0.2/24")] {
        nfkit_testkit::ip(&["link", "set", tap, "netns", ns.name()]).unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", tap]).unwrap();
        ns.run(&["ip", "link", "set", tap, "up"]).unwrap();
    }
    tcp_both_ways([(&na, "10.97.0.1"), (&nb, "10.97.0.2")], fwd, "tap");
}

fn start_fwd(a: &str, b: &str, kind: &str) -> Proc {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nfkit"));
    cmd.args(["fwd", a, b, "--seconds", "60"]);
    let fwd = Proc::spawn(cmd, &format!("nfkit fwd over {kind}"));
    // Let it open its ports before traffic starts.
    std::thread::sleep(Duration::from_millis(700));
    fwd
}

/// A ping, then a file each way, then the checksum error counts of both
/// namespaces' kernels; `fwd` is stopped (SIGINT) in between.
fn tcp_both_ways(ends: [(&nfkit_testkit::Netns, &str); 2], fwd: Proc, kind: &str) {
    let ping = ends[0]
        .0
        .run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", ends[1].1]);
    assert!(ping.is_ok(), "{kind}: ping through nfkit fwd: {ping:?}");
    for (from, to) in [(0, 1), (1, 0)] {
        tcp_file(ends[from].0, ends[to].0, ends[to].1, kind);
    }
    let out = fwd.interrupt(Duration::from_secs(20));
    for (ns, ip) in ends {
        let nstat = ns.run(&["nstat", "-az"]).unwrap_or_default();
        let errors: u64 = nstat
            .lines()
            .filter(|l| l.contains("InCsumErrors"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        assert_eq!(
            errors, 0,
            "{kind}: checksum errors at {ip}:\n{nstat}\n{out}"
        );
    }
}

/// 2 MB of pseudo-random bytes over TCP from `a` to `b` (at `b_ip`, socat),
/// compared.
fn tcp_file(a: &nfkit_testkit::Netns, b: &nfkit_testkit::Netns, b_ip: &str, kind: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    let data = random_bytes(2_000_000);
    std::fs::write(&src, &data).unwrap();
    let server = Proc::in_ns(
        b,
        &[
            "socat",
            "-u",
            "TCP-LISTEN:5001,reuseaddr",
            &format!("CREATE:{}", dst.display()),
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    let sent = a.run(&[
        "timeout",
        "30",
        "socat",
        "-u",
        &format!("OPEN:{}", src.display()),
        &format!("TCP:{b_ip}:5001,retry=20,interval=0.1"),
    ]);
    assert!(sent.is_ok(), "{kind}: to {b_ip}: {sent:?}");
    server.wait(Duration::from_secs(20));
    let got = std::fs::read(&dst).unwrap_or_default();
    assert_eq!(got.len(), data.len(), "{kind}: bytes to {b_ip}");
    assert!(got == data, "{kind}: the file differs at {b_ip}");
}
