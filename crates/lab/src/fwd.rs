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

use crate::{registry, stop_flag, SimLab, SimWire};
use anyhow::{bail, Context, Result};
use nfkit_hw::Bar;
use nfkit_ixgbe::{Agent, AgentConfig, AgentStats, Device, QueueIrq};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::fwd::{fwd, FwdOptions, FwdReport, Touch};
use nfkit_port::rate::{self, RateLines};
use nfkit_port::{
    Idle, IdleOptions, IdleTimes, Model, OpenOptions, Port, PortSpec, RxWake, WakeSet,
};
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
    /// Take pci: devices the kernel is using (`--force`).
    pub force: bool,
    /// Hybrid polling (sleep when idle) or pure polling (`--poll`).
    pub idle: IdleOptions,
    /// `--cores LIST` (parsed): the data path runs on the first.
    pub cores: Option<Vec<usize>>,
}

/// The most queues `--queues` takes (the 82599 spreads over 16 with RSS;
/// the software ports fewer).
pub const MAX_QUEUES: usize = 64;

/// `--queues N`: 1 to [`MAX_QUEUES`].
pub fn check_queues(queues: usize) -> Result<()> {
    if !(1..=MAX_QUEUES).contains(&queues) {
        bail!("--queues {queues}: a port has 1 to {MAX_QUEUES} queues");
    }
    Ok(())
}

/// Forward until `args.seconds` pass, Ctrl-C, or finite sources end,
/// printing per-second lines and a summary.
pub fn run(args: &FwdArgs) -> Result<()> {
    check_queues(args.queues)?;
    let specs: Vec<PortSpec> = args
        .ports
        .iter()
        .map(|s| s.parse().with_context(|| format!("port `{s}`")))
        .collect::<Result<_>>()?;
    nfkit_port::check_distinct(&specs).map_err(anyhow::Error::msg)?;
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 1024,
        },
        args.queues,
    );
    let stop = stop_flag(args.seconds);
    let both_sim = specs.iter().all(|s| matches!(s, PortSpec::Sim(..)));
    if args.model.on(both_sim) == Model::Agent {
        return agents_on_sim(&lab, &specs, &stop, args.idle);
    }
    let reg = registry(lab.clone(), args.queues);
    let opts = OpenOptions {
        force: args.force,
        ..OpenOptions::default()
    };
    let mut a = reg.open(&specs[0], &opts)?;
    let mut b = reg.open(&specs[1], &opts)?;
    for p in [&a, &b] {
        eprintln!("{}", nfkit_port::capability_line(&**p));
        eprintln!("{}", nfkit_port::frame_line(&**p));
    }
    lab.start_load();
    eprintln!("{}", crate::cores::pin_data_path(args.cores.as_deref())?);
    let report = match args.model.on(false) {
        Model::Queue => queues(&mut *a, &mut *b, &stop, args.idle)?,
        _ => adapter(&mut *a, &mut *b, &stop, args.idle),
    };
    lab.stop_load();
    for (i, p) in [&a, &b].iter().enumerate() {
        println!("{}", rate::summary(p.name(), &report.ports[i]));
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
    println!("forwarding thread: {}", report.idle.summary());
    Ok(())
}

fn queues(
    a: &mut dyn Port,
    b: &mut dyn Port,
    stop: &AtomicBool,
    idle: IdleOptions,
) -> Result<FwdReport> {
    let mut lines = RateLines::of_ports(&[&mut *a, &mut *b]);
    let opts = FwdOptions {
        touch: Touch::Read,
        idle,
        ..FwdOptions::default()
    };
    let mut last = IdleTimes::default();
    Ok(fwd([a, b], &opts, stop, |r| {
        lines.print(r.ports.to_vec());
        println!("{}", r.idle.since(&last).line("fwd"));
        last = r.idle;
    })?)
}

fn adapter(
    a: &mut dyn Port,
    b: &mut dyn Port,
    stop: &AtomicBool,
    idle_opts: IdleOptions,
) -> FwdReport {
    let mut lines = RateLines::of_ports(&[&mut *a, &mut *b]);
    let mut agent = AgentAdapter::new(2);
    // port 0's packets go out of port 1 and the other way round
    let mut handlers = [
        |_: &mut [u8], len: usize, out: &mut [u16]| out[1] = len as u16,
        |_: &mut [u8], len: usize, out: &mut [u16]| out[0] = len as u16,
    ];
    let mut ports: [&mut dyn Port; 2] = [a, b];
    let start = Instant::now();
    let mut at = start;
    let mut idle = Idle::new(idle_opts);
    let mut last = IdleTimes::default();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1024 {
            let n = agent.poll(&mut ports, &mut handlers);
            if idle.round(n > 0) {
                idle.sleep(&mut ports, Some(at + Duration::from_secs(1)), |ps| {
                    agent.poll(ps, &mut handlers) > 0
                });
                break;
            }
        }
        if at.elapsed() >= Duration::from_secs(1) {
            lines.print(vec![ports[0].stats(), ports[1].stats()]);
            let now = idle.times(start.elapsed());
            println!("{}", now.since(&last).line("fwd"));
            last = now;
            at = Instant::now();
        }
    }
    let s = agent.stats();
    let mut report = FwdReport {
        ports: [ports[0].stats(), ports[1].stats()],
        elapsed: start.elapsed(),
        idle: idle.times(start.elapsed()),
        ..FwdReport::default()
    };
    for i in 0..2 {
        report.dirs[i].received = s.received[i];
        report.dirs[i].forwarded = s.sent[1 - i];
        report.dirs[i].dropped = s.dropped[1 - i] + s.discarded[i];
    }
    report
}

fn agents_on_sim(
    lab: &Arc<SimLab>,
    specs: &[PortSpec],
    stop: &AtomicBool,
    idle: IdleOptions,
) -> Result<()> {
    let (PortSpec::Sim(x, ox), PortSpec::Sim(y, oy)) = (&specs[0], &specs[1]) else {
        bail!("agents need two sim: ports here");
    };
    if !ox.is_default() || !oy.is_default() {
        bail!(
            "the agent model takes no mtu= or rx_csum= (one 2 KB buffer per descriptor, no \
             offloads): use --model queue"
        );
    }
    if x == y {
        bail!("sim:{x} given twice: forward between two different ports");
    }
    let devs = [
        lab.open_device(*x, &specs[0].to_string())?,
        lab.open_device(*y, &specs[1].to_string())?,
    ];
    let irqs = [lab.interrupts(*x, &devs[0])?, lab.interrupts(*y, &devs[1])?];
    let queue_irqs: Vec<&QueueIrq<_>> = irqs.iter().filter_map(|i| i.queues[0].as_ref()).collect();
    lab.start_load();
    let device_stats = || devs.iter().map(|d| d.stats().as_port_stats()).collect();
    let mut lines = RateLines::new(
        specs.iter().map(|s| s.to_string()).collect(),
        device_stats(),
    );
    let (stats, times) = run_agent_pair_idle(&devs, &queue_irqs, idle, stop, || {
        if lines.due() {
            lines.print(device_stats());
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
    println!("forwarding thread: {}", times.summary());
    Ok(())
}

/// Forward between two 82599s with one agent per direction, touching each
/// packet like ixy-fwd (a byte of the destination MAC is bumped), until
/// `stop` is set; `tick` runs every few thousand rounds. Returns each
/// direction's agent counters. Pure polling: [`run_agent_pair_idle`]
/// with no interrupts.
pub fn run_agent_pair<B: Bar + 'static>(
    devs: &[Device<B>; 2],
    stop: &AtomicBool,
    tick: impl FnMut(),
) -> Result<[AgentStats; 2]> {
    Ok(run_agent_pair_idle(devs, &[], IdleOptions::polling(), stop, tick)?.0)
}

/// The receive queues' MSI-X vectors of an agent loop, as the queues a
/// sleeping loop watches.
struct IrqSet<'a, B>(&'a [&'a QueueIrq<B>]);

impl<B: Bar> WakeSet for IrqSet<'_, B> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn label(&self, i: usize) -> String {
        format!("82599 MSI-X vector {}", self.0[i].vector())
    }
    fn rx_wake(&mut self, i: usize) -> RxWake {
        RxWake::Fd(self.0[i].fd())
    }
    fn rx_arm(&mut self, i: usize) -> bool {
        self.0[i].arm()
    }
    fn rx_disarm(&mut self, i: usize) {
        self.0[i].disarm()
    }
}

/// [`run_agent_pair`] in hybrid polling: after `idle`'s idle period the
/// loop arms `irqs` (the vectors of the agents' receive queues), runs one
/// more round (the re-check) and sleeps until a vector fires, the next
/// second's `tick` or the sleep bound. With no `irqs` (no MSI-X) or
/// [`IdleOptions::polling`], it polls. Also returns where the loop's
/// time went.
pub fn run_agent_pair_idle<B: Bar + 'static>(
    devs: &[Device<B>; 2],
    irqs: &[&QueueIrq<B>],
    idle_opts: IdleOptions,
    stop: &AtomicBool,
    mut tick: impl FnMut(),
) -> Result<([AgentStats; 2], IdleTimes)> {
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
    let start = Instant::now();
    if irqs.is_empty() || idle_opts.sleep_after.is_none() {
        let mut rounds = 0u32;
        nfkit_ixgbe::run(&mut agents, &mut handlers, || {
            rounds = rounds.wrapping_add(1);
            if rounds.is_multiple_of(1024) {
                tick();
            }
            !stop.load(Ordering::Relaxed)
        });
        let times = Idle::new(IdleOptions::polling()).times(start.elapsed());
        return Ok(([agents[0].stats(), agents[1].stats()], times));
    }
    let mut idle = Idle::new(idle_opts);
    let mut rounds = 0u32;
    let mut at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let n = nfkit_ixgbe::round(&mut agents, &mut handlers);
        rounds = rounds.wrapping_add(1);
        if rounds.is_multiple_of(1024) {
            tick();
        }
        if idle.round(n > 0) {
            let mut set = IrqSet(irqs);
            if idle.arm_set(&mut set) {
                // the re-check: a frame that came before the arm raised nothing
                if nfkit_ixgbe::round(&mut agents, &mut handlers) > 0 {
                    idle.found_set(&mut set);
                } else {
                    idle.wait_set(&mut set, Some(at + Duration::from_secs(1)));
                }
            }
            tick();
            if at.elapsed() >= Duration::from_secs(1) {
                at = Instant::now();
            }
        }
    }
    Ok((
        [agents[0].stats(), agents[1].stats()],
        idle.times(start.elapsed()),
    ))
}
