//! Real kernel traffic through nfkit ports between network namespaces
//! (root; otherwise SKIP): ping, a TCP file transfer compared at the far
//! end, iperf3 where installed. The forwarding loop runs in a thread
//! between the host-side ends; counters must add up on every port.

mod common;

use common::traffic::{iperf3, ping, tcp_transfer, Forwarder};
use nfkit_port::{open, OpenOptions, Port, PortSpec};
use nfkit_testkit::{require_root, require_tool, TwoHosts};

fn open_spec(s: &str) -> Box<dyn Port> {
    open(&s.parse::<PortSpec>().unwrap(), &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// ping, TCP and iperf3 between the two namespaces of `net` through the
/// forwarder `fwd`.
fn traffic(net: &TwoHosts, fwd: Forwarder, needs_offloads_off: bool) {
    ping(&net.a.ns, &net.b.ip);
    if needs_offloads_off && !net.offloads_off {
        eprintln!("SKIP: TCP parts: ethtool is not installed, so veth offloads stay on (64 KiB segments, partial checksums)");
    } else {
        tcp_transfer(&net.a.ns, &net.b.ns, &net.b.ip);
        iperf3(&net.a.ns, &net.b.ns, &net.b.ip);
    }
    fwd.finish();
}

#[test]
fn afpacket_forwards_real_traffic() {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afpacket:{}", net.a.host_end));
    let b = open_spec(&format!("afpacket:{},queues=2", net.b.host_end));
    traffic(&net, Forwarder::start(a, b), true);
}

/// Two TAP interfaces made by nfkit, each moved into its own namespace
/// and addressed there: the namespaces' stacks talk through nfkit.
#[test]
fn tap_carries_the_host_stack() {
    require_root!();
    require_tool!("ping");
    use nfkit_testkit::{unique_name, Netns};
    let (na, nb) = (Netns::new().unwrap(), Netns::new().unwrap());
    let (ta, tb) = (unique_name("t"), unique_name("t"));
    let a = open_spec(&format!("tap:{ta}"));
    let b = open_spec(&format!("tap:{tb}"));
    for (tap, ns, ip) in [(&ta, &na, "10.97.0.1/24"), (&tb, &nb, "10.97.0.2/24")] {
        nfkit_testkit::ip(&["link", "set", tap, "netns", ns.name()]).unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", tap]).unwrap();
        ns.run(&["ip", "link", "set", tap, "up"]).unwrap();
    }
    let fwd = Forwarder::start(a, b);
    ping(&na, "10.97.0.2");
    tcp_transfer(&na, &nb, "10.97.0.2");
    iperf3(&na, &nb, "10.97.0.2");
    fwd.finish();
}

#[test]
fn missing_interfaces_are_clear_errors() {
    require_root!();
    let o = OpenOptions::default();
    for spec in ["afpacket:nosuchif0", "afxdp:nosuchif0"] {
        let e = open(&spec.parse::<PortSpec>().unwrap(), &o)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("port `{spec}")) && e.contains("no interface `nosuchif0`"),
            "{e}"
        );
    }
}

#[test]
fn afxdp_forwards_real_traffic() {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afxdp:{},mode=copy", net.a.host_end));
    let b = open_spec(&format!("afxdp:{}", net.b.host_end));
    traffic(&net, Forwarder::start(a, b), true);
}
