//! The forms add no allocation to the data path: after warm-up, rounds
//! of each NF as 82599 agents, through the agent adapter and in the
//! queue loop, over simulated 82599s in lock-step, allocate nothing
//! (counted by `allocation-counter` around the rounds only; the devices
//! step outside them).

use nfkit_ixgbe_model::TrafficGen;
use nfkit_lab::forms::{with_form, SimNics};
use nfkit_nf::workload::workload;
use nfkit_port::Model;
use std::time::Duration;

#[test]
fn rounds_allocate_nothing() {
    let probe = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 10]);
    });
    assert!(probe.count_total >= 1, "the counter counts");
    for name in ["nat", "bridge", "router"] {
        for form in [Model::Agent, Model::AgentAdapter, Model::Queue] {
            let w = workload(name, 2000).unwrap();
            let mut nf = nfkit_nf::build(name, &w.options).unwrap();
            let nics = SimNics::lockstep(2).unwrap();
            let wire = nics.nics[w.input].wire();
            let mut gen = TrafficGen::from_frames(w.frames.clone());
            with_form(form, &nics, &mut *nf, |r| {
                let mut allocations = 0;
                for tick in 0..200u64 {
                    gen.inject(&wire, 32);
                    nics.step();
                    let now = Duration::from_micros(tick);
                    let info = allocation_counter::measure(|| {
                        (r.round)(now);
                    });
                    // The first rounds may size lazily built parts.
                    if tick >= 20 {
                        allocations += info.count_total;
                    }
                    nics.step();
                }
                assert_eq!(allocations, 0, "{name} {form:?}");
                assert!((r.stats)().forwarded > 1000, "{name} {form:?}");
            })
            .unwrap();
        }
    }
}
