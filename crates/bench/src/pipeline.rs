//! `nfkit bench pipeline`: what the SoftNIC layer costs per packet,
//! beside DPDK's io forwarding in the same run (issue #5).
//!
//! Three measurements, each on one worker pinned to core 1:
//!
//! - **Source -> Sink**: the pipeline makes 60-byte packets and frees
//!   them; scheduler, batch and gate overhead with no port at all.
//! - **PortInc -> PortOut**: two `null:size=60` ports forwarded into each
//!   other (`PortInc(p0) -> PortOut(p1)` and back), what testpmd's io
//!   mode does with two `net_null` ports.
//! - **DPDK**: `dpdk-testpmd` io forwarding over two `net_null` ports
//!   (`size=60`, no copy), one forwarding lcore on core 1.
//!
//! **The same work on both sides.** Bursts of 32 (testpmd's default;
//! PortInc's and Source's `burst`, and what a null port hands out per
//! call). A null port, like `net_null` without `copy=1`, writes no packet
//! data: it hands out buffers with their length set, and its send side
//! frees them (`nfkit_port::null`). Neither side touches packet data on
//! the way (testpmd's io mode does not). The pipeline's Source does a
//! little more than a null port: it writes its 60-byte template into
//! every packet. Every packet handled is counted on both sides.
//!
//! **Cycles per packet.** This machine has no hardware PMU and the CLI
//! crate has no `unsafe` (so no `rdtsc`): for every case the forwarding
//! thread's CPU time over the measured seconds comes from the kernel's
//! per-thread account (`/proc/PID/task/TID/schedstat`), is turned into
//! cycles at the nominal TSC frequency (`cpu MHz` in `/proc/cpuinfo`),
//! and is divided by the packets that thread handled (received from
//! every port, or made by the Source). testpmd's own figure from
//! `--record-core-cycles` (TSC cycles of its busy rounds) is printed
//! beside it as a check.

use crate::testpmd::{thread_cpu_time, tsc_hz, Testpmd, FORWARDING_CORE, WARMUP};
use anyhow::{bail, Result};
use nfkit_pipeline::PipelineStats;
use nfkit_port::{OpenOptions, Registry};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The target of issue #5: the pipeline at least as fast as DPDK.
pub const TARGET: f64 = 1.0;

/// One measured case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Packets per second the one worker handled, in millions.
    pub mpps: f64,
    /// CPU cycles of the worker thread per packet.
    pub cycles_per_packet: Option<f64>,
    /// Packets the worker handled from its start (warm-up included) to
    /// its pause: what its thread's instructions under callgrind are
    /// divided by (`--case`).
    pub total: u64,
}

/// A pipeline case: its config and the packets it counts.
struct PipelineCase {
    name: &'static str,
    config: String,
    /// Packets handled, from the live counters.
    packets: fn(&PipelineStats) -> u64,
}

/// The worker's name in the configs; its thread is `nfkit-<name>`.
const WORKER: &str = "w0";

fn cases() -> [PipelineCase; 2] {
    let worker = format!("worker {WORKER} core={FORWARDING_CORE}\n");
    [
        PipelineCase {
            name: "pipeline Source -> Sink",
            config: format!("{worker}src::Source(size=60) -> snk::Sink()\n"),
            packets: |s| s.module("snk").map_or(0, |m| m.received()),
        },
        PipelineCase {
            name: "pipeline PortInc -> PortOut, 2 null",
            config: format!(
                "{worker}\
                 port p0 = \"null:size=60\"\n\
                 port p1 = \"null:size=60\"\n\
                 PortInc(port=p0) -> out1::PortOut(port=p1)\n\
                 PortInc(port=p1) -> out0::PortOut(port=p0)\n"
            ),
            packets: |s| {
                ["out0", "out1"]
                    .iter()
                    .filter_map(|n| s.module(n))
                    .map(|m| m.received())
                    .sum()
            },
        },
    ]
}

/// Run one pipeline case: one second of warm-up, then `seconds`
/// measured.
fn measure_pipeline(
    case: &PipelineCase,
    seconds: u64,
    hz: f64,
    stop: &AtomicBool,
) -> Result<Measured> {
    let desc = nfkit_pipeline::parse(&case.config, case.name)?;
    let registry = Registry::new();
    let open = |spec: &str| registry.open_str(spec, &OpenOptions::default());
    let mut pipeline = desc.build(&open)?;
    pipeline.start()?;
    let worker_thread = format!("nfkit-{WORKER}");
    let pid = std::process::id();
    sleep_unless(WARMUP, stop);
    let (n0, c0, t0) = (
        (case.packets)(&pipeline.stats()),
        thread_cpu_time(pid, &worker_thread),
        Instant::now(),
    );
    sleep_unless(Duration::from_secs(seconds), stop);
    let (n1, c1, wall) = (
        (case.packets)(&pipeline.stats()),
        thread_cpu_time(pid, &worker_thread),
        t0.elapsed(),
    );
    let total = (case.packets)(&pipeline.shutdown()?);
    let packets = n1.saturating_sub(n0);
    if packets == 0 {
        bail!("no packets went through `{}`", case.name);
    }
    let cpu = c0.zip(c1).map(|(a, b)| b.saturating_sub(a));
    Ok(Measured {
        mpps: packets as f64 / wall.as_secs_f64() / 1e6,
        cycles_per_packet: cpu.map(|c| c.as_secs_f64() * hz / packets as f64),
        total,
    })
}

/// Cases of [`lockstep`], in the order of `cases()`.
pub const LOCKSTEP_CASES: [&str; 2] = ["source-sink", "port-inc-out"];

/// Rounds per lock-step run (each round runs one task, a burst of 32).
pub const LOCKSTEP_ROUNDS: u64 = 20_000;

/// The lock-step run measured under callgrind: case `case` (one of
/// [`LOCKSTEP_CASES`]) built but not started, its one worker stepped for
/// `rounds` scheduling rounds on this thread inside [`pipeline_rounds`].
/// Returns the packets handled.
pub fn lockstep(case: &str, rounds: u64) -> Result<u64> {
    let Some(i) = LOCKSTEP_CASES.iter().position(|c| *c == case) else {
        bail!(
            "no lock-step case `{case}` (cases: {})",
            LOCKSTEP_CASES.join(", ")
        );
    };
    let case = &cases()[i];
    let desc = nfkit_pipeline::parse(&case.config, case.name)?;
    let registry = Registry::new();
    let open = |spec: &str| registry.open_str(spec, &OpenOptions::default());
    let mut pipeline = desc.build(&open)?;
    // Warm: the first rounds take the pool's buffers out once.
    pipeline.step(100)?;
    let before = (case.packets)(&pipeline.stats());
    pipeline_rounds(&mut pipeline, rounds)?;
    let after = (case.packets)(&pipeline.stats());
    pipeline.shutdown()?;
    Ok(after.saturating_sub(before))
}

/// The counted part of [`lockstep`]: callgrind collects only in here.
#[inline(never)]
pub fn pipeline_rounds(pipeline: &mut nfkit_pipeline::Pipeline, rounds: u64) -> Result<()> {
    pipeline.step(rounds)?;
    Ok(())
}

/// Instructions per packet of lock-step case `case`, from callgrind
/// (`None` without valgrind).
pub fn instructions_per_packet(case: &str) -> Result<Option<f64>> {
    crate::callgrind::per_packet(
        "pipeline_rounds",
        &[
            "bench-pipeline-lockstep",
            "--case",
            case,
            "--rounds",
            &LOCKSTEP_ROUNDS.to_string(),
        ],
    )
}

fn sleep_unless(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
}

/// testpmd io forwarding over two `net_null` ports: Mpps per core, and
/// cycles per packet by the same method as the pipeline plus testpmd's
/// own figure.
fn measure_dpdk(
    seconds: u64,
    hz: f64,
    stop: &Arc<AtomicBool>,
) -> Result<(Measured, Option<f64>, String)> {
    let run = Testpmd::new(["net_null0,size=60", "net_null1,size=60"], seconds)
        .warmup_periods(1)
        .measure_cpu(true)
        .abort_on(stop.clone())
        .run()?;
    let pps: f64 = run.ports.iter().map(|p| p.rx_pps).sum();
    let cycles = run
        .forwarding_cpu_share
        .filter(|_| pps > 0.0)
        .map(|share| share * hz / pps);
    Ok((
        Measured {
            mpps: pps / 1e6,
            cycles_per_packet: cycles,
            total: 0,
        },
        run.own_cycles_per_packet,
        run.command,
    ))
}

/// `nfkit-bench pipeline --case NAME...`: only these free-running cases
/// (names of [`LOCKSTEP_CASES`]), no DPDK and no callgrind run; one line
/// each, with the packets the worker handled in all. For A/B runs and for
/// the worker's instructions per packet under
/// `valgrind --tool=callgrind --separate-threads=yes` (its thread's total
/// over that packet count).
pub fn pipeline_cases(names: &[String], seconds: u64) -> Result<()> {
    let hz = tsc_hz()?;
    let stop = nfkit_lab::stop_flag(None);
    let all = cases();
    for name in names {
        let Some(i) = LOCKSTEP_CASES.iter().position(|c| c == name) else {
            bail!("no case `{name}` (cases: {})", LOCKSTEP_CASES.join(", "));
        };
        let m = measure_pipeline(&all[i], seconds, hz, &stop)?;
        println!(
            "{name}: {:.2} Mpps, {} cycles/packet, {} packets in all",
            m.mpps,
            m.cycles_per_packet
                .map_or("-".into(), |c| format!("{c:.1}")),
            m.total
        );
    }
    Ok(())
}

/// `nfkit bench pipeline`.
pub fn pipeline(seconds: u64) -> Result<()> {
    if cfg!(debug_assertions) {
        println!(
            "note: a debug build; run `cargo build --release` and target/release/nfkit bench pipeline for meaningful figures"
        );
    }
    let hz = tsc_hz()?;
    let stop = nfkit_lab::stop_flag(None);
    let mut rows: Vec<(&str, Result<Measured, String>)> = Vec::new();
    for case in cases() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let m = measure_pipeline(&case, seconds, hz, &stop).map_err(|e| format!("{e:#}"));
        rows.push((case.name, m));
    }
    let dpdk = measure_dpdk(seconds, hz, &stop);
    print_report(seconds, hz, &rows, &dpdk);
    // Instructions per packet: a figure the load of a shared machine does
    // not move (cycles do).
    for (case, (name, _)) in LOCKSTEP_CASES.iter().zip(&rows) {
        match instructions_per_packet(case) {
            Ok(Some(i)) => println!(
                "{name:<38} {i:.1} instructions/packet (callgrind, {LOCKSTEP_ROUNDS} lock-step rounds: \
                 nfkit-bench bench-pipeline-lockstep --case {case})"
            ),
            Ok(None) => println!("{name:<38} instructions/packet: no valgrind"),
            Err(e) => println!("{name:<38} instructions/packet: error: {e:#}"),
        }
    }
    Ok(())
}

fn print_report(
    seconds: u64,
    hz: f64,
    rows: &[(&str, Result<Measured, String>)],
    dpdk: &Result<(Measured, Option<f64>, String)>,
) {
    println!(
        "one worker on core {FORWARDING_CORE}, {seconds} s measured after {} s warm-up; \
         Mpps = packets the worker handled per second (all ports)",
        WARMUP.as_secs()
    );
    println!(
        "cycles/packet = the worker thread's CPU time (/proc/PID/task/TID/schedstat) x {:.0} MHz \
         (nominal TSC, /proc/cpuinfo) / packets; no PMU here",
        hz / 1e6
    );
    println!(
        "ratios: nfkit/DPDK in Mpps, and DPDK/nfkit in cycles per packet (the fairer one on a \
         shared machine: CPU time does not count time the thread was preempted); met: by cycles"
    );
    println!(
        "{:<38} {:>10} {:>11} {:>11} {:>12} {:>7}  met",
        "case", "Mpps/core", "cycles/pkt", "Mpps ratio", "cycle ratio", "target"
    );
    let dpdk_m = dpdk.as_ref().ok().map(|(m, _, _)| *m);
    let cyc = |m: &Measured| {
        m.cycles_per_packet
            .map_or("-".into(), |c| format!("{c:.1}"))
    };
    for (name, r) in rows {
        match r {
            Ok(m) => {
                let rate = dpdk_m.filter(|d| d.mpps > 0.0).map(|d| m.mpps / d.mpps);
                let cycles = dpdk_m
                    .and_then(|d| Some(d.cycles_per_packet? / m.cycles_per_packet?))
                    .filter(|x| x.is_finite());
                let x = |r: Option<f64>| r.map_or("-".into(), |x| format!("{x:.2}x"));
                println!(
                    "{:<38} {:>10.2} {:>11} {:>11} {:>12} {:>6.1}x  {}",
                    name,
                    m.mpps,
                    cyc(m),
                    x(rate),
                    x(cycles),
                    TARGET,
                    cycles.map_or("-", |x| if x >= TARGET { "yes" } else { "no" })
                );
            }
            Err(e) => println!("{name:<38} error: {e}"),
        }
    }
    match dpdk {
        Ok((m, own, command)) => {
            println!(
                "{:<38} {:>10.2} {:>11}",
                "dpdk-testpmd io, 2 net_null",
                m.mpps,
                cyc(m)
            );
            if let Some(own) = own {
                println!("  testpmd's own --record-core-cycles figure: {own:.1} cycles/packet");
            }
            println!("  DPDK command: {command}");
        }
        Err(e) => println!("dpdk-testpmd io, 2 net_null: error: {e:#}"),
    }
    println!(
        "target (issue #5): the pipeline at >= {TARGET:.1}x DPDK's rate \
         (BESS reports about 11 cycles/packet of scheduler overhead)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both pipelines run and count packets, with the worker's CPU time
    /// found. No figure is checked against a speed.
    #[test]
    fn both_pipelines_move_packets() {
        let stop = AtomicBool::new(false);
        for c in cases() {
            let m = measure_pipeline(&c, 1, 2.6e9, &stop).unwrap();
            assert!(m.mpps > 0.0, "{}: {m:?}", c.name);
            if std::path::Path::new("/proc/thread-self/schedstat").exists() {
                assert!(m.cycles_per_packet.is_some(), "{}: {m:?}", c.name);
            }
        }
    }

    /// The lock-step cases step without threads and count packets.
    #[test]
    fn lockstep_cases_count_packets() {
        for case in LOCKSTEP_CASES {
            assert!(lockstep(case, 20).unwrap() > 0, "{case}");
        }
        assert!(lockstep("nope", 1).is_err());
    }

    #[test]
    fn the_configs_parse() {
        for c in cases() {
            nfkit_pipeline::parse(&c.config, c.name).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        }
    }
}
