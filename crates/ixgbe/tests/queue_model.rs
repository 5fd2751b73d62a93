//! The queue model (ixy/DPDK style) against the 82599 model: byte-exact,
//! in-order forwarding of random-size frames, exact drop accounting under
//! overload, RX errors counted, RSS, and every buffer back in its pool.
//!
//! Packet counts are moderate in debug builds. The free-running
//! forwarding tests (here and in `agent_model.rs`) take their count from
//! `NFKIT_PACKETS`, or run 10 million packets with `NFKIT_LONG=1`:
//! `NFKIT_LONG=1 cargo test --release -p nfkit-ixgbe free_running`.

mod common;

use common::{assert_no_violations, frame, len_of, model, packet_count, seq_of, Bench, Mode};
use nfkit_hw::{Batch, Mempool};
use nfkit_ixgbe::{DeviceConfig, RxQueue, TxQueue};
use nfkit_ixgbe_model::{Faults, ModelConfig, Nic82599, SimBar, TrafficGen};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RING: usize = 512;

struct Forwarder {
    rx: RxQueue<SimBar>,
    tx: TxQueue<SimBar>,
    batch: Batch,
}

impl Forwarder {
    /// Receive a batch and send everything that fits; what does not fit
    /// waits in the batch for the next call (order is kept, nothing lost).
    fn poll(&mut self) -> usize {
        let n = self.rx.rx_batch(&mut self.batch);
        self.tx.tx_batch(&mut self.batch);
        n
    }
}

fn forwarder(
    bench: &Bench,
    nic: &Nic82599,
    pool: &Mempool,
) -> (nfkit_ixgbe::Device<SimBar>, Forwarder) {
    let dev = bench.init(nic, DeviceConfig::default()).expect("init");
    let fwd = Forwarder {
        rx: dev.rx_queue(0, pool, RING).unwrap(),
        tx: dev.tx_queue(0, pool, RING).unwrap(),
        batch: Batch::new(),
    };
    (dev, fwd)
}

/// Checks transmitted frames against the injected ones, in order.
struct Expect {
    pending: VecDeque<Vec<u8>>,
    seen: u64,
}

impl Expect {
    fn check(&mut self, got: &[u8]) {
        let want = self.pending.pop_front().expect("a frame nobody sent");
        assert_eq!(seq_of(got), seq_of(&want), "order");
        assert!(got == &want[..], "frame {} differs", seq_of(&want));
        self.seen += 1;
    }
}

#[test]
fn lock_step_forwarding_is_byte_exact_and_in_order() {
    lock_step_forward(20_000, Faults::default());
}

#[test]
fn lock_step_forwarding_with_delayed_write_back() {
    lock_step_forward(
        5_000,
        Faults {
            writeback_delay: 4,
            ..Faults::default()
        },
    );
}

fn lock_step_forward(total: u64, faults: Faults) {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(ModelConfig { faults, ..model(1) });
    let pool = Mempool::new(&*bench.dma, "fwd", 2048, 4096).unwrap();
    let (_dev, mut fwd) = forwarder(&bench, &nic, &pool);
    let wire = nic.wire();
    let mut expect = Expect {
        pending: VecDeque::new(),
        seen: 0,
    };
    let mut seq = 0;
    while expect.seen < total {
        while seq < total && expect.pending.len() < 200 {
            let f = frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 1));
            assert!(wire.inject(&f));
            expect.pending.push_back(f);
            seq += 1;
        }
        nic.step();
        fwd.poll();
        nic.step();
        wire.drain_transmitted(|f| expect.check(f));
    }
    assert_eq!(fwd.rx.counters().packets, total);
    assert_eq!(fwd.tx.counters().packets, total);
    drop(fwd);
    assert_eq!(
        pool.free_count(),
        pool.capacity(),
        "every buffer back in the pool"
    );
    assert_no_violations(&nic);
}

#[test]
fn free_running_forwarding_without_loss() {
    let total: u64 = packet_count(30_000);
    let mut bench = Bench::new(Mode::FreeRunning);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "fwd", 4096, 4096).unwrap();
    let (dev, fwd) = forwarder(&bench, &nic, &pool);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        let mut fwd = fwd;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if fwd.poll() == 0 {
                    std::thread::yield_now();
                }
            }
            fwd
        })
    };
    let wire = nic.wire();
    let mut expect = Expect {
        pending: VecDeque::new(),
        seen: 0,
    };
    // The sink (this thread) keeps up: at most a window of frames is in
    // flight, well below what the ring holds, so nothing may be lost.
    let window = 256;
    let mut seq = 0;
    let deadline = Instant::now() + Duration::from_secs(120 + total / 5_000);
    while expect.seen < total {
        assert!(
            Instant::now() < deadline,
            "stalled at {} of {total}",
            expect.seen
        );
        while seq < total && expect.pending.len() < window {
            let f = frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 2));
            assert!(
                wire.inject(&f),
                "frame {seq} refused although the sink keeps up"
            );
            expect.pending.push_back(f);
            seq += 1;
        }
        wire.drain_transmitted(|f| expect.check(f));
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let fwd = worker.join().unwrap();
    assert_eq!(dev.stats().rx_dropped(), 0);
    assert_eq!(fwd.rx.counters().packets, total);
    drop(fwd);
    bench.stop();
    assert_eq!(pool.free_count(), pool.capacity());
    assert_no_violations(&nic);
}

#[test]
fn free_running_overload_drops_are_counted_exactly() {
    let burst: u64 = 6_000; // more than the packet buffer (4096 frames) and the ring
    let mut bench = Bench::new(Mode::FreeRunning);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "fwd", 2048, 4096).unwrap();
    let (dev, mut fwd) = forwarder(&bench, &nic, &pool);
    let wire = nic.wire();
    // The forwarder is not running: the sink does not keep up.
    let frames: Vec<Vec<u8>> = (0..burst)
        .map(|s| frame([2, 0, 0, 0, 0, 1], s, len_of(s, 3)))
        .collect();
    // Frames the packet buffer cannot take are refused at once (MPC);
    // frames that find no free descriptor are dropped later (QPRDC).
    let refused = frames.iter().filter(|f| !wire.inject(f)).count() as u64;
    // Now forward until the device has nothing left.
    let mut delivered = Vec::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(300) {
        if fwd.poll() > 0 {
            quiet_since = Instant::now();
        }
        wire.drain_transmitted(|f| delivered.push(f.to_vec()));
    }
    let stats = dev.stats();
    assert!(
        stats.rx_dropped() >= refused && stats.rx_dropped() > 0,
        "{stats:?}"
    );
    assert_eq!(
        delivered.len() as u64 + stats.rx_dropped(),
        burst,
        "delivered {} + dropped {:?} must account for all {burst}",
        delivered.len(),
        stats
    );
    // what was delivered is an in-order, byte-exact subsequence
    let mut last = None;
    for f in &delivered {
        let s = seq_of(f);
        assert!(last.is_none_or(|l| s > l), "out of order at {s}");
        assert!(f == &frames[s as usize], "frame {s} differs");
        last = Some(s);
    }
    drop(fwd);
    bench.stop();
    assert_eq!(pool.free_count(), pool.capacity());
    assert_no_violations(&nic);
}

#[test]
fn rx_errors_are_dropped_and_counted() {
    let total: u64 = 700;
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(ModelConfig {
        faults: Faults {
            rx_error_every: Some(7),
            ..Faults::default()
        },
        ..model(1)
    });
    let pool = Mempool::new(&*bench.dma, "err", 2048, 4096).unwrap();
    let (_dev, mut fwd) = forwarder(&bench, &nic, &pool);
    let wire = nic.wire();
    let mut delivered = Vec::new();
    for seq in 0..total {
        assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 4))));
        if seq % 50 == 49 {
            nic.step();
            fwd.poll();
            nic.step();
        }
    }
    for _ in 0..4 {
        nic.step();
        fwd.poll();
        nic.step();
    }
    wire.drain_transmitted(|f| delivered.push(seq_of(f)));
    let errors = nic.counters().rx_errors_injected;
    assert_eq!(errors, total / 7);
    assert_eq!(
        fwd.rx.counters().errors,
        errors,
        "each flagged frame is counted"
    );
    assert_eq!(
        delivered.len() as u64 + errors,
        total,
        "and none is delivered"
    );
    assert!(delivered.windows(2).all(|w| w[0] < w[1]));
    assert_no_violations(&nic);
}

#[test]
fn rss_spreads_flows_over_queues() {
    let queues = 4;
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let dev = bench
        .init(
            &nic,
            DeviceConfig {
                rx_queues: queues,
                tx_queues: queues,
                ..DeviceConfig::default()
            },
        )
        .unwrap();
    let pool = Mempool::new(&*bench.dma, "rss", 4096, 4096).unwrap();
    let mut rx: Vec<_> = (0..queues)
        .map(|q| dev.rx_queue(q, &pool, 256).unwrap())
        .collect();
    let mut gen = TrafficGen::udp_flows(dev.mac(), 64, 200);
    let injected = gen.inject(&nic.wire(), 640);
    assert_eq!(injected, 640);
    nic.step();
    let mut per_queue = vec![0usize; queues];
    let mut flow_queue = std::collections::HashMap::new();
    let mut batch = Batch::new();
    for (q, r) in rx.iter_mut().enumerate() {
        loop {
            let n = r.rx_batch(&mut batch);
            if n == 0 {
                break;
            }
            for p in batch.drain() {
                let sport = u16::from_be_bytes([p.data()[34], p.data()[35]]);
                assert_eq!(
                    *flow_queue.entry(sport).or_insert(q),
                    q,
                    "a flow stays on one queue"
                );
                per_queue[q] += 1;
            }
        }
    }
    assert_eq!(per_queue.iter().sum::<usize>(), 640);
    assert!(
        per_queue.iter().all(|&n| n > 0),
        "every queue gets flows: {per_queue:?}"
    );
    let stats = dev.stats();
    assert_eq!(stats.rx_packets, 640);
    for (q, &n) in per_queue.iter().enumerate() {
        assert_eq!(stats.queues[q].rx_packets, n as u64, "QPRC of queue {q}");
    }
    assert_no_violations(&nic);
}

/// A network function that keeps packets across batches, releases them in
/// reverse order, and generates new packets from the pool. Everything it
/// sends is recorded and must appear on the wire exactly, in order.
#[test]
fn kept_reordered_and_generated_packets_and_no_leak() {
    let total: u64 = 8_000;
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "nf", 2048, 4096).unwrap();
    let gen_pool = Mempool::new(&*bench.dma, "gen", 256, 2048).unwrap();
    let (_dev, mut fwd) = forwarder(&bench, &nic, &pool);
    let wire = nic.wire();
    let mut kept: Vec<nfkit_hw::PktBuf> = Vec::new();
    let mut out = Batch::new();
    let mut sent: VecDeque<Vec<u8>> = VecDeque::new();
    let mut inbound = Batch::new();
    let mut generated = 0u64;
    let mut seq = 0;
    let mut seen = 0;
    let mut rounds = 0;
    while seq < total || !kept.is_empty() || !out.is_empty() || !sent.is_empty() {
        rounds += 1;
        assert!(rounds < 1_000_000, "no progress");
        for _ in 0..32 {
            if seq < total {
                assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 5))));
                seq += 1;
            }
        }
        nic.step();
        fwd.rx.rx_batch(&mut inbound);
        for p in inbound.drain() {
            kept.push(p);
        }
        // release kept packets in reverse order once enough piled up (or at the end)
        if kept.len() >= 48 || seq >= total {
            while out.room() > 1 {
                let Some(p) = kept.pop() else { break };
                out.push(p);
                // one generated packet after every 5th forwarded one
                if seen % 5 == 0 {
                    if let Some(mut g) = gen_pool.alloc() {
                        g.copy_from(&frame(
                            [2, 0, 0, 0, 0, 9],
                            1_000_000 + generated,
                            64 + (generated % 900) as usize,
                        ))
                        .unwrap();
                        generated += 1;
                        out.push(g);
                    }
                }
                seen += 1;
            }
        }
        let before: Vec<Vec<u8>> = out.iter().map(|p| p.data().to_vec()).collect();
        let n = fwd.tx.tx_batch(&mut out);
        sent.extend(before.into_iter().take(n));
        nic.step();
        wire.drain_transmitted(|f| {
            let want = sent.pop_front().expect("unexpected frame");
            assert!(f == &want[..], "frame {} differs", seq_of(f));
        });
    }
    assert!(generated > 0);
    assert_eq!(fwd.rx.counters().packets, total);
    drop(fwd);
    assert_eq!(
        pool.free_count(),
        pool.capacity(),
        "receive pool: every buffer back"
    );
    assert_eq!(
        gen_pool.free_count(),
        gen_pool.capacity(),
        "generator pool: every buffer back"
    );
    assert_no_violations(&nic);
}

#[test]
fn empty_packets_are_dropped_and_counted_and_the_rest_sent_in_order() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "tx", 2048, 4096).unwrap();
    let (_dev, mut fwd) = forwarder(&bench, &nic, &pool);
    let wire = nic.wire();
    let mut sent: VecDeque<Vec<u8>> = VecDeque::new();
    let mut seq = 0;
    // 40 batches of 17 frames and 3 empty packets: the ring wraps.
    for _ in 0..40 {
        for k in 0..20 {
            let mut p = pool.alloc().unwrap();
            if k % 7 != 3 {
                let f = frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 3));
                p.copy_from(&f).unwrap();
                sent.push_back(f);
                seq += 1;
            }
            assert!(fwd.batch.push(p).is_none());
        }
        assert_eq!(fwd.tx.tx_batch(&mut fwd.batch), 17);
        assert!(fwd.batch.is_empty(), "sent or dropped, none left");
        nic.step();
        wire.drain_transmitted(|f| {
            let want = sent.pop_front().expect("a frame nobody sent");
            assert!(
                f == &want[..],
                "frame {} differs or out of order",
                seq_of(f)
            );
        });
    }
    assert!(sent.is_empty());
    let c = fwd.tx.counters();
    assert_eq!((c.packets, c.errors), (40 * 17, 40 * 3));
    drop(fwd);
    assert_eq!(pool.free_count(), pool.capacity(), "every buffer back");
    assert_no_violations(&nic);
}

#[test]
fn small_pool_buffers_are_refused_with_a_fix() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let dev = bench.init(&nic, DeviceConfig::default()).unwrap();
    let pool = Mempool::new(&*bench.dma, "small", 1024, 2048).unwrap();
    let err = dev.rx_queue(0, &pool, RING).err().unwrap();
    assert!(err.to_string().contains("4096"), "{err}");
}

/// A pool too small for a receive ring and the queues' caches is refused
/// at set-up, naming the smallest pool that works (512 + 4 x 64 = 768).
#[test]
fn a_pool_too_small_for_the_ring_and_caches_is_refused_naming_the_minimum() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let dev = bench.init(&nic, DeviceConfig::default()).unwrap();
    let pool = Mempool::new(&*bench.dma, "tight", 700, 4096).unwrap();
    let err = dev.rx_queue(0, &pool, RING).err().unwrap();
    assert!(err.to_string().contains("at least 768"), "{err}");
    let pool = Mempool::new(&*bench.dma, "enough", 768, 4096).unwrap();
    assert!(dev.rx_queue(0, &pool, RING).is_ok());
}
