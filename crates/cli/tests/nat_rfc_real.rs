//! The NAT's host-visible RFC 4787 behaviour with real kernel traffic:
//! the real `nfkit nf nat` between two network namespaces over AF_PACKET
//! ports on veth pairs (root; else SKIP). UDP sockets in the namespaces
//! see endpoint-independent mapping (REQ-1) and each filtering behaviour
//! (REQ-8): which remote endpoints' datagrams reach the internal socket.

mod common;

use common::{serial, Host, Nfkit, Proc};
use nfkit_testkit::{require_root, require_tool};
use std::time::Duration;

const NF_MAC: &str = "02:00:00:00:99:01";

/// The WAN side: sockets on .2:7000 and .3:7000 wait for the LAN
/// socket's datagrams, print the source ports they saw, then four
/// endpoints answer to the external endpoint: .2:7000 (a), .3:7000 (b),
/// .2:7001 (c, same host, other port), .4:7000 (d, other host).
const WAN_SCRIPT: &str = r#"
import socket, time
s2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s2.bind(("203.0.113.2", 7000))
s3 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s3.bind(("203.0.113.3", 7000))
s2.settimeout(15); s3.settimeout(15)
_, a2 = s2.recvfrom(100)
_, a3 = s3.recvfrom(100)
print("seen", a2[0], a2[1], a3[0], a3[1], flush=True)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.bind(("203.0.113.2", 7001))
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.bind(("203.0.113.4", 7000))
for _ in range(3):
    s2.sendto(b"a", a2); s3.sendto(b"b", a2); c.sendto(b"c", a2); d.sendto(b"d", a2)
    time.sleep(0.2)
"#;

/// The LAN side: one socket on 10.0.0.2:4000 sends to both servers until
/// answered, then prints every payload it receives within 2 s.
const LAN_SCRIPT: &str = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("10.0.0.2", 4000))
s.settimeout(0.3)
got = set()
end = time.time() + 12
while time.time() < end and not got:
    s.sendto(b"x", ("203.0.113.2", 7000)); s.sendto(b"x", ("203.0.113.3", 7000))
    try:
        got.add(s.recvfrom(100)[0].decode())
    except socket.timeout:
        pass
end = time.time() + 2
while time.time() < end:
    try:
        got.add(s.recvfrom(100)[0].decode())
    except socket.timeout:
        pass
print("got", "".join(sorted(got)), flush=True)
"#;

fn udp_filtering(filtering: &str, expect: &str) {
    require_root!();
    for tool in ["ethtool", "python3"] {
        require_tool!(tool);
    }
    let _one = serial();
    let lan = Host::new("10.0.0.2/24");
    let wan = Host::new("203.0.113.2/24");
    for a in ["203.0.113.3/24", "203.0.113.4/24"] {
        wan.ns
            .run(&["ip", "addr", "add", a, "dev", &wan.dev])
            .unwrap();
    }
    lan.default_route("10.0.0.1");
    lan.neighbour("10.0.0.1", NF_MAC);
    wan.neighbour("203.0.113.1", NF_MAC);
    let nf = Nfkit::start(
        &[
            "nat",
            "--lan",
            &lan.port(),
            "--wan",
            &wan.port(),
            "--ext-ip",
            "203.0.113.1",
            "--ports",
            "20000-29999",
            "--filtering",
            filtering,
            "--lan-eth-dest",
            &lan.mac,
            "--wan-eth-dest",
            &wan.mac,
        ],
        12,
    );
    let server = Proc::in_ns(&wan.ns, &["python3", "-c", WAN_SCRIPT]);
    std::thread::sleep(Duration::from_millis(300));
    let client = Proc::in_ns(&lan.ns, &["python3", "-c", LAN_SCRIPT]);
    let seen = server.wait(Duration::from_secs(20));
    let got = client.wait(Duration::from_secs(20));
    nf.finish();
    // REQ-1: both servers saw the one external endpoint.
    let f: Vec<&str> = seen
        .lines()
        .find(|l| l.starts_with("seen "))
        .unwrap_or_else(|| panic!("{seen}"))
        .split_whitespace()
        .collect();
    assert_eq!((f[1], f[3]), ("203.0.113.1", "203.0.113.1"), "{seen}");
    assert_eq!(f[2], f[4], "endpoint-independent mapping: {seen}");
    assert!((20000..=29999).contains(&f[2].parse::<u32>().unwrap()));
    // REQ-8: which remotes got through.
    let line = got.lines().find(|l| l.starts_with("got ")).unwrap_or("");
    assert_eq!(line, format!("got {expect}"), "{filtering}: {got}");
}

#[test]
fn rfc4787_req_1_and_8_endpoint_independent_filtering_real() {
    udp_filtering("endpoint", "abcd");
}

#[test]
fn rfc4787_req_1_and_8_address_dependent_filtering_real() {
    udp_filtering("address", "abc");
}

#[test]
fn rfc4787_req_1_and_8_address_and_port_dependent_filtering_real() {
    udp_filtering("address-port", "ab");
}
