//! The CPU cost per packet of each side of the vhost-user path, ours
//! against ours, on one thread: our virtio-user frontend sends a batch,
//! our backend receives it and sends it back, the frontend receives it.
//! Each call is timed on its own, so the figures are what one side costs
//! without the other side's core or cache-line transfers between cores
//! (`nfkit bench vhost` measures those, against DPDK).
//!
//! ```text
//! cargo run --release -p nfkit-virtio --example vhost_cost [batch] [rounds]
//! cargo run --release -p nfkit-virtio --example vhost_cost pingpong [batch] [seconds]
//! ```
//!
//! Prints ns/packet for the four calls, the best of 20 chunks of rounds
//! (a loaded machine only makes chunks slower, never faster).
//!
//! `serve PATH [seconds]` is only the backend, reflecting on core 1, for
//! a frontend from elsewhere (DPDK's virtio_user).
//!
//! `pingpong` runs the two sides as `nfkit bench vhost` does (frontend
//! reflecting on core 0, backend on core 1, `batch` frames in flight) and
//! prints the frontend's receive rate each second: ours against ours,
//! for comparing changes.

use anyhow::{bail, Result};
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_port::Port;
use nfkit_virtio::vhost_user::{self, BackendConfig, FrontendConfig, VhostUserBackend};
use std::time::{Duration, Instant};

const CHUNKS: usize = 20;

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "serve") {
        return serve(&args[2..]);
    }
    let pingpong = args.get(1).is_some_and(|a| a == "pingpong");
    if pingpong {
        args.remove(1);
    }
    let burst: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(32);
    let rounds: usize = args
        .get(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let path = std::env::temp_dir().join(format!("nfkit-cost-{}.sock", std::process::id()));
    let mut be = backend(&path)?;
    let mut fe = vhost_user::connect(&path, &FrontendConfig::default())?;
    let started = Instant::now();
    while !be.ready(0) {
        if started.elapsed() > Duration::from_secs(5) {
            bail!("the backend did not start its rings");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if pingpong {
        return ping_pong(fe, be, burst, rounds as u64);
    }
    let mut batch = Batch::new();
    let frame = [0x5au8; 60];
    for _ in 0..burst.min(batch.room()) {
        let mut b = fe.pool().alloc().expect("frontend pool");
        b.copy_from(&frame)?;
        batch.push(b);
    }
    // [fe tx, be rx, be tx, fe rx]
    let mut best = [f64::MAX; 4];
    for _ in 0..CHUNKS {
        let mut spent = [Duration::ZERO; 4];
        let mut moved = 0usize;
        for _ in 0..rounds / CHUNKS {
            let n = batch.len();
            for (i, spent) in spent.iter_mut().enumerate() {
                let t = Instant::now();
                match i {
                    0 => fe.tx_batch(0, &mut batch),
                    1 => be.rx_batch(0, &mut batch),
                    2 => be.tx_batch(0, &mut batch),
                    _ => fe.rx_batch(0, &mut batch),
                };
                *spent += t.elapsed();
            }
            if batch.len() != n {
                bail!("{} of {n} packets came round", batch.len());
            }
            moved += n;
        }
        for (b, s) in best.iter_mut().zip(spent) {
            *b = b.min(s.as_nanos() as f64 / moved as f64);
        }
    }
    println!(
        "ns/packet (batch {burst}): frontend tx {:.1}, backend rx {:.1}, backend tx {:.1}, frontend rx {:.1}",
        best[0], best[1], best[2], best[3]
    );
    println!(
        "frontend {:.1} ns/packet, backend {:.1} ns/packet",
        best[0] + best[3],
        best[1] + best[2]
    );
    Ok(())
}

/// Both sides reflecting on their own core, `burst` frames in flight.
fn ping_pong(
    mut fe: impl Port + 'static,
    mut be: impl Port + 'static,
    burst: usize,
    seconds: u64,
) -> Result<()> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let halt = stop.clone();
    let backend = std::thread::spawn(move || {
        core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
        let mut batch = Batch::new();
        while !halt.load(std::sync::atomic::Ordering::Relaxed) {
            be.rx_batch(0, &mut batch);
            if !batch.is_empty() {
                be.tx_batch(0, &mut batch);
            }
        }
        println!("backend: {:?}", be.stats());
    });
    core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    let mut batch = Batch::new();
    let frame = [0x5au8; 60];
    for _ in 0..burst.min(batch.room()) {
        let mut b = fe.pool().alloc().expect("frontend pool");
        b.copy_from(&frame)?;
        batch.push(b);
    }
    let mut received = 0u64;
    let mut last = (Instant::now(), 0u64);
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut rounds = 0u32;
    loop {
        if !batch.is_empty() {
            fe.tx_batch(0, &mut batch);
        }
        received += fe.rx_batch(0, &mut batch) as u64;
        rounds = rounds.wrapping_add(1);
        if rounds & 0xff != 0 {
            continue;
        }
        let now = Instant::now();
        if now - last.0 >= Duration::from_secs(1) {
            let rate = (received - last.1) as f64 / (now - last.0).as_secs_f64();
            println!("{:.2} Mpps", rate / 1e6);
            last = (now, received);
        }
        if now >= end {
            break;
        }
    }
    println!("frontend: {:?}", fe.stats());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    backend
        .join()
        .map_err(|_| anyhow::anyhow!("backend thread panicked"))?;
    Ok(())
}

/// A backend on `args[0]` reflecting on core 1 for `args[1]` seconds.
fn serve(args: &[String]) -> Result<()> {
    let path = args
        .first()
        .cloned()
        .unwrap_or_else(|| "/tmp/nfkit-cost.sock".into());
    let secs: u64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let mut be = backend(std::path::Path::new(&path))?;
    core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
    let end = Instant::now() + Duration::from_secs(secs);
    let mut batch = Batch::new();
    let mut rounds = 0u32;
    let (mut rx_ns, mut tx_ns, mut busy_rounds, mut packets) =
        (Duration::ZERO, Duration::ZERO, 0u64, 0u64);
    let started = Instant::now();
    while rounds & 0xfff != 0 || Instant::now() < end {
        let t = Instant::now();
        let n = be.rx_batch(0, &mut batch);
        let t1 = Instant::now();
        if !batch.is_empty() {
            be.tx_batch(0, &mut batch);
        }
        if n > 0 {
            rx_ns += t1 - t;
            tx_ns += t1.elapsed();
            busy_rounds += 1;
            packets += n as u64;
        }
        rounds = rounds.wrapping_add(1);
    }
    println!("backend: {:?}", be.stats());
    let per = |d: Duration| d.as_nanos() as f64 / packets.max(1) as f64;
    println!(
        "busy {:.1}% of the time, {:.1} packets per busy round, ns per packet: rx {:.1} tx {:.1}",
        100.0 * (rx_ns + tx_ns).as_secs_f64() / started.elapsed().as_secs_f64(),
        packets as f64 / busy_rounds.max(1) as f64,
        per(rx_ns),
        per(tx_ns)
    );
    Ok(())
}

/// Our backend listening on `path`, over a simulated-DMA pool.
fn backend(path: &std::path::Path) -> Result<VhostUserBackend> {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "be", 4096, 2048)?;
    let cfg = BackendConfig {
        name: "be".into(),
        path: path.to_path_buf(),
        queue_pairs: 1,
        mac: [2, 0, 0, 0, 0, 1],
        host_tso: false,
    };
    Ok(VhostUserBackend::listen(cfg, pool)?)
}
