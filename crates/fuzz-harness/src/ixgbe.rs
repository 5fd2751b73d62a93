//! The 82599 driver (queue model) against a hostile device: the
//! simulated 82599 in lock-step, whose receive descriptor write-backs
//! (status bits, lengths, the whole 16 bytes) and transmit head
//! write-back are overwritten with the fuzzer's values between steps,
//! as a broken or malicious device could write them.

use std::sync::{Arc, Mutex, OnceLock};

use nfkit_hw::sim::{SimDma, VirtualClock};
use nfkit_hw::{Batch, Clock, Mempool};
use nfkit_ixgbe::{Device, DeviceConfig, RxQueue, TxQueue};
use nfkit_ixgbe_model::regs::off;
use nfkit_ixgbe_model::{ModelConfig, Nic82599, SimBar};

const RING: usize = 128;

/// Each 8-byte op: `[kind, index, a, b, v0, v1, v2, v3]`: write a receive
/// write-back (status/length word), write a whole receive descriptor
/// quadword, write the transmit head write-back, receive a batch and
/// send it, let the device run a step, or put a frame on the wire.
/// Received packets must fit their buffers; every buffer must come back.
pub fn ixgbe_hostile(data: &[u8]) {
    static NIC: OnceLock<Mutex<Option<Sim>>> = OnceLock::new();
    let mut guard = NIC
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // One device per process (init is the slow part); queues per input.
    let sim = guard.get_or_insert_with(Sim::new);
    let (rx, tx) = match (
        sim.dev.rx_queue(0, &sim.pool, RING),
        sim.dev.tx_queue(0, &sim.pool, RING),
    ) {
        (Ok(rx), Ok(tx)) => (rx, tx),
        (rx, tx) => {
            // A queue that will not enable again after the last input's
            // abuse: start over with a fresh device.
            drop((rx, tx));
            *sim = Sim::new();
            (
                sim.dev
                    .rx_queue(0, &sim.pool, RING)
                    .expect("rx queue on a fresh device"),
                sim.dev
                    .tx_queue(0, &sim.pool, RING)
                    .expect("tx queue on a fresh device"),
            )
        }
    };
    run(sim, rx, tx, data);
}

struct Sim {
    dma: Arc<SimDma>,
    clock: Arc<VirtualClock>,
    nic: Nic82599,
    dev: Device<SimBar>,
    pool: Mempool,
}

impl Sim {
    fn new() -> Sim {
        let dma = SimDma::new();
        let clock = VirtualClock::new();
        let nic = Nic82599::new(
            ModelConfig {
                mac: [2, 0, 0, 0, 0x82, 1],
                strict: false,
                ..ModelConfig::default()
            },
            dma.clone(),
        );
        nic.attach_clock(&clock);
        let c: Arc<dyn Clock> = clock.clone();
        let dev = Device::init(&nic.pci(), dma.clone(), c, DeviceConfig::default())
            .expect("init on a healthy model");
        let pool = Mempool::new(&*dma, "fuzz", 4 * RING, 4096).expect("pool");
        Sim {
            dma,
            clock,
            nic,
            dev,
            pool,
        }
    }
}

fn run(sim: &Sim, mut rx: RxQueue<SimBar>, mut tx: TxQueue<SimBar>, data: &[u8]) {
    let Sim {
        dma,
        clock,
        nic,
        pool,
        ..
    } = sim;
    let dev = &sim.dev;
    let addr = |lo: usize, hi: usize| u64::from(nic.peek(lo)) | u64::from(nic.peek(hi)) << 32;
    let rx_ring = addr(off::rdbal(0), off::rdbah(0));
    let head_wb = addr(off::tdwbal(0), off::tdwbah(0)) & !3;
    let wire = nic.wire();
    let mut batch = Batch::new();
    for op in data.chunks_exact(8) {
        let v = u32::from_le_bytes([op[4], op[5], op[6], op[7]]);
        let desc = rx_ring + 16 * u64::from(op[1] % RING as u8);
        match op[0] % 6 {
            0 => {
                // Write-back format, second quadword: status/error bits
                // (low word) and length (bits 32..47).
                let q1 = u64::from(v) | u64::from(u16::from_le_bytes([op[2], op[3]])) << 32;
                let _ = dma.write_u64(desc + 8, q1);
            }
            1 => {
                let _ = dma.write_u64(
                    desc + 8 * u64::from(op[2] & 1),
                    u64::from(v) << 32 | u64::from(v),
                );
            }
            2 => {
                let _ = dma.write_u32(head_wb, v);
            }
            3 => {
                rx.rx_batch(&mut batch);
                for p in batch.as_slice() {
                    assert!(p.len() <= pool.data_room(), "packet of {} bytes", p.len());
                }
                if op[2] & 1 == 0 {
                    tx.tx_batch(&mut batch);
                }
                batch.clear();
            }
            4 => {
                nic.step();
                clock.advance(std::time::Duration::from_micros(u64::from(op[2])));
            }
            _ => {
                let len = 60 + usize::from(op[2]) * 4;
                let mut f = vec![op[3]; len];
                f[0..6].copy_from_slice(&[2, 0, 0, 0, 0x82, 1]);
                let _ = wire.inject(&f);
            }
        }
    }
    let _ = dev.stats();
    drop((rx, tx, batch));
    assert_eq!(pool.free_count(), pool.capacity(), "buffers lost");
}
