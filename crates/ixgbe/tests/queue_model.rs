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

/// Issue 14 item 8: the receive byte counter must count what the packets
/// hold, not the length a device claims. A descriptor length beyond the
/// buffer is a counted error (no packet, no bytes); one within it gives
/// a packet of that length, and the counter says the same.
#[test]
fn rx_byte_counter_counts_what_the_packets_hold() {
    for (excess, delivered_frames) in [(4000u16, false), (20, true)] {
        let mut bench = Bench::new(Mode::LockStep);
        let nic = bench.nic(ModelConfig {
            faults: Faults {
                rx_length_excess: excess,
                ..Faults::default()
            },
            ..model(1)
        });
        let pool = Mempool::new(&*bench.dma, "len", 2048, 4096).unwrap();
        let dev = bench.init(&nic, DeviceConfig::default()).expect("init");
        let mut rx = dev.rx_queue(0, &pool, RING).unwrap();
        let wire = nic.wire();
        let total = 40u64;
        for seq in 0..total {
            assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], seq, 100)));
        }
        let mut batch = Batch::new();
        let mut held = 0u64;
        let mut got = 0;
        for _ in 0..8 {
            nic.step();
            rx.rx_batch(&mut batch);
            for p in batch.drain() {
                held += p.len() as u64;
                got += 1;
            }
        }
        let c = rx.counters();
        assert_eq!(c.bytes, held, "excess {excess}: counted bytes = bytes held");
        if delivered_frames {
            assert_eq!((got, c.errors), (total, 0));
            assert_eq!(held, total * (100 + u64::from(excess)));
        } else {
            assert_eq!(
                (got, c.errors),
                (0, total),
                "overlong lengths are counted errors"
            );
        }
    }
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

// ------------------------------------------------------------ interrupts
// MSI-X per queue (§7.3) through the model: the model signals the
// vector's eventfd as VFIO would.

/// Whether the eventfd `fd` has a signal pending (no wait, not consumed).
fn signalled(fd: std::os::fd::RawFd) -> bool {
    nfkit_port::idle::readable_now(fd)
}

fn with_interrupts(
    bench: &Bench,
    nic: &Nic82599,
    pool: &Mempool,
    interval: Duration,
) -> (
    nfkit_ixgbe::Device<SimBar>,
    RxQueue<SimBar>,
    nfkit_ixgbe::Interrupts<SimBar>,
) {
    let cfg = DeviceConfig {
        interrupt_interval: interval,
        ..DeviceConfig::default()
    };
    let dev = bench.init(nic, cfg).expect("init");
    let rx = dev.rx_queue(0, pool, RING).unwrap();
    let irq = dev
        .enable_interrupts(&nic.pci())
        .expect("MSI-X in the model");
    (dev, rx, irq)
}

#[test]
fn an_armed_queue_interrupts_and_a_masked_one_does_not() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "irq", 2048, 4096).unwrap();
    let (_dev, mut rx, irq) = with_interrupts(&bench, &nic, &pool, Duration::from_micros(50));
    let q = irq.queues[0].as_ref().unwrap();
    let wire = nic.wire();
    let mut batch = Batch::new();
    // polling: the vector is masked, a packet raises nothing
    assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 0, 64)));
    nic.step();
    assert!(!signalled(q.fd()), "a masked vector fired");
    assert_eq!(rx.rx_batch(&mut batch), 1);
    batch.clear();
    // armed: the stale cause of that packet is cleared, so nothing fires...
    assert!(q.arm());
    nic.step();
    assert!(!signalled(q.fd()), "the stale cause fired on arming");
    // ...until a packet arrives after the arm
    bench
        .vclock
        .as_ref()
        .unwrap()
        .advance(Duration::from_millis(1));
    assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 1, 64)));
    nic.step();
    assert!(
        signalled(q.fd()),
        "a packet after the arm did not interrupt"
    );
    assert_eq!(
        rx.rx_batch(&mut batch),
        1,
        "the interrupt came before its descriptor"
    );
    batch.clear();
    // auto-mask (EIAM): one message per arm, however many packets follow
    bench
        .vclock
        .as_ref()
        .unwrap()
        .advance(Duration::from_millis(1));
    assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 2, 64)));
    nic.step();
    assert_eq!(nic.irq_counters().delivered[q.vector()], 1);
    q.disarm();
    assert_eq!(rx.rx_batch(&mut batch), 1);
    assert_no_violations(&nic);
}

#[test]
fn eitr_limits_the_interrupt_rate() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "irq", 2048, 4096).unwrap();
    let interval = Duration::from_micros(100);
    let (_dev, mut rx, irq) = with_interrupts(&bench, &nic, &pool, interval);
    let q = irq.queues[0].as_ref().unwrap();
    let clock = bench.vclock.clone().unwrap();
    let wire = nic.wire();
    let mut batch = Batch::new();
    let delivered = || nic.irq_counters().delivered[q.vector()];
    // the first message goes at once
    assert!(q.arm());
    assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 0, 64)));
    nic.step();
    assert_eq!(delivered(), 1);
    rx.rx_batch(&mut batch);
    // re-armed at once: the next packet waits out the interval
    assert!(q.arm());
    assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 1, 64)));
    nic.step();
    assert_eq!(delivered(), 1, "a second message inside the EITR interval");
    assert!(!signalled(q.fd()));
    clock.advance(interval / 2);
    assert_eq!(delivered(), 1);
    clock.advance(interval / 2);
    assert_eq!(
        delivered(),
        2,
        "the throttled message did not follow the interval"
    );
    assert!(signalled(q.fd()));
    assert!(nic.irq_counters().throttled >= 1);
    // a steady stream re-armed after every packet: at most one message
    // per interval
    let start = delivered();
    for i in 0..100 {
        assert!(q.arm());
        assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 2 + i, 64)));
        nic.step();
        rx.rx_batch(&mut batch);
        batch.clear();
        clock.advance(Duration::from_micros(10));
    }
    let sent = delivered() - start;
    // 1000 µs of device time at a 100 µs interval
    assert!((9..=11).contains(&sent), "{sent} messages in 1 ms");
    assert_no_violations(&nic);
}

#[test]
fn a_link_change_raises_lsc() {
    use nfkit_hw::{Bar, PciFunction};
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let pool = Mempool::new(&*bench.dma, "irq", 2048, 4096).unwrap();
    let (dev, _rx, irq) = with_interrupts(&bench, &nic, &pool, Duration::from_micros(50));
    let clock = bench.vclock.clone().unwrap();
    assert!(!signalled(irq.link.fd()), "LSC before any change");
    // restart auto-negotiation (AUTOC.RESTART_AN, §8.2.3.22.19): the link
    // drops, then comes back
    let bar = nic.pci().map_bar(0).unwrap();
    bar.write32(0x042A0, bar.read32(0x042A0) | 1 << 12);
    clock.advance(Duration::from_micros(1));
    assert!(!dev.link().up);
    assert!(signalled(irq.link.fd()), "no LSC on link down");
    assert_eq!(irq.link.ack(), 1);
    clock.advance(Duration::from_millis(20));
    assert!(dev.link().up);
    assert!(signalled(irq.link.fd()), "no LSC on link up");
    assert_eq!(irq.link.ack(), 1);
    assert_no_violations(&nic);
}

/// The hybrid loop of `nfkit_port::idle` over an 82599 port: idle, it
/// arms the queue's vector and sleeps in poll(2); a packet that arrives
/// later wakes it through the model's MSI-X eventfd, long before the
/// sleep bound.
#[test]
fn an_idle_port_sleeps_and_the_next_packet_wakes_it() {
    use nfkit_port::{Idle, IdleOptions, Port};
    let mut bench = Bench::new(Mode::FreeRunning);
    let nic = bench.nic(model(1));
    let dev = bench.init(&nic, DeviceConfig::default()).expect("init");
    let mut port = nfkit_ixgbe::IxgbePort::new("sim:0", dev, &*bench.dma).unwrap();
    assert!(port.enable_interrupts(&nic.pci()).unwrap());
    let max_sleep = Duration::from_secs(5);
    let mut idle = Idle::new(IdleOptions {
        sleep_after: Some(Duration::from_micros(200)),
        max_sleep,
    });
    let wire = nic.wire();
    let sent = Arc::new(AtomicBool::new(false));
    let s = sent.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        s.store(true, Ordering::Release);
        assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 0, 64)));
        Instant::now()
    });
    let start = Instant::now();
    let mut batch = Batch::new();
    let mut got = 0;
    let mut received_at = None;
    while got == 0 && start.elapsed() < Duration::from_secs(20) {
        let n = port.rx_batch(0, &mut batch);
        batch.clear();
        got += n;
        if n > 0 {
            received_at = Some(Instant::now());
        }
        if idle.round(n > 0) {
            let mut found = 0;
            idle.sleep(&mut [&mut port as &mut dyn Port], None, |ports| {
                let n = ports[0].rx_batch(0, &mut batch);
                batch.clear();
                found += n;
                n > 0
            });
            if found > 0 {
                got += found;
                received_at = Some(Instant::now());
            }
        }
    }
    let injected_at = sender.join().unwrap();
    assert_eq!(got, 1);
    let times = idle.times(start.elapsed());
    assert!(times.woken >= 1, "never woken by the interrupt: {times:?}");
    assert_eq!(times.timeouts, 0, "slept to the bound: {times:?}");
    let latency = received_at.unwrap().saturating_duration_since(injected_at);
    eprintln!(
        "{} ({} sleeps, {} woken, {} timeouts); first packet after idle received {latency:?} after its injection",
        times.line("82599 sim queue 0"),
        times.sleeps,
        times.woken,
        times.timeouts
    );
    assert!(latency < max_sleep / 2, "woken after {latency:?}");
    assert!(
        times.asleep >= Duration::from_millis(200),
        "asleep only {:?} of an idle 300 ms",
        times.asleep
    );
    drop(port);
    bench.stop();
    assert_no_violations(&nic);
}

/// A free-running port with interrupts on a model with `fault`, driven
/// by the hybrid loop (sleep after 200 µs idle, at most `max_sleep`)
/// until `done` says so or 10 s pass; a frame is injected after 100 ms.
/// Returns the frames received, the loop's times and how long the frame
/// took from injection to receipt.
fn hybrid_on_faulty_irq(
    fault: nfkit_ixgbe_model::IrqFault,
    max_sleep: Duration,
    done: impl Fn(usize, &nfkit_port::IdleTimes) -> bool,
) -> (usize, nfkit_port::IdleTimes, Duration) {
    use nfkit_port::{Idle, IdleOptions, Port};
    let mut bench = Bench::new(Mode::FreeRunning);
    let nic = bench.nic(ModelConfig {
        faults: Faults {
            irq: fault,
            ..Faults::default()
        },
        ..model(1)
    });
    let dev = bench.init(&nic, DeviceConfig::default()).expect("init");
    let mut port = nfkit_ixgbe::IxgbePort::new("sim:0", dev, &*bench.dma).unwrap();
    assert!(port.enable_interrupts(&nic.pci()).unwrap());
    let mut idle = Idle::new(IdleOptions {
        sleep_after: Some(Duration::from_micros(200)),
        max_sleep,
    });
    let wire = nic.wire();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        assert!(wire.inject(&frame([2, 0, 0, 0, 0, 1], 0, 64)));
        Instant::now()
    });
    let start = Instant::now();
    let mut batch = Batch::new();
    let (mut got, mut at) = (0, None);
    while !done(got, &idle.times(start.elapsed())) && start.elapsed() < Duration::from_secs(10) {
        let n = port.rx_batch(0, &mut batch);
        batch.clear();
        if idle.round(n > 0) {
            idle.sleep(&mut [&mut port as &mut dyn Port], None, |ports| {
                let n = ports[0].rx_batch(0, &mut batch);
                batch.clear();
                got += n;
                n > 0
            });
        }
        got += n;
        if got > 0 && at.is_none() {
            at = Some(Instant::now());
        }
    }
    let injected = sender.join().unwrap();
    let times = idle.times(start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the loop hung: {times:?}"
    );
    drop(port);
    bench.stop();
    let latency = at.map_or(Duration::MAX, |a| a.saturating_duration_since(injected));
    (got, times, latency)
}

/// Bad input: a device that raises no interrupt. The loop's sleeps end
/// on their bound, the frame is delivered then and counted as a late
/// wake-up (logged once): never a hang.
#[test]
fn a_device_that_raises_no_interrupt_is_served_by_the_sleep_bound() {
    let bound = Duration::from_millis(30);
    let (got, times, latency) =
        hybrid_on_faulty_irq(nfkit_ixgbe_model::IrqFault::Silent, bound, |got, _| got > 0);
    eprintln!(
        "{} late {}, latency {latency:?}",
        times.summary(),
        times.late
    );
    assert_eq!(got, 1);
    assert_eq!(times.woken, 0, "a silent device woke the loop: {times:?}");
    // found after a timer wake-up (late), or, rarely, by the re-check of
    // a sleep that was about to start when the frame came
    assert!(
        times.late + times.rechecks >= 1,
        "the late delivery was not counted: {times:?}"
    );
    assert!(times.timeouts >= 1, "{times:?}");
    assert!(latency < Duration::from_secs(2), "{latency:?}");
}

/// Bad input: an interrupt that never stops. After [`STORM_WAKES`]
/// wake-ups with nothing to receive the loop stops sleeping on that
/// vector (counted, logged) and polls honestly; the frame still arrives.
#[test]
fn an_interrupt_that_never_stops_is_polled_instead() {
    let (got, times, _) = hybrid_on_faulty_irq(
        nfkit_ixgbe_model::IrqFault::Storm,
        Duration::from_secs(5),
        |got, t| got > 0 && t.fallbacks > 0,
    );
    eprintln!(
        "{} spurious {}, fallbacks {}",
        times.summary(),
        times.spurious,
        times.fallbacks
    );
    assert_eq!(got, 1);
    assert_eq!(times.fallbacks, 1, "{times:?}");
    assert!(
        times.spurious >= u64::from(nfkit_port::idle::STORM_WAKES),
        "{times:?}"
    );
}

/// Large frames and offloads (issues 15, 18, 19): chains over several
/// descriptors, context descriptors, checksum insertion and TSO, against
/// the strict model in lock step.
mod large_and_offload {
    use super::*;
    use nfkit_hw::pool::offload::{self as f, Gso, Offload, L3, L4};
    use nfkit_packet::checksum::{checksum, l4_checksum};
    use nfkit_packet::FrameBuilder;
    use std::net::Ipv4Addr;

    fn jumbo_config() -> DeviceConfig {
        DeviceConfig {
            max_frame: 9018,
            rx_checksum: true,
            ..DeviceConfig::default()
        }
    }

    fn tcp(payload: usize, salt: u8) -> Vec<u8> {
        let data: Vec<u8> = (0..payload).map(|i| (i as u8) ^ salt).collect();
        let (a, z) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut fr = FrameBuilder::tcp((a, 1000), (z, 2000))
            .payload(&data)
            .build();
        fr[47] = 0x19; // ACK, PSH, FIN
        fr[50..52].fill(0);
        let (src, dst) = (
            fr[26..30].try_into().unwrap(),
            fr[30..34].try_into().unwrap(),
        );
        let c = l4_checksum(src, dst, 6, &fr[34..]);
        fr[50..52].copy_from_slice(&c.to_be_bytes());
        fr
    }

    fn tcp_offload(gso: bool) -> Offload {
        Offload {
            flags: f::IP_CSUM | f::L4_CSUM,
            l3: L3::Ipv4,
            l4: L4::Tcp,
            l2_len: 14,
            l3_len: 20,
            l4_len: 20,
            gso: if gso { Gso::Tcp } else { Gso::None },
            gso_size: if gso { 1448 } else { 0 },
            ..Offload::default()
        }
    }

    /// The IPv4 and TCP checksums of a frame verify.
    fn checksums_verify(fr: &[u8]) -> bool {
        let total = usize::from(u16::from_be_bytes([fr[16], fr[17]]));
        let src = fr[26..30].try_into().unwrap();
        let dst = fr[30..34].try_into().unwrap();
        checksum(&fr[14..34]) == 0 && l4_checksum(src, dst, 6, &fr[34..14 + total]) == 0
    }

    /// A 64 KB TSO send, a 9,000-byte chain without offload and a
    /// checksum-only frame, many times over (the ring wraps, groups mix
    /// single descriptors, contexts, segments and null fillers): every
    /// segment's headers replicated and updated, checksums right, the
    /// payload whole and in order; every buffer back; no rule broken.
    #[test]
    fn tso_chains_and_checksums_lock_step() {
        let mut bench = Bench::new(Mode::LockStep);
        let nic = bench.nic(model(1));
        let pool = Mempool::new(&*bench.dma, "tso", 2048, 4096).unwrap();
        let dev = bench.init(&nic, jumbo_config()).expect("init");
        let mut tx = dev.tx_queue(0, &pool, RING).unwrap();
        let wire = nic.wire();
        let payload = 64 * 1024 - 54;
        let mut batch = Batch::new();
        for round in 0..12u8 {
            let big = tcp(payload, round);
            let mut p = pool.alloc_frame(&big).unwrap();
            assert!(p.nb_segs() > 16);
            p.set_offload(tcp_offload(true));
            batch.push(p);
            let jumbo = frame([2, 0, 0, 0, 0, 1], u64::from(round), 60);
            let mut jumbo_bytes = jumbo.clone();
            jumbo_bytes.resize(9000, round);
            batch.push(pool.alloc_frame(&jumbo_bytes).unwrap());
            let mut small = pool.alloc_frame(&tcp(300, round)).unwrap();
            small.set_offload(tcp_offload(false));
            batch.push(small);
            for k in 0..5 {
                let pf = frame([2, 0, 0, 0, 0, 1], 1000 + k, 200);
                batch.push(pool.alloc_frame(&pf).unwrap());
            }
            assert_eq!(tx.tx_batch(&mut batch), 8);
            nic.step();
            let mut got = Vec::new();
            wire.drain_transmitted(|fr| got.push(fr.to_vec()));
            let segs = payload.div_ceil(1448);
            assert_eq!(got.len(), segs + 2 + 5, "round {round}");
            let mut data = Vec::new();
            for (k, s) in got[..segs].iter().enumerate() {
                assert!(s.len() <= 54 + 1448);
                assert!(checksums_verify(s), "segment {k} checksums");
                let seq = u32::from_be_bytes(s[38..42].try_into().unwrap());
                assert_eq!(seq, 1 + (k * 1448) as u32);
                let id = u16::from_be_bytes([s[18], s[19]]);
                assert_eq!(
                    id,
                    u16::from_be_bytes([big[18], big[19]]).wrapping_add(k as u16)
                );
                let last = k + 1 == segs;
                assert_eq!(
                    s[47],
                    if last { 0x19 } else { 0x10 },
                    "FIN/PSH on the last only"
                );
                assert_eq!(s[..14], big[..14]);
                data.extend_from_slice(&s[54..]);
            }
            assert!(data == big[54..], "payload whole and in order");
            assert!(got[segs] == jumbo_bytes, "the chain sent byte-exact");
            assert!(checksums_verify(&got[segs + 1]));
        }
        let c = tx.counters();
        assert_eq!((c.packets, c.errors), (12 * 8, 0));
        drop(tx);
        assert_eq!(pool.free_count(), pool.capacity(), "every buffer back");
        assert_no_violations(&nic);
    }

    /// Jumbo frames arrive over several descriptors as one chain with the
    /// device's checksum verdicts; forwarded, they leave byte-exact.
    #[test]
    fn jumbo_frames_are_received_as_chains_with_verdicts() {
        let mut bench = Bench::new(Mode::LockStep);
        let nic = bench.nic(model(1));
        let pool = Mempool::new(&*bench.dma, "jumbo", 2048, 4096).unwrap();
        let dev = bench.init(&nic, jumbo_config()).expect("init");
        let mut fwd = Forwarder {
            rx: dev.rx_queue(0, &pool, RING).unwrap(),
            tx: dev.tx_queue(0, &pool, RING).unwrap(),
            batch: Batch::new(),
        };
        let wire = nic.wire();
        let good = tcp(8900, 1);
        let mut bad = tcp(5000, 2);
        bad[60] ^= 0xFF;
        let small = tcp(100, 3);
        // one over the largest frame: the device drops it (ROC)
        let huge = tcp(9100, 4);
        for round in 0..40 {
            for fr in [&good, &bad, &small] {
                assert!(wire.inject(fr));
            }
            assert!(!wire.inject(&huge), "over MAXFRS.MFS: not received");
            nic.step();
            let n = fwd.rx.rx_batch(&mut fwd.batch);
            assert_eq!(n, 3, "round {round}");
            let p = fwd.batch.as_slice();
            assert_eq!((p[0].pkt_len(), p[0].nb_segs()), (good.len(), 3));
            let mut bytes = Vec::new();
            p[0].copy_frame_to(&mut bytes);
            assert!(bytes == good);
            let o = p[0].offload().unwrap();
            assert_eq!(o.flags, f::IP_CSUM_GOOD | f::L4_CSUM_GOOD);
            assert_eq!(
                p[1].offload().unwrap().flags,
                f::IP_CSUM_GOOD | f::L4_CSUM_BAD
            );
            assert!(!p[2].is_chained());
            fwd.tx.tx_batch(&mut fwd.batch);
            nic.step();
            let mut got = Vec::new();
            wire.drain_transmitted(|fr| got.push(fr.to_vec()));
            assert_eq!(got, vec![good.clone(), bad.clone(), small.clone()]);
        }
        assert_eq!(fwd.rx.counters().errors, 0);
        drop(fwd);
        assert_eq!(pool.free_count(), pool.capacity(), "every buffer back");
        assert_no_violations(&nic);
    }

    /// What the 82599 cannot carry is dropped and counted, and the rest
    /// goes out: a whole frame over the largest, a TSO send with a UDP
    /// segmentation request, a chain of more segments than a group.
    #[test]
    fn marked_packets_the_device_cannot_carry_are_counted() {
        let mut bench = Bench::new(Mode::LockStep);
        let nic = bench.nic(model(1));
        let pool = Mempool::new(&*bench.dma, "refuse", 2048, 4096).unwrap();
        let small_bufs = Mempool::new(&*bench.dma, "small", 256, 1024).unwrap();
        let dev = bench.init(&nic, DeviceConfig::default()).expect("init");
        let mut tx = dev.tx_queue(0, &pool, RING).unwrap();
        let mut batch = Batch::new();
        batch.push(pool.alloc_frame(&tcp(3000, 0)).unwrap());
        let mut uso = pool.alloc_frame(&tcp(3000, 0)).unwrap();
        uso.set_offload(Offload {
            gso: Gso::Udp,
            ..tcp_offload(true)
        });
        batch.push(uso);
        let mut long = small_bufs.alloc_frame(&tcp(40 * 896, 0)).unwrap();
        long.set_offload(tcp_offload(true));
        batch.push(long);
        batch.push(pool.alloc_frame(&tcp(100, 0)).unwrap());
        assert_eq!(tx.tx_batch(&mut batch), 1);
        assert_eq!(tx.counters().errors, 3);
        nic.step();
        let mut n = 0;
        nic.wire().drain_transmitted(|_| n += 1);
        assert_eq!(n, 1);
        assert_no_violations(&nic);
    }
}
