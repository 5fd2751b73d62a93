//! The same NF code in every form passes the same crafted-packet
//! scenarios (`nfkit_nf::adapt::scenarios`): NAT translation and
//! checksums, firewall drops, bridge flooding and learning, router TTL
//! and ICMP errors, LB heartbeats and affinity, policer bursts. Each runs
//! on simulated 82599s in lock-step: frames go onto the wires, through
//! the real driver queues, and are read back off the wires.
//!
//! The pipeline form runs the same scenarios in `nfkit-pipeline`
//! (`modules::nf`).

use nfkit_lab::forms::{with_form, SimNics};
use nfkit_nf::adapt::scenarios::{Exchange, SCENARIOS};
use nfkit_nf::PortId;
use nfkit_port::Model;
use std::time::Duration;

/// A form on lock-step devices as an [`Exchange`]: a frame onto a
/// port's wire, device steps and rounds, and whatever the devices put on
/// their wires.
struct LockstepExchange<'a> {
    nics: &'a SimNics,
    round: &'a mut dyn FnMut(Duration) -> usize,
}

impl Exchange for LockstepExchange<'_> {
    fn send(&mut self, port: PortId, frame: &[u8], now: Duration) -> Vec<(PortId, Vec<u8>)> {
        if !self.nics.nics[port].wire().inject(frame) {
            return Vec::new();
        }
        // Receive (device), handle (driver), transmit (device); a few
        // times over, for write-backs and tails written when idle.
        for _ in 0..4 {
            self.nics.step();
            (self.round)(now);
        }
        self.nics.step();
        let mut out = Vec::new();
        for (p, nic) in self.nics.nics.iter().enumerate() {
            nic.wire().drain_transmitted(|f| out.push((p, f.to_vec())));
        }
        out
    }
}

fn scenarios_pass_in(form: Model) {
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
    scenarios_pass_in(Model::Agent);
}

#[test]
fn as_agent_handlers_through_the_agent_adapter() {
    scenarios_pass_in(Model::AgentAdapter);
}

#[test]
fn in_the_queue_model_loop() {
    scenarios_pass_in(Model::Queue);
}
