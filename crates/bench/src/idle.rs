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
//! Then the DUT's CPU share while the tester sends at 1 kpps and at
//! 100 kpps (paced from the bench thread; what the tester cannot reach
//! on a loaded machine shows in the achieved rate).

use anyhow::{anyhow, bail, Context, Result};
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
}

const KINDS: [&str; 6] = [
    "af-packet",
    "af-xdp",
    "tap",
    "vhost-user",
    "virtio-user",
    "pipeline",
];

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
    fn fwd(mut a: Box<dyn Port>, mut b: Box<dyn Port>, idle: IdleOptions) -> Dut {
        let stop = Arc::new(AtomicBool::new(false));
        let task = Arc::new(OnceLock::new());
        let (s, t) = (stop.clone(), task.clone());
        let handle = std::thread::spawn(move || {
            if let Ok(me) = std::fs::read_link("/proc/thread-self") {
                let _ = t.set(std::path::Path::new("/proc").join(me));
            }
            let opts = FwdOptions {
                stop_when_done: false,
                idle,
                ..FwdOptions::default()
            };
            if let Err(e) = fwd([&mut *a, &mut *b], &opts, &s, |_| {}) {
                tracing::warn!("bench idle: the forwarder stopped: {e}");
            }
        });
        Dut::Fwd {
            stop,
            task,
            handle: Some(handle),
        }
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

/// The tester's two ports and what keeps the set-up alive.
struct Setup {
    dut: Dut,
    tx: Box<dyn Port>,
    rx: Box<dyn Port>,
    _keep: Vec<Box<dyn std::any::Any>>,
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
                tx,
                rx,
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
                tx,
                rx,
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
                tx,
                rx,
                _keep: vec![Box::new(SocketFiles(paths.to_vec()))],
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

fn probe(port: &dyn Port, seq: u64) -> Result<nfkit_port::PktBuf> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x24, 0x01]);
    f[12..14].copy_from_slice(&PROBE_TYPE);
    f[14..22].copy_from_slice(&seq.to_be_bytes());
    let mut b = port
        .pool()
        .alloc()
        .ok_or_else(|| anyhow!("tester pool empty"))?;
    b.copy_from(&f).map_err(|e| anyhow!("{e:?}"))?;
    Ok(b)
}

/// Send probe `seq` and busy-poll for it behind the DUT; its latency,
/// or `None` after a second.
fn one_probe(s: &mut Setup, seq: u64) -> Result<Option<Duration>> {
    let mut batch = Batch::new();
    let _ = batch.push(probe(&*s.tx, seq)?);
    let t0 = Instant::now();
    while !batch.is_empty() {
        s.tx.tx_batch(0, &mut batch);
        if t0.elapsed() > Duration::from_secs(1) {
            bail!("the tester could not send");
        }
    }
    let mut rx = Batch::new();
    while t0.elapsed() < Duration::from_secs(1) {
        for q in 0..s.rx.rx_queues() {
            if s.rx.rx_batch(q, &mut rx) == 0 {
                continue;
            }
            let hit = rx.iter().any(|p| {
                let d = p.data();
                d.len() >= 22 && d[12..14] == PROBE_TYPE && d[14..22] == seq.to_be_bytes()
            });
            rx.clear();
            if hit {
                return Ok(Some(t0.elapsed()));
            }
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
    let mut batch = Batch::new();
    let mut drain = Batch::new();
    while t0.elapsed().as_secs_f64() < seconds {
        let due = (t0.elapsed().as_secs_f64() * pps) as u64;
        let n = due.saturating_sub(sent).min(32);
        for i in 0..n {
            let _ = batch.push(probe(&*s.tx, 1 << 40 | (sent + i))?);
        }
        if !batch.is_empty() {
            sent += s.tx.tx_batch(0, &mut batch) as u64;
            batch.clear(); // what the tester could not send now: skipped
        }
        for q in 0..s.rx.rx_queues() {
            while s.rx.rx_batch(q, &mut drain) > 0 {
                drain.clear();
            }
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = 100.0 * (s.dut.cpu()? - c0).as_secs_f64() / wall;
    // Quiet again before the next measurement.
    std::thread::sleep(Duration::from_millis(200));
    for q in 0..s.rx.rx_queues() {
        while s.rx.rx_batch(q, &mut drain) > 0 {
            drain.clear();
        }
    }
    Ok((cpu, sent as f64 / wall))
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
    println!(
        "{:<12} {:<7} {:>9} {:>9} {:>18} {:>13} {:>13} {:>9}",
        "KIND",
        "MODE",
        "IDLE CPU",
        "1 kpps",
        "100 kpps (reached)",
        "WAKE p50 µs",
        "WAKE p99 µs",
        "DELIVERED"
    );
    for kind in kinds {
        for (mode, opts) in [
            ("poll", IdleOptions::polling()),
            ("hybrid", IdleOptions::default()),
        ] {
            let row = match measure(kind, mode, opts, seconds, samples) {
                Ok(r) => r,
                Err(e) => {
                    println!("{kind:<12} {mode:<7} skipped: {e:#}");
                    continue;
                }
            };
            println!(
                "{:<12} {:<7} {:>8.2}% {:>8.2}% {:>8.2}% ({:>5.1}k) {:>13.1} {:>13.1} {:>5}/{}",
                row.kind,
                row.mode,
                row.cpu_pct,
                row.cpu_1k_pct,
                row.cpu_100k_pct,
                row.rate_100k_achieved / 1e3,
                row.wake_p50_us,
                row.wake_p99_us,
                row.delivered,
                row.sent
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
) -> Result<Row> {
    let mut s = setup(kind, opts)?;
    // Links up, rings live, the kernel's first frames gone by.
    std::thread::sleep(Duration::from_millis(500));
    let mut drain = Batch::new();
    for q in 0..s.rx.rx_queues() {
        while s.rx.rx_batch(q, &mut drain) > 0 {
            drain.clear();
        }
    }
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
    Ok(Row {
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
