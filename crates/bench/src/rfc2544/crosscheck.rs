//! The generator's own accuracy (`--cross-check`), once per run, before
//! the cases: nfkit's generator and an independent one, DPDK testpmd's
//! `txonly` mode, each send into the same kind of sink, an nfkit
//! `vhost-user:` backend on the DUT's core that only counts frames, over
//! vhost-user (the fastest path here). The sink's count, not either
//! generator's own, gives each rate:
//!
//! - as fast as each can (64-byte frames): nfkit's rate against
//!   testpmd's (testpmd on the tester's core, as nfkit's tester);
//! - nfkit paced at [`PACED_PPS`]: the rate the sink counted against the
//!   rate asked (rate accuracy);
//! - timestamp resolution: the smallest step of the clock the tester
//!   stamps frames with (`Instant`, CLOCK_MONOTONIC) and the cost of
//!   reading it.

use crate::testpmd::{on_path, tail, DpdkEnv, TestpmdError, HUGEPAGES, TESTPMD};
use anyhow::{bail, Context, Result};
use nfkit_lab::pktgen::{GenConfig, Generator, RateLimit};
use nfkit_lab::{registry, SimLab, SimWire};
use nfkit_port::{Batch, OpenOptions};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The rate nfkit's generator is paced at for the accuracy figure.
pub const PACED_PPS: f64 = 500_000.0;
/// Measured time of each phase (after [`WARM`]).
const MEASURE: Duration = Duration::from_secs(2);
const WARM: Duration = Duration::from_millis(500);

/// A counting sink on an nfkit vhost-user backend, on its own thread.
struct Sink {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<(Instant, u64)>>>,
}

impl Sink {
    fn start(sock: &Path, core: usize) -> Result<Sink> {
        let _ = std::fs::remove_file(sock);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (halt, spec) = (stop.clone(), format!("vhost-user:{}", sock.display()));
        let thread = std::thread::Builder::new()
            .name("rfc2544-sink".into())
            .spawn(move || -> Result<Vec<(Instant, u64)>> {
                core_affinity::set_for_current(core_affinity::CoreId { id: core });
                let reg = registry(SimLab::new(SimWire::Open, 1), 1);
                let mut port = match reg.open_str(&spec, &OpenOptions::default()) {
                    Ok(p) => {
                        let _ = tx.send(Ok(()));
                        p
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("{e:#}")));
                        bail!("the sink's port {spec}: {e:#}");
                    }
                };
                let mut b = Batch::new();
                let (mut count, mut samples, mut loops) = (0u64, Vec::new(), 0u32);
                while !halt.load(Ordering::Relaxed) {
                    count += port.rx_batch(0, &mut b) as u64;
                    b.clear();
                    loops = loops.wrapping_add(1);
                    if loops.is_multiple_of(256) {
                        samples.push((Instant::now(), count));
                    }
                }
                samples.push((Instant::now(), count));
                Ok(samples)
            })?;
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => Ok(Sink { stop, thread }),
            Ok(Err(e)) => bail!("the sink did not start: {e}"),
            Err(_) => bail!("the sink did not start within 20 s"),
        }
    }

    /// Stop; the counted rate over [`MEASURE`] from [`WARM`] after the
    /// first frame.
    fn rate(self) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sink panicked"))??;
        let first = samples
            .iter()
            .find(|s| s.1 > 0)
            .context("the sink counted no frame")?;
        let from = first.0 + WARM;
        let a = samples
            .iter()
            .find(|s| s.0 >= from)
            .context("the phase ended before its warm-up did")?;
        let b = samples
            .iter()
            .find(|s| s.0 >= a.0 + MEASURE)
            .or(samples.last())
            .context("no sample")?;
        let secs = (b.0 - a.0).as_secs_f64();
        if secs < MEASURE.as_secs_f64() * 0.5 {
            bail!("the phase measured only {secs:.2} s");
        }
        Ok((b.1 - a.1) as f64 / secs)
    }
}

/// nfkit's generator into a fresh sink: the rate the sink counted.
fn nfkit_phase(sock: &Path, cores: (usize, usize), pps: Option<f64>) -> Result<f64> {
    let sink = Sink::start(sock, cores.1)?;
    let reg = registry(SimLab::new(SimWire::Open, 1), 1);
    let mut port = reg
        .open_str(
            &format!("virtio-user:{}", sock.display()),
            &OpenOptions::default(),
        )
        .context("the generator's port")?;
    let mut cache = port.pool().cache(256);
    let mut g = Generator::new(GenConfig {
        rate: pps.map(RateLimit::Pps),
        ..GenConfig::default()
    });
    let mut batch = Batch::new();
    let start = Instant::now();
    while start.elapsed() < WARM + MEASURE + Duration::from_millis(500) {
        g.fill(&mut batch, &mut cache, start.elapsed(), 32);
        if !batch.is_empty() {
            port.tx_batch(0, &mut batch);
        }
        batch.clear();
    }
    sink.rate()
}

/// testpmd txonly (64-byte frames, one lcore on the tester's core) into
/// a fresh sink.
fn testpmd_phase(sock: &Path, dir: &Path, cores: (usize, usize)) -> Result<f64> {
    if !on_path(TESTPMD) {
        bail!(TestpmdError::NotInstalled);
    }
    let _env = DpdkEnv::prepare(HUGEPAGES)?;
    let sink = Sink::start(sock, cores.1)?;
    let prefix = format!("nfkit-rfc2544-txonly-{}", std::process::id());
    let log = dir.join(format!("{prefix}.log"));
    let out = std::fs::File::create(&log)?;
    let t = cores.0;
    let mut child = Command::new(TESTPMD)
        .args(["--lcores", &format!("0@{t},1@{t}"), "-n", "1"])
        .args(["--no-pci", "--in-memory", "--single-file-segments"])
        .args(["--file-prefix", &prefix, "--vdev"])
        .arg(format!("net_virtio_user0,path={},queues=1", sock.display()))
        .args(["--", "--forward-mode=txonly", "--txpkts=60", "--auto-start"])
        .args([
            "--stats-period",
            "1",
            "--nb-cores=1",
            "--total-num-mbufs=16384",
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {TESTPMD}"))?;
    let start = Instant::now();
    let limit = Duration::from_secs(30) + WARM + MEASURE;
    // run until the sink has counted for its window, or testpmd ends
    let mut seen_at = None;
    while start.elapsed() < limit {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if seen_at.is_none() && text.contains("Port statistics") {
            seen_at = Some(Instant::now());
        }
        if seen_at.is_some_and(|t| t.elapsed() > WARM + MEASURE + Duration::from_millis(700)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let until = Instant::now() + Duration::from_secs(10);
    while !matches!(child.try_wait(), Ok(Some(_))) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&prefix));
    sink.rate()
        .with_context(|| format!("testpmd txonly; its last lines:\n{}", tail(&text, 10)))
}

/// The smallest nonzero step of `Instant` and the mean cost of reading it.
fn clock_resolution() -> (u64, f64) {
    let n = 100_000;
    let start = Instant::now();
    let mut last = start;
    let mut step = u64::MAX;
    for _ in 0..n {
        let now = Instant::now();
        let d = (now - last).as_nanos() as u64;
        if d > 0 {
            step = step.min(d);
        }
        last = now;
    }
    (step, (last - start).as_nanos() as f64 / n as f64)
}

/// Run the cross-check; lines printed, the figures as JSON.
pub fn run(dir: &Path, cores: (usize, usize)) -> Result<Value> {
    let (step, read_ns) = clock_resolution();
    println!(
        "generator: timestamps from CLOCK_MONOTONIC (Instant), smallest step {step} ns, {read_ns:.1} ns per reading"
    );
    let paced = nfkit_phase(&dir.join("xc-paced.sock"), cores, Some(PACED_PPS));
    let nfkit = nfkit_phase(&dir.join("xc-nfkit.sock"), cores, None);
    let pmd = testpmd_phase(&dir.join("xc-pmd.sock"), dir, cores);
    let f = |r: &Result<f64>| match r {
        Ok(v) => format!("{:.3} Mpps", v / 1e6),
        Err(e) => format!("not measured ({e:#})"),
    };
    match &paced {
        Ok(v) => println!(
            "generator: paced at {:.3} Mpps, the sink counted {:.4} Mpps ({:+.2}%)",
            PACED_PPS / 1e6,
            v / 1e6,
            (v / PACED_PPS - 1.0) * 100.0
        ),
        Err(e) => println!("generator: paced rate not measured: {e:#}"),
    }
    println!(
        "generator cross-check, 64 B as fast as each can into the same nfkit vhost-user sink: nfkit {}, DPDK testpmd txonly {}{}",
        f(&nfkit),
        f(&pmd),
        match (&nfkit, &pmd) {
            (Ok(a), Ok(b)) => format!(" (nfkit / testpmd = {:.2})", a / b),
            _ => String::new(),
        }
    );
    let v = |r: &Result<f64>| r.as_ref().ok().copied();
    let e = |r: &Result<f64>| r.as_ref().err().map(|e| format!("{e:#}"));
    Ok(json!({
        "clock_step_ns": step,
        "clock_read_ns": read_ns,
        "paced_asked_pps": PACED_PPS,
        "paced_counted_pps": v(&paced),
        "nfkit_max_pps": v(&nfkit),
        "testpmd_txonly_max_pps": v(&pmd),
        "errors": [e(&paced), e(&nfkit), e(&pmd)],
        "method": "each generator on the tester's core sends 64-byte frames into its own nfkit vhost-user backend on the DUT's core that counts them; rates from the sink's count over 2 s after 0.5 s",
    }))
}
