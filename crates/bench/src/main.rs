//! `nfkit-bench`: the benchmarks of `nfkit bench` (which starts this
//! binary), and the lock-step entry points callgrind measures.

use anyhow::Result;
use clap::{Parser, Subcommand};
use nfkit_port::Model;

#[derive(Parser)]
#[command(
    name = "nfkit-bench",
    version,
    about = "nfkit's benchmarks (also run as `nfkit bench ...`)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
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
        cases: Vec<nfkit_bench::ports::Case>,
    },
    /// Cycles per packet and Mpps of the SoftNIC pipeline (Source -> Sink,
    /// PortInc -> PortOut over null ports) beside dpdk-testpmd io
    /// forwarding over net_null (issue #5). Needs root for DPDK.
    Pipeline {
        /// Measured seconds per case (after 1 s of warm-up).
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Only these cases (source-sink, port-inc-out), free-running,
        /// without the DPDK and callgrind runs.
        #[arg(long = "case")]
        cases: Vec<String>,
    },
    /// The daemon's control plane over gRPC: GetPortStats requests/s, module
    /// add/connect/remove cycles/s, and the data path's cycles per packet
    /// unpolled vs polled 100 times a second (issue 16).
    Control {
        /// Measured seconds per figure.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Pairs of data-path runs (unpolled and polled, ABBA order);
        /// medians reported.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// RFC 2544 (§26.1-§26.4): throughput at a loss bound, latency at
    /// load steps, frame loss rate and back-to-back bursts, for any DUT
    /// over vhost-user, simulated 82599s or veth; a table while it runs, JSON
    /// of every trial and plots (SVG, PNG) in --out.
    Rfc2544 {
        /// DUT: fwd, nf:NAME or pipeline:FILE, each optionally @agent or
        /// @queue; or the yardsticks testpmd:io, testpmd:macswap (DPDK;
        /// vhost or veth) and kernel:forward, kernel:bridge (a namespace;
        /// veth). Repeat for several. Default: fwd@queue.
        #[arg(long = "dut")]
        duts: Vec<String>,
        /// Wiring (repeat for several): vhost, sim or veth (two veth pairs,
        /// the tester on afpacket:; needs root). Default: vhost.
        #[arg(long = "wiring", value_enum)]
        wirings: Vec<nfkit_bench::rfc2544::dut::Wiring>,
        /// Frame sizes with FCS (64..1518) or imix (repeat or comma-separate).
        /// Default: 64,128,256,512,1024,1280,1518,imix.
        #[arg(long = "size", value_delimiter = ',')]
        sizes: Vec<nfkit_bench::rfc2544::Frame>,
        /// Flow counts, 1 to 65,536 (repeat or comma-separate). Default: 1.
        #[arg(long = "flows", value_delimiter = ',')]
        flows: Vec<u32>,
        /// Loss bound in percent (0: RFC 2544's zero loss).
        #[arg(long, default_value_t = 0.1)]
        loss: f64,
        /// Seconds per trial.
        #[arg(long, default_value_t = 5.0)]
        trial: f64,
        /// Trials per offered rate (the median counts).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Search resolution, percent of the rate.
        #[arg(long, default_value_t = 1.0)]
        resolution: f64,
        /// Highest load offered, percent of the line rate.
        #[arg(long, default_value_t = 100.0)]
        max_load: f64,
        /// Longest back-to-back burst tried (frames).
        #[arg(long, default_value_t = 1 << 20)]
        max_burst: u64,
        /// Tests to run (default: all).
        #[arg(long = "test", value_enum, value_delimiter = ',')]
        tests: Vec<nfkit_bench::rfc2544::Test>,
        /// Directory for the JSON and the plots.
        #[arg(long, default_value = "rfc2544-out")]
        out: std::path::PathBuf,
        /// Tester's core and DUT's core.
        #[arg(long, default_value = "0,1", value_delimiter = ',', num_args = 2)]
        cores: Vec<usize>,
        /// A smoke run: 0.1 s trials, one repeat, 10% resolution, 64 and
        /// 1518 B unless --size is given, bursts up to 4,096.
        #[arg(long)]
        quick: bool,
        /// Before the cases, check the generator once: its rate paced and
        /// flat out, against DPDK testpmd's txonly into the same kind of
        /// sink, and its timestamps' resolution (needs dpdk-testpmd).
        #[arg(long)]
        cross_check: bool,
    },
    /// An idle forwarder per port kind, pure polling vs hybrid polling:
    /// its thread's share of a core with no traffic, at 1 and 100 kpps,
    /// the wake-up latency of the first frame after 50 ms of quiet (p50,
    /// p99), and its cycles per packet at saturation (median of 5).
    /// Needs root (issue 24).
    Idle {
        /// Seconds of quiet measured per case.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Wake-up probes per case.
        #[arg(long, default_value_t = 50)]
        samples: usize,
        /// Only these kinds: af-packet, af-xdp, tap, vhost-user,
        /// virtio-user, pipeline, fwd-queue, fwd-agent (default: all).
        #[arg(long = "kind")]
        kinds: Vec<String>,
    },
    /// RateLimit shaping 1 to 4,096 flows at 1-11 Mbit/s each: per-flow
    /// accuracy, inter-packet-gap sigma and cycles per packet at the
    /// pipeline's output (issue 21, SoftNIC §6.2).
    Traffic {
        /// Measured seconds per flow count (after 1 s of warm-up).
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Smoke run: FlowDirector at 1k entries only, one short
        /// balancing run.
        #[arg(long)]
        quick: bool,
    },
    /// Cycles per packet of ExactMatch, WildcardMatch, IPLookup, ACL and
    /// BPF against table size (1k, 64k, 1M entries where the class
    /// allows), one core (issue 20).
    Classify {
        /// Packets per case (the linear ACL and BPF cases take fewer).
        #[arg(long, default_value_t = 2_000_000)]
        packets: usize,
        /// Only the 1k-entry cases (a smoke run).
        #[arg(long)]
        quick: bool,
    },
    /// SoftNIC's Table 1 (issue 19): TCP over VXLAN between two
    /// namespaces through the kernel's VXLAN and through nfkit's software
    /// TSO/LRO over a TAP with vnet headers: Gbit/s and cycles per byte
    /// of every participant, softirq included; and the 82599's driver
    /// instructions per 64 KB TSO send. Needs root, iperf3 and ethtool.
    Offloads {
        /// Bytes per transfer (iperf3 -n; K, M, G suffixes).
        #[arg(long, default_value = "1G")]
        bytes: String,
        /// TCP streams per transfer (iperf3 -P).
        #[arg(long, default_value_t = 1)]
        streams: usize,
        /// Underlay set-ups (default: wire, then defaults).
        #[arg(long = "underlay", value_enum)]
        underlays: Vec<nfkit_bench::offloads::Underlay>,
        /// 82599 TSO sends measured under callgrind (0: skip).
        #[arg(long, default_value_t = 2_000)]
        sends: u64,
    },
    /// (internal) the lock-step run measured under callgrind.
    #[command(hide = true)]
    BenchLockstep {
        #[arg(long, value_parser = parse_model)]
        model: Model,
        #[arg(long, value_enum)]
        nf: nfkit_bench::drivers::Nf,
        #[arg(long)]
        packets: u64,
    },
    /// (internal) the pipeline's lock-step run measured under callgrind.
    #[command(hide = true)]
    BenchPipelineLockstep {
        #[arg(long)]
        case: String,
        #[arg(long, default_value_t = nfkit_bench::pipeline::LOCKSTEP_ROUNDS)]
        rounds: u64,
    },
    /// (internal) the pipeline's software TSO alone, lock-step, for
    /// callgrind (`nfkit_bench::soft_tso`).
    #[command(hide = true)]
    SoftTsoLockstep {
        #[arg(long, default_value_t = 200)]
        frames: usize,
    },
    /// (internal) the lock-step 82599 TSO sends measured under callgrind.
    #[command(hide = true)]
    BenchTsoLockstep {
        #[arg(long)]
        sends: u64,
    },
    /// (internal) the RateLimit shaper alone, every flow backlogged, for
    /// callgrind: `valgrind --tool=callgrind --toggle-collect='*shaper_round*'
    /// nfkit-bench shaper-lockstep --flows N --packets P`.
    #[command(hide = true)]
    ShaperLockstep {
        #[arg(long)]
        flows: usize,
        #[arg(long, default_value_t = 1_000_000)]
        packets: u64,
    },
    /// (internal) the lock-step NF run measured under callgrind.
    #[command(hide = true)]
    BenchNfLockstep {
        #[arg(long, value_parser = parse_model)]
        model: Model,
        #[arg(long)]
        nf: String,
        #[arg(long)]
        packets: u64,
    },
}

fn main() -> Result<()> {
    nfkit_lab::init_tracing();
    match Cli::parse().cmd {
        Cmd::Drivers { seconds, packets } => nfkit_bench::drivers::drivers(seconds, packets)?,
        Cmd::Idle {
            seconds,
            samples,
            kinds,
        } => {
            nfkit_bench::idle::idle(&kinds, seconds, samples)?;
        }
        Cmd::Ports {
            seconds,
            burst,
            cases,
        } => nfkit_bench::ports::ports(&nfkit_bench::ports::PortsOptions {
            cases: if cases.is_empty() {
                nfkit_bench::ports::Case::ALL.to_vec()
            } else {
                cases
            },
            seconds,
            burst,
        })?,
        Cmd::Vhost { seconds, burst } => {
            nfkit_bench::vhost::vhost(&nfkit_bench::vhost::VhostOptions { seconds, burst })?;
        }
        Cmd::Rfc2544 {
            duts,
            wirings,
            sizes,
            flows,
            loss,
            trial,
            repeats,
            resolution,
            max_load,
            max_burst,
            tests,
            out,
            cores,
            quick,
            cross_check,
        } => {
            use nfkit_bench::rfc2544::{dut::Dut, dut::Wiring, Frame, Options, Test};
            let duts = if duts.is_empty() {
                vec!["fwd@queue".to_string()]
            } else {
                duts
            };
            let frames = match (sizes.is_empty(), quick) {
                (false, _) => sizes,
                (true, true) => vec![Frame::Fixed(64), Frame::Fixed(1518)],
                (true, false) => Frame::ALL.to_vec(),
            };
            if !(trial.is_finite() && trial > 0.0 && trial <= 3600.0) {
                anyhow::bail!("--trial {trial}: takes more than 0 and up to 3600 seconds");
            }
            let opts = Options {
                cross_check,
                duts: duts.iter().map(|d| Dut::parse(d)).collect::<Result<_>>()?,
                wirings: if wirings.is_empty() {
                    vec![Wiring::Vhost]
                } else {
                    wirings
                },
                frames,
                flows: if flows.is_empty() { vec![1] } else { flows },
                loss_pct: loss,
                trial: std::time::Duration::from_secs_f64(if quick { 0.1 } else { trial }),
                repeats: if quick { 1 } else { repeats },
                resolution_pct: if quick { 10.0 } else { resolution },
                max_load_pct: max_load,
                max_burst: if quick {
                    max_burst.min(4096)
                } else {
                    max_burst
                },
                tests: if tests.is_empty() {
                    vec![
                        Test::Throughput,
                        Test::Latency,
                        Test::Loss,
                        Test::BackToBack,
                    ]
                } else {
                    tests
                },
                out,
                cores: (cores[0], cores[1]),
            };
            nfkit_bench::rfc2544::rfc2544(&opts)?;
        }
        Cmd::Pipeline { seconds, cases } if !cases.is_empty() => {
            nfkit_bench::pipeline::pipeline_cases(&cases, seconds)?
        }
        Cmd::Pipeline { seconds, .. } => nfkit_bench::pipeline::pipeline(seconds)?,
        Cmd::Control { seconds, runs } => {
            nfkit_bench::control::control(seconds, runs)?;
        }
        Cmd::Traffic { seconds, quick } => nfkit_bench::traffic::traffic(seconds, quick)?,
        Cmd::Classify { packets, quick } => nfkit_bench::classify::classify(packets, quick)?,
        Cmd::Offloads {
            bytes,
            streams,
            mut underlays,
            sends,
        } => {
            if underlays.is_empty() {
                underlays = vec![
                    nfkit_bench::offloads::Underlay::Wire,
                    nfkit_bench::offloads::Underlay::Defaults,
                ];
            }
            nfkit_bench::offloads::offloads(&nfkit_bench::offloads::Options {
                bytes,
                streams,
                underlays,
                sends,
            })?
        }
        Cmd::Nfs {
            seconds,
            packets,
            nfs,
        } => nfkit_bench::nfs::nfs(seconds, packets, &nfs)?,
        Cmd::ShaperLockstep { flows, packets } => {
            let n = nfkit_bench::traffic::shaper_lockstep(flows, packets)?;
            println!("forwarded {n}");
        }
        Cmd::BenchNfLockstep { model, nf, packets } => {
            let n = nfkit_bench::nfs::lockstep(model, &nf, packets)?;
            println!("forwarded {n}");
        }
        Cmd::BenchPipelineLockstep { case, rounds } => {
            let n = nfkit_bench::pipeline::lockstep(&case, rounds)?;
            println!("forwarded {n}");
        }
        Cmd::SoftTsoLockstep { frames } => {
            let n = nfkit_bench::soft_tso::lockstep(frames)?;
            println!(
                "{frames} super-frames, {} payload bytes, {n} segments",
                frames * nfkit_bench::soft_tso::PAYLOAD
            );
        }
        Cmd::BenchTsoLockstep { sends } => {
            let n = nfkit_bench::drivers::tso_lockstep(sends)?;
            println!("forwarded {n}");
        }
        Cmd::BenchLockstep { model, nf, packets } => {
            let n = nfkit_bench::drivers::lockstep(model, nf, packets)?;
            println!("forwarded {n}");
        }
    }
    Ok(())
}

fn parse_model(s: &str) -> Result<Model, String> {
    s.parse()
}

/// `--burst` of `bench ports`: testpmd refuses bursts outside 1..=512.
fn parse_burst(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=512).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} frames: testpmd takes bursts of 1 to 512")),
        Err(e) => Err(e.to_string()),
    }
}
