//! PortOut / QueueOut: send input gate 0 on a port (on the queue of the
//! running worker, or a fixed queue). Packets the port refuses (ring
//! full) are dropped and counted here.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use crate::pipeline::SharedPort;
use nfkit_hw::Batch;

crate::modules::declare_class!("PortOut" => port_out, "QueueOut" => queue_out);

pub struct PortOut {
    port: SharedPort,
    queue: Option<usize>,
}

impl PortOut {
    /// Send on `port`, worker `w` using queue `w % tx_queues`.
    pub fn new(port: SharedPort) -> PortOut {
        PortOut { port, queue: None }
    }
    /// Send on queue `queue` of `port` only (QueueOut).
    pub fn queue(port: SharedPort, queue: usize) -> PortOut {
        PortOut {
            port,
            queue: Some(queue),
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
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let mut port = self.port.lock();
        let q = self.queue.unwrap_or_else(|| {
            let (w, n) = (ctx.worker(), port.tx_queues().max(1));
            // Most workers have a queue of their own: no division.
            if w < n {
                w
            } else {
                w % n
            }
        });
        let sent = port.tx_batch(q, batch);
        drop(port);
        ctx.count_consumed(sent as u64);
        // What is left is dropped and counted by the caller.
    }
    fn on_pause(&mut self) {
        // Buffered output (a capture file) reaches its destination.
        if let Err(e) = self.port.lock().flush() {
            tracing::warn!(error = %e, "flushing a port on pause failed");
        }
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
    let have = port.lock().tx_queues();
    if qid >= have {
        return Err(ArgError::new(
            "qid",
            format!("queue {qid} does not exist (the port has {have})"),
        ));
    }
    Ok(Box::new(PortOut::queue(port, qid)))
}
