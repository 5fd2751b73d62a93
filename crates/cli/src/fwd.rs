//! `nfkit fwd A B`: bidirectional forwarding that touches each packet
//! (like ixy-fwd), with either driver model, printing a line per port per
//! direction each second and a summary at the end.
//!
//! - Queue model: [`nfkit_port::fwd::fwd`] over any two ports.
//! - Agent model: on two 82599s (sim: or pci:), one TinyNF agent per
//!   direction on the devices themselves; on other ports, the agent
//!   handler runs through [`nfkit_port::agent::AgentAdapter`].
//!
//! Simulated ports get a generator and a sink on their wires, so
//! `nfkit fwd sim:0 sim:1` forwards real load.

use crate::demo::Model;
use crate::lab::{registry, SimLab, SimWire};
use crate::stats;
use anyhow::{bail, Context, Result};
use nfkit_hw::Bar;
use nfkit_ixgbe::{Agent, AgentConfig, AgentStats, Device};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::fwd::{fwd, FwdOptions, FwdReport, Touch};
use nfkit_port::{OpenOptions, Port, PortSpec, QueueStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct FwdArgs {
    pub ports: [String; 2],
    pub model: Model,
    /// Stop after this long (else on Ctrl-C, or when finite sources end).
    pub seconds: Option<u64>,
    pub queues: usize,
}

/// A stop flag set by Ctrl-C or a timer.
pub fn stop_flag(seconds: Option<u64>) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // Only the first command of a process can install the handler.
    if ctrlc::set_handler(move || s.store(true, Ordering::Relaxed)).is_err() {
        tracing::warn!("could not install the Ctrl-C handler: Ctrl-C ends the command at once");
    }
    if let Some(secs) = seconds {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            s.store(true, Ordering::Relaxed);
        });
    }
    stop
}

pub fn run(args: &FwdArgs) -> Result<()> {
    let specs: Vec<PortSpec> = args
        .ports
        .iter()
        .map(|s| s.parse().with_context(|| format!("port `{s}`")))
        .collect::<Result<_>>()?;
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 1024,
        },
        args.queues,
    );
    let stop = stop_flag(args.seconds);
    let both_sim = specs.iter().all(|s| matches!(s, PortSpec::Sim(_)));
    if args.model == Model::Agent && both_sim {
        return agents_on_sim(&lab, &specs, &stop);
    }
    let reg = registry(lab.clone(), args.queues);
    let opts = OpenOptions::default();
    let mut a = reg.open(&specs[0], &opts)?;
    let mut b = reg.open(&specs[1], &opts)?;
    lab.start_load();
    let report = match args.model {
        Model::Queue => queues(&mut *a, &mut *b, &stop)?,
        Model::Agent => adapter(&mut *a, &mut *b, &stop),
    };
    lab.stop_load();
    for (i, p) in [&a, &b].iter().enumerate() {
        println!("{}", stats::summary(p.name(), &report.ports[i]));
    }
    for (i, d) in report.dirs.iter().enumerate() {
        println!(
            "{} -> {}: received {}, forwarded {}, dropped {}",
            args.ports[i],
            args.ports[1 - i],
            d.received,
            d.forwarded,
            d.dropped
        );
    }
    Ok(())
}

/// Prints per-second lines from port counters.
struct Lines {
    names: [String; 2],
    last: [QueueStats; 2],
    at: Instant,
}

impl Lines {
    fn new(a: &dyn Port, b: &dyn Port) -> Lines {
        Lines {
            names: [a.name().to_string(), b.name().to_string()],
            last: [a.stats(), b.stats()],
            at: Instant::now(),
        }
    }

    fn print(&mut self, now: [QueueStats; 2]) {
        let over = self.at.elapsed();
        for ((name, last), now) in self.names.iter().zip(&self.last).zip(&now) {
            for l in stats::diff_lines(name, last, now, over) {
                println!("{l}");
            }
        }
        self.last = now;
        self.at = Instant::now();
    }
}

fn queues(a: &mut dyn Port, b: &mut dyn Port, stop: &AtomicBool) -> Result<FwdReport> {
    let mut lines = Lines::new(a, b);
    let opts = FwdOptions {
        touch: Touch::Read,
        ..FwdOptions::default()
    };
    Ok(fwd([a, b], &opts, stop, |r| lines.print(r.ports))?)
}

fn adapter(a: &mut dyn Port, b: &mut dyn Port, stop: &AtomicBool) -> FwdReport {
    let mut lines = Lines::new(a, b);
    let mut agent = AgentAdapter::new(2);
    // port 0's packets go out of port 1 and the other way round
    let mut handlers = [
        |_: &mut [u8], len: usize, out: &mut [u16]| out[1] = len as u16,
        |_: &mut [u8], len: usize, out: &mut [u16]| out[0] = len as u16,
    ];
    let mut ports: [&mut dyn Port; 2] = [a, b];
    let mut at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1024 {
            agent.poll(&mut ports, &mut handlers);
        }
        if at.elapsed() >= Duration::from_secs(1) {
            lines.print([ports[0].stats(), ports[1].stats()]);
            at = Instant::now();
        }
    }
    let s = agent.stats();
    let mut report = FwdReport {
        ports: [ports[0].stats(), ports[1].stats()],
        ..FwdReport::default()
    };
    for i in 0..2 {
        report.dirs[i].received = s.received[i];
        report.dirs[i].forwarded = s.sent[1 - i];
        report.dirs[i].dropped = s.dropped[1 - i] + s.discarded[i];
    }
    report
}

fn agents_on_sim(lab: &Arc<SimLab>, specs: &[PortSpec], stop: &AtomicBool) -> Result<()> {
    let (PortSpec::Sim(x), PortSpec::Sim(y)) = (&specs[0], &specs[1]) else {
        bail!("agents need two sim: ports here");
    };
    if x == y {
        bail!("sim:{x} given twice: forward between two different ports");
    }
    let devs = [
        lab.open_device(*x, &specs[0].to_string())?,
        lab.open_device(*y, &specs[1].to_string())?,
    ];
    lab.start_load();
    let mut last = [devs[0].stats(), devs[1].stats()];
    let mut at = Instant::now();
    let stats = run_agent_pair(&devs, stop, || {
        if at.elapsed() >= Duration::from_secs(1) {
            let over = at.elapsed();
            for (i, d) in devs.iter().enumerate() {
                let s = d.stats();
                let rx = stats::Rate::new(
                    s.rx_packets - last[i].rx_packets,
                    s.rx_bytes - last[i].rx_bytes,
                    over,
                );
                let tx = stats::Rate::new(
                    s.tx_packets - last[i].tx_packets,
                    s.tx_bytes - last[i].tx_bytes,
                    over,
                );
                println!("{}", stats::line(&specs[i].to_string(), "RX", rx));
                println!("{}", stats::line(&specs[i].to_string(), "TX", tx));
                last[i] = s;
            }
            at = Instant::now();
        }
    })?;
    lab.stop_load();
    for (i, s) in stats.iter().enumerate() {
        println!(
            "{} -> {}: received {}, forwarded {}, receive errors {}",
            specs[i],
            specs[1 - i],
            s.rx_packets,
            s.tx_packets[0],
            s.rx_errors
        );
    }
    Ok(())
}

/// Forward between two 82599s with one agent per direction, touching each
/// packet like ixy-fwd (a byte of the destination MAC is bumped), until
/// `stop` is set; `tick` runs every few thousand rounds. Returns each
/// direction's agent counters.
pub fn run_agent_pair<B: Bar + 'static>(
    devs: &[Device<B>; 2],
    stop: &AtomicBool,
    mut tick: impl FnMut(),
) -> Result<[AgentStats; 2]> {
    let cfg = AgentConfig::default();
    let mut agents = [
        Agent::new(&devs[0], 0, &[(&devs[1], 0)], &cfg)?,
        Agent::new(&devs[1], 0, &[(&devs[0], 0)], &cfg)?,
    ];
    let touch = |buf: &mut [u8], len: usize, out: &mut [u16]| {
        buf[1] = buf[1].wrapping_add(1);
        out[0] = len as u16;
    };
    let mut handlers = [touch, touch];
    let mut rounds = 0u32;
    nfkit_ixgbe::run(&mut agents, &mut handlers, || {
        rounds = rounds.wrapping_add(1);
        if rounds.is_multiple_of(1024) {
            tick();
        }
        !stop.load(Ordering::Relaxed)
    });
    Ok([agents[0].stats().clone(), agents[1].stats().clone()])
}
