//! Form (b): an NF in the queue model, over any [`Port`]s: a handler of
//! nfkit-port's one queue-model loop ([`QueueLoop`]).
//!
//! Each round receives one batch from every receive queue of every port,
//! runs the NF on each packet in its pool buffer (offered whole, so the NF
//! may grow it), and sorts the packets into one output batch per port:
//! a forwarded packet moves, a flooded one is copied into fresh buffers
//! for all its ports but the last. Output batches are sent on the transmit
//! queue matching the receive queue (`q % tx_queues`).
//!
//! Counting, per port: `requested = sent + dropped` (dropped: transmit
//! ring full, or no buffer for a flood copy); the NF's own counters say
//! `packets_in = forwarded + dropped`, and `received` here equals the
//! packets handed to the NF ([`LoopStats`], shared with the agent adapter;
//! `discarded` counts the NF's drops per input).

use std::time::Duration;

use nfkit_port::agent::LoopStats;
use nfkit_port::queue::{Outputs, QueueHandler, QueueLoop};
use nfkit_port::{Batch, Port};

use crate::verdict::{NetworkFunction, PortSet, Verdict};

/// An NF on the queue-model loop ([`QueueLoop`], the loop `fwd` runs
/// too): the loop's buffers and counters, made once.
pub struct QueueNf {
    lp: QueueLoop,
}

impl QueueNf {
    /// A loop for an NF with `ports` ports.
    pub fn new(ports: usize) -> QueueNf {
        QueueNf {
            lp: QueueLoop::new(ports),
        }
    }

    pub fn stats(&self) -> &LoopStats {
        self.lp.stats()
    }

    /// One round: a batch from each receive queue of each port through
    /// `nf`, with `now` read by the caller once for the round. `ports[k]`
    /// is NF port `k`. Returns the packets received.
    #[inline]
    pub fn poll<P: Port + ?Sized>(
        &mut self,
        ports: &mut [&mut P],
        nf: &mut dyn NetworkFunction,
        now: Duration,
    ) -> usize {
        self.lp.poll(ports, &mut Nf { nf, now })
    }
}

/// The NF as the loop's handler.
struct Nf<'a> {
    nf: &'a mut dyn NetworkFunction,
    now: Duration,
}

impl QueueHandler for Nf<'_> {
    #[inline]
    fn handle(&mut self, input: usize, rx: &mut Batch, out: &mut Outputs) {
        let count = out.ports();
        for mut pkt in rx.drain() {
            let len = pkt.len();
            // Offer the whole buffer; cannot fail, it is what the buffer
            // has.
            let _ = pkt.set_len(len + pkt.tailroom());
            let (targets, len) = match self.nf.process(pkt.data_mut(), len, input, self.now) {
                Verdict::Drop(_) => {
                    out.discard(input);
                    continue;
                }
                Verdict::Forward { port, len } => (PortSet::EMPTY.with(port), len),
                Verdict::Flood { ports, len } => (ports.without(input), len),
            };
            if targets.iter().any(|p| p >= count) {
                out.unrouted();
            }
            let mut targets = targets.iter().filter(|&p| p < count).peekable();
            let fits = pkt.set_len(len).is_ok();
            while let Some(p) = targets.next() {
                if !fits {
                    out.refuse(p);
                } else if targets.peek().is_none() {
                    // The last port gets the buffer itself.
                    out.send(p, pkt);
                    break;
                } else {
                    match pkt.try_clone() {
                        Some(copy) => out.send(p, copy),
                        None => out.refuse(p),
                    }
                }
            }
        }
    }
}
