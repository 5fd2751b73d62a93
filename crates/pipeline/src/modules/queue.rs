//! Queue: packets arriving on input gate 0 wait in a bounded lock-free
//! ring; the module's task takes them out to output gate 0, on whatever
//! worker the task is attached to. Between two workers this is SoftNIC's
//! *chaining* (§4.6): the input side runs on the upstream worker and the
//! task half on the downstream one, sharing only the ring.
//!
//! A full ring drops and counts. Packets waiting in the ring show in the
//! `queued` statistic.
//!
//! The task's worker may sleep when the ring is empty: the input side
//! rings a [`Doorbell`] after each batch it queues, which signals only
//! while the consumer has said it sleeps (no system call per packet; the
//! consumer re-checks the ring after saying so, see `Doorbell`).

use crate::args::{ArgError, Args};
use crate::module::{AdaptiveBurst, Ctx, Module, DEFAULT_BURST};
use crossbeam_queue::ArrayQueue;
use nfkit_hw::{Batch, PktBuf};
use nfkit_port::Doorbell;
use std::sync::Arc;

crate::modules::declare_class!("Queue" => build);

pub struct Queue {
    ring: Arc<ArrayQueue<PktBuf>>,
    burst: AdaptiveBurst,
    task_only: bool,
    /// Rung by the input side; `None` (no eventfd to be had): the task's
    /// worker polls.
    bell: Option<Arc<Doorbell>>,
}

impl Queue {
    /// A queue of `size` packets whose task takes up to `burst` a run.
    pub fn new(size: usize, burst: usize) -> Queue {
        Queue {
            ring: Arc::new(ArrayQueue::new(size.max(1))),
            burst: AdaptiveBurst::new(burst),
            task_only: false,
            bell: match Doorbell::new() {
                Ok(b) => Some(Arc::new(b)),
                Err(e) => {
                    tracing::warn!("Queue: no eventfd for its doorbell ({e}): its task's worker polls");
                    None
                }
            },
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
        let mut queued = 0;
        for p in batch.drain() {
            match self.ring.push(p) {
                Ok(()) => queued += 1,
                Err(p) => ctx.drop_packet(p),
            }
        }
        if queued > 0 {
            if let Some(b) = &self.bell {
                b.ring();
            }
        }
    }
    fn is_task(&self) -> bool {
        true
    }
    fn task_sleeps(&self) -> bool {
        self.bell.is_some()
    }
    fn task_doorbell(&self) -> Option<Arc<Doorbell>> {
        self.bell.clone()
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
            bell: self.bell.clone(),
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
