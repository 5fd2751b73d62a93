//! Running `dpdk-testpmd` as the yardstick of the benchmark commands.
//!
//! One run: make sure hugepages are reserved and hugetlbfs is mounted
//! (both put back as they were afterwards), start testpmd in io
//! forwarding mode on the given virtual devices with statistics every
//! second, let it run for the asked time, stop it with SIGINT (SIGKILL
//! after a grace period), and average each port's `Rx-pps`/`Tx-pps` over
//! the steady periods. Every wait is bounded.
//!
//! ```no_run
//! use nfkit_bench::testpmd::Testpmd;
//! let run = Testpmd::new(["net_null0,size=60", "net_null1,size=60"], 3).run()?;
//! println!("{:.2} Mpps per port", run.mean_rx_pps() / 1e6);
//! # Ok::<(), nfkit_bench::testpmd::TestpmdError>(())
//! ```

pub use nfkit_testkit::DpdkEnv;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The core both sides of a comparison forward on.
pub const FORWARDING_CORE: usize = 1;
/// Measurement starts this long after forwarding does.
pub const WARMUP: Duration = Duration::from_secs(1);

/// The TSC's nominal frequency in Hz: the first `cpu MHz` of
/// `/proc/cpuinfo` (on this kind of machine the CPU runs at it:
/// `constant_tsc`, `tsc_known_freq`).
pub fn tsc_hz() -> anyhow::Result<f64> {
    use anyhow::Context;
    let info = std::fs::read_to_string("/proc/cpuinfo").context("reading /proc/cpuinfo")?;
    parse_cpu_mhz(&info)
        .map(|mhz| mhz * 1e6)
        .context("no `cpu MHz` line in /proc/cpuinfo")
}

fn parse_cpu_mhz(info: &str) -> Option<f64> {
    info.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1)?.trim().parse().ok())
}

/// The program run.
pub const TESTPMD: &str = "dpdk-testpmd";
/// Debian packages that provide it and the virtual-device drivers used.
pub const DEBIAN_PACKAGES: &str =
    "dpdk-dev librte-net-null23 librte-mempool-ring23 librte-net-af-packet23 librte-net-af-xdp23";
/// Free 2 MiB hugepages asked for (256 MiB: the mbuf pool below, the
/// AF_XDP PMD's UMEM and EAL's own structures fit with room to spare).
pub const HUGEPAGES: u64 = 128;
/// Mbufs in testpmd's pool (its default sizes the pool for hardware rings
/// of thousands of descriptors per queue, about 400 MiB).
const MBUFS: usize = 16384;
/// How long EAL start-up and port configuration may take before the
/// first statistics appear.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// How long testpmd may take to exit after SIGINT.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// Lines of testpmd's output shown when it fails.
const TAIL_LINES: usize = 15;

/// Why a testpmd run gave no figures.
#[derive(Debug, thiserror::Error)]
pub enum TestpmdError {
    #[error(
        "`{TESTPMD}` is not installed: `apt-get install {DEBIAN_PACKAGES}` (DPDK 22.11 in Debian 12)"
    )]
    NotInstalled,
    #[error("{0}")]
    Env(#[from] nfkit_testkit::DpdkEnvError),
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}); its last lines:\n{tail}")]
    Failed {
        command: String,
        status: String,
        tail: String,
    },
    #[error("interrupted before testpmd printed enough statistics")]
    Interrupted,
    #[error("`{command}` printed no throughput figures; its last lines:\n{tail}")]
    NoStats { command: String, tail: String },
}

fn os(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestpmdError {
    let what = what.into();
    move |source| TestpmdError::Os { what, source }
}

/// One testpmd run in io forwarding mode.
#[derive(Debug, Clone)]
pub struct Testpmd {
    /// `--vdev` arguments, one port each, in port order.
    pub vdevs: Vec<String>,
    /// Statistics periods (about a second each) averaged, after the
    /// baseline block and the warm-up periods.
    pub seconds: u64,
    /// EAL `-l`: the main lcore first, then the forwarding lcores.
    pub lcores: String,
    /// Forwarding cores (`--nb-cores`).
    pub forwarding_cores: usize,
    /// Send one burst out of every port at start (`--tx-first`): the only
    /// traffic when ports loop back to each other.
    pub tx_first: bool,
    /// Packets per burst (`--burst`), testpmd's default (32) if `None`.
    pub burst: Option<usize>,
    /// Statistics periods after the baseline block left out of the
    /// average (warm-up).
    pub warmup_periods: usize,
    /// Also measure the CPU time of the forwarding lcore's thread over
    /// the steady periods, and ask testpmd for its own cycles per packet
    /// (`--record-core-cycles`).
    pub measure_cpu: bool,
    /// Stop early (as at the end of the run) once this is set: Ctrl-C.
    pub abort: Option<Arc<AtomicBool>>,
}

/// The thread testpmd's first forwarding lcore runs on (DPDK 22.11 names
/// worker lcore threads `rte-worker-N`).
const FORWARDING_THREAD: &str = "rte-worker-1";

/// Average rates of one port over the steady periods.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PortRate {
    pub port: usize,
    pub rx_pps: f64,
    pub tx_pps: f64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct TestpmdRun {
    /// One entry per port, in port order.
    pub ports: Vec<PortRate>,
    /// Statistics periods averaged (seconds).
    pub periods: usize,
    /// The command line, for the report.
    pub command: String,
    /// With [`Testpmd::measure_cpu`]: the forwarding thread's CPU time
    /// over the steady periods, as a share of their wall-clock time.
    pub forwarding_cpu_share: Option<f64>,
    /// With [`Testpmd::measure_cpu`]: testpmd's own figure at exit (TSC
    /// cycles of forwarding rounds that moved packets, per packet).
    pub own_cycles_per_packet: Option<f64>,
}

impl TestpmdRun {
    /// Receive rate averaged over the ports.
    pub fn mean_rx_pps(&self) -> f64 {
        mean(self.ports.iter().map(|p| p.rx_pps))
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

impl Testpmd {
    /// One forwarding core (lcore 1; lcore 0 is the main lcore printing
    /// statistics), no `--tx-first`.
    pub fn new<S: Into<String>>(vdevs: impl IntoIterator<Item = S>, seconds: u64) -> Testpmd {
        Testpmd {
            vdevs: vdevs.into_iter().map(Into::into).collect(),
            seconds,
            lcores: "0-1".into(),
            forwarding_cores: 1,
            tx_first: false,
            burst: None,
            warmup_periods: 0,
            measure_cpu: false,
            abort: None,
        }
    }

    pub fn tx_first(mut self, on: bool) -> Testpmd {
        self.tx_first = on;
        self
    }

    pub fn burst(mut self, packets: Option<usize>) -> Testpmd {
        self.burst = packets;
        self
    }

    pub fn warmup_periods(mut self, periods: usize) -> Testpmd {
        self.warmup_periods = periods;
        self
    }

    pub fn measure_cpu(mut self, on: bool) -> Testpmd {
        self.measure_cpu = on;
        self
    }

    pub fn abort_on(mut self, flag: Arc<AtomicBool>) -> Testpmd {
        self.abort = Some(flag);
        self
    }

    fn aborted(&self) -> bool {
        self.abort
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// The arguments after the program name. `prefix` names this run's
    /// runtime files (`--file-prefix`), unique so runs never share them.
    pub fn args(&self, prefix: &str) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-l".into(),
            self.lcores.clone(),
            "-n".into(),
            "1".into(),
            "--no-pci".into(),
            // No hugepage files left behind, even if testpmd is killed.
            "--in-memory".into(),
            "--file-prefix".into(),
            prefix.into(),
            "--log-level".into(),
            "pmd.net.af_xdp:error".into(),
        ];
        for v in &self.vdevs {
            a.push("--vdev".into());
            a.push(v.clone());
        }
        a.push("--".into());
        a.extend(
            [
                "--forward-mode=io",
                "--auto-start",
                "--stats-period",
                "1",
                &format!("--nb-cores={}", self.forwarding_cores),
                &format!("--total-num-mbufs={MBUFS}"),
            ]
            .map(String::from),
        );
        if let Some(b) = self.burst {
            a.push(format!("--burst={b}"));
        }
        if self.tx_first {
            a.push("--tx-first".into());
        }
        if self.measure_cpu {
            a.push("--record-core-cycles".into());
        }
        a
    }

    /// Run testpmd and average its per-port rates over the steady periods
    /// (every statistics block after the first, which only sets the
    /// baseline, and after the warm-up periods).
    pub fn run(&self) -> Result<TestpmdRun, TestpmdError> {
        if !on_path(TESTPMD) {
            return Err(TestpmdError::NotInstalled);
        }
        let _env = DpdkEnv::prepare(HUGEPAGES)?;
        let prefix = unique_prefix();
        let args = self.args(&prefix);
        let command = format!("{TESTPMD} {}", args.join(" "));
        let log = LogFile::new(&prefix)?;
        let child = Command::new(TESTPMD)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.writer()?)
            .stderr(log.writer()?)
            .spawn()
            .map_err(os(format!("cannot start `{TESTPMD}`")))?;
        let mut child = Running(Some(child));
        let outcome = self.supervise(&mut child, &log, &command);
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&prefix));
        let text = log.read();
        let (status, cpu_share) = outcome?;
        let periods = parse_periods(&text);
        let skip = 1 + self.warmup_periods;
        let Some(ports) = steady_average(&periods, skip) else {
            return Err(match status {
                _ if self.aborted() => TestpmdError::Interrupted,
                Some(s) if !s.success() => TestpmdError::Failed {
                    command,
                    status: s.to_string(),
                    tail: tail(&text, TAIL_LINES),
                },
                _ => TestpmdError::NoStats {
                    command,
                    tail: tail(&text, TAIL_LINES),
                },
            });
        };
        Ok(TestpmdRun {
            ports,
            periods: periods.len().saturating_sub(skip),
            command,
            forwarding_cpu_share: cpu_share,
            own_cycles_per_packet: parse_own_cycles(&text),
        })
    }

    /// Wait until testpmd has printed the baseline block and the warm-up
    /// blocks, then until its complete blocks after those cover `seconds`
    /// of wall-clock time (it prints a block about every second, every
    /// two on machines whose TSC DPDK rounds up), then stop it. Returns
    /// its exit status (`None` if it had to be killed) and, if asked, the
    /// forwarding thread's share of a CPU over the steady blocks.
    fn supervise(
        &self,
        child: &mut Running,
        log: &LogFile,
        command: &str,
    ) -> Result<(Option<ExitStatus>, Option<f64>), TestpmdError> {
        let steady_from = 1 + self.warmup_periods;
        let measured = Duration::from_secs(self.seconds);
        let limit = STARTUP_LIMIT + 3 * (measured + Duration::from_secs(steady_from as u64 + 2));
        // When the first steady block began, and the forwarding thread's
        // CPU time then.
        let mut steady: Option<(Instant, Option<Duration>)> = None;
        // Blocks printed when `measured` had passed: the one in progress
        // then is complete once the next header appears.
        let mut at_deadline: Option<usize> = None;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                // Ended by itself: the caller shows its output.
                return Ok((Some(status), None));
            }
            let blocks = log.read().matches(STATS_HEADER).count();
            if steady.is_none() && blocks >= steady_from {
                let cpu = self
                    .measure_cpu
                    .then(|| thread_cpu_time(child.pid()?, FORWARDING_THREAD))
                    .flatten();
                steady = Some((Instant::now(), cpu));
            }
            if let Some((from, _)) = steady {
                if at_deadline.is_none() && from.elapsed() >= measured {
                    at_deadline = Some(blocks);
                }
            }
            if at_deadline.is_some_and(|n| blocks > n) || self.aborted() {
                break;
            }
            if started.elapsed() > limit {
                child.kill();
                return Err(TestpmdError::Failed {
                    command: command.into(),
                    status: format!(
                        "its statistics blocks did not cover {measured:?} after the warm-up within {limit:?}"
                    ),
                    tail: tail(&log.read(), TAIL_LINES),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let cpu_from = steady.and_then(|(at, t0)| Some((at, t0?)));
        let cpu_share = cpu_from.and_then(|(at, t0)| {
            let t1 = thread_cpu_time(child.pid()?, FORWARDING_THREAD)?;
            Some((t1.saturating_sub(t0)).as_secs_f64() / at.elapsed().as_secs_f64())
        });
        child.interrupt()?;
        let deadline = Instant::now() + EXIT_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Ok((Some(status), cpu_share));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::warn!("{TESTPMD} did not exit within {EXIT_GRACE:?} of SIGINT; killing it");
        child.kill();
        Ok((None, cpu_share))
    }
}

/// The testpmd process, killed and reaped if still running on drop.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(|c| c.id())
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>, TestpmdError> {
        match &mut self.0 {
            Some(c) => c.try_wait().map_err(os("waiting for testpmd")),
            None => Ok(None),
        }
    }

    /// SIGINT: testpmd stops forwarding, prints its totals and exits.
    fn interrupt(&mut self) -> Result<(), TestpmdError> {
        let Some(c) = &self.0 else { return Ok(()) };
        let status = Command::new("kill")
            .args(["-s", "INT", &c.id().to_string()])
            .status()
            .map_err(os("cannot run `kill` to stop testpmd"))?;
        if !status.success() {
            tracing::warn!("`kill -s INT {}` failed: {status}", c.id());
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// testpmd's output, in a file (a pipe could fill up and stall it).
struct LogFile(PathBuf);

impl LogFile {
    fn new(prefix: &str) -> Result<LogFile, TestpmdError> {
        let path = std::env::temp_dir().join(format!("{prefix}.log"));
        File::create(&path).map_err(os(format!("cannot create {}", path.display())))?;
        Ok(LogFile(path))
    }

    fn writer(&self) -> Result<File, TestpmdError> {
        File::options()
            .append(true)
            .open(&self.0)
            .map_err(os(format!("cannot open {}", self.0.display())))
    }

    fn read(&self) -> String {
        std::fs::read(&self.0)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn unique_prefix() -> String {
    static RUN: AtomicU32 = AtomicU32::new(0);
    format!(
        "nfkit-tp-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    )
}

/// CPU time of the thread named `name` (its `comm`) in process `pid`,
/// from the scheduler's nanosecond account (`/proc/PID/task/TID/schedstat`,
/// first field); `None` if there is no such thread.
pub fn thread_cpu_time(pid: u32, name: &str) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
            return Some(Duration::from_nanos(ns));
        }
    }
    None
}

/// CPU time of the calling thread (`/proc/thread-self/schedstat`).
pub fn current_thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Whether an executable named `prog` is on the PATH.
pub fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// The last `n` lines of `text`, without terminal control sequences.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.replace("\x1b[2J", "").replace("\x1b[1;1H", ""))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------
// Parsing testpmd's statistics.

/// The line that starts each statistics block.
const STATS_HEADER: &str = "Port statistics ====";

/// One statistics block: each port's rates since the previous block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Period {
    /// `(port, Rx-pps, Tx-pps)` in the order printed.
    pub ports: Vec<(usize, u64, u64)>,
}

/// The statistics blocks in testpmd's output, in order. A block cut off
/// by the end of the output keeps the ports that were complete.
pub fn parse_periods(text: &str) -> Vec<Period> {
    let mut periods: Vec<Period> = Vec::new();
    let mut port: Option<usize> = None;
    let mut rx: Option<u64> = None;
    for line in text.lines() {
        if line.contains(STATS_HEADER) {
            periods.push(Period::default());
            port = None;
            continue;
        }
        if let Some(rest) = line.split("NIC statistics for port").nth(1) {
            port = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            rx = None;
            continue;
        }
        let (Some(p), Some(period)) = (port, periods.last_mut()) else {
            continue;
        };
        if let Some(v) = field(line, "Rx-pps:") {
            rx = Some(v);
        } else if let Some(v) = field(line, "Tx-pps:") {
            if let Some(r) = rx.take() {
                period.ports.push((p, r, v));
            }
        }
    }
    periods
}

/// Where testpmd's packets went, from its output: each port's totals in
/// the last statistics block (what the port received and sent) and the
/// forward statistics printed at exit (what forwarding took and sent).
/// Told apart, they show e.g. frames a port received before forwarding
/// started. Empty if the output has neither.
pub fn packet_counts(text: &str) -> String {
    let counter = |l: &&str| {
        let l = l.trim_start();
        l.starts_with("RX-packets:") || l.starts_with("TX-packets:")
    };
    let squeeze = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let last_block = text
        .rsplit(STATS_HEADER)
        .next()
        .filter(|_| text.contains(STATS_HEADER));
    if let Some(block) = last_block {
        let block = block.split("Telling cores to stop").next().unwrap_or(block);
        for l in block.lines() {
            if let Some(rest) = l.split("NIC statistics for port").nth(1) {
                let port = rest.split_whitespace().next().unwrap_or("?");
                out.push(format!("port {port} in all (last statistics block):"));
            } else if counter(&l) {
                out.push(format!("  {}", squeeze(l)));
            }
        }
    }
    for section in text.split("Forward statistics for port").skip(1) {
        let port = section.split_whitespace().next().unwrap_or("?");
        out.push(format!("port {port} forwarded (at exit):"));
        let lines = section.lines().skip(1).take_while(|l| !l.contains("-----"));
        out.extend(lines.filter(counter).map(|l| format!("  {}", squeeze(l))));
    }
    out.join("\n")
}

/// testpmd's `CPU cycles/packet=24.19 (...)` line (`--record-core-cycles`,
/// printed with the totals at exit).
pub fn parse_own_cycles(text: &str) -> Option<f64> {
    text.lines()
        .rev()
        .find_map(|l| l.split("CPU cycles/packet=").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// The number after `key` on a line like `  Rx-pps:   123   Rx-bps: 0`.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split(key)
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Per-port mean rates over the blocks after the first `skip`, counting
/// only complete blocks (as many ports as the first block). `None` if no
/// block is left.
pub fn steady_average(periods: &[Period], skip: usize) -> Option<Vec<PortRate>> {
    let nports = periods.first()?.ports.len();
    let steady: Vec<&Period> = periods
        .iter()
        .skip(skip)
        .filter(|p| p.ports.len() == nports && nports > 0)
        .collect();
    if steady.is_empty() {
        return None;
    }
    let rates = (0..nports)
        .map(|i| PortRate {
            port: steady[0].ports[i].0,
            rx_pps: mean(steady.iter().map(|p| p.ports[i].1 as f64)),
            tx_pps: mean(steady.iter().map(|p| p.ports[i].2 as f64)),
        })
        .collect();
    Some(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_frequency_from_cpuinfo() {
        let info =
            "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.134\ncache size\t: 512 KB\n";
        assert_eq!(parse_cpu_mhz(info), Some(2596.134));
        assert_eq!(parse_cpu_mhz("processor\t: 0\n"), None);
    }

    /// Captured from `dpdk-testpmd ... --vdev net_null0 --vdev net_null1
    /// -- --forward-mode=io --auto-start --stats-period 1` (DPDK 22.11),
    /// shortened to its statistics and the totals at SIGINT.
    const SAMPLE: &str = "\
Logical Core 1 (socket 0) forwards packets on 2 streams:
  RX P=0/Q=0 (socket 0) -> TX P=1/Q=0 (socket 0) peer=02:00:00:00:00:01
\x1b[2J\x1b[1;1H
Port statistics ====================================
  ######################## NIC statistics for port 0  ########################
  RX-packets: 622720     RX-missed: 0          RX-bytes:  0
  RX-errors: 0
  RX-nombuf:  0         
  TX-packets: 1152       TX-errors: 0          TX-bytes:  0

  Throughput (since last show)
  Rx-pps:            0          Rx-bps:            0
  Tx-pps:            0          Tx-bps:            0
  ############################################################################

  ######################## NIC statistics for port 1  ########################
  RX-packets: 658336     RX-missed: 0          RX-bytes:  0
  RX-errors: 0
  RX-nombuf:  0         
  TX-packets: 1440       TX-errors: 0          TX-bytes:  0

  Throughput (since last show)
  Rx-pps:            0          Rx-bps:            0
  Tx-pps:            0          Tx-bps:            0
  ############################################################################
\x1b[2J\x1b[1;1H
Port statistics ====================================
  ######################## NIC statistics for port 0  ########################
  RX-packets: 80394304   RX-missed: 0          RX-bytes:  0
  RX-errors: 0
  RX-nombuf:  0         
  TX-packets: 79772704   TX-errors: 0          TX-bytes:  0

  Throughput (since last show)
  Rx-pps:     39876556          Rx-bps:            0
  Tx-pps:     39876540          Tx-bps:            0
  ############################################################################

  ######################## NIC statistics for port 1  ########################
  RX-packets: 80429600   RX-missed: 0          RX-bytes:  0
  RX-errors: 0
  RX-nombuf:  0         
  TX-packets: 79772736   TX-errors: 0          TX-bytes:  0

  Throughput (since last show)
  Rx-pps:     39876380          Rx-bps:            0
  Tx-pps:     39876396          Tx-bps:            0
  ############################################################################
\x1b[2J\x1b[1;1H
Port statistics ====================================
  ######################## NIC statistics for port 0  ########################
  Throughput (since last show)
  Rx-pps:     40123444          Rx-bps:            0
  Tx-pps:     40123460          Tx-bps:            0
  ######################## NIC statistics for port 1  ########################
  Throughput (since last show)
  Rx-pps:     40123620          Rx-bps:            0
  Tx-pps:     40123604          Tx-bps:            0
Telling cores to stop...
Waiting for lcores to finish...

  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 177422784      RX-dropped: 0             RX-total: 177422784
  TX-packets: 177422784      TX-dropped: 0             TX-total: 177422784
  ----------------------------------------------------------------------------
  CPU cycles/packet=24.19 (total cycles=10016607023 / total io packets=414145344) at 2600 MHz Clock
Bye...
";

    #[test]
    fn parses_every_block_and_port() {
        let p = parse_periods(SAMPLE);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].ports, vec![(0, 0, 0), (1, 0, 0)]);
        assert_eq!(
            p[1].ports,
            vec![(0, 39876556, 39876540), (1, 39876380, 39876396)]
        );
        assert_eq!(p[2].ports[1], (1, 40123620, 40123604));
    }

    #[test]
    fn the_baseline_block_is_left_out_of_the_average() {
        let rates = steady_average(&parse_periods(SAMPLE), 1).unwrap();
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0].port, 0);
        assert_eq!(rates[0].rx_pps, (39876556.0 + 40123444.0) / 2.0);
        assert_eq!(rates[1].tx_pps, (39876396.0 + 40123604.0) / 2.0);
        let run = TestpmdRun {
            ports: rates,
            periods: 2,
            command: String::new(),
            forwarding_cpu_share: None,
            own_cycles_per_packet: None,
        };
        assert!((run.mean_rx_pps() - 40_000_000.0).abs() < 1.0);
    }

    #[test]
    fn a_cut_off_block_and_no_blocks_are_handled() {
        let cut = SAMPLE
            .split("Tx-pps:     40123460")
            .next()
            .unwrap()
            .to_string();
        let p = parse_periods(&cut);
        assert_eq!(p.len(), 3);
        assert!(p[2].ports.is_empty());
        // The incomplete last block is not averaged.
        let rates = steady_average(&p, 1).unwrap();
        assert_eq!(rates[0].rx_pps, 39876556.0);
        assert!(steady_average(&parse_periods("EAL: error\n"), 1).is_none());
        assert!(steady_average(&p[..1], 1).is_none());
    }

    #[test]
    fn the_command_line_has_the_isolation_flags() {
        let t = Testpmd::new(["net_null0", "net_null1"], 2)
            .tx_first(true)
            .burst(Some(64));
        let a = t.args("nfkit-tp-1-0").join(" ");
        for want in [
            "-l 0-1",
            "--no-pci",
            "--file-prefix nfkit-tp-1-0",
            "--vdev net_null0 --vdev net_null1 --",
            "--forward-mode=io",
            "--auto-start",
            "--stats-period 1",
            "--nb-cores=1",
            "--burst=64",
            "--tx-first",
        ] {
            assert!(a.contains(want), "`{want}` missing from `{a}`");
        }
    }

    #[test]
    fn own_cycles_and_thread_cpu_time() {
        assert_eq!(parse_own_cycles(SAMPLE), Some(24.19));
        assert_eq!(parse_own_cycles("Bye...\n"), None);
        // This test's own thread: named after the test by the harness
        // (cut to 15 bytes by the kernel), or `main` when run alone.
        let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert!(thread_cpu_time(std::process::id(), me.trim_end()).is_some());
        }
        assert!(thread_cpu_time(std::process::id(), "no-such-thread").is_none());
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert!(current_thread_cpu_time().is_some());
        }
    }

    #[test]
    fn packet_counts_give_port_totals_and_forwarded() {
        // The sample's last block is shortened to its rates: leave it out.
        let last = SAMPLE.rfind("\x1b[2J\x1b[1;1H\nPort statistics").unwrap();
        let exit = SAMPLE.find("Telling cores to stop").unwrap();
        let c = packet_counts(&format!("{}{}", &SAMPLE[..last], &SAMPLE[exit..]));
        assert!(c.starts_with("port 0 in all (last statistics block):\n  RX-packets: 80394304"));
        assert!(c.contains("port 1 in all"));
        assert!(c.contains(
            "port 0 forwarded (at exit):\n  RX-packets: 177422784 RX-dropped: 0 RX-total: 177422784\n  TX-packets: 177422784"
        ));
        assert_eq!(packet_counts("EAL: error\n"), "");
    }

    #[test]
    fn the_tail_drops_screen_clears() {
        assert_eq!(tail("a\nb\n\x1b[2J\x1b[1;1Hc\n", 2), "b\nc");
    }
}
