//! Who had the CPU during a trial: each core's busy share from
//! `/proc/stat` (user, nice, system, irq and softirq against the total,
//! softirq also apart), and each thread's own run time from its
//! `schedstat` (the tester's thread, the DUT's thread, and every other
//! thread of this process: the simulated 82599s, vhost-user control).

use std::path::PathBuf;
use std::time::Instant;

/// Jiffies of one core: (busy incl. irq and softirq, softirq, total).
fn cores() -> Vec<(u64, u64, u64)> {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            let g = |i: usize| v.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal
            let busy = g(0) + g(1) + g(2) + g(5) + g(6) + g(7);
            let total = busy + g(3) + g(4);
            (busy, g(6), total)
        })
        .collect()
}

/// Nanoseconds a thread has run, from `/proc/self/task/TID/schedstat`.
fn run_ns(task: &std::path::Path) -> u64 {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The calling thread's `/proc/self/task/TID` directory.
pub fn this_thread() -> Option<PathBuf> {
    // /proc/thread-self links to "PID/task/TID"
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    let tid = link.file_name()?.to_owned();
    Some(PathBuf::from("/proc/self/task").join(tid))
}

fn all_threads() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.flatten().map(|e| run_ns(&e.path())).sum())
        .unwrap_or(0)
}

/// A reading taken at the start of a trial.
#[derive(Debug, Clone)]
pub struct Mark {
    at: Instant,
    cores: Vec<(u64, u64, u64)>,
    tester: u64,
    dut: u64,
    all: u64,
}

/// Shares of the trial's wall time (1.0 = one core all the time).
#[derive(Debug, Clone, Default)]
pub struct Share {
    pub tester_thread: f64,
    pub dut_thread: f64,
    /// The DUT thread's own run time (schedstat: time it waited for a
    /// core is not in it), nanoseconds.
    pub dut_ns: u64,
    /// Every other thread's run time, nanoseconds.
    pub other_ns: u64,
    /// Softirq time summed over the cores, nanoseconds (from each core's
    /// softirq share of the trial's wall time; the kernel samples it at
    /// the tick unless it accounts IRQ time exactly).
    pub softirq_ns: f64,
    /// Every other thread of the process (simulated NICs, control).
    pub other_threads: f64,
    /// Per core: busy share incl. irq and softirq, and softirq alone.
    pub cores: Vec<(f64, f64)>,
}

impl Share {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "tester_thread": self.tester_thread,
            "dut_thread": self.dut_thread,
            "dut_thread_ns": self.dut_ns,
            "other_threads": self.other_threads,
            "other_threads_ns": self.other_ns,
            "softirq_ns": self.softirq_ns,
            "cores_busy": self.cores.iter().map(|c| c.0).collect::<Vec<_>>(),
            "cores_softirq": self.cores.iter().map(|c| c.1).collect::<Vec<_>>(),
        })
    }

    /// `gen 98% dut 97% other 3% | cpu0 100% (si 0%) cpu1 ...`
    pub fn line(&self) -> String {
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        let cores: Vec<String> = self
            .cores
            .iter()
            .enumerate()
            .map(|(i, (b, si))| format!("cpu{i} {} si {}", pct(*b), pct(*si)))
            .collect();
        format!(
            "gen {} dut {} other {} | {}",
            pct(self.tester_thread),
            pct(self.dut_thread),
            pct(self.other_threads),
            cores.join(" ")
        )
    }
}

/// Reads the tester's and the DUT's threads.
#[derive(Debug, Clone)]
pub struct Meter {
    pub tester: Option<PathBuf>,
    pub dut: Option<PathBuf>,
}

impl Meter {
    pub fn mark(&self) -> Mark {
        let t = |p: &Option<PathBuf>| p.as_deref().map(run_ns).unwrap_or(0);
        Mark {
            at: Instant::now(),
            cores: cores(),
            tester: t(&self.tester),
            dut: t(&self.dut),
            all: all_threads(),
        }
    }

    pub fn since(&self, m: &Mark) -> Share {
        let now = self.mark();
        let wall = m.at.elapsed().as_nanos().max(1) as f64;
        let tester = now.tester.saturating_sub(m.tester);
        let dut = now.dut.saturating_sub(m.dut);
        let all = now.all.saturating_sub(m.all);
        // a DUT process's thread (testpmd) is not among this process's
        let own = if self
            .dut
            .as_deref()
            .is_some_and(|d| d.starts_with("/proc/self"))
        {
            tester + dut
        } else {
            tester
        };
        let cores: Vec<(f64, f64)> = now
            .cores
            .iter()
            .zip(&m.cores)
            .map(|(a, b)| {
                let total = a.2.saturating_sub(b.2).max(1) as f64;
                (
                    a.0.saturating_sub(b.0) as f64 / total,
                    a.1.saturating_sub(b.1) as f64 / total,
                )
            })
            .collect();
        Share {
            tester_thread: tester as f64 / wall,
            dut_thread: dut as f64 / wall,
            dut_ns: dut,
            other_ns: all.saturating_sub(own),
            other_threads: all.saturating_sub(own) as f64 / wall,
            softirq_ns: cores.iter().map(|c| c.1).sum::<f64>() * wall,
            cores,
        }
    }
}
