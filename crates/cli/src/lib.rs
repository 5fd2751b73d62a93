//! The `nfkit` command's library: each subcommand is a module.
#![forbid(unsafe_code)]

pub mod bench;
pub mod bench_nf;
pub mod bench_pipeline;
pub mod bench_ports;
pub mod bench_vhost;
pub mod daemon;
pub mod demo;
pub mod doctor;
pub mod fwd;
pub mod ixgbe_port;
pub mod lab;
pub mod nf;
pub mod pktgen;
pub mod run;
pub mod stats;
pub mod testpmd;
