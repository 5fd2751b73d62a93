//! # nfkit-fuzz-harness: one function per fuzz target
//!
//! Each function takes the fuzzer's bytes and feeds them to one parser or
//! packet handler of nfkit; none may panic, hang or abort, whatever the
//! bytes (bad input is an error or a counted drop). The nightly-only
//! cargo-fuzz targets in the top-level `fuzz/` crate are one line each
//! around these; on stable, `tests/regressions.rs` replays the committed
//! inputs in `fuzz/regressions/TARGET/` (seeds, and every input that once
//! found a bug) through the same functions.
//!
//! [`TARGETS`] lists them by name (the name of the cargo-fuzz target and
//! of its regression directory).
#![forbid(unsafe_code)]

mod chains;
mod classifiers;
mod daemon;
mod devices;
mod ixgbe;
mod nfs;
mod offloads;
mod parsers;
mod tunnels;

pub use chains::packet_chains;
pub use classifiers::{cbpf, classifiers};
pub use daemon::daemon_requests;
pub use devices::{
    afpacket_ring, afxdp_ring, descriptor_chain, vhost_user_message, virtio_used_ring,
};
pub use ixgbe::ixgbe_hostile;
pub use nfs::{nf_bridge, nf_firewall, nf_lb, nf_nat, nf_options, nf_policer, nf_router};
pub use offloads::offloads;
pub use parsers::{lacp_frames, nfk_config, packet_views, pcap_reader, port_spec};
pub use tunnels::tunnels;

/// A fuzz target: its name and what it does with an input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("pcap_reader", pcap_reader),
    ("nfk_config", nfk_config),
    ("port_spec", port_spec),
    ("nf_options", nf_options),
    ("packet_views", packet_views),
    ("nf_nat", nf_nat),
    ("nf_bridge", nf_bridge),
    ("nf_lb", nf_lb),
    ("nf_policer", nf_policer),
    ("nf_firewall", nf_firewall),
    ("nf_router", nf_router),
    ("virtio_used_ring", virtio_used_ring),
    ("ixgbe_hostile", ixgbe_hostile),
    ("afpacket_ring", afpacket_ring),
    ("afxdp_ring", afxdp_ring),
    ("vhost_user_message", vhost_user_message),
    ("descriptor_chain", descriptor_chain),
    ("classifiers", classifiers),
    ("cbpf", cbpf),
    ("daemon_requests", daemon_requests),
    ("tunnels", tunnels),
    ("packet_chains", packet_chains),
    ("offloads", offloads),
    ("lacp_frames", lacp_frames),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// True if `text` holds a number above a million (decimal, or hex with
/// more than five digits). Table and pool sizes are not bounded by the
/// parsers yet (issue 14); until they are, inputs asking for gigabytes
/// are skipped rather than reported as out-of-memory findings.
pub(crate) fn has_huge_number(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let hex = b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
            let start = if hex { i + 2 } else { i };
            let mut j = start;
            while j < b.len() && (b[j].is_ascii_hexdigit() && hex || b[j].is_ascii_digit()) {
                j += 1;
            }
            let digits = &text[start..j];
            let huge = if hex {
                digits.len() > 5
            } else {
                digits.len() > 7 || digits.parse::<u64>().is_ok_and(|n| n > 1_000_000)
            };
            if huge {
                return true;
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    false
}
