//! `nfkit demo`: two simulated 82599s, each cabled to a traffic generator
//! and a sink, with the driver forwarding between them in both directions.
//! Prints a MoonGen-style line per port per second, then a summary that
//! accounts for every frame: offered by a generator = counted by a sink +
//! dropped somewhere (refused at the wire, missed for lack of a
//! descriptor, or refused by a full transmit ring).

use crate::{LoadCounters, SimLab, SimWire};
use anyhow::{bail, Result};
use nfkit_ixgbe::{Device, IxgbePort};
use nfkit_ixgbe_model::SimBar;
use nfkit_port::fwd::{fwd, FwdOptions, Touch};
use nfkit_port::rate::RateLines;
use nfkit_port::Model;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub seconds: u64,
    pub model: Model,
    pub frame_len: usize,
    pub flows: usize,
}

/// What the demo measured.
#[derive(Debug, Default, Clone)]
pub struct DemoReport {
    pub offered: u64,
    pub refused_at_wire: u64,
    pub missed: u64,
    pub received: u64,
    pub forwarded: u64,
    pub tx_dropped: u64,
    pub sunk: u64,
    pub violations: usize,
    pub elapsed: Duration,
    /// The forwarding thread's own CPU per packet, apart from the model's.
    pub driver: Option<crate::cost::DriverCost>,
    /// The driver's cost in lock-step with the model (after the run).
    pub lockstep: Option<Result<crate::cost::LockstepCost, String>>,
}

impl DemoReport {
    /// Every offered frame is delivered to a sink or counted as dropped.
    pub fn adds_up(&self) -> bool {
        self.offered == self.refused_at_wire + self.missed + self.received
            && self.received == self.forwarded + self.tx_dropped
            && self.forwarded == self.sunk
    }
}

/// Packets of the lock-step run after the demo (about 0.1 s here; a
/// tenth in debug builds, whose figure means nothing anyway).
pub const LOCKSTEP_PACKETS: u64 = if cfg!(debug_assertions) {
    20_000
} else {
    200_000
};

/// Run the demo, printing per-second lines; returns what it measured
/// (the caller prints the summary with [`DemoReport`]).
pub fn run(opts: &DemoOptions) -> Result<DemoReport> {
    if !(60..=1514).contains(&opts.frame_len) {
        bail!(
            "--size {}: frames are 60 to 1514 bytes (without CRC)",
            opts.frame_len
        );
    }
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: opts.frame_len,
            flows: opts.flows,
        },
        1,
    );
    println!(
        "nfkit demo: two simulated 82599s (sim:0, sim:1), each cabled to a generator of {}-byte UDP frames over {} flows and a sink; \
         forwarding both ways with the {:?} model for {} s",
        opts.frame_len, opts.flows, opts.model, opts.seconds
    );
    let devs = [lab.open_device(0, "sim:0")?, lab.open_device(1, "sim:1")?];
    for (i, d) in devs.iter().enumerate() {
        println!(
            "sim:{i}: initialized, MAC {}, link {:?}",
            mac_str(d.mac()),
            d.link()
        );
    }
    let load = lab.start_load();
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let (stop, lab, secs) = (stop.clone(), lab.clone(), opts.seconds);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            lab.stop_load();
            // let the frames in flight drain before stopping the forwarder
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let mut ticker = Ticker::new(&devs);
    let mark = crate::cost::Mark::now();
    let (forwarded, tx_dropped) = match opts.model {
        Model::Queue => forward_queues(&lab, &devs, &stop, &mut ticker, &load)?,
        Model::Agent | Model::AgentAdapter => forward_agents(&devs, &stop, &mut ticker, &load)?,
    };
    let driver = mark.finish(forwarded);
    let _ = timer.join();
    let mut r = DemoReport {
        driver,
        offered: load.offered.load(Ordering::Relaxed),
        forwarded,
        tx_dropped,
        ..DemoReport::default()
    };
    for n in 0..2 {
        let nic = lab.nic(n).expect("opened above");
        let c = nic.counters();
        r.refused_at_wire += c.rx_fifo_overflow + c.rx_dropped_filter + c.rx_dropped_other;
        r.missed += c.rx_missed;
        r.received += c.rx_frames;
        r.sunk += lab.sink_frames(n);
        r.violations += nic.violations().len();
    }
    r.elapsed = ticker.start.elapsed();
    // The figure above follows the free-running model, starved on a small
    // machine; a short lock-step run gives one that does not.
    r.lockstep = Some(
        crate::cost::lockstep(opts.model, opts.frame_len, LOCKSTEP_PACKETS)
            .map_err(|e| format!("{e:#}")),
    );
    Ok(r)
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Prints one line per port per direction each second, from the device
/// statistics registers (read once a second, never on the data path).
struct Ticker<'a> {
    devs: &'a [Device<SimBar>; 2],
    lines: RateLines,
    last_offered: u64,
    start: Instant,
}

impl<'a> Ticker<'a> {
    fn new(devs: &'a [Device<SimBar>; 2]) -> Self {
        Ticker {
            devs,
            lines: RateLines::new(vec!["sim:0".into(), "sim:1".into()], Self::stats(devs)),
            last_offered: 0,
            start: Instant::now(),
        }
    }

    fn stats(devs: &[Device<SimBar>; 2]) -> Vec<nfkit_port::QueueStats> {
        devs.iter().map(|d| d.stats().as_port_stats()).collect()
    }

    fn tick(&mut self, load: &LoadCounters) {
        if !self.lines.due() {
            return;
        }
        let over = self.lines.since_print();
        let offered = load.offered.load(Ordering::Relaxed);
        println!(
            "[{:>4.1}s] generators offered {:.2} Mpps",
            self.start.elapsed().as_secs_f64(),
            (offered - self.last_offered) as f64 / over.as_secs_f64() / 1e6
        );
        self.last_offered = offered;
        self.lines.print(Self::stats(self.devs));
    }
}

fn forward_queues(
    lab: &Arc<SimLab>,
    devs: &[Device<SimBar>; 2],
    stop: &AtomicBool,
    ticker: &mut Ticker,
    load: &LoadCounters,
) -> Result<(u64, u64)> {
    let mut a = IxgbePort::new("sim:0", devs[0].clone(), &**lab.dma())?;
    let mut b = IxgbePort::new("sim:1", devs[1].clone(), &**lab.dma())?;
    let opts = FwdOptions {
        touch: Touch::Write,
        stats_interval: Duration::from_millis(100),
        stop_when_done: false,
        ..FwdOptions::default()
    };
    let report = fwd([&mut a, &mut b], &opts, stop, |_| ticker.tick(load))?;
    let d = report.dirs;
    Ok((d[0].forwarded + d[1].forwarded, d[0].dropped + d[1].dropped))
}

fn forward_agents(
    devs: &[Device<SimBar>; 2],
    stop: &AtomicBool,
    ticker: &mut Ticker,
    load: &LoadCounters,
) -> Result<(u64, u64)> {
    let stats = crate::fwd::run_agent_pair(devs, stop, || ticker.tick(load))?;
    let forwarded = stats.iter().map(|s| s.tx_packets[0]).sum();
    // An agent never refuses a packet: outputs are in lock-step with the
    // input, so the receive ring waits for the slowest output instead.
    Ok((forwarded, 0))
}
