//! The `nfkit` command's library: each subcommand is a module.
#![forbid(unsafe_code)]

pub mod doctor;
pub mod pktgen;
pub mod stats;
