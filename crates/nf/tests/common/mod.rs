//! Helpers shared by the NF tests.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::time::Duration;

use nfkit_nf::{NetworkFunction, Verdict};

pub const BUF: usize = 2048;

pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Run one frame through `nf` in a 2 KiB buffer; returns the verdict and
/// the frame as it would be sent (empty when dropped).
pub fn run(
    nf: &mut dyn NetworkFunction,
    frame: &[u8],
    port: usize,
    now: Duration,
) -> (Verdict, Vec<u8>) {
    let mut buf = vec![0u8; BUF.max(frame.len())];
    buf[..frame.len()].copy_from_slice(frame);
    let v = nf.process(&mut buf, frame.len(), port, now);
    let out = match v {
        Verdict::Forward { len, .. } | Verdict::Flood { len, .. } => buf[..len].to_vec(),
        Verdict::Drop(_) => Vec::new(),
    };
    (v, out)
}

pub fn assert_counts_balance(nf: &dyn NetworkFunction) {
    let s = nf.stats();
    assert_eq!(s.packets_in, s.forwarded + s.dropped_total(), "{s:?}");
}
