//! Benchmark of the free-running model: frames injected on port A's wire
//! are received by A's device thread, "forwarded" by a minimal
//! TinyNF-style driver loop on this thread (the RX descriptor's buffer is
//! handed to the TX ring of the same port, no copy), transmitted by A's
//! device thread into a sink.
//!
//! `cargo run --release -p nfkit-ixgbe-model --example model_fwd -- 10000000`

use nfkit_hw::sim::SimDma;
use nfkit_hw::{poll_until, Bar, DmaAllocator, PciFunction, SystemClock};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, TrafficGen};
use std::time::{Duration, Instant};

const RING: usize = 1024;

fn main() {
    let total: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let dma = SimDma::new();
    let nic = Nic82599::new(ModelConfig::default(), dma.clone());
    let pci = nic.pci();
    let bar = pci.map_bar(0).unwrap();
    let clock = SystemClock::default();
    let wait = |off: usize, mask: u32, want: u32| {
        assert!(poll_until(&clock, Duration::from_secs(1), || bar
            .read32(off)
            & mask
            == want))
    };
    // §4.6.3 (abridged: the model was just powered on)
    pci.config_write16(4, 0x0406).unwrap();
    std::thread::sleep(Duration::from_millis(11));
    wait(0x10010, 1 << 9, 1 << 9);
    wait(0x02F00, 1 << 3, 1 << 3);
    bar.write32(0x02F00, bar.read32(0x02F00) | 2);
    // one ring for RX queue 0 and TX queue 0, like TinyNF
    let rx_ring = dma.allocate(RING * 16, true).unwrap();
    let tx_ring = dma.allocate(RING * 16, true).unwrap();
    let bufs = dma.allocate(RING * 2048, true).unwrap();
    for i in 0..RING {
        rx_ring.write_u64(i * 16, bufs.device_addr_at(i * 2048));
        tx_ring.write_u64(i * 16, bufs.device_addr_at(i * 2048));
    }
    let (ra, ta) = (rx_ring.device_addr(), tx_ring.device_addr());
    bar.write32(0x01000, ra as u32);
    bar.write32(0x01004, (ra >> 32) as u32);
    bar.write32(0x01008, (RING * 16) as u32);
    bar.write32(0x01014, 2 | (1 << 28));
    bar.write32(0x01028, 1 << 25);
    wait(0x01028, 1 << 25, 1 << 25);
    bar.write32(0x01018, (RING - 1) as u32);
    bar.write32(0x08D00, 2);
    wait(0x08D04, 1, 1);
    bar.write32(0x03000, 1);
    bar.write32(0x08D00, 0);
    bar.write32(0x06000, ta as u32);
    bar.write32(0x06004, (ta >> 32) as u32);
    bar.write32(0x06008, (RING * 16) as u32);
    bar.write32(0x04A80, 1);
    bar.write32(0x06028, 1 << 25);
    wait(0x06028, 1 << 25, 1 << 25);
    while bar.read32(0x042A4) & (1 << 30) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let sink = nic.wire().attach_sink();
    let running = nic.spawn();

    // one thread generates and forwards; the device runs on its own
    let wire = nic.wire();
    let mut g = TrafficGen::udp_flows([0x02, 0, 0, 0, 0, 1], 64, 60);
    let mut offered = 0u64;
    let start = Instant::now();
    let mut next = 0usize;
    let mut forwarded = 0u64;
    let deadline = start + Duration::from_secs(120);
    while (forwarded + nic.counters().rx_missed < total || sink.frames() < forwarded)
        && Instant::now() < deadline
    {
        if offered < total && wire.rx_pending() < 256 {
            for _ in 0..32 {
                wire.inject(g.next_frame());
            }
            offered += 32;
        }
        let mut batch = 0;
        while batch < 32 {
            let q1 = rx_ring.read_u64(next * 16 + 8);
            if q1 & (1 << 32) == 0 {
                break;
            }
            let len = q1 & 0xFFFF;
            tx_ring.write_u64(next * 16 + 8, len | (1 << 24) | (1 << 25));
            rx_ring.write_u64(next * 16 + 8, 0);
            next = (next + 1) % RING;
            batch += 1;
        }
        if batch > 0 {
            forwarded += batch as u64;
            bar.write32(0x06018, next as u32);
        }
        // recycle: buffers the TX head passed go back to RX
        let head = bar.read32(0x06010) as usize;
        bar.write32(0x01018, ((head + RING - 1) % RING) as u32);
        if batch == 0 {
            std::thread::yield_now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    running.stop();
    let c = nic.counters();
    println!(
        "forwarded {forwarded} of {total} frames in {secs:.2} s: {:.2} Mpps (sink {}, missed {}, violations {})",
        forwarded as f64 / secs / 1e6,
        sink.frames(),
        c.rx_missed,
        nic.violation_count()
    );
}
