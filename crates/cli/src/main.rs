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
    /// Forward between two ports in both directions, touching each packet.
    Fwd {
        /// Two port specs: sim:N, pci:ADDR, afxdp:IFACE[:Q], afpacket:IFACE,
        /// tap:NAME, pcap:FILE[,timing=file][,loop=N], pcap-out:FILE, null:,
        /// vhost-user:PATH[,queues=N], virtio-user:PATH[,queues=N].
        #[arg(num_args = 2, required = true)]
        ports: Vec<String>,
        #[arg(long, value_enum, default_value_t = Model::Queue)]
        model: Model,
        /// Stop after this many seconds (default: Ctrl-C, or the end of a
        /// finite source).
        #[arg(long)]
        seconds: Option<u64>,
        /// Queues per port (RSS spreads flows over the receive queues).
        #[arg(long, default_value_t = 1)]
        queues: usize,
    },
    /// Generate UDP traffic with sequence numbers on one or more ports.
    Pktgen {
        #[arg(required = true)]
        ports: Vec<String>,
        /// Frame size without CRC, or a range for random sizes: 60, 60-1514.
        #[arg(long, default_value = "60")]
        size: nfkit::pktgen::Sizes,
        /// Flows (consecutive UDP source ports).
        #[arg(long, default_value_t = 1)]
        flows: u16,
        /// Packets per second per port.
        #[arg(long, conflicts_with = "rate_mbit")]
        rate_pps: Option<f64>,
        /// Mbit/s per port on the wire (with CRC and framing).
        #[arg(long)]
        rate_mbit: Option<f64>,
        /// Packets per port, then stop.
        #[arg(long)]
        count: Option<u64>,
        #[arg(long)]
        seconds: Option<u64>,
        /// Receive the traffic back on the same ports: loss and latency.
        #[arg(long)]
        rx: bool,
    },
    /// Run a network function between ports: `nfkit nf NAME --lan SPEC
    /// --wan SPEC [--model agent|queue] [--seconds N] [--table] [NF
    /// options]` (`nfkit nf --help` lists everything).
    #[command(disable_help_flag = true)]
    Nf {
        /// NAME, the ports and options, and the NF's own options.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Benchmarks that print figures.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
    /// (internal) the lock-step run measured under callgrind.
    #[command(hide = true)]
    BenchLockstep {
        #[arg(long, value_enum)]
        model: Model,
        #[arg(long, value_enum)]
        nf: nfkit::bench::Nf,
        #[arg(long)]
        packets: u64,
    },
    /// (internal) the lock-step NF run measured under callgrind.
    #[command(hide = true)]
    BenchNfLockstep {
        #[arg(long, value_enum)]
        model: Model,
        #[arg(long)]
        nf: String,
        #[arg(long)]
        packets: u64,
    },
    /// Run a pipeline described in FILE (the SoftNIC config language).
    Run {
        file: std::path::PathBuf,
        /// Stop after this many seconds (default: Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// A long-running pipeline driven over gRPC, wire-compatible with
    /// BESS's bess.pb.BESSControl (pybess, bessctl). Stops on SIGTERM/SIGINT.
    Daemon {
        /// Unix socket to listen on (mode 0660).
        #[arg(long)]
        socket: Option<std::path::PathBuf>,
        /// Also listen on TCP HOST:PORT (BESS tools use localhost:10514).
        #[arg(long)]
        grpc_url: Option<String>,
        /// Allow a --grpc-url that is not a loopback address.
        #[arg(long)]
        allow_remote: bool,
        /// Largest request accepted, in bytes.
        #[arg(long, default_value_t = nfkit_daemon::DEFAULT_MAX_REQUEST)]
        max_request: usize,
    },
    /// Check this machine for hugepages, IOMMU/VFIO, device bindings and
    /// permissions, and print the fixes.
    Doctor,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Every NF on both driver models over simulated 82599s with 60,000
    /// flows: Mpps per core and instructions per packet (callgrind).
    Nfs {
        /// Seconds per free-running measurement.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Packets per callgrind run.
        #[arg(long, default_value_t = 20_000)]
        packets: u64,
        /// Only these NFs (default: all).
        #[arg(long = "nf")]
        nfs: Vec<String>,
    },
    /// Agent vs queue model: Mpps per core against the free-running model
    /// and instructions per packet under callgrind, for TinyNF's no-op,
    /// MAC write and MAC lookup.
    Drivers {
        /// Seconds per free-running measurement.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Packets per callgrind run.
        #[arg(long, default_value_t = 20_000)]
        packets: u64,
    },
    /// The vhost-user path: nfkit's virtio-user against DPDK's net_vhost
    /// and DPDK's virtio_user against nfkit's vhost-user backend, beside
    /// DPDK's own pair (issue #7). Needs root and dpdk-testpmd.
    Vhost {
        /// Measured seconds per pairing (after 2 s of warm-up).
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Frames in flight (sent by the frontend at start).
        #[arg(long, default_value_t = 32)]
        burst: usize,
    },
    /// nfkit's AF_XDP, AF_PACKET and null ports against DPDK's PMDs
    /// (dpdk-testpmd io forwarding) on the same veth pair, same traffic,
    /// same core (issue #4). Needs root and dpdk-testpmd.
    Ports {
        /// Measured seconds per side and case (after 1 s of warm-up).
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Frames sent out of each veth end at start (testpmd --burst,
        /// which takes 1 to 512).
        #[arg(long, default_value_t = 32, value_parser = parse_burst)]
        burst: usize,
        /// Only these cases (default: af-xdp, af-packet and null, the
        /// ones with targets; af-packet-v3 is on request).
        #[arg(long = "case", value_enum)]
        cases: Vec<nfkit::bench_ports::Case>,
    },
    /// Cycles per packet and Mpps of the SoftNIC pipeline (Source -> Sink,
    /// PortInc -> PortOut over null ports) beside dpdk-testpmd io
    /// forwarding over net_null (issue #5). Needs root for DPDK.
    Pipeline {
        /// Measured seconds per case (after 1 s of warm-up).
        #[arg(long, default_value_t = 3)]
        seconds: u64,
    },
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
        Cmd::Fwd {
            ports,
            model,
            seconds,
            queues,
        } => nfkit::fwd::run(&nfkit::fwd::FwdArgs {
            ports: [ports[0].clone(), ports[1].clone()],
            model,
            seconds,
            queues,
        })?,
        Cmd::Pktgen {
            ports,
            size,
            flows,
            rate_pps,
            rate_mbit,
            count,
            seconds,
            rx,
        } => {
            use nfkit::pktgen::{GenConfig, PktgenArgs, RateLimit};
            let rate = rate_pps
                .map(RateLimit::Pps)
                .or(rate_mbit.map(RateLimit::WireMbit));
            let seconds = if count.is_none() && seconds.is_none() {
                None
            } else {
                seconds
            };
            nfkit::pktgen::run(&PktgenArgs {
                ports,
                gen: GenConfig {
                    sizes: size,
                    flows: flows.max(1),
                    rate,
                    ..GenConfig::default()
                },
                count,
                seconds,
                rx,
            })?;
        }
        Cmd::Nf { args } if nfkit::nf::wants_help(&args) => println!("{}", nfkit::nf::usage()),
        Cmd::Nf { args } => {
            nfkit::nf::run(&nfkit::nf::parse_args(&args)?)?;
        }
        Cmd::Bench { what } => match what {
            BenchCmd::Drivers { seconds, packets } => nfkit::bench::drivers(seconds, packets)?,
            BenchCmd::Ports {
                seconds,
                burst,
                cases,
            } => nfkit::bench_ports::ports(&nfkit::bench_ports::PortsOptions {
                cases: if cases.is_empty() {
                    nfkit::bench_ports::Case::ALL.to_vec()
                } else {
                    cases
                },
                seconds,
                burst,
            })?,
            BenchCmd::Vhost { seconds, burst } => {
                nfkit::bench_vhost::vhost(&nfkit::bench_vhost::VhostOptions { seconds, burst })?;
            }
            BenchCmd::Pipeline { seconds } => nfkit::bench_pipeline::pipeline(seconds)?,
            BenchCmd::Nfs {
                seconds,
                packets,
                nfs,
            } => nfkit::bench_nf::nfs(seconds, packets, &nfs)?,
        },
        Cmd::BenchNfLockstep { model, nf, packets } => {
            let n = nfkit::bench_nf::lockstep(model, &nf, packets)?;
            println!("forwarded {n}");
        }
        Cmd::BenchLockstep { model, nf, packets } => {
            let n = nfkit::bench::lockstep(model, nf, packets)?;
            println!("forwarded {n}");
        }
        Cmd::Run { file, seconds } => print!("{}", nfkit::run::run(&file, seconds)?),
        Cmd::Daemon {
            socket,
            grpc_url,
            allow_remote,
            max_request,
        } => nfkit::daemon::run(nfkit_daemon::Options {
            socket,
            grpc_url,
            allow_remote,
            max_request,
            ..Default::default()
        })?,
        Cmd::Doctor => {
            let checks = nfkit::doctor::checks(&nfkit::doctor::System::live());
            print!("{}", nfkit::doctor::report(&checks));
            let failed = nfkit::doctor::failures(&checks);
            if failed > 0 {
                bail!("{failed} check(s) failed (see the fixes above)");
            }
        }
    }
    Ok(())
}

/// `--burst` of `bench ports`: testpmd refuses bursts outside 1..=512.
fn parse_burst(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=512).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} frames: testpmd takes bursts of 1 to 512")),
        Err(e) => Err(e.to_string()),
    }
}
