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
