//! `nfkit bench vhost`: the vhost-user path, nfkit against DPDK, in one
//! run, on the same two cores.
//!
//! | pairing | frontend (driver) | backend (device) |
//! |---|---|---|
//! | DPDK's own | testpmd `net_virtio_user` | testpmd `net_vhost` |
//! | our frontend | nfkit `virtio-user:SOCK` | testpmd `net_vhost` |
//! | our backend | testpmd `net_virtio_user` | nfkit `vhost-user:SOCK` |
//!
//! Each side sends every packet it receives straight back (testpmd's io
//! mode on one port; nfkit's reflector leaves the data untouched too).
//! The only traffic is one burst of `burst` 64-byte frames sent by the
//! frontend at start (testpmd's `--tx-first`, or the same number of
//! frames from nfkit), which then circulates. Both processes run as in
//! DPDK's documented setup (this-machine.md §2): two processes,
//! `--single-file-segments`, the backend's forwarding lcore on core 1,
//! the frontend's on core 0 (nfkit pins its reflector thread there).
//!
//! The rate of a pairing is what testpmd measures, the same way in all
//! three: its mean receive rate over its statistics periods that start
//! after the warm-up (testpmd is the frontend in DPDK's pair and against
//! our backend, the backend against our frontend; in a ping-pong both
//! sides see the same rate). The other side's own count is printed
//! beside it as a check. Ratios are against DPDK's own pair.
//!
//! testpmd is asked for a statistics block every second, but it prints
//! one every two seconds on a machine whose TSC runs slightly slower than
//! DPDK's estimate of its frequency (rounded to 10 MHz: this machine's
//! 2596.1 MHz is taken as 2600 MHz, so one second of sleep falls short of
//! its period). So the bench never counts blocks as seconds: it notes
//! when each block appears in testpmd's output and waits until the blocks
//! after the warm-up cover the measured time, however long they are.
//!
//! Each pairing runs [`ROUNDS`] times, interleaved (DPDK, ours as
//! frontend, ours as backend, DPDK, ...), every run is printed, and the
//! table compares each pairing's best run. On the shared machines this
//! runs on, one run of a pairing can land at half the rate of the next
//! (DPDK's own pair as much as ours: it follows where the processes and
//! their hugepages land, not the code), so one run per pairing would make
//! the ratios a coin toss; the best of a few is the same rule for all
//! three. Each run's line also gives our pairings against that round's
//! DPDK pair, which is the reading to trust when rounds land at different
//! speeds (best-of can then pair a fast run of ours with a slow one of
//! DPDK's).

use crate::testpmd::{
    on_path, packet_counts, parse_periods, steady_average, tail, DpdkEnv, TestpmdError, TESTPMD,
};
use anyhow::{bail, Context, Result};
use nfkit_port::null::udp_template;
use nfkit_port::{Batch, OpenOptions, Port};
use parking_lot::Mutex;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frame size of the circulating traffic (testpmd's transmit default).
const FRAME_LEN: usize = 64;
/// Forwarding starts, then this long passes before measuring.
const WARMUP: Duration = Duration::from_secs(2);
/// How long a backend may take to create its socket, or a pairing to
/// start moving packets.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Mbufs per testpmd (its default sizes for hardware rings: 400 MiB).
const MBUFS: usize = 16384;
/// The longest gap between two of testpmd's statistics blocks (asked
/// for every second; every two seconds where DPDK overestimates the TSC
/// frequency, see the module doc).
const LONGEST_PERIOD: Duration = Duration::from_secs(2);
/// How often testpmd's output is read for new statistics blocks.
const POLL: Duration = Duration::from_millis(20);
/// A block is noted up to a [`POLL`] (and a file read) after it was
/// printed, so the span of the blocks may look this much shorter than it
/// was.
const SLACK: Duration = Duration::from_millis(100);
/// Runs of each pairing.
pub const ROUNDS: usize = 3;
/// The cores: the backend forwards on one, the frontend on the other.
const BACKEND_CORE: usize = 1;
const FRONTEND_CORE: usize = 0;

/// What to run.
#[derive(Debug, Clone)]
pub struct VhostOptions {
    /// Measured seconds per pairing.
    pub seconds: u64,
    /// Frames in flight (testpmd's `--burst` with `--tx-first`).
    pub burst: usize,
}

/// The measured rate of one pairing.
#[derive(Debug, Clone)]
pub struct Pairing {
    pub name: &'static str,
    /// Packets per second, as testpmd received them.
    pub pps: f64,
    /// What the other side counted, as a check.
    pub peer_pps: f64,
}

impl VhostOptions {
    /// The measured time of each pairing.
    fn measured(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    /// How long a pairing may take from its start to the end of its
    /// measurement: start-up, warm-up, the measured time, and up to two
    /// statistics periods to round the warm-up and the measurement up to
    /// whole blocks.
    fn run_limit(&self) -> Duration {
        START_LIMIT + WARMUP + self.measured() + 2 * LONGEST_PERIOD + Duration::from_secs(1)
    }
}

/// Run the three pairings and print them side by side with the ratios.
pub fn vhost(opts: &VhostOptions) -> Result<Vec<Pairing>> {
    if opts.seconds == 0 {
        bail!("--seconds must be at least 1: the measured time of each pairing");
    }
    if opts.burst == 0 {
        bail!("--burst must be at least 1: the frames that circulate");
    }
    if !on_path(TESTPMD) {
        bail!(TestpmdError::NotInstalled);
    }
    let _env = DpdkEnv::prepare(crate::testpmd::HUGEPAGES)?;
    let mut runs: Vec<[Pairing; 3]> = Vec::with_capacity(ROUNDS);
    println!("runs, Mpps: DPDK's pair / nfkit frontend / nfkit backend");
    for round in 1..=ROUNDS {
        let run = [
            twice(|| dpdk_pair(opts)).context("DPDK's virtio_user <-> net_vhost")?,
            twice(|| our_frontend(opts)).context("nfkit virtio-user <-> DPDK net_vhost")?,
            twice(|| our_backend(opts)).context("DPDK virtio_user <-> nfkit vhost-user")?,
        ];
        let mpps = run.iter().map(|p| format!("{:.2}", p.pps / 1e6));
        println!(
            "run {round}/{ROUNDS}: {} Mpps; against this round's DPDK pair: {}",
            mpps.collect::<Vec<_>>().join(" / "),
            round_ratios(&run)
        );
        runs.push(run);
    }
    let best: Vec<Pairing> = (0..3)
        .filter_map(|i| {
            runs.iter()
                .map(|run| run[i].clone())
                .max_by(|a, b| a.pps.total_cmp(&b.pps))
        })
        .collect();
    print_table(&best, opts);
    Ok(best)
}

/// Run a pairing; if it fails (a process that did not start in time on
/// a busy machine, say), print why on one line and run it once more.
fn twice(run: impl Fn() -> Result<Pairing>) -> Result<Pairing> {
    run().or_else(|e| {
        println!("  a run failed ({e:#}); running it again");
        run()
    })
}

/// Our two pairings against the DPDK pair of the same round: the fairer
/// reading when rounds land at different speeds.
fn round_ratios(run: &[Pairing; 3]) -> String {
    let base = run[0].pps;
    if base <= 0.0 {
        return "no DPDK rate".to_string();
    }
    format!(
        "frontend {:.2}x, backend {:.2}x",
        run[1].pps / base,
        run[2].pps / base
    )
}

fn print_table(rows: &[Pairing], opts: &VhostOptions) {
    let base = rows[0].pps;
    println!(
        "\nvhost-user ping-pong, {} frames of {FRAME_LEN} bytes in flight, {} s measured, frontend on core {FRONTEND_CORE}, backend on core {BACKEND_CORE}, best of {ROUNDS} runs",
        opts.burst, opts.seconds
    );
    println!(
        "{:<40} {:>10} {:>12} {:>9}",
        "pairing", "Mpps", "(peer Mpps)", "vs DPDK"
    );
    for r in rows {
        let ratio = if base > 0.0 { r.pps / base } else { 0.0 };
        println!(
            "{:<40} {:>10.2} {:>12.2} {:>8.2}x",
            r.name,
            r.pps / 1e6,
            r.peer_pps / 1e6,
            ratio
        );
    }
    println!("(target: at least 1.10x DPDK's own pair for both nfkit pairings)");
}

/// This run's socket for a pairing; a file left at that path by an
/// earlier run is removed first (testpmd's net_vhost fails to bind over
/// it, and we would take it for the new backend's socket).
fn socket(tag: &str) -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "nfkit-bench-vhost-{tag}-{}.sock",
        std::process::id()
    ));
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing the stale socket {}", path.display()))
        }
        _ => Ok(path),
    }
}

/// testpmd with a `net_vhost` backend listening on `sock`, once it
/// forwards.
///
/// net_vhost creates its socket when the port is configured, before
/// testpmd starts the port and forwarding; a frontend that connects at
/// once can finish the handshake and send its one burst in that window,
/// and testpmd then discards the burst with the rest of its receive
/// queues as forwarding starts (it counted 32 received, 0 forwarded, and
/// the ping-pong never began: about one run in ten on a busy machine).
/// So the frontend starts only after testpmd's first statistics block,
/// which it prints once forwarding has started; `--no-flush-rx` (see
/// [`Pmd::start`]) keeps such a burst as well.
fn dpdk_backend(sock: &Path) -> Result<Pmd> {
    let mut backend = Pmd::start(
        "be",
        BACKEND_CORE,
        &format!("net_vhost0,iface={}", sock.display()),
        None,
    )?;
    wait_until(START_LIMIT, || {
        backend.first_block().is_some() || !backend.running()
    });
    if backend.first_block().is_none() {
        bail!(
            "testpmd's net_vhost backend did not start forwarding within {START_LIMIT:?}; \
             its output:\n{}",
            backend.log_text()
        );
    }
    if !sock.exists() {
        bail!(
            "testpmd's net_vhost backend forwards but did not create {}; its output:\n{}",
            sock.display(),
            backend.log_text()
        );
    }
    Ok(backend)
}

/// testpmd with a `net_virtio_user` frontend on `sock`, sending the
/// first burst as it starts forwarding.
fn dpdk_frontend(sock: &Path, opts: &VhostOptions) -> Result<Pmd> {
    Pmd::start(
        "fe",
        FRONTEND_CORE,
        &format!("net_virtio_user0,path={},queues=1", sock.display()),
        Some(opts.burst),
    )
}

/// Wait (every [`POLL`], at most `limit`) until `done()`.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < limit {
        std::thread::sleep(POLL);
    }
}

/// DPDK's pair: net_vhost backend, net_virtio_user frontend.
fn dpdk_pair(opts: &VhostOptions) -> Result<Pairing> {
    let sock = socket("dpdk")?;
    let backend = dpdk_backend(&sock)?;
    let frontend = dpdk_frontend(&sock, opts)?;
    let m = opts.measured();
    wait_until(opts.run_limit(), || {
        frontend
            .warm_from_start()
            .is_some_and(|from| frontend.covers(from, m) && backend.covers(from, m))
    });
    let from = frontend.warm_from_start();
    let fe = frontend.stop_and_rate(from, m);
    let be = backend.stop_and_rate(from, m);
    pairing(
        "DPDK virtio_user <-> DPDK net_vhost",
        fe.context("testpmd's virtio_user frontend"),
        be.context("testpmd's net_vhost backend"),
    )
}

/// Our virtio-user frontend against DPDK's net_vhost.
fn our_frontend(opts: &VhostOptions) -> Result<Pairing> {
    let sock = socket("ourfe")?;
    let backend = dpdk_backend(&sock)?;
    let port = nfkit_virtio::open_virtio_user(&sock, 1, false, &OpenOptions::default())?;
    let reflector = Reflector::start(port, opts, true, FRONTEND_CORE)?;
    // The warm-up starts with the first packet our frontend gets back.
    let m = opts.measured();
    wait_until(opts.run_limit(), || {
        reflector.ended()
            || reflector.measured()
                && reflector
                    .measuring_since()
                    .is_some_and(|from| backend.covers(from, m))
    });
    let be = backend.stop_and_rate(reflector.measuring_since(), m);
    let ours = reflector.finish();
    pairing(
        "nfkit virtio-user <-> DPDK net_vhost",
        be.context("testpmd's net_vhost backend"),
        ours.context("nfkit's virtio-user frontend"),
    )
}

/// DPDK's virtio_user against our vhost-user backend.
fn our_backend(opts: &VhostOptions) -> Result<Pairing> {
    let sock = socket("ourbe")?;
    let port = nfkit_virtio::open_vhost_user(&sock, 1, false, &OpenOptions::default())?;
    let frontend = dpdk_frontend(&sock, opts)?;
    // Our backend forwards on the backend core; the rate is read on
    // testpmd's side (the frontend), as in DPDK's pair.
    let reflector = Reflector::start(port, opts, false, BACKEND_CORE)?;
    let m = opts.measured();
    wait_until(opts.run_limit(), || {
        reflector.ended()
            || reflector.measured()
                && frontend
                    .warm_from_start()
                    .is_some_and(|from| frontend.covers(from, m))
    });
    let from = frontend.warm_from_start();
    let fe = frontend.stop_and_rate(from, m);
    let ours = reflector.finish();
    let _ = fs::remove_file(&sock);
    pairing(
        "DPDK virtio_user <-> nfkit vhost-user",
        fe.context("testpmd's virtio_user frontend"),
        ours.context("nfkit's vhost-user backend"),
    )
}

/// A pairing's figures, or what went wrong on either side (both, if
/// both sides failed: one side's failure often explains the other's).
fn pairing(name: &'static str, pps: Result<f64>, peer_pps: Result<f64>) -> Result<Pairing> {
    match (pps, peer_pps) {
        (Ok(pps), Ok(peer_pps)) => Ok(Pairing {
            name,
            pps,
            peer_pps,
        }),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(anyhow::anyhow!("{a:#}\nand {b:#}")),
    }
}

/// Sends every received packet back out of the same port, on a thread
/// pinned to a core, until stopped.
struct Reflector {
    stop: Arc<AtomicBool>,
    /// When the warm-up ended and the measurement started.
    since: Arc<OnceLock<Instant>>,
    measured: Arc<AtomicBool>,
    thread: JoinHandle<Result<f64>>,
}

impl Reflector {
    /// First send `opts.burst` frames if `send_first`. The thread
    /// measures its receive rate over `opts.seconds` after a warm-up
    /// that starts with the first packet received, then goes on
    /// reflecting until [`Reflector::finish`].
    fn start(
        mut port: Box<dyn Port>,
        opts: &VhostOptions,
        send_first: bool,
        core: usize,
    ) -> Result<Reflector> {
        let (seconds, burst) = (Duration::from_secs(opts.seconds), opts.burst);
        let stop = Arc::new(AtomicBool::new(false));
        let since = Arc::new(OnceLock::new());
        let measured = Arc::new(AtomicBool::new(false));
        let (halt, start, done) = (stop.clone(), since.clone(), measured.clone());
        let thread = std::thread::Builder::new()
            .name("vhost-reflect".into())
            .spawn(move || -> Result<f64> {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                    tracing::warn!("could not pin the reflector to core {core}");
                }
                if send_first {
                    send_burst(&mut *port, burst)?;
                }
                let mut batch = Batch::new();
                let started = Instant::now();
                let mut first: Option<Instant> = None;
                let mut from: Option<(Instant, u64)> = None;
                let mut rate = None;
                let mut received = 0u64;
                let mut rounds = 0u32;
                loop {
                    let n = port.rx_batch(0, &mut batch);
                    received += n as u64;
                    if !batch.is_empty() {
                        port.tx_batch(0, &mut batch);
                    }
                    rounds = rounds.wrapping_add(1);
                    // The clock is read once per 256 rounds.
                    if rounds & 0xff != 0 {
                        continue;
                    }
                    if halt.load(Ordering::Relaxed) {
                        return rate.context("stopped before the measurement ended");
                    }
                    let now = Instant::now();
                    if received > 0 && first.is_none() {
                        first = Some(now);
                    }
                    match (first, from) {
                        (None, _) if now - started > START_LIMIT => {
                            let s = port.stats();
                            bail!(
                                "no packet came within {START_LIMIT:?} (this port sent {} \
                                 and received {} packets)",
                                s.tx_packets,
                                s.rx_packets
                            )
                        }
                        (Some(f), None) if now - f >= WARMUP => {
                            from = Some((now, received));
                            let _ = start.set(now);
                        }
                        (_, Some((t0, r0))) if rate.is_none() && now - t0 >= seconds => {
                            rate = Some((received - r0) as f64 / (now - t0).as_secs_f64());
                            done.store(true, Ordering::Release);
                        }
                        _ => {}
                    }
                }
            })?;
        Ok(Reflector {
            stop,
            since,
            measured,
            thread,
        })
    }

    /// When the warm-up ended, once it has.
    fn measuring_since(&self) -> Option<Instant> {
        self.since.get().copied()
    }

    /// Whether the measurement is over (the thread goes on reflecting).
    fn measured(&self) -> bool {
        self.measured.load(Ordering::Acquire)
    }

    /// Whether the thread ended (with an error: it only ends when stopped).
    fn ended(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stop and return the measured rate.
    fn finish(self) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the reflector thread panicked"))?
    }
}

/// `burst` 64-byte UDP frames from the port's own pool.
fn send_burst(port: &mut dyn Port, burst: usize) -> Result<()> {
    let frame = udp_template(FRAME_LEN);
    let mut batch = Batch::new();
    for _ in 0..burst.min(batch.room()) {
        let mut b = port.pool().alloc().context("the port's pool is empty")?;
        b.copy_from(&frame)
            .map_err(|_| anyhow::anyhow!("frame too large"))?;
        batch.push(b);
    }
    let started = Instant::now();
    while !batch.is_empty() {
        port.tx_batch(0, &mut batch);
        if started.elapsed() > START_LIMIT {
            bail!("the backend took no packet within {START_LIMIT:?}");
        }
    }
    Ok(())
}

/// One testpmd process on one vdev, io forwarding, statistics every
/// second; its main lcore on the other core (it only prints). A thread
/// reads its output every [`POLL`] and notes when each statistics block
/// appears.
struct Pmd {
    child: Option<Child>,
    log: PathBuf,
    prefix: String,
    blocks: Arc<Mutex<Vec<Block>>>,
    watching: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// One of testpmd's statistics blocks as the watcher saw it.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// When its header was first seen: the end of its period (testpmd
    /// reads its counters as it prints).
    seen: Instant,
    /// All its ports printed.
    complete: bool,
}

impl Pmd {
    fn start(tag: &str, core: usize, vdev: &str, tx_first_burst: Option<usize>) -> Result<Pmd> {
        let prefix = format!("nfkit-bv-{tag}-{}", std::process::id());
        let log = std::env::temp_dir().join(format!("{prefix}.log"));
        let out = fs::File::create(&log)?;
        let main_core = 1 - core;
        let mut c = Command::new(TESTPMD);
        c.args(["--lcores", &format!("0@{main_core},1@{core}"), "-n", "1"])
            .args(["--no-pci", "--in-memory", "--single-file-segments"])
            .args(["--file-prefix", &prefix, "--vdev", vdev, "--"])
            .args(["--forward-mode=io", "--auto-start", "--stats-period", "1"])
            // Frames that came before forwarding started are forwarded,
            // not discarded (see `dpdk_backend`).
            .arg("--no-flush-rx")
            .args(["--nb-cores=1", &format!("--total-num-mbufs={MBUFS}")]);
        if let Some(b) = tx_first_burst {
            c.args(["--tx-first", &format!("--burst={b}")]);
        }
        let child = c
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {TESTPMD}"))?;
        let blocks = Arc::new(Mutex::new(Vec::new()));
        let watching = Arc::new(AtomicBool::new(true));
        let (path, seen, on) = (log.clone(), blocks.clone(), watching.clone());
        let watcher = std::thread::Builder::new()
            .name("testpmd-watch".into())
            .spawn(move || watch_blocks(&path, &seen, &on));
        let mut pmd = Pmd {
            child: Some(child),
            log,
            prefix,
            blocks,
            watching,
            watcher: None,
        };
        // On an error the drop stops testpmd.
        pmd.watcher = Some(watcher.context("starting the thread that reads testpmd's output")?);
        Ok(pmd)
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// When testpmd's first statistics block appeared: it prints it as
    /// soon as forwarding has started (with `--tx-first`, right after the
    /// first burst is sent).
    fn first_block(&self) -> Option<Instant> {
        self.blocks.lock().first().map(|b| b.seen)
    }

    /// The end of the warm-up when it starts with testpmd's forwarding.
    fn warm_from_start(&self) -> Option<Instant> {
        self.first_block().map(|t| t + WARMUP)
    }

    /// Whether the process is still running.
    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Whether the complete blocks whose periods start at or after
    /// `from` cover at least `span` so far.
    fn covers(&self, from: Instant, span: Duration) -> bool {
        covers(&self.blocks.lock(), from, span)
    }

    /// SIGINT (SIGKILL after 10 s), then the mean Rx-pps of the blocks
    /// whose periods start at or after `from` (the end of the warm-up,
    /// `None` if it never came), provided they cover `span`.
    fn stop_and_rate(mut self, from: Option<Instant>, span: Duration) -> Result<f64> {
        self.halt();
        let blocks = std::mem::take(&mut *self.blocks.lock());
        let text = self.log_text();
        let shortfall = |why: String| {
            anyhow::anyhow!(
                "{why} (testpmd printed {} statistics blocks; it is asked for one \
                 a second, and gives one every one or two)\n{}\ntestpmd's last lines:\n{}",
                blocks.len(),
                packet_counts(&text),
                tail(&text, 8)
            )
        };
        let Some(from) = from else {
            bail!(shortfall(
                "the pairing never got through its warm-up".into()
            ));
        };
        if !covers(&blocks, from, span) {
            let after = blocks.iter().filter(|b| b.seen >= from).count();
            bail!(shortfall(format!(
                "testpmd's statistics after the warm-up cover less than the \
                 {span:?} asked ({after} blocks printed after it)"
            )));
        }
        // Only the blocks the watcher timed: any later one is left out.
        let periods = parse_periods(&text);
        let timed = &periods[..blocks.len().min(periods.len())];
        let skip = 1 + blocks.iter().filter(|b| b.seen < from).count();
        match steady_average(timed, skip).as_deref() {
            Some([r, ..]) => Ok(r.rx_pps),
            _ => bail!(shortfall(
                "testpmd's blocks after the warm-up have no receive rate".into()
            )),
        }
    }

    fn halt(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let started = Instant::now();
            let mut exited = false;
            while !exited && started.elapsed() < Duration::from_secs(10) {
                exited = matches!(child.try_wait(), Ok(Some(_)));
                std::thread::sleep(Duration::from_millis(50));
            }
            if !exited {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.watching.store(false, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Pmd {
    fn drop(&mut self) {
        self.halt();
        let _ = fs::remove_file(&self.log);
        let _ = fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// Whether the complete `blocks` whose periods start at or after `from`
/// cover at least `span`. A block's period runs from the block before it
/// to itself.
fn covers(blocks: &[Block], from: Instant, span: Duration) -> bool {
    let Some(first) = blocks.iter().position(|b| b.seen >= from) else {
        return false;
    };
    let start = blocks[first].seen;
    blocks[first + 1..]
        .iter()
        .rev()
        .find(|b| b.complete)
        .is_some_and(|last| last.seen + SLACK >= start + span)
}

/// Until `on` is cleared: read testpmd's output at `log` every [`POLL`]
/// and note in `blocks` when each statistics block first appears and
/// when it is complete.
fn watch_blocks(log: &Path, blocks: &Mutex<Vec<Block>>, on: &AtomicBool) {
    while on.load(Ordering::Relaxed) {
        let text = fs::read(log).unwrap_or_default();
        let periods = parse_periods(&String::from_utf8_lossy(&text));
        let ports = periods.first().map_or(0, |p| p.ports.len());
        let now = Instant::now();
        let mut seen = blocks.lock();
        for (i, p) in periods.iter().enumerate() {
            let complete = ports > 0 && p.ports.len() == ports;
            match seen.get_mut(i) {
                Some(b) => b.complete = complete,
                None => seen.push(Block {
                    seen: now,
                    complete,
                }),
            }
        }
        drop(seen);
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks seen at these offsets (seconds) from `t0`, all complete.
    fn blocks(t0: Instant, at: &[f64]) -> Vec<Block> {
        at.iter()
            .map(|&s| Block {
                seen: t0 + Duration::from_secs_f64(s),
                complete: true,
            })
            .collect()
    }

    #[test]
    fn two_second_periods_cover_a_short_measurement() {
        // testpmd's periods on a machine where DPDK rounds the TSC
        // frequency up: a block every two seconds.
        let t0 = Instant::now();
        let from = t0 + WARMUP;
        let two = Duration::from_secs(2);
        assert!(!covers(&blocks(t0, &[0.0, 2.0]), from, two));
        assert!(covers(&blocks(t0, &[0.0, 2.0, 4.0]), from, two));
        assert!(!covers(&blocks(t0, &[0.0, 2.0, 4.0]), from, 2 * two));
        assert!(covers(&blocks(t0, &[0.0, 2.0, 4.0, 6.0]), from, 2 * two));
        // One-second periods, one second measured.
        let one = Duration::from_secs(1);
        assert!(covers(&blocks(t0, &[0.0, 1.0, 2.0, 3.0]), from, one));
        assert!(!covers(&blocks(t0, &[0.0, 1.0, 2.0]), from, one));
    }

    #[test]
    fn a_block_seen_late_by_the_poll_still_counts() {
        let t0 = Instant::now();
        let from = t0 + WARMUP;
        let b = blocks(t0, &[0.0, 2.03, 4.01]);
        assert!(covers(&b, from, Duration::from_secs(2)));
        // A block that started before the warm-up ended is not counted.
        let b = blocks(t0, &[0.0, 1.9, 3.9]);
        assert!(!covers(&b, from, Duration::from_secs(2)));
    }

    #[test]
    fn an_incomplete_last_block_does_not_count() {
        let t0 = Instant::now();
        let mut b = blocks(t0, &[0.0, 2.0, 4.0]);
        b[2].complete = false;
        assert!(!covers(&b, t0 + WARMUP, Duration::from_secs(2)));
        assert!(!covers(&[], t0, Duration::from_secs(1)));
    }

    #[test]
    fn zero_seconds_or_frames_are_refused() {
        for (seconds, burst) in [(0, 32), (2, 0)] {
            let e = vhost(&VhostOptions { seconds, burst }).unwrap_err();
            assert!(e.to_string().contains("must be at least 1"), "{e}");
        }
    }
}
