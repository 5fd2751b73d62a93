//! The agent model (TinyNF) against the 82599 model: 1 to 4 outputs,
//! each packet sent to any subset with its own length, one output
//! deliberately slow. Every packet the handler sees appears exactly once
//! on each output chosen for it, in order and byte-exact (a buffer reused
//! while still in flight would show up as corrupted bytes); every other
//! packet is counted as dropped by the input device.

mod common;

use common::{assert_no_violations, frame, len_of, model, seq_of, Bench, Mode};
use nfkit_ixgbe::{Agent, AgentConfig, Device, DeviceConfig};
use nfkit_ixgbe::{InitError, Step};
use nfkit_ixgbe_model::{Faults, ModelConfig, Nic82599, SimBar};
use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The handler rewrites the destination MAC in place.
const REWRITTEN: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

#[derive(Debug, Clone)]
struct Scenario {
    packets: u64,
    ring: usize,
    /// Output k's device is stepped every `speeds[k]` rounds (1 = always).
    speeds: Vec<u32>,
    /// Probability that a packet goes to a given output.
    send_probability: f64,
    /// Whether outputs may get a shorter length than the frame.
    trim: bool,
    seed: u64,
    /// Model fault: descriptor and head write-back delayed by N steps.
    writeback_delay: u32,
}

struct Outcome {
    handled: u64,
    rx_errors: u64,
    dropped_at_input: u64,
    wraps: u64,
}

/// Run a scenario in lock-step mode: input on port 0, output k on port k+1.
fn run_scenario(s: &Scenario) -> Outcome {
    let mut bench = Bench::new(Mode::LockStep);
    let faults = Faults {
        writeback_delay: s.writeback_delay,
        ..Faults::default()
    };
    let port = |mac: u8| ModelConfig {
        faults: faults.clone(),
        ..model(mac)
    };
    let in_nic = bench.nic(port(1));
    let out_nics: Vec<Nic82599> = (0..s.speeds.len())
        .map(|k| bench.nic(port(10 + k as u8)))
        .collect();
    let in_dev = bench.init(&in_nic, DeviceConfig::default()).unwrap();
    let out_devs: Vec<Device<SimBar>> = out_nics
        .iter()
        .map(|n| bench.init(n, DeviceConfig::default()).unwrap())
        .collect();
    let outputs: Vec<(&Device<SimBar>, usize)> = out_devs.iter().map(|d| (d, 0)).collect();
    let mut agent = Agent::new(&in_dev, 0, &outputs, &AgentConfig { ring_size: s.ring }).unwrap();

    let in_wire = in_nic.wire();
    let out_wires: Vec<_> = out_nics.iter().map(|n| n.wire()).collect();
    let mut expected: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); s.speeds.len()];
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut handled = 0u64;
    let trim = s.trim;
    let p = s.send_probability;

    let mut seq = 0u64;
    let mut round = 0u64;
    let mut idle_rounds = 0u64;
    loop {
        round += 1;
        // the generator: a few frames per round while the packet buffer has room
        let mut injected_now = 0;
        while seq < s.packets && injected_now < 8 && in_wire.rx_pending() < 24 {
            in_wire.inject(&frame(IN_MAC, seq, len_of(seq, s.seed)));
            seq += 1;
            injected_now += 1;
        }
        in_nic.step();
        let n = {
            let expected = &mut expected;
            let rng = &mut rng;
            let handled = &mut handled;
            let mut handler = |buf: &mut [u8], len: usize, out: &mut [u16]| {
                let sq = seq_of(buf);
                let original = frame(IN_MAC, sq, len_of(sq, s.seed));
                assert_eq!(len, original.len(), "length of frame {sq}");
                assert!(
                    buf[..len] == original[..],
                    "frame {sq} corrupted before the handler saw it"
                );
                buf[0..6].copy_from_slice(&REWRITTEN);
                for (k, o) in out.iter_mut().enumerate() {
                    if rng.gen_bool(p) {
                        let l = if trim { rng.gen_range(60..=len) } else { len };
                        *o = l as u16;
                        expected[k].push_back(buf[..l].to_vec());
                    }
                }
                *handled += 1;
            };
            // like `nfkit_ixgbe::run`: up to FLUSH_PERIOD packets per turn,
            // a few turns per round so the agent keeps up with the generator
            let mut n = 0;
            for _ in 0..4 {
                let done = agent.run_once(&mut handler);
                n += done;
                if done < nfkit_ixgbe::FLUSH_PERIOD {
                    break;
                }
            }
            n
        };
        for (k, nic) in out_nics.iter().enumerate() {
            if round.is_multiple_of(u64::from(s.speeds[k])) {
                nic.step();
            }
        }
        for (k, w) in out_wires.iter().enumerate() {
            let exp = &mut expected[k];
            w.drain_transmitted(|f| {
                let want = exp
                    .pop_front()
                    .unwrap_or_else(|| panic!("output {k}: frame {} not sent there", seq_of(f)));
                assert_eq!(seq_of(f), seq_of(&want), "output {k}: order");
                assert!(
                    f == &want[..],
                    "output {k}: frame {} differs (buffer reused in flight?)",
                    seq_of(f)
                );
            });
        }
        let c = in_nic.counters();
        let accounted = handled + agent.stats().rx_errors + c.rx_missed + c.rx_fifo_overflow;
        let outputs_done = expected.iter().all(|e| e.is_empty());
        if seq == s.packets && accounted == s.packets && outputs_done {
            break;
        }
        idle_rounds = if n == 0 { idle_rounds + 1 } else { 0 };
        assert!(
            idle_rounds < 200_000,
            "stuck: injected {seq}, accounted {accounted}, waiting on outputs {:?}",
            expected.iter().map(|e| e.len()).collect::<Vec<_>>()
        );
    }
    let stats = agent.stats().clone();
    for (k, e) in expected.iter().enumerate() {
        assert!(e.is_empty());
        assert_eq!(
            out_nics[k].counters().tx_frames,
            stats.tx_packets[k],
            "output {k}"
        );
    }
    let dropped_at_input = in_dev.stats().rx_dropped();
    assert_eq!(
        handled + stats.rx_errors + dropped_at_input,
        s.packets,
        "every packet handled or counted as dropped"
    );
    drop(agent);
    assert_no_violations(&in_nic);
    for n in &out_nics {
        assert_no_violations(n);
    }
    Outcome {
        handled,
        rx_errors: stats.rx_errors,
        dropped_at_input,
        wraps: handled / s.ring as u64,
    }
}

#[test]
fn one_output_forwards_everything() {
    let o = run_scenario(&Scenario {
        packets: 5_000,
        ring: 256,
        speeds: vec![1],
        send_probability: 1.0,
        trim: false,
        seed: 1,
        writeback_delay: 0,
    });
    assert_eq!(o.handled, 5_000);
    assert_eq!(o.dropped_at_input + o.rx_errors, 0);
}

#[test]
fn four_outputs_one_slow_rings_wrap_thousands_of_times() {
    let o = run_scenario(&Scenario {
        packets: 260_000,
        ring: 128,
        speeds: vec![1, 1, 1, 30],
        send_probability: 0.6,
        trim: true,
        seed: 2,
        writeback_delay: 0,
    });
    assert!(o.wraps >= 1_000, "only {} wraps", o.wraps);
    assert!(
        o.dropped_at_input > 0,
        "the slow output should have filled the ring"
    );
}

/// The case the published "earliest head" rule gets wrong: one output
/// drains completely (its head equals the processing index) while another
/// lags far behind. Taking the drained output's head would hand the
/// lagging output's unsent buffers back to receive; the byte-exact check
/// on the slow output would then fail.
#[test]
fn a_drained_output_does_not_release_a_lagging_ones_buffers() {
    let o = run_scenario(&Scenario {
        packets: 40_000,
        ring: 128,
        speeds: vec![1, 25],
        send_probability: 1.0,
        trim: false,
        seed: 3,
        writeback_delay: 0,
    });
    assert!(o.handled > 0 && o.dropped_at_input > 0);
}

#[test]
fn packets_sent_nowhere_still_recycle() {
    let o = run_scenario(&Scenario {
        packets: 3_000,
        ring: 128,
        speeds: vec![1, 3],
        send_probability: 0.0,
        trim: false,
        seed: 4,
        writeback_delay: 0,
    });
    assert_eq!(o.handled, 3_000);
}

/// Liveness: an output stalls until the ring is full of its unsent
/// buffers, then drains while no packet arrives. Status descriptors are
/// only processed when packets arrive, and packets only arrive once the
/// receive tail moves; so the agent must also re-read the written-back
/// heads when idle, or reception would never resume.
#[test]
fn reception_resumes_after_a_stalled_output_drains() {
    let mut bench = Bench::new(Mode::LockStep);
    let in_nic = bench.nic(model(1));
    let out_nic = bench.nic(model(2));
    let din = bench.init(&in_nic, DeviceConfig::default()).unwrap();
    let dout = bench.init(&out_nic, DeviceConfig::default()).unwrap();
    let mut agent = Agent::new(&din, 0, &[(&dout, 0)], &AgentConfig { ring_size: 128 }).unwrap();
    let mut forward = |_: &mut [u8], len: usize, out: &mut [u16]| out[0] = len as u16;
    let (w_in, w_out) = (in_nic.wire(), out_nic.wire());
    let mut delivered = Vec::new();
    // phase 1: the output is stalled (never stepped) while 400 frames arrive
    for seq in 0..400 {
        w_in.inject(&frame(IN_MAC, seq, len_of(seq, 11)));
        in_nic.step();
        agent.run_once(&mut forward);
    }
    let handled_while_stalled = agent.stats().rx_packets;
    assert!(
        handled_while_stalled < 128,
        "the stalled output holds the ring"
    );
    // phase 2: nothing arrives; the output drains everything it was given
    for _ in 0..20 {
        out_nic.step();
        in_nic.step();
        agent.run_once(&mut forward);
    }
    w_out.drain_transmitted(|f| delivered.push(seq_of(f)));
    assert_eq!(delivered.len() as u64, handled_while_stalled);
    // phase 3: traffic resumes and must get through
    for seq in 1_000..1_300 {
        w_in.inject(&frame(IN_MAC, seq, len_of(seq, 11)));
        in_nic.step();
        agent.run_once(&mut forward);
        out_nic.step();
    }
    for _ in 0..20 {
        in_nic.step();
        agent.run_once(&mut forward);
        out_nic.step();
    }
    delivered.clear();
    w_out.drain_transmitted(|f| delivered.push(seq_of(f)));
    assert_eq!(
        delivered,
        (1_000..1_300).collect::<Vec<u64>>(),
        "reception resumed, nothing lost"
    );
    drop(agent);
    assert_no_violations(&in_nic);
    assert_no_violations(&out_nic);
}

#[test]
fn delayed_write_back_changes_nothing() {
    let o = run_scenario(&Scenario {
        packets: 5_000,
        ring: 128,
        speeds: vec![1, 4],
        send_probability: 0.7,
        trim: true,
        seed: 5,
        writeback_delay: 5,
    });
    assert!(o.handled > 0);
}

const TXDCTL0: usize = 0x06028;
const RXDCTL0: usize = 0x01028;
const ENABLE: u32 = 1 << 25;

/// An output queue that never enables: a typed error, and the input queue
/// is released unused.
#[test]
fn failing_output_is_a_typed_error_and_releases_everything() {
    let mut bench = Bench::new(Mode::LockStep);
    let a = bench.nic(model(1));
    let b = bench.nic(ModelConfig {
        faults: Faults {
            queue_never_enables: Some(0),
            ..Faults::default()
        },
        ..model(2)
    });
    let da = bench.init(&a, DeviceConfig::default()).unwrap();
    let db = bench.init(&b, DeviceConfig::default()).unwrap();
    let cfg = AgentConfig { ring_size: 128 };
    let err = Agent::new(&da, 0, &[(&da, 0), (&db, 0)], &cfg)
        .err()
        .expect("must fail");
    assert!(
        matches!(
            err,
            InitError::Timeout {
                step: Step::TxQueueSetup,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        a.peek(TXDCTL0) & ENABLE,
        0,
        "the output already started was stopped"
    );
    assert_eq!(a.peek(RXDCTL0) & ENABLE, 0, "the input was never started");
    // everything was released: the same queues work for a new agent
    let agent = Agent::new(&da, 0, &[(&da, 0)], &cfg).expect("queues were released");
    drop(agent);
    assert_no_violations(&a);
}

/// The input queue never enables: the outputs already started are stopped.
#[test]
fn failing_input_stops_the_outputs() {
    let mut bench = Bench::new(Mode::LockStep);
    let a = bench.nic(ModelConfig {
        faults: Faults {
            queue_never_enables: Some(0),
            ..Faults::default()
        },
        ..model(1)
    });
    let b = bench.nic(model(2));
    let da = bench.init(&a, DeviceConfig::default()).unwrap();
    let db = bench.init(&b, DeviceConfig::default()).unwrap();
    let err = Agent::new(&da, 0, &[(&db, 0)], &AgentConfig { ring_size: 128 })
        .err()
        .expect("must fail");
    assert!(
        matches!(
            err,
            InitError::Timeout {
                step: Step::RxQueueSetup,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(b.peek(TXDCTL0) & ENABLE, 0, "the output was stopped again");
    assert_no_violations(&b);
}

/// Frames the device flags with an error reach no output and are counted.
#[test]
fn rx_errors_reach_no_output() {
    let mut bench = Bench::new(Mode::LockStep);
    let a = bench.nic(ModelConfig {
        faults: Faults {
            rx_error_every: Some(5),
            ..Faults::default()
        },
        ..model(1)
    });
    let b = bench.nic(model(2));
    let da = bench.init(&a, DeviceConfig::default()).unwrap();
    let db = bench.init(&b, DeviceConfig::default()).unwrap();
    let mut agent = Agent::new(&da, 0, &[(&db, 0)], &AgentConfig { ring_size: 128 }).unwrap();
    let mut forward = |_: &mut [u8], len: usize, out: &mut [u16]| out[0] = len as u16;
    let mut delivered = 0u64;
    for seq in 0..500 {
        a.wire().inject(&frame(IN_MAC, seq, len_of(seq, 12)));
        a.step();
        agent.run_once(&mut forward);
        b.step();
    }
    for _ in 0..10 {
        a.step();
        agent.run_once(&mut forward);
        b.step();
    }
    b.wire().drain_transmitted(|_| delivered += 1);
    assert_eq!(agent.stats().rx_errors, 100);
    assert_eq!(agent.stats().rx_packets, 400);
    assert_eq!(delivered, 400);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn every_packet_once_per_chosen_output_or_counted_as_dropped(
        speeds in proptest::collection::vec(1u32..12, 1..=4),
        packets in 300u64..2_500,
        send_probability in 0.0f64..=1.0,
        trim in any::<bool>(),
        seed in any::<u64>(),
        writeback_delay in 0u32..4,
    ) {
        run_scenario(&Scenario { packets, ring: 128, speeds, send_probability, trim, seed, writeback_delay });
    }
}

/// Two agents on one core, round robin with [`nfkit_ixgbe::run`]: port A
/// to port B and B to A.
#[test]
fn two_agents_round_robin_on_one_core() {
    let mut bench = Bench::new(Mode::LockStep);
    let a = bench.nic(model(1));
    let b = bench.nic(model(2));
    let da = bench.init(&a, DeviceConfig::default()).unwrap();
    let db = bench.init(&b, DeviceConfig::default()).unwrap();
    let cfg = AgentConfig { ring_size: 256 };
    let mut agents = vec![
        Agent::new(&da, 0, &[(&db, 0)], &cfg).unwrap(),
        Agent::new(&db, 0, &[(&da, 0)], &cfg).unwrap(),
    ];
    let forward = |_: &mut [u8], len: usize, out: &mut [u16]| out[0] = len as u16;
    let mut handlers = [forward, forward];
    let (wa, wb) = (a.wire(), b.wire());
    let mut seq = 0;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    nfkit_ixgbe::run(&mut agents, &mut handlers, || {
        if seq < 2_000 {
            wa.inject(&frame([2, 0, 0, 0, 0, 1], seq, len_of(seq, 7)));
            wb.inject(&frame([2, 0, 0, 0, 0, 2], seq, len_of(seq, 8)));
            seq += 1;
        }
        a.step();
        b.step();
        wa.drain_transmitted(|f| got_a.push(seq_of(f)));
        wb.drain_transmitted(|f| got_b.push(seq_of(f)));
        got_a.len() < 2_000 || got_b.len() < 2_000
    });
    let want: Vec<u64> = (0..2_000).collect();
    assert_eq!(got_b, want, "A's input leaves through B");
    assert_eq!(got_a, want, "B's input leaves through A");
    drop(agents);
    assert_no_violations(&a);
    assert_no_violations(&b);
}

/// Free-running device, the agent on its own thread (agents are Send):
/// two outputs on two ports, no loss while the sink keeps up.
#[test]
fn free_running_agent_on_its_own_thread() {
    let total: u64 = common::packet_count(20_000);
    let mut bench = Bench::new(Mode::FreeRunning);
    let input = bench.nic(model(1));
    let out1 = bench.nic(model(2));
    let din = bench.init(&input, DeviceConfig::default()).unwrap();
    let dout = bench.init(&out1, DeviceConfig::default()).unwrap();
    let agent = Agent::new(&din, 0, &[(&din, 0), (&dout, 0)], &AgentConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        let mut agent = agent;
        std::thread::spawn(move || {
            let mut handler = |_: &mut [u8], len: usize, out: &mut [u16]| {
                out[0] = len as u16;
                out[1] = len as u16;
            };
            while !stop.load(Ordering::Relaxed) {
                if agent.run_once(&mut handler) == 0 {
                    std::thread::yield_now();
                }
            }
            agent
        })
    };
    let (w_in, w_out) = (input.wire(), out1.wire());
    let mut pending: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut seq = 0;
    let mut done = [0u64; 2];
    let deadline = Instant::now() + Duration::from_secs(120 + total / 5_000);
    while done[0] < total || done[1] < total {
        assert!(Instant::now() < deadline, "stalled at {done:?}");
        while seq < total && pending[0].len() < 256 && pending[1].len() < 256 {
            let f = frame(IN_MAC, seq, len_of(seq, 9));
            assert!(w_in.inject(&f));
            pending[0].push_back(f.clone());
            pending[1].push_back(f);
            seq += 1;
        }
        for (k, w) in [&w_in, &w_out].into_iter().enumerate() {
            let p = &mut pending[k];
            let d = &mut done[k];
            w.drain_transmitted(|f| {
                let want = p.pop_front().expect("unexpected frame");
                assert!(f == &want[..], "output {k}: frame {} differs", seq_of(f));
                *d += 1;
            });
        }
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let agent = worker.join().unwrap();
    assert_eq!(agent.stats().rx_packets, total);
    assert_eq!(din.stats().rx_dropped(), 0);
    drop(agent);
    bench.stop();
    assert_no_violations(&input);
    assert_no_violations(&out1);
}
