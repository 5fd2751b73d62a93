//! Form (b): an NF in the queue model, over any [`Port`]s.
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
use nfkit_port::{Batch, PktBuf, Port};

use crate::verdict::{NetworkFunction, PortId, PortSet, Verdict};

/// The queue-model loop's buffers and counters (made once, here).
pub struct QueueNf {
    rx: Batch,
    outs: Outputs,
}

/// Per-port output batches and the counters, apart from the receive
/// batch so that packets can be drained from one into the other.
struct Outputs {
    out: Vec<Batch>,
    stats: LoopStats,
}

impl QueueNf {
    /// A loop for an NF with `ports` ports.
    pub fn new(ports: usize) -> QueueNf {
        QueueNf {
            rx: Batch::new(),
            outs: Outputs {
                out: (0..ports).map(|_| Batch::new()).collect(),
                stats: LoopStats::new(ports),
            },
        }
    }

    pub fn stats(&self) -> &LoopStats {
        &self.outs.stats
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
        let mut total = 0;
        for input in 0..ports.len().min(self.outs.out.len()) {
            for q in 0..ports[input].rx_queues() {
                let n = ports[input].rx_batch(q, &mut self.rx);
                if n == 0 {
                    continue;
                }
                total += n;
                self.outs.stats.received[input] += n as u64;
                for mut pkt in self.rx.drain() {
                    let len = pkt.len();
                    // Offer the whole buffer; cannot fail, it is what the
                    // buffer has.
                    let _ = pkt.set_len(len + pkt.tailroom());
                    let verdict = nf.process(pkt.data_mut(), len, input, now);
                    self.outs.send(verdict, pkt, input, ports, q);
                }
                self.outs.flush_all(ports, q);
            }
        }
        total
    }
}

impl Outputs {
    /// Queue `pkt` (or copies of it) as `verdict` says.
    #[inline(always)]
    fn send<P: Port + ?Sized>(
        &mut self,
        verdict: Verdict,
        mut pkt: PktBuf,
        input: PortId,
        ports: &mut [&mut P],
        q: usize,
    ) {
        let (targets, len) = match verdict {
            Verdict::Drop(_) => {
                self.stats.discarded[input] += 1;
                return;
            }
            Verdict::Forward { port, len } => (PortSet::EMPTY.with(port), len),
            Verdict::Flood { ports, len } => (ports.without(input), len),
        };
        let count = self.out.len();
        if targets.iter().any(|p| p >= count) {
            self.stats.unrouted += 1;
        }
        let mut targets = targets.iter().filter(|&p| p < count).peekable();
        let fits = pkt.set_len(len).is_ok();
        while let Some(p) = targets.next() {
            self.stats.requested[p] += 1;
            if !fits {
                self.stats.dropped[p] += 1;
            } else if targets.peek().is_none() {
                // The last port gets the buffer itself.
                self.enqueue(p, pkt, ports, q);
                return;
            } else {
                match pkt.try_clone() {
                    Some(copy) => self.enqueue(p, copy, ports, q),
                    None => self.stats.dropped[p] += 1,
                }
            }
        }
    }

    #[inline(always)]
    fn enqueue<P: Port + ?Sized>(&mut self, o: usize, pkt: PktBuf, ports: &mut [&mut P], q: usize) {
        if self.out[o].is_full() {
            self.flush(o, ports, q);
        }
        // Cannot be handed back: the batch was just flushed if full.
        if self.out[o].push(pkt).is_some() {
            self.stats.dropped[o] += 1;
        }
    }

    fn flush_all<P: Port + ?Sized>(&mut self, ports: &mut [&mut P], q: usize) {
        for o in 0..self.out.len() {
            self.flush(o, ports, q);
        }
    }

    #[inline]
    fn flush<P: Port + ?Sized>(&mut self, o: usize, ports: &mut [&mut P], q: usize) {
        if self.out[o].is_empty() {
            return;
        }
        let left = |b: &Batch| b.len() as u64;
        if let Some(port) = ports.get_mut(o) {
            let txq = q % port.tx_queues().max(1);
            self.stats.sent[o] += port.tx_batch(txq, &mut self.out[o]) as u64;
            if !self.out[o].is_empty() {
                port.tx_refused(txq, left(&self.out[o]));
            }
        }
        self.stats.dropped[o] += left(&self.out[o]);
        self.out[o].clear();
    }
}
