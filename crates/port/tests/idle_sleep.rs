//! Kernel-facing ports sleep when idle (root; otherwise SKIP): the
//! forwarding loop between two namespaces over AF_PACKET, AF_XDP and TAP
//! uses almost no CPU while no packet flows (its thread's time on a CPU
//! from `/proc`, a functional check that it sleeps, with a generous
//! bound: the goal is under 1% of a core), and after waking, a ping and
//! a TCP transfer go through byte for byte. Pure polling (`--poll`)
//! still spins, which shows the measurement sees a busy loop.

mod common;

use common::traffic::{ping, tcp_transfer, Forwarder};
use nfkit_port::fwd::FwdOptions;
use nfkit_port::{open, IdleOptions, OpenOptions, Port, PortSpec};
use nfkit_testkit::{require_root, require_tool, unique_name, Netns, TwoHosts};
use std::time::{Duration, Instant};

fn open_spec(s: &str) -> Box<dyn Port> {
    open(&s.parse::<PortSpec>().unwrap(), &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// The share of one core the forwarding thread used over `window`.
fn cpu_share(fwd: &Forwarder, window: Duration) -> f64 {
    let (c0, t0) = (fwd.cpu_time(), Instant::now());
    std::thread::sleep(window);
    let (c1, t1) = (fwd.cpu_time(), Instant::now());
    (c1 - c0).as_secs_f64() / (t1 - t0).as_secs_f64()
}

/// Idle share below 5% of a core, then traffic after waking.
fn sleeps_then_forwards(fwd: Forwarder, a: &Netns, b: &Netns, b_ip: &str) {
    // ARP and the kernel's own first frames, then quiet.
    ping(a, b_ip);
    std::thread::sleep(Duration::from_millis(300));
    let share = cpu_share(&fwd, Duration::from_secs(3));
    eprintln!("idle forwarding thread: {:.2}% of a core", share * 100.0);
    assert!(
        share < 0.05,
        "an idle hybrid loop used {:.1}% of a core",
        share * 100.0
    );
    ping(a, b_ip);
    assert!(tcp_transfer(a, b, b_ip) || !nfkit_testkit::skips_fail());
    let r = fwd.finish();
    eprintln!("{}", r.idle.summary());
    assert!(r.idle.sleeps > 0 && r.idle.woken > 0, "{:?}", r.idle);
}

#[test]
fn idle_afpacket_forwarding_sleeps() {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afpacket:{}", net.a.host_end));
    let b = open_spec(&format!("afpacket:{},queues=2", net.b.host_end));
    sleeps_then_forwards(Forwarder::start(a, b), &net.a.ns, &net.b.ns, &net.b.ip);
}

#[test]
fn idle_afxdp_forwarding_sleeps() {
    require_root!();
    require_tool!("ping");
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afxdp:{},mode=copy", net.a.host_end));
    let b = open_spec(&format!("afxdp:{},mode=copy", net.b.host_end));
    sleeps_then_forwards(Forwarder::start(a, b), &net.a.ns, &net.b.ns, &net.b.ip);
}

#[test]
fn idle_tap_forwarding_sleeps() {
    require_root!();
    require_tool!("ping");
    let (na, nb) = (Netns::new().unwrap(), Netns::new().unwrap());
    let (ta, tb) = (unique_name("t"), unique_name("t"));
    let a = open_spec(&format!("tap:{ta}"));
    let b = open_spec(&format!("tap:{tb},queues=2"));
    for (tap, ns, ip) in [(&ta, &na, "10.96.0.1/24"), (&tb, &nb, "10.96.0.2/24")] {
        nfkit_testkit::ip(&["link", "set", tap, "netns", ns.name()]).unwrap();
        ns.run(&["ip", "addr", "add", ip, "dev", tap]).unwrap();
        ns.run(&["ip", "link", "set", tap, "up"]).unwrap();
    }
    sleeps_then_forwards(Forwarder::start(a, b), &na, &nb, "10.96.0.2");
}

/// The same measurement sees pure polling spin (so a low share above
/// means sleeping, not a broken measurement).
#[test]
fn pure_polling_spins() {
    require_root!();
    let net = TwoHosts::new().unwrap();
    let a = open_spec(&format!("afpacket:{}", net.a.host_end));
    let b = open_spec(&format!("afpacket:{}", net.b.host_end));
    let opts = FwdOptions {
        idle: IdleOptions::polling(),
        ..FwdOptions::default()
    };
    let fwd = Forwarder::start_with(a, b, opts);
    let share = cpu_share(&fwd, Duration::from_secs(1));
    eprintln!("polling forwarding thread: {:.1}% of a core", share * 100.0);
    // On a loaded 2-core machine a spinning thread gets well under 100%.
    assert!(share > 0.2, "{share}");
    let r = fwd.finish();
    assert_eq!(r.idle.sleeps, 0);
}
