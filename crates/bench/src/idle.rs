//! `nfkit bench idle`: what an idle forwarder costs, and how fast it
//! wakes (issue 24). Needs root (veth pairs).
//!
//! For each port kind the device under test forwards between two ports
//! (`fwd`, or a PortInc -> PortOut pipeline worker), once in pure
//! polling (`--poll`) and once in hybrid polling (the default). With no
//! traffic, the share of a core its thread used (kernel CPU time of that
//! thread only, not the tester's); then the wake-up latency: after at
//! least 50 ms of quiet the tester sends one frame into the DUT's first
//! port and times its arrival behind the second (the tester busy-polls
//! its receive side), `samples` times: p50 and p99.
//!
//! Kinds: AF_PACKET and AF_XDP (copy mode) on veth pairs, the tester on
//! the veth peers over AF_PACKET; vhost-user (the DUT holds two backends,
//! the tester two virtio-user frontends, in this process); virtio-user
//! (the DUT holds two virtio-user frontends, the tester two vhost-user
//! backends); a pipeline worker over AF_PACKET; and TAP (the DUT holds
//! two TAP interfaces, the tester AF_PACKET sockets on them).
//!
//! `fwd-queue` and `fwd-agent`: `fwd` between two simulated 82599s
//! (`sim:0`, `sim:1`) in the queue model and the agent model, sleeping
//! on the model's MSI-X vectors; the tester injects frames on the first
//! port's wire and takes them from the second's. Only the forwarding
//! thread's CPU is counted, not the models' device threads.
//!
//! Then the DUT's CPU share while the tester sends at 1 kpps and at
//! 100 kpps (paced from the bench thread; what the tester cannot reach
//! on a loaded machine shows in the achieved rate), and its cycles per
//! packet at saturation: the tester sends as fast as it can for
//! `seconds` (the simulated wire holds at most 256 frames waiting), the
//! DUT thread's CPU time at the nominal clock over the frames that came
//! out, median of [`SAT_RUNS`] windows (and the median rate beside it).
//! On a machine with fewer cores than threads the DUT also polls while
//! the tester or a model waits for a core: an upper bound. With two
//! cores or more the tester runs on core 0 and a forwarding DUT thread
//! on core 1 (a pipeline's workers are not pinned).

use anyhow::{anyhow, bail, Context, Result};
use nfkit_ixgbe_model::Wire;
use nfkit_lab::{SimLab, SimWire};
use nfkit_port::fwd::{fwd, FwdOptions};
use nfkit_port::{Batch, IdleOptions, OpenOptions, Port};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: &'static str,
    pub mode: &'static str,
    /// Share of one core, percent, while idle.
    pub cpu_pct: f64,
    /// Share of one core at 1 kpps and 100 kpps (achieved rates beside).
    pub cpu_1k_pct: f64,
    pub cpu_100k_pct: f64,
    pub rate_100k_achieved: f64,
    pub wake_p50_us: f64,
    pub wake_p99_us: f64,
    /// Frames that came back out of the ones sent.
    pub delivered: usize,
    pub sent: usize,
    /// At saturation: DUT cycles per frame forwarded, the rate and the
    /// DUT's share of a core (below 100%: the tester or a model, not the
    /// DUT, was the bottleneck), each the median of [`SAT_RUNS`] windows.
    pub sat_cycles: f64,
    pub sat_pps: f64,
    pub sat_cpu_pct: f64,
}

const KINDS: [&str; 8] = [
    "af-packet",
    "af-xdp",
    "tap",
    "vhost-user",
    "virtio-user",
    "pipeline",
    "fwd-queue",
    "fwd-agent",
];

/// Windows of saturation measured per case (the median is printed).
pub const SAT_RUNS: usize = 5;

/// Ethertype of the probe frames (IEEE local experimental).
const PROBE_TYPE: [u8; 2] = [0x88, 0xb5];

fn open(spec: &str) -> Result<Box<dyn Port>> {
    let reg = nfkit_lab::registry(nfkit_lab::SimLab::new(nfkit_lab::SimWire::Open, 1), 1);
    let opts = OpenOptions {
        pool_buffers: 1024,
        ..OpenOptions::default()
    };
    reg.open_str(spec, &opts)
        .with_context(|| format!("opening {spec}"))
}

/// The DUT running in its thread (or a pipeline's worker).
enum Dut {
    Fwd {
        stop: Arc<AtomicBool>,
        task: Arc<OnceLock<PathBuf>>,
        handle: Option<std::thread::JoinHandle<()>>,
    },
    Pipeline(Box<nfkit_pipeline::Pipeline>),
}

impl Dut {
    /// `body` on its own thread until its stop flag is set.
    fn thread(body: impl FnOnce(&AtomicBool) + Send + 'static) -> Dut {
        let stop = Arc::new(AtomicBool::new(false));
        let task = Arc::new(OnceLock::new());
        let (s, t) = (stop.clone(), task.clone());
        let handle = std::thread::spawn(move || {
            if core_ids() >= 2 {
                core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
            }
            if let Ok(me) = std::fs::read_link("/proc/thread-self") {
                let _ = t.set(std::path::Path::new("/proc").join(me));
            }
            body(&s);
        });
        Dut::Fwd {
            stop,
            task,
            handle: Some(handle),
        }
    }

    fn fwd(mut a: Box<dyn Port>, mut b: Box<dyn Port>, idle: IdleOptions) -> Dut {
        Dut::thread(move |stop| {
            let opts = FwdOptions {
                stop_when_done: false,
                idle,
                ..FwdOptions::default()
            };
            if let Err(e) = fwd([&mut *a, &mut *b], &opts, stop, |_| {}) {
                tracing::warn!("bench idle: the forwarder stopped: {e}");
            }
        })
    }

    /// One TinyNF agent per direction between two simulated 82599s,
    /// sleeping on their receive queues' vectors.
    fn agents(lab: &Arc<SimLab>, idle: IdleOptions) -> Result<Dut> {
        let devs = [lab.open_device(0, "sim:0")?, lab.open_device(1, "sim:1")?];
        let irqs = [lab.interrupts(0, &devs[0])?, lab.interrupts(1, &devs[1])?];
        Ok(Dut::thread(move |stop| {
            let queues: Vec<_> = irqs.iter().filter_map(|i| i.queues[0].as_ref()).collect();
            if let Err(e) = nfkit_lab::fwd::run_agent_pair_idle(&devs, &queues, idle, stop, || {}) {
                tracing::warn!("bench idle: the agents stopped: {e}");
            }
        }))
    }

    fn pipeline(a: &str, b: &str, idle: IdleOptions) -> Result<Dut> {
        let src = format!(
            "port a = \"{a}\"\nport b = \"{b}\"\nPortInc(port=a) -> PortOut(port=b)\nPortInc(port=b) -> PortOut(port=a)\n"
        );
        let desc = nfkit_pipeline::config::parse(&src, "bench-idle.nfk")?;
        let mut p = desc.build(&|spec: &str| {
            open(spec).map_err(|e| nfkit_port::PortError::config(spec, e.to_string()))
        })?;
        p.set_idle(idle);
        p.start()?;
        Ok(Dut::Pipeline(Box::new(p)))
    }

    /// The DUT thread's time on a CPU so far.
    fn cpu(&self) -> Result<Duration> {
        let path = match self {
            Dut::Fwd { task, .. } => {
                let t = Instant::now();
                while task.get().is_none() && t.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                task.get()
                    .cloned()
                    .ok_or_else(|| anyhow!("no DUT thread"))?
            }
            Dut::Pipeline(p) => {
                let tid = p
                    .worker_tids()
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| anyhow!("no worker thread"))?;
                PathBuf::from(format!("/proc/self/task/{tid}"))
            }
        };
        let s = std::fs::read_to_string(path.join("schedstat"))?;
        let ns: u64 = s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("schedstat: {s}"))?;
        Ok(Duration::from_nanos(ns))
    }
}

impl Drop for Dut {
    fn drop(&mut self) {
        match self {
            Dut::Fwd { stop, handle, .. } => {
                stop.store(true, Ordering::Relaxed);
                if let Some(h) = handle.take() {
                    let _ = h.join();
                }
            }
            Dut::Pipeline(p) => {
                let _ = p.pause();
            }
        }
    }
}

/// Where the tester sends and receives.
enum Tester {
    /// Ports of its own: into the DUT's first port, out of its second.
    Ports {
        tx: Box<dyn Port>,
        rx: Box<dyn Port>,
    },
    /// The simulated wires: frames injected at `sim:0`, taken from what
    /// `sim:1` transmitted.
    Sim { input: Wire, output: Wire },
}

impl Tester {
    /// Send frame `seq` and the ones after it, `n` in all; how many went.
    fn send(&mut self, seq: u64, n: usize) -> Result<usize> {
        match self {
            Tester::Ports { tx, .. } => {
                let mut batch = Batch::new();
                for i in 0..n as u64 {
                    let mut b = tx
                        .pool()
                        .alloc()
                        .ok_or_else(|| anyhow!("tester pool empty"))?;
                    b.copy_from(&probe(seq + i, [0xff; 6]))
                        .map_err(|e| anyhow!("{e:?}"))?;
                    let _ = batch.push(b);
                }
                let sent = tx.tx_batch(0, &mut batch);
                batch.clear(); // what the port could not take now: skipped
                Ok(sent)
            }
            Tester::Sim { input, .. } => Ok((0..n as u64)
                .take_while(|i| input.inject(&probe(seq + i, nfkit_lab::sim_mac(0))))
                .count()),
        }
    }

    /// Frames that came out of the DUT, each given to `f`; how many.
    fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        match self {
            Tester::Ports { rx, .. } => {
                let mut batch = Batch::new();
                for q in 0..rx.rx_queues() {
                    while rx.rx_batch(q, &mut batch) > 0 {
                        n += batch.len();
                        batch.iter().for_each(|p| f(p.data()));
                        batch.clear();
                    }
                }
            }
            Tester::Sim { output, .. } => output.drain_transmitted(|d| {
                n += 1;
                f(d)
            }),
        }
        n
    }

    /// Whether the DUT's input has room for a burst now (the simulated
    /// wire's packet buffer: at most 256 frames waiting).
    fn room(&self) -> bool {
        match self {
            Tester::Ports { .. } => true,
            Tester::Sim { input, .. } => input.rx_pending() < 256,
        }
    }
}

/// The tester and what keeps the set-up alive.
struct Setup {
    dut: Dut,
    tester: Tester,
    _keep: Vec<Box<dyn std::any::Any>>,
}

fn ports(tx: Box<dyn Port>, rx: Box<dyn Port>) -> Tester {
    Tester::Ports { tx, rx }
}

fn socket(tag: &str, i: usize) -> PathBuf {
    std::env::temp_dir().join(format!(
        "nfkit-bench-idle-{tag}-{i}-{}.sock",
        std::process::id()
    ))
}

fn setup(kind: &str, idle: IdleOptions) -> Result<Setup> {
    match kind {
        "af-packet" | "af-xdp" | "pipeline" => {
            let v1 = nfkit_testkit::Veth::new()?;
            let v2 = nfkit_testkit::Veth::new()?;
            let spec = |dev: &str| match kind {
                "af-xdp" => format!("afxdp:{dev},mode=copy"),
                _ => format!("afpacket:{dev}"),
            };
            let dut = if kind == "pipeline" {
                Dut::pipeline(&spec(&v1.a), &spec(&v2.a), idle)?
            } else {
                Dut::fwd(open(&spec(&v1.a))?, open(&spec(&v2.a))?, idle)
            };
            let tx = open(&format!("afpacket:{}", v1.b))?;
            let rx = open(&format!("afpacket:{}", v2.b))?;
            Ok(Setup {
                dut,
                tester: ports(tx, rx),
                _keep: vec![Box::new(v1), Box::new(v2)],
            })
        }
        "tap" => {
            let pid = std::process::id() % 100_000;
            let names = [format!("nfki{pid}a"), format!("nfki{pid}b")];
            let a = open(&format!("tap:{}", names[0]))?;
            let b = open(&format!("tap:{}", names[1]))?;
            for n in &names {
                let ok = std::process::Command::new("ip")
                    .args(["link", "set", n, "up"])
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    bail!("ip link set {n} up failed");
                }
            }
            let tx = open(&format!("afpacket:{}", names[0]))?;
            let rx = open(&format!("afpacket:{}", names[1]))?;
            Ok(Setup {
                dut: Dut::fwd(a, b, idle),
                tester: ports(tx, rx),
                _keep: Vec::new(),
            })
        }
        "vhost-user" | "virtio-user" => {
            let paths = [socket(kind, 0), socket(kind, 1)];
            for p in &paths {
                let _ = std::fs::remove_file(p);
            }
            let be = |p: &PathBuf| open(&format!("vhost-user:{}", p.display()));
            let fe = |p: &PathBuf| open(&format!("virtio-user:{}", p.display()));
            let (dut, tx, rx) = if kind == "vhost-user" {
                let (a, b) = (be(&paths[0])?, be(&paths[1])?);
                let (tx, rx) = (fe(&paths[0])?, fe(&paths[1])?);
                (Dut::fwd(a, b, idle), tx, rx)
            } else {
                let (tx, rx) = (be(&paths[0])?, be(&paths[1])?);
                let (a, b) = (fe(&paths[0])?, fe(&paths[1])?);
                (Dut::fwd(a, b, idle), tx, rx)
            };
            Ok(Setup {
                dut,
                tester: ports(tx, rx),
                _keep: vec![Box::new(SocketFiles(paths.to_vec()))],
            })
        }
        "fwd-queue" | "fwd-agent" => {
            let lab = SimLab::new(SimWire::Open, 1);
            let dut = if kind == "fwd-agent" {
                Dut::agents(&lab, idle)?
            } else {
                let reg = nfkit_lab::registry(lab.clone(), 1);
                let opts = OpenOptions::default();
                let a = reg.open_str("sim:0", &opts)?;
                let b = reg.open_str("sim:1", &opts)?;
                Dut::fwd(a, b, idle)
            };
            let nic = |n| lab.nic(n).ok_or_else(|| anyhow!("no sim:{n}"));
            let tester = Tester::Sim {
                input: nic(0)?.wire(),
                output: nic(1)?.wire(),
            };
            Ok(Setup {
                dut,
                tester,
                _keep: vec![Box::new(lab)],
            })
        }
        _ => bail!("unknown kind {kind} (one of {})", KINDS.join(", ")),
    }
}

/// Socket files this bench made, removed at the end.
struct SocketFiles(Vec<PathBuf>);

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Cores this process may run on.
fn core_ids() -> usize {
    core_affinity::get_core_ids().map_or(0, |c| c.len())
}

/// A probe frame: `seq` after the (experimental) ethertype.
fn probe(seq: u64, dst: [u8; 6]) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x24, 0x01]);
    f[12..14].copy_from_slice(&PROBE_TYPE);
    f[14..22].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Send probe `seq` and busy-poll for it behind the DUT; its latency,
/// or `None` after a second.
fn one_probe(s: &mut Setup, seq: u64) -> Result<Option<Duration>> {
    let t0 = Instant::now();
    while s.tester.send(seq, 1)? == 0 {
        if t0.elapsed() > Duration::from_secs(1) {
            bail!("the tester could not send");
        }
    }
    while t0.elapsed() < Duration::from_secs(1) {
        let mut hit = false;
        s.tester.drain(|d| {
            hit |= d.len() >= 22 && d[12..14] == PROBE_TYPE && d[14..22] == seq.to_be_bytes();
        });
        if hit {
            return Ok(Some(t0.elapsed()));
        }
    }
    Ok(None)
}

/// The DUT's share of a core while the tester sends `pps` frames per
/// second for `seconds` (and drains what comes out), and the rate it
/// reached.
fn cpu_at_rate(s: &mut Setup, pps: f64, seconds: f64) -> Result<(f64, f64)> {
    let (c0, t0) = (s.dut.cpu()?, Instant::now());
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < seconds {
        let due = (t0.elapsed().as_secs_f64() * pps) as u64;
        let n = due.saturating_sub(sent).min(32);
        if n > 0 {
            sent += s.tester.send(1 << 40 | sent, n as usize)? as u64;
        }
        s.tester.drain(|_| {});
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = 100.0 * (s.dut.cpu()? - c0).as_secs_f64() / wall;
    quiet(s);
    Ok((cpu, sent as f64 / wall))
}

/// Quiet again before the next measurement: what is still in flight
/// comes out and is dropped.
fn quiet(s: &mut Setup) {
    std::thread::sleep(Duration::from_millis(200));
    s.tester.drain(|_| {});
}

/// The tester sends flat out for `seconds`: the DUT thread's cycles per
/// frame that came out (at the nominal clock), the rate out and the
/// DUT's share of a core.
fn saturation(s: &mut Setup, seconds: f64, ghz: f64) -> Result<(f64, f64, f64)> {
    let (c0, t0) = (s.dut.cpu()?, Instant::now());
    let (mut seq, mut out) = (2u64 << 40, 0u64);
    while t0.elapsed().as_secs_f64() < seconds {
        if s.tester.room() {
            seq += s.tester.send(seq, 32)? as u64;
        }
        out += s.tester.drain(|_| {}) as u64;
    }
    let cpu = (s.dut.cpu()? - c0).as_secs_f64();
    let wall = t0.elapsed().as_secs_f64();
    quiet(s);
    if out == 0 {
        bail!("nothing came out at saturation");
    }
    Ok((
        cpu * 1e9 * ghz / out as f64,
        out as f64 / wall,
        100.0 * cpu / wall,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Measure every kind in `kinds` (all when empty), polling and hybrid.
pub fn idle(kinds: &[String], seconds: f64, samples: usize) -> Result<Vec<Row>> {
    if !nfkit_testkit::is_root() {
        bail!("bench idle needs root (veth pairs, raw sockets)");
    }
    let kinds: Vec<&'static str> = if kinds.is_empty() {
        KINDS.to_vec()
    } else {
        kinds
            .iter()
            .map(|k| {
                KINDS
                    .iter()
                    .find(|&&n| n == k)
                    .copied()
                    .ok_or_else(|| anyhow!("unknown kind {k} (one of {})", KINDS.join(", ")))
            })
            .collect::<Result<_>>()?
    };
    let mut rows = Vec::new();
    let ghz = nfkit_lab::cost::cpu_ghz().unwrap_or(1.0);
    println!(
        "{:<12} {:<7} {:>9} {:>9} {:>18} {:>13} {:>13} {:>9} {:>22}",
        "KIND",
        "MODE",
        "IDLE CPU",
        "1 kpps",
        "100 kpps (reached)",
        "WAKE p50 µs",
        "WAKE p99 µs",
        "DELIVERED",
        "SATURATION cyc/pkt (rate, DUT cpu)"
    );
    for kind in kinds {
        for (mode, opts) in [
            ("poll", IdleOptions::polling()),
            ("hybrid", IdleOptions::default()),
        ] {
            // Its own thread, so that pinning the tester leaves the main
            // thread (and the next set-up's pipeline workers) unpinned.
            let run = std::thread::spawn(move || measure(kind, mode, opts, seconds, samples, ghz));
            let measured = run
                .join()
                .unwrap_or_else(|_| Err(anyhow!("the measuring thread panicked")));
            let row = match measured {
                Ok(r) => r,
                Err(e) => {
                    println!("{kind:<12} {mode:<7} skipped: {e:#}");
                    continue;
                }
            };
            println!(
                "{:<12} {:<7} {:>8.2}% {:>8.2}% {:>8.2}% ({:>5.1}k) {:>13.1} {:>13.1} {:>5}/{:<3} {:>8.0} ({:>6.1} kpps, {:>3.0}%)",
                row.kind,
                row.mode,
                row.cpu_pct,
                row.cpu_1k_pct,
                row.cpu_100k_pct,
                row.rate_100k_achieved / 1e3,
                row.wake_p50_us,
                row.wake_p99_us,
                row.delivered,
                row.sent,
                row.sat_cycles,
                row.sat_pps / 1e3,
                row.sat_cpu_pct
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

fn measure(
    kind: &'static str,
    mode: &'static str,
    opts: IdleOptions,
    seconds: f64,
    samples: usize,
    ghz: f64,
) -> Result<Row> {
    let mut s = setup(kind, opts)?;
    // The tester on core 0, a forwarding DUT thread on core 1 (as `bench
    // rfc2544` does): a DUT woken onto the tester's core would measure
    // the scheduler. A pipeline's workers are left where they are.
    if core_ids() >= 2 {
        core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    }
    // Links up, rings live, the kernel's first frames gone by.
    std::thread::sleep(Duration::from_millis(500));
    s.tester.drain(|_| {});
    let (c0, t0) = (s.dut.cpu()?, Instant::now());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let cpu_pct = 100.0 * (s.dut.cpu()? - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let (cpu_1k_pct, _) = cpu_at_rate(&mut s, 1_000.0, seconds)?;
    let (cpu_100k_pct, rate_100k_achieved) = cpu_at_rate(&mut s, 100_000.0, seconds)?;
    let mut lat = Vec::new();
    for seq in 0..samples as u64 {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(d) = one_probe(&mut s, seq + 1)? {
            lat.push(d);
        }
    }
    lat.sort();
    let mut sat = Vec::new();
    for _ in 0..SAT_RUNS {
        sat.push(saturation(&mut s, seconds, ghz)?);
    }
    Ok(Row {
        sat_cycles: median(sat.iter().map(|x| x.0).collect()),
        sat_pps: median(sat.iter().map(|x| x.1).collect()),
        sat_cpu_pct: median(sat.iter().map(|x| x.2).collect()),
        kind,
        mode,
        cpu_pct,
        cpu_1k_pct,
        cpu_100k_pct,
        rate_100k_achieved,
        wake_p50_us: percentile(&lat, 0.5),
        wake_p99_us: percentile(&lat, 0.99),
        delivered: lat.len(),
        sent: samples,
    })
}
