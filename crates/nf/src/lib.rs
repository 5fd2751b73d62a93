//! # nfkit-nf: network functions as pure packet logic
//!
//! Six NFs, each written once against [`NetworkFunction`]: a packet
//! buffer and its length, the input port, and `now` in; a [`Verdict`]
//! out (drop with a counted [`DropReason`], forward on a port, or flood a
//! [`PortSet`]). No NF knows about drivers or ports; adapters (agent
//! handler, queue-model loop, pipeline module) wrap them.
//!
//! | NF | type | config |
//! |---|---|---|
//! | NAPT, RFC 3022/4787/5382/5508 | [`Nat`] | [`NatConfig`] |
//! | MAC-learning bridge | [`Bridge`] | [`BridgeConfig`] |
//! | Maglev load balancer | [`LoadBalancer`] | [`LbConfig`] |
//! | per-destination policer | [`Policer`] | [`PolicerConfig`] |
//! | stateful firewall | [`Firewall`] | [`FirewallConfig`] |
//! | DIR-24-8 LPM router | [`Router`] | [`RouterConfig`] |
//!
//! ```
//! use std::time::Duration;
//! use nfkit_nf::{Nat, NetworkFunction, Verdict};
//! use nfkit_packet::FrameBuilder;
//!
//! let mut nat = Nat::new("--ext-ip 203.0.113.1 --ports 1024-65535 --expire 60s".parse()?)?;
//! let frame = FrameBuilder::udp(("10.0.0.5".parse()?, 5555), ("8.8.8.8".parse()?, 53)).build();
//! let mut buf = [0u8; 2048]; // the packet's whole buffer: NFs may grow a packet
//! buf[..frame.len()].copy_from_slice(&frame);
//! let now = Duration::from_secs(1); // read once per batch by the caller
//! match nat.process(&mut buf, frame.len(), 0 /* LAN */, now) {
//!     Verdict::Forward { port, len } => assert_eq!((port, len), (1, frame.len())),
//!     other => panic!("{other:?}"),
//! }
//! assert_eq!(nat.stats().forwarded, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`build`] makes any NF from its name and CLI options.
//!
//! Flow tables have a fixed capacity allocated at construction
//! ([`table`]); the data path allocates nothing. Every packet is counted:
//! `packets_in == forwarded + dropped` ([`NfStats`]).
#![forbid(unsafe_code)]

pub mod adapt;
mod bridge;
pub mod config;
mod firewall;
mod lb;
pub mod lpm;
pub mod maglev;
mod nat;
mod policer;
pub mod registry;
mod rewrite;
mod router;
pub mod table;
mod verdict;
pub mod workload;

pub use bridge::{Bridge, BridgeConfig, MacEntry, StaticEntry};
pub use config::{ConfigError, Ipv4Prefix, PortRange};
pub use firewall::{Firewall, FirewallConfig};
pub use lb::{Backend, BackendSpec, BackendsFull, LbConfig, LoadBalancer};
pub use nat::{ExternalAddr, Filtering, Mapping, Nat, NatConfig, NatTimeouts, MAX_EXTERNAL};
pub use policer::{Policer, PolicerConfig};
pub use registry::{build, build_for_ports, nf_list, BoxedNf, NFS};
pub use router::{Iface, Neighbor, Route, Router, RouterConfig};
pub use verdict::{DropReason, NetworkFunction, NfStats, PortId, PortSet, Verdict};

/// A per-instance hash seed, so table collisions cannot be precomputed.
pub(crate) fn seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0x006e_666b_6974_u64)
}
