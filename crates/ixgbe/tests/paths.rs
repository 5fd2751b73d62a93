//! Path counts of the data path (TinyNF, OSDI'20, Table 2), measured:
//! with the `paths` feature every branch site of the data path records
//! its outcome (`src/paths.rs`), and this test drives both driver models
//! against the lock-step 82599 model over inputs that reach every
//! outcome the datasheet allows (frames and none, frame errors, every
//! handler choice per output, outputs at different paces, idle gaps,
//! full rings, a pool run dry, empty packets), then counts the distinct
//! sequences of branch outcomes per call of each function.
//!
//! Run it with `cargo xtask paths` (it prints the table). The counts are
//! checked against the table quoted in ARCHITECTURE.md, so a change to
//! the data path's branches shows up here.

mod common;

use common::{frame, len_of, model, Bench, Mode};
use nfkit_hw::pool::MAX_BATCH;
use nfkit_hw::{Batch, Mempool};
use nfkit_ixgbe::paths::{self, Function, Trace};
use nfkit_ixgbe::{Agent, AgentConfig, Device, DeviceConfig, BUFFER_SIZE};
use nfkit_ixgbe_model::{Faults, ModelConfig, Nic82599, SimBar};
use std::collections::{BTreeMap, BTreeSet};

type Seen = BTreeMap<Function, BTreeSet<Trace>>;

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// The agent with `outputs` outputs: 3,000 frames (every 5th flagged
/// with a receive error) in bursts of 0 to 11 with idle gaps, a handler
/// that cycles through every choice per output (nothing, the frame, a
/// length beyond the buffer), output k's device stepped every k+1
/// rounds, and now and then not at all for a while.
fn agent_paths(outputs: usize) -> Seen {
    let mut bench = Bench::new(Mode::LockStep);
    let faulty = ModelConfig {
        faults: Faults {
            rx_error_every: Some(5),
            ..Faults::default()
        },
        ..model(1)
    };
    let in_nic = bench.nic(faulty);
    let out_nics: Vec<Nic82599> = (0..outputs)
        .map(|k| bench.nic(model(10 + k as u8)))
        .collect();
    let in_dev = bench.init(&in_nic, DeviceConfig::default()).unwrap();
    let out_devs: Vec<Device<SimBar>> = out_nics
        .iter()
        .map(|n| bench.init(n, DeviceConfig::default()).unwrap())
        .collect();
    let outs: Vec<(&Device<SimBar>, usize)> = out_devs.iter().map(|d| (d, 0)).collect();
    let mut agent = Agent::new(&in_dev, 0, &outs, &AgentConfig { ring_size: 128 }).unwrap();
    let wire = in_nic.wire();
    let mut handled = 0u32;
    let mut handler = |_: &mut [u8], len: usize, out: &mut [u16]| {
        let mut choice = handled;
        for o in out.iter_mut() {
            *o = match choice % 3 {
                0 => 0,
                1 => len as u16,
                _ => BUFFER_SIZE as u16 + 1,
            };
            choice /= 3;
        }
        handled += 1;
    };
    paths::start();
    let total = 3_000u64;
    let mut seq = 0u64;
    for round in 0u64..3_000 {
        let burst = (round * 7 + round / 13) % 12;
        for _ in 0..burst {
            if seq < total && wire.rx_pending() < 24 {
                wire.inject(&frame(IN_MAC, seq, len_of(seq, 5)));
                seq += 1;
            }
        }
        in_nic.step();
        for _ in 0..1 + round % 3 {
            agent.run_once(&mut handler);
        }
        // Outputs stall for a while every 200 rounds.
        if round % 200 < 150 {
            for (k, nic) in out_nics.iter().enumerate() {
                if round.is_multiple_of(k as u64 + 1) {
                    nic.step();
                }
            }
        }
        for nic in &out_nics {
            nic.wire().drain_transmitted(|_| {});
        }
    }
    let seen = paths::stop();
    assert_eq!(seq, total, "every frame offered");
    assert!(agent.stats().rx_packets > 1_000, "{:?}", agent.stats());
    seen
}

/// The queue model with batches of one packet (as TinyNF counted ixy
/// and DPDK: one buffer per call): rings of 64, every 3rd frame flagged
/// with an error, every 7th packet sent empty, the device stalled now
/// and then (the transmit ring fills), the pool now and then run dry.
fn queue_paths() -> Seen {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(ModelConfig {
        faults: Faults {
            rx_error_every: Some(3),
            ..Faults::default()
        },
        ..model(1)
    });
    let dev = bench.init(&nic, DeviceConfig::default()).unwrap();
    let pool = Mempool::new(&*bench.dma, "paths", 1024, 4096).unwrap();
    let filler_pool = Mempool::new(&*bench.dma, "filler", MAX_BATCH, 4096).unwrap();
    let mut rx = dev.rx_queue(0, &pool, 64).unwrap();
    let mut tx = dev.tx_queue(0, &pool, 64).unwrap();
    // Room for one packet: MAX_BATCH - 1 fillers stay in the batch.
    let mut rx_batch = Batch::new();
    filler_pool.alloc_bulk(&mut rx_batch, MAX_BATCH - 1);
    let mut tx_batch = Batch::new();
    let wire = nic.wire();
    paths::start();
    let mut seq = 0u64;
    for round in 0u64..2_500 {
        let burst = (round * 5 + round / 11) % 4;
        for _ in 0..burst {
            if wire.rx_pending() < 24 {
                wire.inject(&frame(IN_MAC, seq, len_of(seq, 9)));
                seq += 1;
            }
        }
        // The device stalls (sends nothing) for a while every 300 rounds.
        let stalled = round % 300 >= 200;
        if !stalled || round.is_multiple_of(16) {
            nic.step();
        }
        // Now and then the pool has run dry while frames wait.
        let hog = if round % 61 < 8 {
            let mut hog = Vec::new();
            loop {
                let mut b = Batch::new();
                if pool.alloc_bulk(&mut b, MAX_BATCH) == 0 {
                    break hog;
                }
                hog.push(b);
            }
        } else {
            Vec::new()
        };
        rx.rx_batch(&mut rx_batch);
        drop(hog);
        if rx_batch.len() == MAX_BATCH {
            let mut pkt = rx_batch.pop().unwrap();
            if round.is_multiple_of(7) {
                pkt.set_len(0).unwrap();
            }
            tx_batch.push(pkt);
        }
        tx.tx_batch(&mut tx_batch);
        // What the ring had no room for is dropped.
        tx_batch.clear();
        if !stalled {
            nic.step();
        }
        wire.drain_transmitted(|_| {});
    }
    let seen = paths::stop();
    assert!(rx.counters().packets > 500, "{:?}", rx.counters());
    assert!(tx.counters().errors > 0, "{:?}", tx.counters());
    seen
}

/// TinyNF's published counts (Table 2) for 1, 2, 3 outputs, or what
/// stands in their place (TinyNF's transmit includes its recycling, the
/// handler call is not in the table; the queue model is compared with
/// ixy's counts, with one path per pool call).
fn tinynf(f: Function) -> &'static str {
    match f {
        Function::AgentReceive => "3",
        Function::AgentHandler => "-",
        Function::AgentTransmit => "2 + 2^O: 4, 6, 10 (recycling included)",
        Function::AgentRecycle => "in transmit: 2^(O-1)",
        Function::QueueReceive => "ixy: 1 + A_F + A_S (3)",
        Function::QueueTransmit => "ixy: 14^O, cleaning included",
        Function::QueueRecycle => "ixy: in transmit",
    }
}

fn count(seen: &Seen, f: Function) -> usize {
    seen.get(&f).map_or(0, BTreeSet::len)
}

/// The table quoted in ARCHITECTURE.md: (function, paths with 1, 2, 3
/// outputs; the queue model's counts do not depend on outputs).
const EXPECTED: [(Function, [usize; 3]); 7] = [
    (Function::AgentReceive, [4, 4, 4]),
    (Function::AgentHandler, [1, 1, 1]),
    (Function::AgentTransmit, [6, 12, 24]),
    (Function::AgentRecycle, [2, 2, 2]),
    (Function::QueueReceive, [6, 6, 6]),
    (Function::QueueTransmit, [4, 4, 4]),
    (Function::QueueRecycle, [3, 3, 3]),
];

#[test]
fn path_counts() {
    let agents: Vec<Seen> = (1..=3).map(agent_paths).collect();
    let queue = queue_paths();
    println!("paths per call (distinct sequences of branch outcomes, lock-step 82599 model):");
    println!(
        "{:<16} {:>6} {:>6} {:>6}   TinyNF (OSDI'20 Table 2, O outputs = 1, 2, 3)",
        "function", "O=1", "O=2", "O=3"
    );
    let mut got = Vec::new();
    for f in paths::FUNCTIONS {
        let counts: [usize; 3] = match f {
            Function::QueueReceive | Function::QueueTransmit | Function::QueueRecycle => {
                [count(&queue, f); 3]
            }
            _ => [0, 1, 2].map(|o| count(&agents[o], f)),
        };
        println!(
            "{:<16} {:>6} {:>6} {:>6}   {}",
            format!("{f:?}"),
            counts[0],
            counts[1],
            counts[2],
            tinynf(f)
        );
        got.push((f, counts));
    }
    if std::env::var_os("NFKIT_PATHS_VERBOSE").is_some() {
        for (name, seen) in [("agent, 3 outputs", &agents[2]), ("queue", &queue)] {
            for (f, traces) in seen {
                println!("{name}: {f:?}");
                for t in traces {
                    println!("  {t:?}");
                }
            }
        }
    }
    assert_eq!(
        got, EXPECTED,
        "path counts changed: update ARCHITECTURE.md's table"
    );
}
