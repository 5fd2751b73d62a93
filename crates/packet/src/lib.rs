//! # nfkit-packet: typed, zero-copy packet headers
//!
//! Views over `&[u8]` / `&mut [u8]` for the hot path: [`Ethernet`],
//! [`Vlan`], [`Ipv4`] (options included), [`Tcp`], [`Udp`], [`Icmp`].
//! Each view's constructor checks the bytes its accessors will read and
//! returns a [`PacketError`] for truncated or inconsistent input, so no
//! input makes a view panic. [`parse_ipv4`] finds all offsets of a frame
//! in one pass.
//!
//! The views are hand-written instead of using `etherparse`'s slices: an
//! NF reads a handful of fields at fixed offsets, and a few direct loads
//! after one length check cost less than etherparse's full slicing (which
//! validates and decodes every layer up front). `etherparse` is used on
//! the slow path: the [`FrameBuilder`] for tests and generators and
//! [`verify_checksums`], which makes it an independent oracle in tests.
//!
//! Also: the RFC 1071 checksum and RFC 1624 incremental updates
//! ([`checksum`]), the 5-tuple [`FlowKey`] with a fast seeded hash, and
//! (feature `proptest`) strategies for arbitrary and malformed frames.
#![forbid(unsafe_code)]

pub mod builder;
pub mod checksum;
mod error;
mod ether;
mod flow;
pub mod gso;
mod ipv4;
mod l4;
mod layout;
pub mod offload;
pub mod offload_meta;
#[cfg(feature = "proptest")]
pub mod strategy;

pub use builder::{arp_request, verify_checksums, FrameBuilder, L4};
pub use error::{Header, PacketError};
pub use ether::{ethertype, BadMac, Ethernet, MacAddr, Vlan};
pub use flow::{mix, FlowKey};
pub use ipv4::{proto, Ipv4};
pub use l4::{
    icmp_type, is_error_type, Icmp, Tcp, Udp, ICMP_CHECKSUM_AT, TCP_CHECKSUM_AT, UDP_CHECKSUM_AT,
};
pub use layout::{has_ports, parse_ipv4, parse_l2, Fragment, Ipv4Layout, L2Layout};
