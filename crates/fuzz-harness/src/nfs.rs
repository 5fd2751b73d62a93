//! The network functions: their options, and their packet handlers fed
//! a sequence of frames on any port at any time.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nfkit_nf::{build, BoxedNf, PortSet, Verdict, NFS};

/// An NF name and options from text (`NAME --opt v ...`): built or refused.
pub fn nf_options(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if crate::has_huge_number(s) {
        return;
    }
    let mut words = s.split_whitespace();
    let Some(name) = words.next() else {
        return;
    };
    let name = NFS
        .iter()
        .map(|(n, _)| *n)
        .find(|n| *n == name)
        .unwrap_or(NFS[name.len() % NFS.len()].0);
    let _ = build(name, words);
}

/// Frames from the input: each is `[port, time step, len_hi, len_lo,
/// bytes...]`; the last one takes what is left.
fn frames(data: &[u8]) -> impl Iterator<Item = (usize, u64, &[u8])> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let (h, r) = rest.split_at(4);
        let len = usize::from(u16::from_be_bytes([h[2], h[3]])).min(r.len());
        let (f, r) = r.split_at(len);
        rest = r;
        Some((usize::from(h[0]), u64::from(h[1]), f))
    })
}

/// Run the frames through `nf`; every verdict must be sound and every
/// packet counted.
fn drive(mut nf: BoxedNf, data: &[u8]) -> BoxedNf {
    let ports = nf.port_count();
    let mut buf = [0u8; 2048];
    let mut now = Duration::ZERO;
    for (port, step, f) in frames(data) {
        // Time steps up to ~4 minutes, so entries expire.
        now += Duration::from_millis(step * step * step / 4);
        let len = f.len().min(buf.len());
        buf[..len].copy_from_slice(&f[..len]);
        // Ports past the NF's count test the adapters' check too.
        let in_port = port % (ports + 1);
        match nf.process(&mut buf, len, in_port, now) {
            Verdict::Forward { port, len } => {
                assert!(port < ports, "forward to port {port} of {ports}");
                assert!(len <= buf.len());
            }
            Verdict::Flood { ports: set, len } => {
                assert!(!set.contains(in_port), "flooded back to port {in_port}");
                assert_eq!(set.bits() & !PortSet::first(ports).bits(), 0);
                assert!(len <= buf.len());
            }
            Verdict::Drop(_) => {}
        }
    }
    let s = nf.stats();
    assert_eq!(s.packets_in, s.forwarded + s.dropped_total(), "{s:?}");
    nf
}

fn nf(name: &str, args: &str) -> BoxedNf {
    build(name, args.split_whitespace()).expect("the target's own options are valid")
}

/// The NAT (filtering chosen by the first byte).
pub fn nf_nat(data: &[u8]) {
    let filtering = ["endpoint", "address", "address-port"]
        [usize::from(data.first().copied().unwrap_or(0) % 3)];
    let n = nf(
        "nat",
        &format!("--ext-ip 203.0.113.1 --ports 1000-1063 --capacity 32 --expire 60s --filtering {filtering}"),
    );
    let _ = drive(n, data.get(1..).unwrap_or(&[]));
}

pub fn nf_bridge(data: &[u8]) {
    let b = nf(
        "bridge",
        "--ports 4 --capacity 8 --expire 10s --static 02:00:00:00:00:01@3",
    );
    let _ = drive(b, data);
}

pub fn nf_lb(data: &[u8]) {
    let lb = nf(
        "lb",
        "--vip 192.0.2.10 --flow-capacity 16 --flow-expire 1s --backend-expire 2s --table-size 251",
    );
    let _ = drive(lb, data);
}

pub fn nf_policer(data: &[u8]) {
    let _ = drive(nf("policer", "--capacity 8 --rate 1000 --burst 2000"), data);
}

pub fn nf_firewall(data: &[u8]) {
    let _ = drive(nf("firewall", "--capacity 16 --expire 1s"), data);
}

/// The router, built once per process (its DIR-24-8 table is 32 MiB):
/// its state across inputs is only the ICMP token bucket and counters.
pub fn nf_router(data: &[u8]) {
    static ROUTER: OnceLock<Mutex<Option<BoxedNf>>> = OnceLock::new();
    let mut r = ROUTER
        .get_or_init(|| Mutex::new(Some(router())))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let taken = r.take().unwrap_or_else(router);
    *r = Some(drive(taken, data));
}

fn router() -> BoxedNf {
    nf(
        "router",
        "--iface 0,10.0.0.1/24,02:00:00:00:00:01 --iface 1,192.0.2.1/24,02:00:00:00:00:02 \
         --iface 2,198.51.100.1/30,02:00:00:00:00:03 --route 0.0.0.0/0,1,192.0.2.254 \
         --route 172.16.0.0/12,2 --neighbor 192.0.2.254,02:00:00:00:00:fe \
         --neighbor 10.0.0.5,02:00:00:00:00:05 --icmp-rate 100",
    )
}
