//! PortInc / QueueInc: a task that receives from a port (all its receive
//! queues in turn, or one queue) into output gate 0.
//!
//! A run hands on at most `burst` packets (32 by default), and fewer
//! while the port keeps up: the batch grows only while every run finds
//! the port backed up (SoftNIC §4.5). `Port::rx_batch` fills whatever
//! room a batch has, so the port receives into a carry-over batch owned
//! by the module, and runs take from its front; packets waiting there
//! show in the `queued` statistic.

use crate::args::{ArgError, Args};
use crate::module::{AdaptiveBurst, Ctx, Module, DEFAULT_BURST};
use crate::ports::{Dir, PortUse, Queues, SharedPort};
use nfkit_hw::Batch;

crate::modules::declare_class!("PortInc" => port_inc, "QueueInc" => queue_inc);

pub struct PortInc {
    port: SharedPort,
    /// `None`: every receive queue in turn.
    queue: Option<usize>,
    /// The port's receive queues (fixed when it was opened).
    rx_queues: usize,
    next: usize,
    burst: AdaptiveBurst,
    carry: Batch,
}

impl PortInc {
    /// Receive from every queue of `port`.
    pub fn new(port: SharedPort) -> PortInc {
        PortInc::with(port, None, DEFAULT_BURST)
    }
    /// Receive from queue `queue` of `port` only (QueueInc).
    pub fn queue(port: SharedPort, queue: usize) -> PortInc {
        PortInc::with(port, Some(queue), DEFAULT_BURST)
    }
    /// Hand on at most `burst` packets a run.
    pub fn with_burst(mut self, burst: usize) -> PortInc {
        self.burst = AdaptiveBurst::new(burst);
        self
    }
    fn with(port: SharedPort, queue: Option<usize>, burst: usize) -> PortInc {
        PortInc {
            rx_queues: port.rx_queues(),
            port,
            queue,
            next: 0,
            burst: AdaptiveBurst::new(burst),
            carry: Batch::new(),
        }
    }

    /// Refill the carry-over batch from the port when it is empty.
    fn receive(&mut self, ctx: &mut Ctx<'_>) {
        if !self.carry.is_empty() {
            return;
        }
        let q = match self.queue {
            Some(q) => q,
            None => {
                // Each queue in turn, wrapped by comparison (no `%`).
                let q = if self.next < self.rx_queues {
                    self.next
                } else {
                    0
                };
                self.next = q + 1;
                q
            }
        };
        // The worker owns the queue: no lock.
        let got = ctx.port_rx(0, q, &mut self.carry);
        ctx.count_created(got as u64);
    }
}

impl Module for PortInc {
    fn class(&self) -> &'static str {
        if self.queue.is_some() {
            "QueueInc"
        } else {
            "PortInc"
        }
    }
    fn igates(&self) -> usize {
        0
    }
    fn ports(&self) -> Vec<PortUse> {
        vec![PortUse {
            port: self.port.clone(),
            dir: Dir::Rx,
            queues: self.queue.map_or(Queues::All, Queues::One),
        }]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_dropped(batch.len() as u64);
        batch.clear();
    }
    fn is_task(&self) -> bool {
        true
    }
    fn task_sleeps(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        self.receive(ctx);
        let want = self.burst.next();
        let have = self.carry.len();
        let take = want.min(have);
        // "Full" when the port had at least what we asked for.
        self.burst.record(if have >= want { want } else { take });
        let Some(out) = ctx.output(0) else { return };
        if take == have && out.is_empty() {
            // All of it: the two batches trade buffers.
            std::mem::swap(out, &mut self.carry);
            return;
        }
        for p in self.carry.drain_front(take) {
            // Cannot fail: the gate batch is empty and `take` <= its size.
            let _ = out.push(p);
        }
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("queued", self.carry.len() as u64)]
    }
}

fn burst(args: &mut Args) -> Result<usize, ArgError> {
    args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)
}

fn port_inc(
    args: &mut Args,
    env: &crate::registry::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    let port = env.port(args, "port")?;
    Ok(Box::new(PortInc::new(port).with_burst(burst(args)?)))
}

fn queue_inc(
    args: &mut Args,
    env: &crate::registry::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    let port = env.port(args, "port")?;
    let qid = args.u64_or("qid", 0)? as usize;
    let have = port.rx_queues();
    if qid >= have {
        return Err(ArgError::new(
            "qid",
            format!("queue {qid} does not exist (the port has {have})"),
        ));
    }
    Ok(Box::new(PortInc::queue(port, qid).with_burst(burst(args)?)))
}
