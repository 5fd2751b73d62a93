//! Queue: packets arriving on input gate 0 wait in a bounded lock-free
//! ring; the module's task takes them out to output gate 0, on whatever
//! worker the task is attached to. Between two workers this is SoftNIC's
//! *chaining* (§4.6): the input side runs on the upstream worker and the
//! task half on the downstream one, sharing only the ring.
//!
//! A full ring drops and counts. Packets waiting in the ring show in the
//! `queued` statistic.

use crate::args::{ArgError, Args};
use crate::module::{AdaptiveBurst, Ctx, Module, DEFAULT_BURST};
use crossbeam_queue::ArrayQueue;
use nfkit_hw::{Batch, PktBuf};
use std::sync::Arc;

crate::modules::declare_class!("Queue" => build);

pub struct Queue {
    ring: Arc<ArrayQueue<PktBuf>>,
    burst: AdaptiveBurst,
    task_only: bool,
}

impl Queue {
    /// A queue of `size` packets whose task takes up to `burst` a run.
    pub fn new(size: usize, burst: usize) -> Queue {
        Queue {
            ring: Arc::new(ArrayQueue::new(size.max(1))),
            burst: AdaptiveBurst::new(burst),
            task_only: false,
        }
    }
}

impl Module for Queue {
    fn class(&self) -> &'static str {
        "Queue"
    }
    fn igates(&self) -> usize {
        if self.task_only {
            0
        } else {
            1
        }
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            if let Err(p) = self.ring.push(p) {
                ctx.drop_packet(p);
            }
        }
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let want = self.burst.next();
        let Some(out) = ctx.output(0) else { return };
        let mut got = 0;
        while got < want {
            let Some(p) = self.ring.pop() else { break };
            // Cannot be full: the gate batch is empty at the start of a
            // run and `want` is at most the batch size.
            let _ = out.push(p);
            got += 1;
        }
        self.burst.record(got);
    }
    fn task_half(&mut self) -> Option<Box<dyn Module>> {
        Some(Box::new(Queue {
            ring: self.ring.clone(),
            burst: AdaptiveBurst::new(self.burst.cap()),
            task_only: true,
        }))
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("queued", self.ring.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let size = args.usize_in("size", 1024, 1, 1 << 20)?;
    let burst = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
    Ok(Box::new(Queue::new(size, burst)))
}
