//! The `nfkit` command: parses arguments, calls the library that does
//! the work (`nfkit-lab`: fwd, demo, nf, pktgen, run, doctor) and prints
//! the results (`nfkit::print`). `nfkit bench` runs `nfkit-bench`.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use nfkit_lab::demo::{self, DemoOptions};
use nfkit_port::Model;

#[derive(Parser)]
#[command(
    name = "nfkit",
    version,
    about = "User-space NIC drivers and a software-NIC pipeline for network functions"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Take a pci: device even though the kernel is using it (one of its
    /// interfaces is up, addressed or routed): that cuts its traffic off.
    #[arg(long, global = true)]
    force: bool,
    /// Show only errors (warnings are shown by default; RUST_LOG overrides).
    #[arg(long, global = true)]
    quiet: bool,
    /// Cores for the data path, DPDK style (`2`, `0-3`, `1,3`): fwd, nf
    /// and pktgen pin it to the first (default: the core it starts on);
    /// `run` and `daemon` pin workers without a core to them in turn
    /// (default: the allowed cores in turn).
    #[arg(long, global = true)]
    cores: Option<String>,
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
        #[arg(long, value_parser = parse_model, default_value = "queue")]
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
        #[arg(long, value_parser = parse_model, default_value = "queue")]
        model: Model,
        /// Stop after this many seconds (default: Ctrl-C, or the end of a
        /// finite source).
        #[arg(long)]
        seconds: Option<u64>,
        /// Queues per port (RSS spreads flows over the receive queues).
        #[arg(long, default_value_t = 1)]
        queues: usize,
        /// Pure polling: never sleep when idle (lowest latency, one core
        /// at 100%).
        #[arg(long)]
        poll: bool,
        /// Hybrid polling: sleep after this many microseconds without a
        /// packet, until a port wakes the loop.
        #[arg(long, default_value_t = 200)]
        idle_us: u64,
    },
    /// Generate UDP traffic with sequence numbers on one or more ports.
    Pktgen {
        #[arg(required = true)]
        ports: Vec<String>,
        /// Frame size without CRC, or a range for random sizes: 60, 60-1514.
        #[arg(long, default_value = "60")]
        size: nfkit_lab::pktgen::Sizes,
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
    /// Benchmarks that print figures: runs `nfkit-bench` (built beside
    /// `nfkit` by `cargo build --release`); `nfkit bench --help` lists them.
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its options.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Run a pipeline described in FILE (the SoftNIC config language).
    Run {
        file: std::path::PathBuf,
        /// Stop after this many seconds (default: Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
        /// Pure polling: idle workers never sleep (lowest latency, one
        /// core per worker at 100%).
        #[arg(long)]
        poll: bool,
        /// Hybrid polling: a worker sleeps after this many microseconds
        /// without a packet, until a port, its next timer or a control
        /// request wakes it.
        #[arg(long, default_value_t = 200)]
        idle_us: u64,
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
        /// Pure polling: idle workers never sleep.
        #[arg(long)]
        poll: bool,
        /// Hybrid polling: a worker sleeps after this many microseconds
        /// without a packet.
        #[arg(long, default_value_t = 200)]
        idle_us: u64,
        /// Largest request accepted, in bytes.
        #[arg(long, default_value_t = nfkit_lab::daemon::DEFAULT_MAX_REQUEST)]
        max_request: usize,
        /// A .nfk file whose pipeline is built before serving (an error
        /// names its line and the daemon does not start).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Serve Prometheus metrics at http://HOST:PORT/metrics (loopback
        /// only unless --allow-remote).
        #[arg(long, value_name = "HOST:PORT")]
        metrics: Option<String>,
    },
    /// Drive a running `nfkit daemon` in bessctl's habits: show, add,
    /// connect, command, run, monitor, daemon reset|stop.
    Ctl {
        /// The daemon's Unix socket (default: the daemon's default).
        #[arg(long, global = true)]
        socket: Option<std::path::PathBuf>,
        /// Talk to the daemon over TCP HOST:PORT (its --grpc-url) instead.
        #[arg(long, global = true, conflicts_with = "socket")]
        grpc_url: Option<String>,
        #[command(subcommand)]
        cmd: nfkit::ctl::CtlCmd,
    },
    /// Print a shell completion script: `nfkit completions bash >
    /// /etc/bash_completion.d/nfkit` (also zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Check this machine for hugepages, IOMMU/VFIO, device bindings and
    /// permissions, and print the fixes.
    Doctor,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    nfkit_lab::init_tracing_quiet(cli.quiet);
    let force = cli.force;
    let cores = cli
        .cores
        .as_deref()
        .map(nfkit_lab::cores::parse)
        .transpose()?;
    match cli.cmd {
        Cmd::Demo {
            seconds,
            model,
            size,
            flows,
        } => {
            let opts = DemoOptions {
                seconds,
                model,
                frame_len: size,
                flows,
            };
            let r = demo::run(&opts)?;
            nfkit::print::demo_summary(&opts, &r);
            if !r.adds_up() {
                bail!("the counters do not add up: {r:?}");
            }
        }
        Cmd::Fwd {
            ports,
            model,
            seconds,
            queues,
            poll,
            idle_us,
        } => nfkit_lab::fwd::run(&nfkit_lab::fwd::FwdArgs {
            ports: [ports[0].clone(), ports[1].clone()],
            model,
            seconds,
            queues,
            force,
            cores,
            idle: idle_options(poll, idle_us),
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
            use nfkit_lab::pktgen::{GenConfig, PktgenArgs, RateLimit};
            let rate = rate_pps
                .map(RateLimit::Pps)
                .or(rate_mbit.map(RateLimit::WireMbit));
            let seconds = if count.is_none() && seconds.is_none() {
                None
            } else {
                seconds
            };
            let results = nfkit_lab::pktgen::run(&PktgenArgs {
                ports,
                gen: GenConfig {
                    sizes: size,
                    flows: flows.max(1).into(),
                    rate,
                    ..GenConfig::default()
                },
                count,
                seconds,
                rx,
                force,
                cores,
            })?;
            nfkit::print::pktgen_results(&results, rx);
        }
        Cmd::Nf { args } if nfkit::nf::wants_help(&args) => println!("{}", nfkit::nf::usage()),
        Cmd::Nf { args } => {
            let mut args = nfkit::nf::parse_args(&args)?;
            args.force |= force;
            if cores.is_some() {
                args.cores = cores;
            }
            let summary = nfkit_lab::nf::run(&args)?;
            nfkit::nf::print_summary(&args, &summary);
            summary.check()?;
        }
        Cmd::Bench { args } => std::process::exit(nfkit::bench::run(&args)?),
        Cmd::Run {
            file,
            seconds,
            poll,
            idle_us,
        } => print!(
            "{}",
            nfkit_lab::run::run(
                &file,
                seconds,
                idle_options(poll, idle_us),
                cores.as_deref()
            )?
        ),
        Cmd::Daemon {
            socket,
            grpc_url,
            allow_remote,
            max_request,
            config,
            metrics,
            poll,
            idle_us,
        } => nfkit_lab::daemon::run(nfkit_lab::daemon::Options {
            socket,
            grpc_url,
            allow_remote,
            max_request,
            config,
            metrics,
            idle: idle_options(poll, idle_us),
            cores,
            ..Default::default()
        })?,
        Cmd::Ctl {
            socket,
            grpc_url,
            cmd,
        } => nfkit::ctl::run(nfkit_ctl::Target::new(socket, grpc_url), cmd)?,
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "nfkit", &mut std::io::stdout());
        }
        Cmd::Doctor => {
            use nfkit_lab::doctor::{checks, failures, report, System};
            let checks = checks(&System::live());
            print!("{}", report(&checks));
            let failed = failures(&checks);
            if failed > 0 {
                bail!("{failed} check(s) failed (see the fixes above)");
            }
        }
    }
    Ok(())
}

/// `--model agent|queue`.
fn parse_model(s: &str) -> Result<Model, String> {
    match s.parse()? {
        m @ (Model::Agent | Model::Queue) => Ok(m),
        m => Err(format!("--model {m}: expected agent or queue")),
    }
}

/// `--poll` / `--idle-us N` as idle options.
fn idle_options(poll: bool, idle_us: u64) -> nfkit_port::IdleOptions {
    if poll {
        nfkit_port::IdleOptions::polling()
    } else {
        nfkit_port::IdleOptions {
            sleep_after: Some(std::time::Duration::from_micros(idle_us)),
            ..nfkit_port::IdleOptions::default()
        }
    }
}
