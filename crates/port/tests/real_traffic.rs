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

/// The same with TPACKET_V3 RX rings (frames handed over in blocks, a
/// partly filled one after its 1 ms timer).
#[test]
fn afpacket_v3_forwards_real_traffic() {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afpacket:{},tpacket=3", net.a.host_end));
    let b = open_spec(&format!("afpacket:{},queues=2,tpacket=3", net.b.host_end));
    traffic(&net, Forwarder::start(a, b), true);
}

/// Two TAP interfaces made by nfkit, each moved into its own namespace
/// and addressed there: the namespaces' stacks talk through nfkit. One
/// of them has two queues.
#[test]
fn tap_carries_the_host_stack() {
    require_root!();
    require_tool!("ping");
    use nfkit_testkit::{unique_name, Netns};
    let (na, nb) = (Netns::new().unwrap(), Netns::new().unwrap());
    let (ta, tb) = (unique_name("t"), unique_name("t"));
    let a = open_spec(&format!("tap:{ta}"));
    // b has two queues (IFF_MULTI_QUEUE): the kernel spreads its flows
    // over them.
    let b = open_spec(&format!("tap:{tb},queues=2"));
    assert_eq!((b.rx_queues(), b.tx_queues()), (2, 2));
    // IFF_VNET_HDR: partial checksums come and go as offload metadata.
    let line = nfkit_port::capability_line(&*b);
    assert!(
        line.contains("tx-l4-csum") && line.contains("rx-partial-csum"),
        "{line}"
    );
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
    // the taps keep their default offload settings
    for ns in [&na, &nb] {
        assert_eq!(
            common::traffic::csum_errors(ns),
            0,
            "checksum errors in {}",
            ns.name()
        );
    }
}

/// Jumbo frames end to end: MTU 9000 on the four veth ends (the
/// scenario itself), a 9,000-byte ping that may not fragment and a TCP
/// transfer (9,014-byte frames, chained buffers inside nfkit), byte-exact.
fn jumbo_frames(spec: impl Fn(&str) -> String) {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    for h in [&net.a, &net.b] {
        h.ns.run(&["ip", "link", "set", "dev", &h.dev, "mtu", "9000"])
            .unwrap();
        nfkit_testkit::ip(&["link", "set", "dev", &h.host_end, "mtu", "9000"]).unwrap();
    }
    let a = open_spec(&spec(&net.a.host_end));
    let b = open_spec(&spec(&net.b.host_end));
    assert!(
        a.max_frame() >= 9014,
        "{}: max frame {}",
        a.name(),
        a.max_frame()
    );
    let fwd = Forwarder::start(a, b);
    let out = net.a.ns.run(&[
        "ping", "-c", "3", "-i", "0.2", "-W", "2", "-M", "do", "-s", "8972", &net.b.ip,
    ]);
    if out.is_err() {
        let r = fwd.finish();
        panic!("9,000-byte ping through nfkit: {out:?}\n{r:?}");
    }
    if net.offloads_off {
        assert!(tcp_transfer(&net.a.ns, &net.b.ns, &net.b.ip));
    }
    let r = fwd.finish();
    assert!(r.ports.iter().all(|p| p.rx_errors == 0), "{r:?}");
}

#[test]
fn afpacket_carries_jumbo_frames() {
    jumbo_frames(|i| format!("afpacket:{i}"));
}

/// Multi-buffer AF_XDP (`XDP_USE_SG`, kernel 6.6) in copy mode.
#[test]
fn afxdp_carries_jumbo_frames() {
    jumbo_frames(|i| format!("afxdp:{i},mode=copy"));
}

/// TCP between namespaces whose veth ends keep their default offloads
/// (checksum offload, TSO): byte-exact, and the receiver counts no
/// checksum error (`nstat`).
fn tcp_at_default_offloads(spec: impl Fn(&str) -> String) {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::at_default_offloads(1).unwrap();
    let a = open_spec(&spec(&net.a.host_end));
    let b = open_spec(&spec(&net.b.host_end));
    let fwd = Forwarder::start(a, b);
    ping(&net.a.ns, &net.b.ip);
    assert!(tcp_transfer(&net.a.ns, &net.b.ns, &net.b.ip));
    tcp_transfer(&net.b.ns, &net.a.ns, &net.a.ip);
    fwd.finish();
    for ns in [&net.a.ns, &net.b.ns] {
        assert_eq!(
            common::traffic::csum_errors(ns),
            0,
            "checksum errors in {}",
            ns.name()
        );
    }
}

#[test]
fn afpacket_tcp_at_default_offloads() {
    tcp_at_default_offloads(|i| format!("afpacket:{i}"));
}

#[test]
#[ignore = "TPACKET_V3 has no PACKET_COPY_THRESH: TSO super-frames are dropped (counted, with a warning); use tpacket=2 at default offloads"]
fn afpacket_v3_tcp_at_default_offloads() {
    tcp_at_default_offloads(|i| format!("afpacket:{i},tpacket=3"));
}

#[test]
fn afxdp_tcp_at_default_offloads() {
    tcp_at_default_offloads(|i| format!("afxdp:{i},mode=copy"));
}

/// TAP interfaces with MTU 9000 in two namespaces: a 9,000-byte ping and
/// a TCP transfer through nfkit.
#[test]
fn tap_carries_jumbo_frames() {
    require_root!();
    require_tool!("ping");
    use nfkit_testkit::{unique_name, Netns};
    let (na, nb) = (Netns::new().unwrap(), Netns::new().unwrap());
    let (ta, tb) = (unique_name("t"), unique_name("t"));
    let a = open_spec(&format!("tap:{ta}"));
    let b = open_spec(&format!("tap:{tb}"));
    for (tap, ns, ip) in [(&ta, &na, "10.96.0.1/24"), (&tb, &nb, "10.96.0.2/24")] {
        nfkit_testkit::ip(&["link", "set", tap, "netns", ns.name()]).unwrap();
        ns.run(&["ip", "link", "set", tap, "mtu", "9000"]).unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", tap]).unwrap();
        ns.run(&["ip", "link", "set", tap, "up"]).unwrap();
    }
    let fwd = Forwarder::start(a, b);
    let out = na.run(&[
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "-M",
        "do",
        "-s",
        "8972",
        "10.96.0.2",
    ]);
    assert!(out.is_ok(), "9,000-byte ping through nfkit: {out:?}");
    tcp_transfer(&na, &nb, "10.96.0.2");
    let r = fwd.finish();
    assert!(r.ports.iter().all(|p| p.rx_errors == 0), "{r:?}");
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
    let net = TwoHosts::with_queues(2).unwrap();
    let a = open_spec(&format!("afxdp:{},mode=copy", net.a.host_end));
    // Both queues of b, each with its socket; auto mode falls back to
    // copy on veth.
    let b = open_spec(&format!("afxdp:{}:0,queues=2", net.b.host_end));
    assert_eq!(b.rx_queues(), 2);
    traffic(&net, Forwarder::start(a, b), true);
}

/// Replay real captures out of one end of a veth pair with AF_PACKET and
/// capture them on the other end: every frame that fits the MTU arrives
/// unchanged and in order (VLAN tags the kernel takes out on receive are
/// put back); longer ones are counted as TX errors.
#[test]
fn pcap_replayed_onto_veth_arrives_frame_by_frame() {
    require_root!();
    replay_captures_onto_veth("");
}

/// The same through a TPACKET_V3 (block) RX ring on the capturing end:
/// every frame of every block is taken, in order.
#[test]
fn pcap_replayed_onto_veth_arrives_frame_by_frame_through_v3_blocks() {
    require_root!();
    replay_captures_onto_veth(",tpacket=3");
}

fn replay_captures_onto_veth(capture_options: &str) {
    use common::{frames_of, real_capture};
    use nfkit_port::Batch;
    let veth = nfkit_testkit::Veth::new().unwrap();
    for end in [&veth.a, &veth.b] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{end}/disable_ipv6"), "1");
    }
    let mut capture = open_spec(&format!("afpacket:{}{capture_options}", veth.b));
    let mut checked = 0;
    for name in [
        "TCP_SACK.pcap",
        "QinQ.pcap.pcap",
        "ICMP_across_dot1q.pcap",
        "vxlan.pcap",
    ] {
        let path = match real_capture("pdu", "tests/pcaps", name) {
            Ok(p) => p,
            Err(why) => {
                eprintln!("SKIP: {name}: {why}");
                continue;
            }
        };
        let expected: Vec<Vec<u8>> = frames_of(&path)
            .into_iter()
            .filter(|f| f.len() <= 1514)
            .collect();
        let mut src = open_spec(&format!("pcap:{}", path.display()));
        let mut out = open_spec(&format!("afpacket:{}", veth.a));
        let mut batch = Batch::new();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut rx = Batch::new();
        let mut drain = |got: &mut Vec<Vec<u8>>| {
            capture.rx_batch(0, &mut rx);
            got.extend(rx.drain().map(|p| p.data().to_vec()));
        };
        while !src.rx_done() {
            src.rx_batch(0, &mut batch);
            while !batch.is_empty() {
                out.tx_batch(0, &mut batch);
                drain(&mut got);
            }
        }
        nfkit_testkit::wait_for(std::time::Duration::from_secs(5), || {
            drain(&mut got);
            is_subsequence(&expected, &got)
        });
        assert!(
            is_subsequence(&expected, &got),
            "{name}: sent {} frames, captured {} (first differing frame shown in debug)",
            expected.len(),
            got.len()
        );
        let s = out.stats();
        assert_eq!(s.tx_packets as usize, expected.len(), "{name}");
        checked += 1;
    }
    if checked == 0 {
        eprintln!("SKIP: no captures of the pdu crate found");
    }
}

/// Whether `want` appears in `got` in order (other frames the kernel sends
/// on the link may be interleaved).
fn is_subsequence(want: &[Vec<u8>], got: &[Vec<u8>]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w))
}

/// Opening kernel ports without privileges names the fix. As root, the
/// test runs itself again as `nobody` without capabilities (setpriv).
#[test]
fn unprivileged_open_names_the_fix() {
    if !nfkit_testkit::is_root() {
        check_unprivileged_errors();
        return;
    }
    require_tool!("setpriv");
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(&exe)
        .args(["--exact", "unprivileged_child", "--ignored", "--nocapture"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("Permission denied")
        && text.contains("os error 13")
        && !text.contains("test result")
    {
        nfkit_testkit::skip!("the test binary is not executable by `nobody`: {text}");
    }
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

#[test]
#[ignore = "run by unprivileged_open_names_the_fix as an unprivileged user"]
fn unprivileged_child() {
    check_unprivileged_errors();
}

fn check_unprivileged_errors() {
    let o = OpenOptions::default();
    for (spec, fix) in [
        ("afpacket:lo", "needs root or CAP_NET_RAW"),
        ("tap:nkperm0", "root or CAP_NET_ADMIN"),
        ("afxdp:lo", "AF_XDP needs root"),
    ] {
        let e = open(&spec.parse::<PortSpec>().unwrap(), &o)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("port `{spec}")) && e.contains(fix),
            "{spec}: {e}"
        );
    }
}

/// A frame longer than the MTU is refused by the kernel: counted as a TX
/// error, the rest of the batch still goes out.
#[test]
fn afpacket_frame_longer_than_the_mtu_is_a_counted_error() {
    require_root!();
    let veth = nfkit_testkit::Veth::new().unwrap();
    let mut p = open_spec(&format!("afpacket:{}", veth.a));
    let mut batch = nfkit_port::Batch::new();
    for len in [100, 1800, 100] {
        let mut b = p.pool().alloc().unwrap();
        b.copy_from(&vec![0x02; len]).unwrap();
        batch.push(b);
    }
    let mut sent = 0;
    for _ in 0..10 {
        sent += p.tx_batch(0, &mut batch);
        if batch.is_empty() {
            break;
        }
    }
    assert_eq!(sent, 3);
    let s = p.stats();
    assert_eq!((s.tx_packets, s.tx_errors), (2, 1), "{s:?}");
}

/// TPACKET_V3 cannot take a frame larger than a buffer (no whole-frame
/// copy): an MTU above one is refused at open, naming the fix.
#[test]
fn v3_mtu_larger_than_a_buffer_is_a_clear_error() {
    require_root!();
    let veth = nfkit_testkit::Veth::new().unwrap();
    nfkit_testkit::ip(&["link", "set", &veth.a, "mtu", "9000"]).unwrap();
    let spec = format!("afpacket:{},tpacket=3", veth.a);
    let e = open(&spec.parse::<PortSpec>().unwrap(), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains(&spec) && e.contains("MTU 9000") && e.contains("ip link set"),
        "{e}"
    );
}

#[test]
fn zero_copy_on_veth_says_to_use_copy_mode() {
    require_root!();
    let veth = nfkit_testkit::Veth::new().unwrap();
    let spec = format!("afxdp:{},mode=zc", veth.a);
    let e = open(&spec.parse::<PortSpec>().unwrap(), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("mode=copy"), "{e}");
    // And a queue the device does not have.
    let spec = format!("afxdp:{}:5", veth.a);
    let e = open(&spec.parse::<PortSpec>().unwrap(), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("queue 5"), "{e}");
}

#[test]
fn tap_name_taken_by_another_interface_is_a_clear_error() {
    require_root!();
    let veth = nfkit_testkit::Veth::new().unwrap();
    let spec = format!("tap:{}", veth.a);
    let e = open(&spec.parse::<PortSpec>().unwrap(), &OpenOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains(&spec) && e.contains("pick another name"), "{e}");
}

/// Kernel ports report the interface's link: up with the veth's speed,
/// down once the peer goes down (no carrier), up again after.
#[test]
fn kernel_ports_follow_the_link_state() {
    require_root!();
    use nfkit_testkit::{ip, wait_for};
    use std::time::Duration;
    let veth = nfkit_testkit::Veth::new().unwrap();
    let ports = [
        open_spec(&format!("afpacket:{}", veth.a)),
        open_spec(&format!("afxdp:{},mode=copy", veth.a)),
    ];
    let all = |up: bool| ports.iter().all(|p| p.link().up == up);
    assert!(
        wait_for(Duration::from_secs(5), || all(true)),
        "not up at start"
    );
    assert!(ports.iter().all(|p| p.link().speed_mbps.is_some()));
    ip(&["link", "set", &veth.b, "down"]).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || all(false)),
        "still up with the peer down"
    );
    ip(&["link", "set", &veth.b, "up"]).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || all(true)),
        "not up again"
    );
}

/// Each queue of a multi-queue TAP sends: a frame written on queue q is
/// received by the interface (seen by a packet socket on it), and the
/// TAP's link follows the interface's state in this namespace.
#[test]
fn every_tap_queue_sends_into_the_kernel() {
    require_root!();
    use nfkit_port::Batch;
    use nfkit_testkit::{ip, unique_name, wait_for};
    use std::time::Duration;
    let name = unique_name("t");
    let mut tap = open_spec(&format!("tap:{name},queues=3"));
    assert!(!tap.link().up, "a new TAP starts down");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
    ip(&["link", "set", &name, "up"]).unwrap();
    assert!(wait_for(Duration::from_secs(5), || tap.link().up));
    let mut capture = open_spec(&format!("afpacket:{name}"));
    let frame = |q: u8| {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0x7a, q]);
        f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
        f.resize(60, q);
        f
    };
    for q in 0..3u8 {
        let mut b = tap.pool().alloc().unwrap();
        b.copy_from(&frame(q)).unwrap();
        let mut batch = Batch::new();
        let _ = batch.push(b);
        assert_eq!(tap.tx_batch(q as usize, &mut batch), 1, "queue {q}");
    }
    let mut got = Vec::new();
    let mut rx = Batch::new();
    wait_for(Duration::from_secs(5), || {
        capture.rx_batch(0, &mut rx);
        got.extend(rx.drain().map(|p| p.data().to_vec()));
        (0..3).all(|q| got.contains(&frame(q)))
    });
    for q in 0..3u8 {
        assert!(got.contains(&frame(q)), "queue {q}'s frame never arrived");
        assert_eq!(tap.queue_stats(q as usize).tx_packets, 1);
    }
}

/// A forwarder restarted at once finds the queue still busy while the
/// kernel tears the old socket down: the bind is retried, not failed
/// (issue 14 item 10).
#[test]
fn afxdp_reopened_at_once_binds() {
    require_root!();
    let net = TwoHosts::new().unwrap();
    for round in 0..5 {
        let p = open(
            &format!("afxdp:{},mode=copy", net.a.host_end)
                .parse::<PortSpec>()
                .unwrap(),
            &OpenOptions::default(),
        );
        assert!(p.is_ok(), "round {round}: {:?}", p.err());
    }
}

/// At default offloads, a UDP datagram the namespace's stack sends
/// reaches an AF_PACKET port with its checksum partial (veth's transmit
/// checksum offload): the port puts that in the packet's offload
/// metadata instead of completing it, says so in its capabilities, and
/// software finishes it for a port that cannot (the checksum then
/// verifies). AF_XDP in copy mode names the peer's offload settings.
#[test]
fn kernel_checksum_state_reaches_the_metadata() {
    use nfkit_port::{cap, prepare_tx, Batch, Caps};
    require_root!();
    let net = TwoHosts::at_default_offloads(1).unwrap();
    let mut a = open_spec(&format!("afpacket:{}", net.a.host_end));
    let caps = a.capabilities();
    assert!(
        caps.has(cap::TX_L4_CSUM) && caps.has(cap::RX_PARTIAL_CSUM),
        "{caps}"
    );
    let line = nfkit_port::capability_line(&*a);
    assert!(
        line.contains("tx-l4-csum") && line.contains("max frame 1518"),
        "{line}"
    );
    // The peer of a host end is in a namespace: said so.
    let note = nfkit_port::afxdp::copy_mode_note(&net.a.host_end).unwrap();
    assert!(note.contains("another network namespace"), "{note}");
    let veth = nfkit_testkit::Veth::new().unwrap();
    let note = nfkit_port::afxdp::copy_mode_note(&veth.b).unwrap();
    assert!(
        note.contains(&format!("`{}`", veth.a)) && note.contains("tx-checksumming"),
        "{note}"
    );

    let ns = &net.a.ns;
    ns.run(&[
        "ip",
        "neigh",
        "replace",
        &net.b.ip,
        "lladdr",
        "02:00:00:00:00:99",
        "dev",
        &net.a.dev,
        "nud",
        "permanent",
    ])
    .unwrap();
    let send = format!("echo offload-metadata > /dev/udp/{}/9", net.b.ip);
    let mut batch = Batch::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let udp = loop {
        ns.run(&["bash", "-c", &send]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        a.rx_batch(0, &mut batch);
        let at = batch.iter().position(|p| {
            let d = p.data();
            d.len() > 42 && d[12..14] == [8, 0] && d[23] == 17 && d[36..38] == [0, 9]
        });
        if let Some(i) = at {
            let mut one = Batch::new();
            for (j, p) in batch.drain().enumerate() {
                if j == i {
                    let _ = one.push(p);
                }
            }
            break one;
        }
        batch.clear();
        assert!(std::time::Instant::now() < deadline, "no UDP frame arrived");
    };
    let p = udp.iter().next().unwrap();
    let tx_csum_on = !nfkit_testkit::have_tool("ethtool")
        || ns
            .run(&["ethtool", "-k", &net.a.dev])
            .unwrap()
            .contains("tx-checksumming: on");
    let state = p.offload().copied();
    if tx_csum_on {
        let o = state.expect("a partial checksum is offload metadata");
        assert!(o.has(nfkit_hw::pool::offload::L4_CSUM), "{o:?}");
        assert_eq!(o.l4_start(), 34);
    }
    let mut udp = udp;
    assert_eq!(prepare_tx(&mut udp, Caps::NONE), 0);
    let p = udp.iter().next().unwrap();
    assert!(p.offload().is_none());
    nfkit_packet::verify_checksums(p.data()).unwrap();
}
