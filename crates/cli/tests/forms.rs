//! The same NF code in every form passes the same crafted-packet
//! scenarios (`nfkit_nf::adapt::scenarios`): NAT translation and
//! checksums, firewall drops, bridge flooding and learning, router TTL
//! and ICMP errors, LB heartbeats and affinity, policer bursts. Each runs
//! on simulated 82599s in lock-step: frames go onto the wires, through
//! the real driver queues, and are read back off the wires.
//!
//! The pipeline form runs the same scenarios in `nfkit-pipeline`
//! (`modules::nf`).

use nfkit::bench_nf::{with_form, Form, LockstepExchange, SimNics};
use nfkit_nf::adapt::scenarios::SCENARIOS;

fn scenarios_pass_in(form: Form) {
    for s in SCENARIOS {
        let mut nf = nfkit_nf::build(s.nf, s.options).unwrap();
        let nics = SimNics::lockstep(nf.port_count()).unwrap();
        let result = with_form(form, &nics, &mut *nf, |r| {
            (s.run)(&mut LockstepExchange {
                nics: &nics,
                round: r.round,
            })
        })
        .unwrap();
        if let Err(e) = result {
            panic!("{form:?}: {}: {e}", s.name);
        }
        let st = nf.stats();
        assert_eq!(
            st.packets_in,
            st.forwarded + st.dropped_total(),
            "{form:?}: {}",
            s.name
        );
        for nic in &nics.nics {
            assert!(nic.violations().is_empty(), "{:?}", nic.violations());
        }
    }
}

#[test]
fn as_agent_handlers_on_82599_agents() {
    scenarios_pass_in(Form::Agent);
}

#[test]
fn as_agent_handlers_through_the_agent_adapter() {
    scenarios_pass_in(Form::AgentAdapter);
}

#[test]
fn in_the_queue_model_loop() {
    scenarios_pass_in(Form::Queue);
}
