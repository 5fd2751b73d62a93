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
//! | NAPT, RFC 3022/4787 | [`Nat`] | [`NatConfig`] |
//! | MAC-learning bridge | [`Bridge`] | [`BridgeConfig`] |
//! | Maglev load balancer | [`LoadBalancer`] | [`LbConfig`] |
//! | per-destination policer | [`Policer`] | [`PolicerConfig`] |
//! | stateful firewall | [`Firewall`] | [`FirewallConfig`] |
//! | DIR-24-8 LPM router | [`Router`] | [`RouterConfig`] |
//!
//! Flow tables have a fixed capacity allocated at construction
//! ([`table`]); the data path allocates nothing. Every packet is counted:
//! `packets_in == forwarded + dropped` ([`NfStats`]).
#![forbid(unsafe_code)]

mod bridge;
pub mod config;
mod firewall;
mod lb;
pub mod lpm;
pub mod maglev;
mod nat;
mod policer;
mod rewrite;
mod router;
pub mod table;
mod verdict;

pub use bridge::{Bridge, BridgeConfig, MacEntry, StaticEntry};
pub use config::{ConfigError, Ipv4Prefix, PortRange};
pub use firewall::{Firewall, FirewallConfig};
pub use lb::{Backend, BackendSpec, BackendsFull, LbConfig, LoadBalancer};
pub use nat::{Mapping, Nat, NatConfig};
pub use policer::{Policer, PolicerConfig};
pub use router::{Iface, Neighbor, Route, Router, RouterConfig};
pub use verdict::{DropReason, NetworkFunction, NfStats, PortId, PortSet, Verdict};

/// A per-instance hash seed, so table collisions cannot be precomputed.
pub(crate) fn seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0x006e_666b_6974_u64)
}
