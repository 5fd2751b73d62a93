//! The `nfkit` command's own code: argument parsing that clap does not
//! do ([`nf`]), printing ([`print`]), and starting `nfkit-bench`
//! ([`bench`]). The work is in `nfkit-lab` and the crates below it.
#![forbid(unsafe_code)]

pub mod bench;
pub mod ctl;
pub mod nf;
pub mod print;
