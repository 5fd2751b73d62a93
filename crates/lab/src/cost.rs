//! The driver's own cost, apart from the simulated 82599's: the
//! forwarding thread's CPU time (from its `schedstat`, so time the
//! thread waited for a core is not counted) per packet, in cycles at the
//! CPU's nominal clock, with a labelled projection of what one core would
//! forward; the CPU time of every other thread of the process (the
//! models, the generators) is reported beside it, never mixed in.
//!
//! The driver's time includes its empty polls while it waits for the
//! (starved) model, so the cycles per packet are an upper bound and the
//! projection a lower bound.
//!
//! [`lockstep`] gives the figure that does not follow the model at all:
//! the devices advanced in lock-step between the driver's rounds, the
//! driver's rounds timed apart from the model's steps (`nfkit demo`
//! prints both).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn run_ns(task: &Path) -> Option<u64> {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn this_thread() -> Option<PathBuf> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(PathBuf::from("/proc/self/task").join(link.file_name()?))
}

fn process_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.flatten().filter_map(|e| run_ns(&e.path())).sum())
        .unwrap_or(0)
}

/// The CPU's clock from `/proc/cpuinfo` (`cpu MHz` of the first CPU), in GHz.
pub fn cpu_ghz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu MHz"))?;
    let mhz: f64 = line.split(':').nth(1)?.trim().parse().ok()?;
    (mhz > 0.0).then_some(mhz / 1e3)
}

/// A reading taken on the forwarding thread when measuring starts.
#[derive(Debug, Clone)]
pub struct Mark {
    task: Option<PathBuf>,
    thread_ns: u64,
    process_ns: u64,
    at: Instant,
}

impl Mark {
    /// Call on the forwarding thread.
    pub fn now() -> Mark {
        let task = this_thread();
        Mark {
            thread_ns: task.as_deref().and_then(run_ns).unwrap_or(0),
            task,
            process_ns: process_ns(),
            at: Instant::now(),
        }
    }

    /// Call on the same thread when measuring ends, with the packets it
    /// forwarded since [`Mark::now`].
    pub fn finish(&self, packets: u64) -> Option<DriverCost> {
        let thread = self.task.as_deref().and_then(run_ns)?;
        let driver_ns = thread.saturating_sub(self.thread_ns);
        let all = process_ns().saturating_sub(self.process_ns);
        Some(DriverCost {
            packets,
            driver_cpu: Duration::from_nanos(driver_ns),
            others_cpu: Duration::from_nanos(all.saturating_sub(driver_ns)),
            wall: self.at.elapsed(),
            ghz: cpu_ghz(),
        })
    }
}

/// The forwarding thread's own cost.
#[derive(Debug, Clone, Default)]
pub struct DriverCost {
    pub packets: u64,
    /// CPU time of the forwarding thread.
    pub driver_cpu: Duration,
    /// CPU time of every other thread (models, generators, sinks).
    pub others_cpu: Duration,
    pub wall: Duration,
    pub ghz: Option<f64>,
}

impl DriverCost {
    /// Nanoseconds of the driver thread's CPU time per packet.
    pub fn ns_per_packet(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.driver_cpu.as_nanos() as f64 / self.packets as f64)
    }

    /// Cycles per packet at the nominal clock.
    pub fn cycles_per_packet(&self) -> Option<f64> {
        Some(self.ns_per_packet()? * self.ghz?)
    }

    /// Mpps one core would forward at this cost (a projection).
    pub fn projected_mpps(&self) -> Option<f64> {
        Some(1e3 / self.ns_per_packet()?)
    }

    /// What was measured and how, for a summary.
    pub fn lines(&self) -> Vec<String> {
        let Some(ns) = self.ns_per_packet() else {
            return vec!["driver cost: no packet forwarded, nothing to divide".into()];
        };
        let cyc = self
            .cycles_per_packet()
            .map(|c| format!("{c:.0} cycles"))
            .unwrap_or_else(|| "? cycles (no clock in /proc/cpuinfo)".into());
        let pct = |d: Duration| d.as_secs_f64() / self.wall.as_secs_f64().max(1e-9) * 100.0;
        vec![
            format!(
                "driver cost: {cyc} ({ns:.1} ns) of the forwarding thread's own CPU time per packet \
                 (schedstat: {:.0} ms over {} packets{}; includes its empty polls, so an upper bound)",
                self.driver_cpu.as_secs_f64() * 1e3,
                self.packets,
                self.ghz.map(|g| format!(", clock {g:.2} GHz from /proc/cpuinfo")).unwrap_or_default()
            ),
            format!(
                "projection: one core running only the driver would forward >= {:.2} Mpps \
                 (1 / CPU time per packet; not a measurement)",
                self.projected_mpps().unwrap_or(0.0)
            ),
            format!(
                "model and generators (other threads): {:.0} ms of CPU, {:.0}% of a core, apart from the above; \
                 the driver thread ran {:.0}% of the wall time",
                self.others_cpu.as_secs_f64() * 1e3,
                pct(self.others_cpu),
                pct(self.driver_cpu)
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_has_cpu_time_and_a_cost() {
        let m = Mark::now();
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until {
            x = x.wrapping_add(1);
        }
        std::hint::black_box(x);
        let c = m.finish(1000).expect("schedstat readable on Linux");
        assert!(c.driver_cpu > Duration::ZERO, "{c:?}");
        assert!(c.ns_per_packet().unwrap() > 0.0);
        assert_eq!(c.lines().len(), 3);
        assert!(m.finish(0).unwrap().lines()[0].contains("no packet"));
    }
}

/// The driver's cost in lock-step with the simulated 82599: the model
/// does its work only when stepped, between the driver's rounds, so the
/// driver never waits for it and its rounds are timed apart from the
/// model's steps. A figure that does not depend on how starved a
/// free-running model is (see [`lockstep`]).
#[derive(Debug, Clone)]
pub struct LockstepCost {
    pub model: nfkit_port::Model,
    pub packets: u64,
    /// Median over blocks of [`BLOCK`] packets of the driver rounds' wall
    /// time per packet (a block the scheduler interrupted is an outlier
    /// the median leaves out).
    pub driver_ns: f64,
    /// The same for the model's steps (receive and transmit side).
    pub model_ns: f64,
    pub ghz: Option<f64>,
}

/// Packets per timed block of [`lockstep`].
pub const BLOCK: u64 = 4096;

/// Forward `packets` frames of `frame_len` bytes one way (sim:0 to
/// sim:1) through lock-step devices with `model`'s driver, touching each
/// frame as `nfkit demo` does (one byte of the destination MAC). Each
/// round: the generator fills sim:0's wire, sim:0 is stepped, the driver
/// runs one round (every frame waiting), sim:1 is stepped; only the
/// driver's rounds are counted as the driver's time.
pub fn lockstep(
    model: nfkit_port::Model,
    frame_len: usize,
    packets: u64,
) -> anyhow::Result<LockstepCost> {
    use nfkit_hw::Batch;
    use nfkit_ixgbe::{Agent, AgentConfig, IxgbePort};
    use nfkit_port::{Model, Port};
    let nics = crate::forms::SimNics::lockstep(2)?;
    let (nic0, nic1) = (&nics.nics[0], &nics.nics[1]);
    nic1.wire().attach_sink();
    let wire = nic0.wire();
    let mut gen = nfkit_ixgbe_model::TrafficGen::udp_flows(crate::sim_mac(0), 256, frame_len);
    let mut agent = None;
    let mut ports = None;
    match model {
        Model::Agent | Model::AgentAdapter => {
            agent = Some(Agent::new(
                &nics.devs[0],
                0,
                &[(&nics.devs[1], 0)],
                &AgentConfig::default(),
            )?)
        }
        Model::Queue => {
            ports = Some((
                IxgbePort::new("sim:0", nics.devs[0].clone(), &*nics.dma)?,
                IxgbePort::new("sim:1", nics.devs[1].clone(), &*nics.dma)?,
            ))
        }
    }
    let mut handler = |buf: &mut [u8], len: usize, out: &mut [u16]| {
        buf[1] = buf[1].wrapping_add(1);
        out[0] = len as u16;
    };
    let mut batch = Batch::new();
    let (mut forwarded, mut idle) = (0u64, 0u32);
    let (mut drv, mut mdl, mut in_block) = (Duration::ZERO, Duration::ZERO, 0u64);
    let (mut drv_blocks, mut mdl_blocks) = (Vec::new(), Vec::new());
    while forwarded < packets && idle < 1000 {
        let t0 = Instant::now();
        if wire.rx_pending() < 256 {
            gen.inject(&wire, 128);
        }
        nic0.step();
        let t1 = Instant::now();
        let mut n = 0usize;
        if let Some(a) = agent.as_mut() {
            loop {
                let k = a.run_once(&mut handler);
                n += k;
                if k == 0 {
                    break;
                }
            }
        }
        if let Some((rx, tx)) = ports.as_mut() {
            loop {
                let k = rx.rx_batch(0, &mut batch);
                if k == 0 {
                    break;
                }
                n += k;
                for p in batch.iter_mut() {
                    let d = p.data_mut();
                    d[1] = d[1].wrapping_add(1);
                }
                tx.tx_batch(0, &mut batch);
                batch.clear();
            }
        }
        let t2 = Instant::now();
        nic1.step();
        let t3 = Instant::now();
        drv += t2 - t1;
        mdl += (t1 - t0) + (t3 - t2);
        forwarded += n as u64;
        in_block += n as u64;
        idle = if n == 0 { idle + 1 } else { 0 };
        if in_block >= BLOCK {
            drv_blocks.push(drv.as_nanos() as f64 / in_block as f64);
            mdl_blocks.push(mdl.as_nanos() as f64 / in_block as f64);
            (drv, mdl, in_block) = (Duration::ZERO, Duration::ZERO, 0);
        }
    }
    if drv_blocks.is_empty() {
        anyhow::bail!(
            "the lock-step run forwarded {forwarded} packets, less than one block of {BLOCK}"
        );
    }
    Ok(LockstepCost {
        model,
        packets: forwarded,
        driver_ns: median(&mut drv_blocks),
        model_ns: median(&mut mdl_blocks),
        ghz: cpu_ghz(),
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl LockstepCost {
    pub fn cycles_per_packet(&self) -> Option<f64> {
        Some(self.driver_ns * self.ghz?)
    }

    /// Mpps one core running only the driver would forward.
    pub fn projected_mpps(&self) -> f64 {
        1e3 / self.driver_ns.max(1e-9)
    }

    /// What was measured and how.
    pub fn lines(&self) -> Vec<String> {
        let cyc = self
            .cycles_per_packet()
            .map(|c| format!("{c:.0} cycles"))
            .unwrap_or_else(|| "? cycles (no clock in /proc/cpuinfo)".into());
        vec![
            format!(
                "driver cost, lock-step: {cyc} ({:.1} ns) per packet in the {:?} driver's rounds \
                 (sim:0 -> sim:1, {} packets; the models stepped between rounds and timed apart, \
                 median of blocks of {BLOCK}{}): does not depend on the model's speed; \
                 the simulated BAR's register writes cost a memory store here, not an MMIO write",
                self.driver_ns,
                self.model,
                self.packets,
                self.ghz.map(|g| format!(", clock {g:.2} GHz from /proc/cpuinfo")).unwrap_or_default()
            ),
            format!(
                "projection: one core running only this driver would forward {:.2} Mpps \
                 (1 / lock-step time per packet; not a measurement); the model's steps took {:.1} ns per packet apart",
                self.projected_mpps(),
                self.model_ns
            ),
        ]
    }
}
