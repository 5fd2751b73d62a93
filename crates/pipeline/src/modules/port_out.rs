//! PortOut / QueueOut: send input gate 0 on a port (on the queue of the
//! running worker, or a fixed queue). Packets the port refuses (ring
//! full) are dropped and counted here.
//!
//! Offload state a packet carries (checksums to fill in, a VLAN tag to
//! insert; `nfkit_hw::pool::offload`) is split by the port's
//! capabilities (`Port::capabilities`): what the port does itself is
//! left on the packet for it, the rest is done here in software before
//! the port sees the packet; a packet whose state does not fit it, or
//! asks for segmentation the port cannot do, is dropped and counted
//! (`bad_offload`). A chained frame the port cannot carry (it takes one
//! buffer per frame, or the frame is past its maximum) is dropped and
//! counted (`too_large`).

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use crate::ports::{Dir, PortUse, Queues, SharedPort};
use nfkit_hw::Batch;

crate::modules::declare_class!("PortOut" => port_out, "QueueOut" => queue_out);

pub struct PortOut {
    port: SharedPort,
    queue: Option<usize>,
    /// The port's transmit queues (fixed when it was opened).
    tx_queues: usize,
    /// What the port does itself.
    caps: nfkit_port::Caps,
    /// Packets dropped for offload state software could not carry out.
    bad_offload: u64,
    /// Chained frames the port cannot carry.
    too_large: u64,
}

impl PortOut {
    /// Send on `port`, worker `w` using queue `w % tx_queues`.
    pub fn new(port: SharedPort) -> PortOut {
        PortOut {
            tx_queues: port.tx_queues().max(1),
            caps: port.capabilities(),
            port,
            queue: None,
            bad_offload: 0,
            too_large: 0,
        }
    }
    /// Send on queue `queue` of `port` only (QueueOut).
    pub fn queue(port: SharedPort, queue: usize) -> PortOut {
        PortOut {
            tx_queues: port.tx_queues().max(1),
            caps: port.capabilities(),
            port,
            queue: Some(queue),
            bad_offload: 0,
            too_large: 0,
        }
    }
}

impl PortOut {
    /// Packets with offload state or chains: finish the one, drop the
    /// chains the port cannot carry.
    #[cold]
    #[inline(never)]
    fn marked(&mut self, ctx: &mut Ctx<'_>, marks: nfkit_hw::pool::Marks, batch: &mut Batch) {
        if marks.offload() {
            let bad = nfkit_port::prepare_tx(batch, self.caps);
            self.bad_offload += bad;
            ctx.count_dropped(bad);
        }
        if marks.chained() {
            let (chains, max) = (self.port.tx_chains(), self.port.max_frame());
            let before = batch.len();
            batch.retain(|p| !p.is_chained() || (chains && p.pkt_len() <= max));
            let n = (before - batch.len()) as u64;
            self.too_large += n;
            ctx.count_dropped(n);
        }
    }
}

impl Module for PortOut {
    fn class(&self) -> &'static str {
        if self.queue.is_some() {
            "QueueOut"
        } else {
            "PortOut"
        }
    }
    fn ogates(&self) -> usize {
        0
    }
    fn ports(&self) -> Vec<PortUse> {
        vec![PortUse {
            port: self.port.clone(),
            dir: Dir::Tx,
            queues: self.queue.map_or(Queues::OfWorker, Queues::One),
        }]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let q = self.queue.unwrap_or_else(|| {
            let (w, n) = (ctx.worker(), self.tx_queues);
            // Most workers have a queue of their own: no division.
            if w < n {
                w
            } else {
                w % n
            }
        });
        // One OR per packet (the flags are in the buffer handle).
        let marks = batch.marks();
        if marks.any() {
            self.marked(ctx, marks, batch);
        }
        // The worker owns the queue: no lock. Buffered output (a capture
        // file) is flushed by the pipeline when it pauses.
        let sent = ctx.port_tx(0, q, batch);
        ctx.count_consumed(sent as u64);
        // What is left is dropped and counted by the caller.
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("bad_offload", self.bad_offload),
            ("too_large", self.too_large),
        ]
    }
}

fn port_out(
    args: &mut Args,
    env: &crate::registry::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(PortOut::new(env.port(args, "port")?)))
}

fn queue_out(
    args: &mut Args,
    env: &crate::registry::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    let port = env.port(args, "port")?;
    let qid = args.u64_or("qid", 0)? as usize;
    let have = port.tx_queues();
    if qid >= have {
        return Err(ArgError::new(
            "qid",
            format!("queue {qid} does not exist (the port has {have})"),
        ));
    }
    Ok(Box::new(PortOut::queue(port, qid)))
}
