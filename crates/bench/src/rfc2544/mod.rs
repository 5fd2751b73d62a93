//! `nfkit bench rfc2544`: RFC 2544 §26.1-§26.4 (throughput, latency,
//! frame loss rate, back-to-back frames) for any DUT ([`dut`]) on any
//! wiring, with nfkit's own generator as the tester ([`tester`]), each
//! figure with both sides' CPU share ([`cpu`]), JSON of every trial and
//! plots ([`plot`]).
//!
//! - Throughput: the highest offered rate whose loss is within the bound
//!   (default 0.1%; `--loss 0` is RFC 2544's zero loss), by binary search
//!   from the maximum load (the first probe after a failure is the rate
//!   the DUT forwarded) until the bracket is within the resolution (1% of
//!   the rate); each rate is tried `repeats` times and the median loss
//!   decides.
//! - Latency at 10, 50, 90 and 100% of that throughput: min, p50, p99,
//!   p99.9, max and the whole histogram (hdrhistogram, 3 digits), every
//!   frame stamped (not one tagged frame per trial as RFC 2544 has it).
//! - Frame loss rate from the maximum load down in steps of 10% of it,
//!   until two steps in a row lose nothing.
//! - Back-to-back: the longest burst, sent as fast as the tester can,
//!   that comes through whole (doubling, then bisecting); the tester's
//!   own burst rate is recorded beside it, as it is below line rate here.
//!
//! Traffic goes one way, into the DUT's input port (port 0, or the NF's
//! workload input) and out of the other; frames carry the NF workload's
//! addresses, with the UDP source port counting through the flows.

pub mod cpu;
pub mod crosscheck;
pub mod dut;
pub mod external;
pub mod plot;
pub mod summary;
pub mod tester;

use anyhow::{bail, Context, Result};
use cpu::Meter;
use dut::{Dut, Wiring};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use nfkit_lab::pktgen::{GenConfig, Sizes, IMIX};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tester::{Offer, Tester};

/// A frame size of RFC 2544 §9 (with the 4-byte FCS), or Simple IMIX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    Fixed(usize),
    Imix,
}

impl std::str::FromStr for Frame {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Frame> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(Frame::Imix);
        }
        let n: usize = s
            .parse()
            .map_err(|_| anyhow::anyhow!("`{s}` is not a frame size (64..1518 or imix)"))?;
        if !(64..=1518).contains(&n) {
            bail!("frame size {n}: Ethernet frames are 64 to 1518 bytes with the FCS");
        }
        Ok(Frame::Fixed(n))
    }
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Frame::Fixed(n) => write!(f, "{n}"),
            Frame::Imix => write!(f, "imix"),
        }
    }
}

impl Frame {
    /// RFC 2544's sizes and Simple IMIX.
    pub const ALL: [Frame; 8] = [
        Frame::Fixed(64),
        Frame::Fixed(128),
        Frame::Fixed(256),
        Frame::Fixed(512),
        Frame::Fixed(1024),
        Frame::Fixed(1280),
        Frame::Fixed(1518),
        Frame::Imix,
    ];

    /// What the generator makes (the FCS is the port's).
    fn sizes(self) -> Sizes {
        match self {
            Frame::Fixed(n) => Sizes::Fixed(n - 4),
            Frame::Imix => Sizes::Imix,
        }
    }

    /// Mean bytes on the line per frame: frame with FCS, preamble and
    /// start delimiter (8) and the inter-frame gap (12).
    fn line_bytes(self) -> f64 {
        match self {
            Frame::Fixed(n) => (n + 20) as f64,
            Frame::Imix => IMIX.iter().map(|n| (n + 24) as f64).sum::<f64>() / IMIX.len() as f64,
        }
    }

    /// Frames per second at the line rate.
    pub fn line_pps(self, line_bps: f64) -> f64 {
        line_bps / (8.0 * self.line_bytes())
    }
}

/// Which of §26.1-§26.4 to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    Throughput,
    Latency,
    Loss,
    BackToBack,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub duts: Vec<Dut>,
    pub wirings: Vec<Wiring>,
    pub frames: Vec<Frame>,
    pub flows: Vec<u32>,
    /// Loss bound, percent.
    pub loss_pct: f64,
    pub trial: Duration,
    pub repeats: usize,
    /// Binary search resolution, percent of the rate.
    pub resolution_pct: f64,
    /// Highest load offered, percent of the line rate.
    pub max_load_pct: f64,
    /// Longest back-to-back burst tried.
    pub max_burst: u64,
    pub tests: Vec<Test>,
    pub out: PathBuf,
    /// Tester's core, DUT's core.
    pub cores: (usize, usize),
    /// Check the generator against DPDK testpmd's txonly first
    /// ([`crosscheck`]).
    pub cross_check: bool,
}

impl Options {
    pub fn check(&self) -> Result<()> {
        if !(0.0..100.0).contains(&self.loss_pct) {
            bail!(
                "--loss {}: a loss bound is a percentage from 0 (RFC 2544's zero loss) to below 100",
                self.loss_pct
            );
        }
        if self.max_load_pct > 100.0 {
            bail!(
                "--max-load {}%: a rate above the line rate cannot be offered (the line is {} Gbit/s per port)",
                self.max_load_pct,
                Wiring::Sim.line_bps() / 1e9
            );
        }
        if self.max_load_pct <= 0.0 {
            bail!("--max-load {}%: must be above 0", self.max_load_pct);
        }
        if !(0.01..=50.0).contains(&self.resolution_pct) {
            bail!("--resolution {}%: takes 0.01 to 50", self.resolution_pct);
        }
        if self.repeats == 0 || self.trial.is_zero() {
            bail!("--repeats and --trial must be above 0");
        }
        if let Some(f) = self.flows.iter().find(|f| !(1..=65_536).contains(*f)) {
            bail!("--flows {f}: takes 1 to 65,536");
        }
        if self.duts.is_empty() || self.wirings.is_empty() || self.frames.is_empty() {
            bail!("nothing to run: give at least one --dut, --wiring and --size");
        }
        Ok(())
    }

    /// Trials of one (DUT, wiring, size, flows), at most.
    fn trials_per_case(&self) -> u64 {
        let mut n = 0u64;
        let bisect = (100.0 / self.resolution_pct).log2().ceil() as u64 + 3;
        for t in &self.tests {
            n += match t {
                Test::Throughput => bisect * self.repeats as u64,
                Test::Latency => 4,
                Test::Loss => 10,
                Test::BackToBack => (self.max_burst as f64).log2().ceil() as u64,
            };
        }
        n
    }
}

/// Everything measured so far, saved as JSON after each case.
struct Book {
    path: PathBuf,
    started: String,
    trials: Vec<Value>,
    results: Vec<Value>,
    options: Value,
    generator: Option<Value>,
}

impl Book {
    fn save(&self, status: &str) -> Result<()> {
        let doc = json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "started_unix": self.started,
            "status": status,
            "options": self.options,
            "generator_cross_check": self.generator,
            "results": self.results,
            "trials": self.trials,
        });
        std::fs::write(&self.path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Everything one case needs.
struct Case<'a> {
    opts: &'a Options,
    wiring: Wiring,
    dut: &'a Dut,
    frame: Frame,
    flows: u32,
    gen: GenConfig,
    line_pps: f64,
    input: usize,
}

/// The median trial's numbers at one offered rate.
#[derive(Debug, Clone)]
struct Point {
    loss_ratio: f64,
    rx_pps: f64,
    /// What the tester really sent (below the offered rate when the
    /// tester cannot keep up).
    tx_pps: f64,
    /// The DUT's CPU cycles per frame received ([`dut_cycles`]).
    cycles: Option<f64>,
    share: cpu::Share,
    latency: Option<Histogram<u64>>,
}

struct Runner<'a> {
    book: &'a mut Book,
    meter: Meter,
    tester: Tester,
    running: &'a dut::Running,
    stop: Arc<AtomicBool>,
    bar: ProgressBar,
    /// Frames received in the current case so far.
    case_received: u64,
    /// The DUT cycles per packet of the current case's throughput trial
    /// that forwarded the most frames (the busiest DUT polls least in
    /// vain), with that count.
    case_cycles: Option<(u64, f64)>,
}

impl Runner<'_> {
    /// A line of the table (above the progress bar on a terminal).
    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            println!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// One trial; recorded in the book.
    fn trial(
        &mut self,
        c: &Case,
        test: &str,
        pct: Option<f64>,
        count: Option<u64>,
    ) -> Result<Point> {
        if self.running.ended() {
            bail!("the DUT {} stopped during the run", c.dut.name());
        }
        let pps = pct.map(|p| p / 100.0 * c.line_pps);
        let offer = Offer {
            gen: GenConfig {
                sizes: c.frame.sizes(),
                flows: c.flows,
                ..c.gen.clone()
            },
            pps,
            duration: if count.is_some() {
                Duration::from_secs(5)
            } else {
                c.opts.trial
            },
            count,
            input: c.input,
        };
        let mark = self.meter.mark();
        let seen = self.tester.trial(&offer, &self.stop);
        let share = self.meter.since(&mark);
        self.bar.inc(1);
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let secs = seen.sending.as_secs_f64().max(1e-9);
        let lost = seen.sent.saturating_sub(seen.received);
        let loss_ratio = lost as f64 / seen.sent.max(1) as f64;
        let h = &seen.latency_ns;
        let q = |x: f64| h.value_at_quantile(x);
        let (cycles, cycles_from) = dut_cycles(c.dut, c.wiring, &share, seen.received);
        let latency = (!h.is_empty()).then(|| {
            json!({"min_ns": h.min(), "p50_ns": q(0.5), "p99_ns": q(0.99), "p999_ns": q(0.999), "max_ns": h.max(), "samples": h.len()})
        });
        self.book.trials.push(json!({
            "wiring": format!("{:?}", c.wiring).to_lowercase(),
            "dut": c.dut.name(),
            "frame": c.frame.to_string(),
            "flows": c.flows,
            "test": test,
            "offered_pct_of_line": pct,
            "offered_pps": pps,
            "burst": count,
            "sent": seen.sent,
            "refused_by_tester_port": seen.refused,
            "received": seen.received,
            "reordered": seen.reordered,
            "late_from_earlier_trials": seen.late,
            "loss_pct": loss_ratio * 100.0,
            "tester_tx_pps": seen.sent as f64 / secs,
            "rx_pps": seen.received as f64 / secs,
            "sending_s": secs,
            "cpu": share.json(),
            "dut_cycles_per_packet": cycles,
            "dut_cycles_from": cycles_from,
            "latency": latency,
        }));
        self.case_received += seen.received;
        if test == "throughput" {
            if let Some(cy) = cycles {
                if self.case_cycles.is_none_or(|(n, _)| seen.received > n) {
                    self.case_cycles = Some((seen.received, cy));
                }
            }
        }
        if seen.sent >= 100 && self.case_received == 0 {
            bail!(
                "the DUT {} on {:?} forwarded none of {} frames ({} B, {} flows{}): it drops everything",
                c.dut.name(),
                c.wiring,
                seen.sent,
                c.frame,
                c.flows,
                pct.map(|p| format!(", {p:.2}% of line")).unwrap_or_default()
            );
        }
        Ok(Point {
            loss_ratio,
            rx_pps: seen.received as f64 / secs,
            tx_pps: seen.sent as f64 / secs,
            cycles,
            share,
            latency: Some(seen.latency_ns),
        })
    }

    /// `repeats` trials at `pct`; the one with the median loss.
    fn at(&mut self, c: &Case, test: &str, pct: f64) -> Result<Point> {
        let mut pts = Vec::new();
        for _ in 0..c.opts.repeats {
            pts.push(self.trial(c, test, Some(pct), None)?);
        }
        pts.sort_by(|a, b| a.loss_ratio.total_cmp(&b.loss_ratio));
        Ok(pts.swap_remove(pts.len() / 2))
    }

    fn passes(c: &Case, p: &Point) -> bool {
        p.loss_ratio * 100.0 <= c.opts.loss_pct + 1e-12
    }

    /// §26.1: the throughput, percent of line.
    fn throughput(&mut self, c: &Case) -> Result<(f64, Point)> {
        let max = c.opts.max_load_pct;
        let first = self.at(c, "throughput", max)?;
        if Self::passes(c, &first) {
            return Ok((max, first));
        }
        let (mut lo, mut hi) = (0.0f64, max);
        let mut best: Option<Point> = None;
        // first probe: what the DUT forwarded at the maximum
        let mut probe = (first.rx_pps / c.line_pps * 100.0).clamp(max * 1e-4, max * 0.99);
        loop {
            let p = self.at(c, "throughput", probe)?;
            if Self::passes(c, &p) {
                lo = probe;
                best = Some(p);
            } else {
                hi = probe;
            }
            if hi - lo <= c.opts.resolution_pct / 100.0 * hi {
                break;
            }
            if hi < max * 1e-4 {
                break;
            }
            probe = (lo + hi) / 2.0;
        }
        match best {
            Some(p) => Ok((lo, p)),
            // RFC 2544 §26.1: the throughput is the fastest rate with no
            // loss beyond the bound; when no rate down to 0.01% of the
            // maximum meets it, that rate is 0. A figure, not a failure of
            // the benchmark (a loaded machine can lose at every rate).
            None => {
                self.say(format!(
                    "the DUT {} on {:?} loses more than {}% even at {:.4}% of line ({} B): throughput 0",
                    c.dut.name(),
                    c.wiring,
                    c.opts.loss_pct,
                    hi,
                    c.frame
                ));
                Ok((0.0, first))
            }
        }
    }
}

/// Run the whole benchmark; JSON and plots go to `opts.out`.
pub fn rfc2544(opts: &Options) -> Result<()> {
    opts.check()?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    let stop = nfkit_lab::stop_flag(None);
    let cases =
        (opts.duts.len() * opts.wirings.len() * opts.frames.len() * opts.flows.len()) as u64;
    let per = opts.trials_per_case();
    let trial_s = opts.trial.as_secs_f64() + tester::SETTLE.as_secs_f64() / 4.0;
    println!(
        "nfkit bench rfc2544: {} DUT(s) x {} wiring(s) x {} size(s) x {} flow count(s) = {cases} cases; \
         at most ~{} trials of {:.2} s: ETA up to {:.0} s (usually much less)",
        opts.duts.len(),
        opts.wirings.len(),
        opts.frames.len(),
        opts.flows.len(),
        cases * per,
        opts.trial.as_secs_f64(),
        (cases * per) as f64 * trial_s
    );
    for w in &opts.wirings {
        println!("line rate assumed, {:?}: {}", w, w.describe());
    }
    println!(
        "tester on core {}, DUT on core {}; loss bound {}%, trials {} s x {}, resolution {}%; results in {}",
        opts.cores.0,
        opts.cores.1,
        opts.loss_pct,
        opts.trial.as_secs_f64(),
        opts.repeats,
        opts.resolution_pct,
        opts.out.display()
    );
    if !core_affinity::set_for_current(core_affinity::CoreId { id: opts.cores.0 }) {
        tracing::warn!("could not pin the tester to core {}", opts.cores.0);
    }
    let bar = ProgressBar::new(cases * per);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:40} {pos}/{len} trials (ETA {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut book = Book {
        path: opts.out.join("rfc2544.json"),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs().to_string())
            .unwrap_or_default(),
        trials: Vec::new(),
        results: Vec::new(),
        generator: None,
        options: json!({
            "duts": opts.duts.iter().map(|d| d.name()).collect::<Vec<_>>(),
            "wirings": opts.wirings.iter().map(|w| format!("{w:?}").to_lowercase()).collect::<Vec<_>>(),
            "line_rate_bps": opts.wirings.iter().map(|w| (format!("{w:?}").to_lowercase(), w.line_bps())).collect::<std::collections::BTreeMap<_,_>>(),
            "frames": opts.frames.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
            "flows": opts.flows,
            "loss_bound_pct": opts.loss_pct,
            "trial_s": opts.trial.as_secs_f64(),
            "repeats": opts.repeats,
            "resolution_pct": opts.resolution_pct,
            "max_load_pct": opts.max_load_pct,
            "cores": [opts.cores.0, opts.cores.1],
        }),
    };
    let result = run_all(opts, &mut book, &stop, &bar);
    bar.finish_and_clear();
    let status = match &result {
        Ok(()) => "complete".to_string(),
        Err(e) => format!("ended early: {e:#}"),
    };
    book.save(&status)?;
    println!(
        "{} trials saved in {}",
        book.trials.len(),
        book.path.display()
    );
    let table = opts.out.join("summary.md");
    match std::fs::write(&table, summary::markdown(&book.results)) {
        Ok(()) => println!("table: {}", table.display()),
        Err(e) => println!("table not written: {e}"),
    }
    match plot::all(&book.results, &opts.out) {
        Ok(files) => {
            for f in files {
                println!("plot: {}", f.display());
            }
        }
        Err(e) => println!("plots not drawn: {e:#}"),
    }
    result
}

fn run_all(
    opts: &Options,
    book: &mut Book,
    stop: &Arc<AtomicBool>,
    bar: &ProgressBar,
) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("nfkit-rfc2544-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    if opts.cross_check {
        bar.suspend(|| match crosscheck::run(&dir, opts.cores) {
            Ok(v) => book.generator = Some(v),
            Err(e) => println!("generator cross-check not done: {e:#}"),
        });
        let _ = book.save("running");
    }
    let r = run_cases(opts, book, stop, bar, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn run_cases(
    opts: &Options,
    book: &mut Book,
    stop: &Arc<AtomicBool>,
    bar: &ProgressBar,
    dir: &std::path::Path,
) -> Result<()> {
    for &wiring in &opts.wirings {
        for dut in &opts.duts {
            if !wiring.takes(dut) {
                let line = format!(
                    "{} does not run on {wiring:?} (the kernel runs on veth only, testpmd not on sim): skipped",
                    dut.name()
                );
                if bar.is_hidden() {
                    println!("{line}");
                } else {
                    bar.println(line);
                }
                continue;
            }
            let (running, tester) = dut::start(dut, wiring, dir, opts.cores.1)?;
            let meter = Meter {
                tester: cpu::this_thread(),
                dut: running.task.clone(),
            };
            let mut runner = Runner {
                book: &mut *book,
                meter,
                tester,
                running: &running,
                stop: stop.clone(),
                bar: bar.clone(),
                case_received: 0,
                case_cycles: None,
            };
            let r = run_dut(opts, wiring, dut, &mut runner);
            drop(runner);
            let _ = book.save(if r.is_ok() { "running" } else { "ended early" });
            let stopped = running.stop();
            r?;
            stopped.with_context(|| format!("the DUT {}", dut.name()))?;
        }
    }
    Ok(())
}

/// The DUT's CPU cost per frame that came through one trial, in cycles
/// at the CPU's nominal clock (`/proc/cpuinfo`), and where its CPU time
/// was read. The time is the DUT's own run time over the trial
/// (schedstat: time it waited for a core is not in it, so a starved DUT
/// still shows its true cost); a polling DUT's empty polls are in it,
/// so each trial's figure is an upper bound, and a case reports the one
/// of its throughput search's trial that forwarded the most frames (the
/// trial at overload, usually, where the DUT had the least reason to
/// poll in vain; the most ticks for the kernel's sampled softirq time).
fn dut_cycles(
    dut: &Dut,
    wiring: Wiring,
    share: &cpu::Share,
    received: u64,
) -> (Option<f64>, &'static str) {
    use dut::DutKind;
    let (ns, from) = match &dut.kind {
        DutKind::Kernel(_) => (
            share.softirq_ns,
            "softirq time of all cores (the kernel has no thread; sampled at the tick)",
        ),
        DutKind::Pipeline(_) if wiring == Wiring::Sim => {
            return (
                None,
                "none: the pipeline's workers share the process with the simulated 82599s",
            )
        }
        DutKind::Pipeline(_) => (
            (share.dut_ns + share.other_ns) as f64,
            "every thread of this process but the tester's (the pipeline's workers)",
        ),
        DutKind::Testpmd(_) => (share.dut_ns as f64, "testpmd's forwarding lcore thread"),
        DutKind::Fwd | DutKind::Nf(_) => (share.dut_ns as f64, "the DUT thread"),
    };
    let cycles = nfkit_lab::cost::cpu_ghz()
        .filter(|_| ns > 0.0 && received > 0)
        .map(|ghz| ns * ghz / received as f64);
    (cycles, from)
}

fn gen_for(dut: &Dut, wiring: Wiring) -> GenConfig {
    let mut g = GenConfig::default();
    if let Some(f) = dut.template() {
        if f.len() >= 38 && f[12..14] == [0x08, 0x00] {
            g.dst_mac.copy_from_slice(&f[0..6]);
            g.src_mac.copy_from_slice(&f[6..12]);
            g.src_ip = std::net::Ipv4Addr::new(f[26], f[27], f[28], f[29]);
            g.dst_ip = std::net::Ipv4Addr::new(f[30], f[31], f[32], f[33]);
            g.src_port = u16::from_be_bytes([f[34], f[35]]);
            g.dst_port = u16::from_be_bytes([f[36], f[37]]);
        }
    } else if wiring == Wiring::Sim {
        g.dst_mac = nfkit_lab::sim_mac(dut.input());
    }
    g
}

fn run_dut(opts: &Options, wiring: Wiring, dut: &Dut, r: &mut Runner) -> Result<()> {
    for &frame in &opts.frames {
        for &flows in &opts.flows {
            let c = Case {
                opts,
                wiring,
                dut,
                frame,
                flows,
                gen: r
                    .running
                    .gen
                    .clone()
                    .unwrap_or_else(|| gen_for(dut, wiring)),
                line_pps: frame.line_pps(wiring.line_bps()),
                input: dut.input(),
            };
            let w = format!("{wiring:?}").to_lowercase();
            let head = format!(
                "{w:<5} {:<14} {:>5} B {:>5} flows",
                dut.name(),
                frame.to_string(),
                flows
            );
            let mut res = json!({
                "wiring": w, "dut": dut.name(), "frame": frame.to_string(), "flows": flows,
                "line_pps": c.line_pps,
            });
            let mut thr = None;
            r.case_received = 0;
            r.case_cycles = None;
            for t in &opts.tests {
                match t {
                    Test::Throughput => {
                        let (mut pct, p) = r.throughput(&c)?;
                        // A rate the tester could not send was not offered:
                        // the figure is then the tester's, and says so.
                        let offered = pct / 100.0 * c.line_pps;
                        let tester_bound = pct > 0.0 && p.tx_pps < 0.95 * offered;
                        if tester_bound {
                            pct = p.tx_pps / c.line_pps * 100.0;
                        }
                        let mpps = pct / 100.0 * c.line_pps / 1e6;
                        let busiest = r.case_cycles.map(|(_, c)| c);
                        let cycles = busiest
                            .map(|c| format!("{c:.0} cycles/pkt"))
                            .unwrap_or_else(|| "? cycles/pkt".into());
                        r.say(format!(
                            "{head}  throughput {mpps:>7.3} Mpps ({pct:.2}% of line, {:.3} Gbit/s L1), DUT {cycles}{}  [{}]",
                            pct / 100.0 * wiring.line_bps() / 1e9,
                            if tester_bound { " tester-bound: no loss at the most the tester sent" } else { "" },
                            p.share.line()
                        ));
                        res["throughput"] = json!({"pct_of_line": pct, "mpps": mpps, "rx_mpps": p.rx_pps / 1e6, "tester_tx_mpps": p.tx_pps / 1e6, "tester_bound": tester_bound, "loss_pct": p.loss_ratio * 100.0, "cpu": p.share.json(), "dut_cycles_per_packet": busiest, "dut_cycles_at_throughput": p.cycles, "dut_cycles_from": dut_cycles(dut, wiring, &p.share, 0).1});
                        thr = Some(pct);
                    }
                    Test::Latency => {
                        let Some(base) = thr else {
                            r.say(format!(
                                "{head}  latency skipped: needs the throughput test"
                            ));
                            continue;
                        };
                        let mut steps = Vec::new();
                        for step in [10.0, 50.0, 90.0, 100.0] {
                            let p = r.trial(
                                &c,
                                "latency",
                                Some((base * step / 100.0).max(1e-4)),
                                None,
                            )?;
                            let h = p.latency.as_ref().expect("trials keep their histogram");
                            let us = |v: u64| v as f64 / 1e3;
                            let q = |x: f64| h.value_at_quantile(x);
                            r.say(format!(
                                "{head}  latency @{step:>3}%: min {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} us  [{}]",
                                us(h.min()), us(q(0.5)), us(q(0.99)), us(q(0.999)), us(h.max()), p.share.line()
                            ));
                            let hist: Vec<[u64; 2]> = h
                                .iter_recorded()
                                .map(|v| [v.value_iterated_to(), v.count_at_value()])
                                .collect();
                            steps.push(json!({
                                "load_pct_of_throughput": step,
                                "min_ns": h.min(), "p50_ns": q(0.5), "p99_ns": q(0.99), "p999_ns": q(0.999), "max_ns": h.max(),
                                "histogram_ns_count": hist, "cpu": p.share.json(),
                            }));
                        }
                        res["latency"] = json!(steps);
                    }
                    Test::Loss => {
                        let mut curve = Vec::new();
                        let mut clean = 0;
                        for k in 0..10 {
                            let pct = opts.max_load_pct * (10 - k) as f64 / 10.0;
                            let p = r.trial(&c, "loss", Some(pct), None)?;
                            curve.push(json!({"offered_pct_of_line": pct, "loss_pct": p.loss_ratio * 100.0}));
                            clean = if p.loss_ratio == 0.0 { clean + 1 } else { 0 };
                            if clean == 2 {
                                break;
                            }
                        }
                        let text: Vec<String> = curve
                            .iter()
                            .map(|v| {
                                format!(
                                    "{:.0}%:{:.2}",
                                    v["offered_pct_of_line"].as_f64().unwrap_or(0.0),
                                    v["loss_pct"].as_f64().unwrap_or(0.0)
                                )
                            })
                            .collect();
                        r.say(format!("{head}  loss % by load: {}", text.join(" ")));
                        res["frame_loss"] = json!(curve);
                    }
                    Test::BackToBack => {
                        let (mut ok, mut bad) = (0u64, None::<u64>);
                        let mut n = 32u64.min(opts.max_burst);
                        let mut rate = 0.0f64;
                        for _ in 0..24 {
                            let p = r.trial(&c, "back-to-back", None, Some(n))?;
                            rate = rate.max(p.rx_pps);
                            if p.loss_ratio == 0.0 {
                                ok = n
                            } else {
                                bad = Some(n)
                            }
                            n = match bad {
                                None if n >= opts.max_burst => break,
                                None => (n * 2).min(opts.max_burst),
                                Some(b) if b - ok <= (b / 20).max(1) => break,
                                Some(b) => (ok + b) / 2,
                            };
                        }
                        r.say(format!(
                            "{head}  back-to-back: {ok} frames whole{} (tester's burst rate ~{:.2} Mpps, line {:.2} Mpps)",
                            if bad.is_none() { " (the longest tried)" } else { "" },
                            rate / 1e6,
                            c.line_pps / 1e6
                        ));
                        res["back_to_back"] = json!({"frames": ok, "capped": bad.is_none(), "max_burst": opts.max_burst});
                    }
                }
            }
            r.book.results.push(res);
            r.book.save("running")?;
        }
    }
    Ok(())
}
