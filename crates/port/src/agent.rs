//! The agent API (TinyNF's driver model) over any queue-model ports.
//!
//! An NF is a handler per input port, with the signature of the 82599
//! agent model: `handler(buffer, len, outputs)`. `buffer` is the packet's
//! whole buffer (the packet at its start, `len` bytes long, with the
//! buffer's free space after it); the handler changes it in place and
//! writes, for each port, the length to send on it (`0` = not on that
//! output). Lengths are `u16`, as in `nfkit_ixgbe::Agent`, so one handler
//! runs on both. The adapter receives a batch, runs the handler on each packet,
//! and sends: the original buffer to the last output chosen, a fresh copy
//! to every other one (a packet on two outputs needs two buffers here,
//! where the 82599 agent model shares one).
//!
//! Counting: per output, `requested = sent + dropped` (dropped: TX ring
//! full, no buffer for a copy, or a length larger than the buffer); per
//! input, `received = discarded + packets sent on at least one output or
//! dropped`.

use crate::queue::{Outputs, QueueHandler, QueueLoop};
use crate::{Batch, PktBuf, Port};

/// What an agent does with each packet, on 82599 agents
/// (`nfkit_ixgbe::Agent`) and through [`AgentAdapter`] alike: `buffer`
/// is the whole packet buffer; its first `len` bytes are the received
/// frame, to be read or rewritten in place. Set `out_lens[k]` to the
/// number of bytes of `buffer` to send on output `k`; it is 0 (not sent
/// there) on entry. Any `FnMut(&mut [u8], usize, &mut [u16])` is one.
pub trait PacketHandler {
    fn handle(&mut self, buffer: &mut [u8], len: usize, out_lens: &mut [u16]);
}

impl<F: FnMut(&mut [u8], usize, &mut [u16])> PacketHandler for F {
    #[inline(always)]
    fn handle(&mut self, buffer: &mut [u8], len: usize, out_lens: &mut [u16]) {
        self(buffer, len, out_lens)
    }
}

pub use crate::queue::LoopStats;

/// Runs per-input handlers over a set of ports, on the queue-model loop
/// ([`QueueLoop`]).
pub struct AgentAdapter {
    lp: QueueLoop,
    lens: Vec<u16>,
}

impl AgentAdapter {
    /// An adapter for `ports` ports (each is an input and an output).
    pub fn new(ports: usize) -> AgentAdapter {
        AgentAdapter {
            lp: QueueLoop::new(ports),
            lens: vec![0; ports],
        }
    }

    pub fn stats(&self) -> &LoopStats {
        self.lp.stats()
    }

    /// One round: every RX queue of every port, through that port's
    /// handler. Returns the packets received.
    ///
    /// # Panics
    /// If `ports` and `handlers` do not both have the length given to
    /// [`AgentAdapter::new`] (a programming error, not bad input).
    pub fn poll<H: PacketHandler>(
        &mut self,
        ports: &mut [&mut dyn Port],
        handlers: &mut [H],
    ) -> usize {
        let count = self.lens.len();
        assert!(
            ports.len() == count && handlers.len() == count,
            "AgentAdapter made for {count} ports, given {} ports and {} handlers",
            ports.len(),
            handlers.len()
        );
        self.lp.poll(
            ports,
            &mut Handlers {
                handlers,
                lens: &mut self.lens,
            },
        )
    }
}

/// The per-input handlers as the loop's [`QueueHandler`].
struct Handlers<'a, H> {
    handlers: &'a mut [H],
    lens: &'a mut [u16],
}

impl<H: PacketHandler> QueueHandler for Handlers<'_, H> {
    #[inline]
    fn handle(&mut self, input: usize, rx: &mut Batch, out: &mut Outputs) {
        let Some(handler) = self.handlers.get_mut(input) else {
            return;
        };
        for mut pkt in rx.drain() {
            let len = pkt.len();
            let room = len + pkt.tailroom();
            // Cannot fail: the room is what the buffer has.
            let _ = pkt.set_len(room);
            self.lens.fill(0);
            handler.handle(pkt.data_mut(), len, self.lens);
            let Some(last) = self.lens.iter().rposition(|&l| l > 0) else {
                out.discard(input);
                continue;
            };
            for o in 0..last {
                let l = usize::from(self.lens[o]);
                if l == 0 {
                    continue;
                }
                match (l <= room).then(|| copy_prefix(&pkt, l)).flatten() {
                    Some(c) => out.send(o, c),
                    None => out.refuse(o),
                }
            }
            if pkt.set_len(usize::from(self.lens[last])).is_ok() {
                out.send(last, pkt);
            } else {
                out.refuse(last);
            }
        }
    }
}

/// A fresh buffer from the same pool holding the first `len` bytes of
/// `pkt`, or `None` if the pool is empty.
fn copy_prefix(pkt: &PktBuf, len: usize) -> Option<PktBuf> {
    let mut c = pkt.pool().alloc()?;
    c.copy_from(&pkt.data()[..len]).ok()?;
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{open, OpenOptions};

    #[test]
    fn handler_rewrites_truncates_and_replicates() {
        let o = OpenOptions::default();
        let mut src = open(&"null:size=100".parse().unwrap(), &o).unwrap();
        let mut sink = open(&"null:".parse().unwrap(), &o).unwrap();
        let mut ports: [&mut dyn Port; 2] = [&mut *src, &mut *sink];
        let mut seen = 0;
        let mut handlers = [
            |buf: &mut [u8], len: usize, out: &mut [u16]| {
                assert_eq!(len, 100);
                assert!(buf.len() >= 1900, "the whole buffer is offered");
                buf[0] = 0xee;
                out[1] = 60; // truncated to 60 on port 1
                out[0] = len as u16; // and back out of port 0
            },
            |_: &mut [u8], _: usize, _: &mut [u16]| {},
        ];
        let mut a = AgentAdapter::new(2);
        while seen < 1000 {
            seen += a.poll(&mut ports, &mut handlers);
        }
        let s = a.stats().clone();
        assert_eq!(s.received[0] as usize, seen);
        assert_eq!(s.requested, vec![seen as u64, seen as u64]);
        for o in 0..2 {
            assert_eq!(s.requested[o], s.sent[o] + s.dropped[o]);
        }
        assert_eq!(ports[1].stats().tx_bytes, 60 * s.sent[1]);
        assert_eq!(ports[0].stats().tx_packets, s.sent[0]);
        assert_eq!(s.discarded, vec![0, 0]);
    }
}
