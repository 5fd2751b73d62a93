//! Form (a): an NF as agent-model handlers.
//!
//! An agent (TinyNF's driver model) reads one input and hands each packet
//! to a handler `FnMut(buffer, len, lengths)`, where `buffer` is the
//! packet's whole buffer and `lengths[k]` (0 on entry) is what to send on
//! output `k`. [`AgentNf::handler`] makes that handler for one input port
//! of an NF; every agent must have one output per NF port, in NF port
//! order (output `k` = port `k`), including its own input port (the
//! router sends ICMP errors back where the packet came from).
//!
//! The same handler runs on `nfkit_ixgbe::Agent` (82599 queues; a packet
//! on several outputs shares one buffer) and on
//! `nfkit_port::agent::AgentAdapter` (any ports; copies for floods).
//!
//! All handlers of one NF share it through a `RefCell`: agents run round
//! robin on one thread and a handler never calls another, so the borrow
//! is never contended. The time is set once per round with
//! [`AgentNf::set_now`]; handlers read the stored value.

use std::cell::{Cell, RefCell, RefMut};
use std::time::Duration;

use super::write_lengths;
use crate::verdict::{NetworkFunction, PortId};

/// One NF shared by the handlers of all its input ports.
pub struct AgentNf<'a> {
    nf: RefCell<&'a mut dyn NetworkFunction>,
    now: Cell<Duration>,
    unrouted: Cell<u64>,
}

impl<'a> AgentNf<'a> {
    pub fn new(nf: &'a mut dyn NetworkFunction) -> AgentNf<'a> {
        AgentNf {
            nf: RefCell::new(nf),
            now: Cell::new(Duration::ZERO),
            unrouted: Cell::new(0),
        }
    }

    /// The time the handlers pass to the NF until the next call: call
    /// once per round of the agents.
    #[inline]
    pub fn set_now(&self, now: Duration) {
        self.now.set(now);
    }

    /// The handler for packets arriving on NF port `in_port`.
    pub fn handler(
        &self,
        in_port: PortId,
    ) -> impl FnMut(&mut [u8], usize, &mut [u16]) + use<'_, 'a> {
        move |buffer: &mut [u8], len: usize, lengths: &mut [u16]| {
            let now = self.now.get();
            let verdict = self.nf.borrow_mut().process(buffer, len, in_port, now);
            if !write_lengths(verdict, in_port, lengths) {
                self.unrouted.set(self.unrouted.get() + 1);
            }
        }
    }

    /// One handler per NF port, in port order (for `nfkit_ixgbe::run`
    /// and `AgentAdapter::poll`, which take one handler per agent/port).
    pub fn handlers(&self) -> Vec<impl FnMut(&mut [u8], usize, &mut [u16]) + use<'_, 'a>> {
        let ports = self.nf.borrow().port_count();
        (0..ports).map(|p| self.handler(p)).collect()
    }

    /// The NF, for its counters and tables (not while a handler runs).
    pub fn nf(&self) -> RefMut<'_, &'a mut dyn NetworkFunction> {
        self.nf.borrow_mut()
    }

    /// Packets the NF sent to a port the agent had no output for (a
    /// set-up with fewer outputs than NF ports): counted by the NF as
    /// forwarded, sent nowhere.
    pub fn unrouted(&self) -> u64 {
        self.unrouted.get()
    }
}
