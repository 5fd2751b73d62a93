//! # nfkit-bench: the benchmarks, apart from the product
//!
//! Every `nfkit bench X` case lives here and runs as the binary
//! `nfkit-bench X` (`nfkit bench` starts it when it is installed beside
//! `nfkit`, as `cargo build --release` leaves it):
//!
//! - [`drivers`]: agent vs queue model on TinyNF's functions, Mpps and
//!   instructions per packet under callgrind ([`callgrind`] runs the
//!   hidden lock-step entry points of this binary under valgrind);
//! - [`nfs`]: every NF on both models over simulated 82599s;
//! - [`ports`], [`vhost`], [`pipeline`]: nfkit against dpdk-testpmd on
//!   the same wiring ([`testpmd`] is the harness);
//! - [`rfc2544`]: RFC 2544 throughput, latency, frame loss and
//!   back-to-back for any DUT over vhost-user or simulated 82599s;
//! - [`traffic`]: the many-flow shaper's accuracy and cost (issue 21);
//! - [`classify`]: the rule-table classifiers against table size (issue 20);
//! - [`offloads`]: SoftNIC's Table 1, TCP over VXLAN through the kernel
//!   and through nfkit's TSO/LRO over TAP (issue 19).
#![forbid(unsafe_code)]

pub mod callgrind;
pub mod classify;
pub mod control;
pub mod drivers;
pub mod idle;
pub mod nfs;
pub mod offloads;
pub mod pipeline;
pub mod ports;
pub mod rfc2544;
pub mod soft_tso;
pub mod testpmd;
pub mod traffic;
pub mod vhost;
