//! PortInc / QueueInc: a task that receives from a port (all its receive
//! queues in turn, or one queue) into output gate 0.
//!
//! The port fills the gate's batch directly, up to what it holds; how
//! many packets a run takes thus follows the load (SoftNIC §4.5).

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use crate::pipeline::SharedPort;
use nfkit_hw::Batch;

pub struct PortInc {
    port: SharedPort,
    /// `None`: every receive queue in turn.
    queue: Option<usize>,
    next: usize,
}

impl PortInc {
    /// Receive from every queue of `port`.
    pub fn new(port: SharedPort) -> PortInc {
        PortInc {
            port,
            queue: None,
            next: 0,
        }
    }
    /// Receive from queue `queue` of `port` only (QueueInc).
    pub fn queue(port: SharedPort, queue: usize) -> PortInc {
        PortInc {
            port,
            queue: Some(queue),
            next: 0,
        }
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
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_dropped(batch.len() as u64);
        batch.clear();
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let mut port = self.port.lock();
        let q = match self.queue {
            Some(q) => q,
            None => {
                let q = self.next % port.rx_queues().max(1);
                self.next = q + 1;
                q
            }
        };
        let Some(out) = ctx.output(0) else { return };
        let got = port.rx_batch(q, out);
        drop(port);
        ctx.count_created(got as u64);
    }
}

pub(super) fn port_inc(
    args: &mut Args,
    env: &super::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(PortInc::new(env.port(args, "port")?)))
}

pub(super) fn queue_inc(
    args: &mut Args,
    env: &super::BuildEnv,
) -> Result<Box<dyn Module>, ArgError> {
    let port = env.port(args, "port")?;
    let qid = args.u64_or("qid", 0)? as usize;
    let have = port.lock().rx_queues();
    if qid >= have {
        return Err(ArgError::new(
            "qid",
            format!("queue {qid} does not exist (the port has {have})"),
        ));
    }
    Ok(Box::new(PortInc::queue(port, qid)))
}
