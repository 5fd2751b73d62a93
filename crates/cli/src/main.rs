//! The `nfkit` command. Each subcommand lives in the library
//! (`crates/cli/src/<name>.rs`); this file only parses arguments.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use nfkit::demo::{self, DemoOptions, Model};

#[derive(Parser)]
#[command(
    name = "nfkit",
    version,
    about = "User-space NIC drivers and a software-NIC pipeline for network functions"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Two simulated 82599s with a generator and a sink, forwarding between
    /// them (no root, no hugepages, no NIC).
    Demo {
        /// How long to run.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Driver model.
        #[arg(long, value_enum, default_value_t = Model::Queue)]
        model: Model,
        /// Frame size in bytes, without CRC (60 is the 64-byte minimum).
        #[arg(long, default_value_t = 60)]
        size: usize,
        /// Flows (UDP source ports) the generators cycle through.
        #[arg(long, default_value_t = 1024)]
        flows: usize,
    },
    /// Check this machine for hugepages, IOMMU/VFIO, device bindings and
    /// permissions, and print the fixes.
    Doctor,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Demo {
            seconds,
            model,
            size,
            flows,
        } => {
            if !(60..=1514).contains(&size) {
                bail!("--size {size}: frames are 60 to 1514 bytes (without CRC)");
            }
            let r = demo::run(&DemoOptions {
                seconds,
                model,
                frame_len: size,
                flows,
            })?;
            if !r.adds_up() {
                bail!("the counters do not add up: {r:?}");
            }
        }
        Cmd::Doctor => print!(
            "{}",
            nfkit::doctor::report(&nfkit::doctor::checks(&nfkit::doctor::System::live()))
        ),
    }
    Ok(())
}
