//! The queue-model loop: the one loop that moves batches between
//! [`Port`]s. [`fwd`](crate::fwd::fwd) (two ports, pass-through), the
//! queue-model NF loop (`nfkit_nf::adapt::QueueNf`) and the agent adapter
//! ([`AgentAdapter`](crate::agent::AgentAdapter)) are each a
//! [`QueueHandler`] run by [`QueueLoop::poll`].
//!
//! One round: a batch from every receive queue of every port in turn;
//! the handler empties it into the per-port output batches
//! ([`Outputs`]), which are sent right away on the transmit queue
//! matching the receive queue (`q % tx_queues`). A packet the transmit
//! queue refuses is dropped, counted here and told to the port
//! ([`Port::tx_refused`]).
//!
//! Counting ([`LoopStats`]), per port: `requested = sent + dropped`;
//! per input, `received` = packets handed to the handler.

use crate::{Batch, PktBuf, Port};

/// Counters of a loop that hands each received packet to a handler or
/// an NF and sends it where that says: every [`QueueHandler`] run by
/// [`QueueLoop`]. Indexed by port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// Packets received per input.
    pub received: Vec<u64>,
    /// Packets the handler or NF sent nowhere, per input.
    pub discarded: Vec<u64>,
    /// Packets the handler asked to send per output (a flood counts on
    /// each).
    pub requested: Vec<u64>,
    pub sent: Vec<u64>,
    /// Refused by the transmit ring, no buffer for a copy, or a length
    /// larger than the buffer.
    pub dropped: Vec<u64>,
    /// Of `dropped`: frames larger than the output port carries (a
    /// chained frame for a port that takes only one buffer per frame, or
    /// one past its [`Port::max_frame`]).
    pub too_large: Vec<u64>,
    /// Verdicts naming a port the loop does not have (sent nowhere; the
    /// queue loop counts these, agent handlers count them in
    /// `nfkit_nf::adapt::AgentNf::unrouted`).
    pub unrouted: u64,
}

impl LoopStats {
    /// All zero, for `ports` ports.
    pub fn new(ports: usize) -> LoopStats {
        LoopStats {
            received: vec![0; ports],
            discarded: vec![0; ports],
            requested: vec![0; ports],
            sent: vec![0; ports],
            dropped: vec![0; ports],
            too_large: vec![0; ports],
            unrouted: 0,
        }
    }
}

/// What the loop does with each received batch.
pub trait QueueHandler {
    /// `rx` holds packets received on port `input`: move each to `out`
    /// (or drop it, counting it there). Packets left in `rx` are freed
    /// and counted as discarded.
    fn handle(&mut self, input: usize, rx: &mut Batch, out: &mut Outputs);
}

/// The per-port output batches of one round and the loop's counters.
/// Each is sent, and emptied, after every received batch, so a handler
/// that queues at most one packet per output per received packet never
/// finds one full.
pub struct Outputs {
    out: Vec<Batch>,
    stats: LoopStats,
}

impl Outputs {
    /// How many ports the loop sends to.
    #[inline(always)]
    pub fn ports(&self) -> usize {
        self.out.len()
    }

    pub fn stats(&self) -> &LoopStats {
        &self.stats
    }

    /// Queue `pkt` on output `o`.
    #[inline(always)]
    pub fn send(&mut self, o: usize, pkt: PktBuf) {
        let Some(out) = self.out.get_mut(o) else {
            self.stats.unrouted += 1;
            return;
        };
        self.stats.requested[o] += 1;
        if out.push(pkt).is_some() {
            self.stats.dropped[o] += 1;
        }
    }

    /// Queue every packet of `batch` on output `o` (moving the whole
    /// batch, not each packet, when the output is empty).
    #[inline(always)]
    pub fn send_batch(&mut self, o: usize, batch: &mut Batch) {
        let Some(out) = self.out.get_mut(o) else {
            self.stats.unrouted += batch.len() as u64;
            batch.clear();
            return;
        };
        self.stats.requested[o] += batch.len() as u64;
        if out.is_empty() {
            std::mem::swap(out, batch);
        } else {
            for p in batch.drain() {
                if out.push(p).is_some() {
                    self.stats.dropped[o] += 1;
                }
            }
        }
    }

    /// A packet meant for output `o` that could not be made (no buffer
    /// for a copy, a length larger than the buffer): requested and
    /// dropped.
    #[inline(always)]
    pub fn refuse(&mut self, o: usize) {
        if o < self.out.len() {
            self.stats.requested[o] += 1;
            self.stats.dropped[o] += 1;
        } else {
            self.stats.unrouted += 1;
        }
    }

    /// A packet from `input` the handler sends nowhere.
    #[inline(always)]
    pub fn discard(&mut self, input: usize) {
        if let Some(d) = self.stats.discarded.get_mut(input) {
            *d += 1;
        }
    }

    /// A packet sent to a port the loop does not have.
    #[inline(always)]
    pub fn unrouted(&mut self) {
        self.stats.unrouted += 1;
    }

    /// Send every output batch on transmit queue `q % tx_queues` of its
    /// port; drop (and count, and tell the port) what it refuses.
    #[inline]
    fn flush<P: Port + ?Sized>(&mut self, ports: &mut [&mut P], q: usize) {
        for (o, (out, port)) in self.out.iter_mut().zip(ports.iter_mut()).enumerate() {
            if out.is_empty() {
                continue;
            }
            let txq = q % port.tx_queues().max(1);
            // One OR per packet for both marks.
            let marks = out.marks();
            if marks.any() {
                if marks.chained() {
                    let n = drop_too_large(out, &**port);
                    if n > 0 {
                        port.tx_refused(txq, n);
                        self.stats.dropped[o] += n;
                        self.stats.too_large[o] += n;
                    }
                }
                // Offload state the port cannot carry out is done here, in
                // software; what cannot be done at all is dropped.
                if marks.offload() {
                    self.stats.dropped[o] += crate::prepare_tx(out, port.capabilities());
                }
                if out.is_empty() {
                    continue;
                }
            }
            self.stats.sent[o] += port.tx_batch(txq, out) as u64;
            if !out.is_empty() {
                let left = out.len() as u64;
                port.tx_refused(txq, left);
                self.stats.dropped[o] += left;
                out.clear();
            }
        }
    }
}

/// Drop the frames of `out` that `port` cannot carry (chained ones when
/// it takes no chains, any past its maximum frame); returns how many.
#[cold]
#[inline(never)]
pub fn drop_too_large<P: Port + ?Sized>(out: &mut Batch, port: &P) -> u64 {
    let (chains, max) = (port.tx_chains(), port.max_frame());
    let before = out.len();
    out.retain(|p| !p.is_chained() || (chains && p.pkt_len() <= max));
    let n = (before - out.len()) as u64;
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if n > 0 && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            port = port.name(),
            max,
            "{n} frame(s) larger than the port carries dropped (counted in tx_dropped)"
        );
    }
    n
}

/// The loop's buffers and counters (made once, here).
pub struct QueueLoop {
    rx: Batch,
    outs: Outputs,
}

impl QueueLoop {
    /// A loop over `ports` ports (each an input and an output).
    pub fn new(ports: usize) -> QueueLoop {
        QueueLoop {
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

    /// One round: a batch from each receive queue of each port (up to
    /// the count given to [`QueueLoop::new`]) through `handler`, sent at
    /// once. `ports[k]` is port `k`. Returns the packets received.
    #[inline]
    pub fn poll<P: Port + ?Sized, H: QueueHandler + ?Sized>(
        &mut self,
        ports: &mut [&mut P],
        handler: &mut H,
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
                handler.handle(input, &mut self.rx, &mut self.outs);
                if !self.rx.is_empty() {
                    self.outs.stats.discarded[input] += self.rx.len() as u64;
                    self.rx.clear();
                }
                self.outs.flush(ports, q);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{open, OpenOptions};

    /// Every packet back out of the port it came from, every other one
    /// also to the next port; odd inputs discarded.
    struct Echo;

    impl QueueHandler for Echo {
        fn handle(&mut self, input: usize, rx: &mut Batch, out: &mut Outputs) {
            if input == 1 {
                return;
            }
            for (i, p) in rx.drain().enumerate() {
                if i % 2 == 0 {
                    if let Some(c) = p.try_clone() {
                        out.send(1, c);
                    }
                }
                out.send(0, p);
            }
        }
    }

    #[test]
    fn counts_add_up_and_leftovers_are_discarded() {
        let o = OpenOptions::default();
        let mut a = open(&"null:size=60".parse().unwrap(), &o).unwrap();
        let mut b = open(&"null:size=60".parse().unwrap(), &o).unwrap();
        let mut ports: [&mut dyn Port; 2] = [&mut *a, &mut *b];
        let mut lp = QueueLoop::new(2);
        let mut seen = 0;
        while seen < 1000 {
            seen += lp.poll(&mut ports, &mut Echo);
        }
        let s = lp.stats().clone();
        assert_eq!(s.received[0] + s.received[1], seen as u64);
        assert_eq!(
            s.discarded[1], s.received[1],
            "input 1's packets stay in rx"
        );
        assert_eq!(s.requested[0], s.received[0]);
        for o in 0..2 {
            assert_eq!(s.requested[o], s.sent[o] + s.dropped[o]);
        }
        assert_eq!(ports[0].stats().tx_packets, s.sent[0]);
        assert_eq!(ports[1].stats().tx_packets, s.sent[1]);
    }
}
