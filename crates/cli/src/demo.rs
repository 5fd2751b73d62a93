//! `nfkit demo`: two simulated 82599s, each cabled to a traffic generator
//! and a sink, with the driver forwarding between them in both directions.
//! Prints a MoonGen-style line per port per second, then a summary that
//! accounts for every frame: offered by a generator = counted by a sink +
//! dropped somewhere (refused at the wire, missed for lack of a
//! descriptor, or refused by a full transmit ring).

use crate::ixgbe_port::IxgbePort;
use crate::lab::{LoadCounters, SimLab, SimWire};
use crate::stats;
use anyhow::Result;
use nfkit_ixgbe::{Device, DeviceStats};
use nfkit_ixgbe_model::SimBar;
use nfkit_port::fwd::{fwd, FwdOptions, Touch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which driver model forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Model {
    /// TinyNF agents: no pool, packets handled in place.
    Agent,
    /// ixy/DPDK queues: pool buffers in batches.
    Queue,
}

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
}

impl DemoReport {
    /// Every offered frame is delivered to a sink or counted as dropped.
    pub fn adds_up(&self) -> bool {
        self.offered == self.refused_at_wire + self.missed + self.received
            && self.received == self.forwarded + self.tx_dropped
            && self.forwarded == self.sunk
    }
}

pub fn run(opts: &DemoOptions) -> Result<DemoReport> {
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
    let (forwarded, tx_dropped) = match opts.model {
        Model::Queue => forward_queues(&lab, &devs, &stop, &mut ticker, &load)?,
        Model::Agent => forward_agents(&devs, &stop, &mut ticker, &load)?,
    };
    let _ = timer.join();
    let mut r = DemoReport {
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
    print_summary(opts, &r, ticker.start.elapsed());
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
    last: [DeviceStats; 2],
    last_offered: u64,
    at: Instant,
    start: Instant,
}

impl<'a> Ticker<'a> {
    fn new(devs: &'a [Device<SimBar>; 2]) -> Self {
        let last = [devs[0].stats(), devs[1].stats()];
        let now = Instant::now();
        Ticker {
            devs,
            last,
            last_offered: 0,
            at: now,
            start: now,
        }
    }

    fn tick(&mut self, load: &LoadCounters) {
        let over = self.at.elapsed();
        if over < Duration::from_secs(1) {
            return;
        }
        let offered = load.offered.load(Ordering::Relaxed);
        println!(
            "[{:>4.1}s] generators offered {:.2} Mpps",
            self.start.elapsed().as_secs_f64(),
            (offered - self.last_offered) as f64 / over.as_secs_f64() / 1e6
        );
        self.last_offered = offered;
        for (i, d) in self.devs.iter().enumerate() {
            let s = d.stats();
            let old = &self.last[i];
            let rx = stats::Rate::new(
                s.rx_packets - old.rx_packets,
                s.rx_bytes - old.rx_bytes,
                over,
            );
            let tx = stats::Rate::new(
                s.tx_packets - old.tx_packets,
                s.tx_bytes - old.tx_bytes,
                over,
            );
            println!("{}", stats::line(&format!("sim:{i}"), "RX", rx));
            println!("{}", stats::line(&format!("sim:{i}"), "TX", tx));
            self.last[i] = s;
        }
        self.at = Instant::now();
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

fn print_summary(opts: &DemoOptions, r: &DemoReport, elapsed: Duration) {
    println!(
        "\nSummary ({:?} model, {:.1} s):",
        opts.model,
        elapsed.as_secs_f64()
    );
    println!("  frames offered by the generators   {:>12}", r.offered);
    println!(
        "  refused at the wire (buffer full)  {:>12}",
        r.refused_at_wire
    );
    println!("  missed (no free RX descriptor)     {:>12}", r.missed);
    println!("  received by the driver             {:>12}", r.received);
    println!("  forwarded                          {:>12}", r.forwarded);
    println!("  dropped (transmit ring full)       {:>12}", r.tx_dropped);
    println!("  counted by the sinks               {:>12}", r.sunk);
    println!(
        "  forwarding rate                    {:>12.3} Mpps",
        r.forwarded as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!("  datasheet violations (strict mode) {:>12}", r.violations);
    println!(
        "  counters add up: {}",
        if r.adds_up() { "yes" } else { "NO" }
    );
}
