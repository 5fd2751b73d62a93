//! A vhost-user backend port that sends every packet back where it came
//! from: a target for DPDK's virtio-user or QEMU.
//!
//! ```text
//! vhost_echo <socket> [seconds]
//! ```
//!
//! Prints `ECHO rx=<received> tx=<sent>` when it ends.

use anyhow::Result;
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_port::Port;
use nfkit_virtio::vhost_user::{BackendConfig, VhostUserBackend};
use std::time::{Duration, Instant};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/nfkit-echo.sock".into());
    let secs: u64 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(10);
    // Received packets are copied out of the frontend's memory into
    // ordinary buffers: no device reaches them, so plain memory will do.
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "echo", 4096, 2048)?;
    let cfg = BackendConfig {
        name: "echo".into(),
        path: path.into(),
        queue_pairs: 1,
        mac: [2, 0, 0, 0, 0, 0x42],
        host_tso: false,
    };
    let mut port = VhostUserBackend::listen(cfg, pool)?;
    let start = Instant::now();
    let mut batch = Batch::new();
    while start.elapsed() < Duration::from_secs(secs) {
        if port.rx_batch(0, &mut batch) == 0 && batch.is_empty() {
            std::thread::sleep(Duration::from_micros(50));
        }
        port.tx_batch(0, &mut batch);
        // What the frontend had no room for is dropped (and counted).
        batch.clear();
    }
    let s = port.stats();
    println!(
        "ECHO rx={} tx={} tx_errors={} rx_errors={}",
        s.rx_packets, s.tx_packets, s.tx_errors, s.rx_errors
    );
    Ok(())
}
