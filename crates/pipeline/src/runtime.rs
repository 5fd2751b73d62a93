//! The data path of one worker: modules by id, their gate batches, and
//! the walk that moves a task's output through the graph.
//!
//! Every batch the walk uses is allocated at commit: each output gate
//! has one, plus a stack of spare batches (one per level of the walk).
//! Handing a gate's packets downstream swaps its batch with a spare, so
//! nothing is allocated or copied per packet.

use crate::counters::{GateCounters, ModuleCounters};
use crate::graph::Node;
use crate::metadata::Attr;
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;
use std::sync::Arc;

/// Deepest chain of modules one batch may cross in one task run; deeper
/// (a packet loop) is dropped and counted.
pub const MAX_DEPTH: usize = 64;

pub(crate) struct Slot {
    pub module: Box<dyn Module>,
    /// The task-only half of a module whose input side runs elsewhere.
    pub is_half: bool,
    attrs: Box<[Attr]>,
    outs: Box<[Batch]>,
    targets: Box<[Option<(usize, usize)>]>,
    counters: Arc<ModuleCounters>,
    igate_counters: Box<[Arc<GateCounters>]>,
    ogate_counters: Box<[Arc<GateCounters>]>,
}

impl Slot {
    pub fn new(node: &Node, module: Box<dyn Module>, attrs: Vec<Attr>, is_half: bool) -> Slot {
        Slot {
            module,
            is_half,
            attrs: attrs.into(),
            outs: node.ogates.iter().map(|_| Batch::new()).collect(),
            targets: node.ogates.clone().into(),
            counters: node.counters.clone(),
            igate_counters: node.igate_counters.clone().into(),
            ogate_counters: node.ogate_counters.clone().into(),
        }
    }
}

/// The modules one worker runs.
pub(crate) struct Runtime {
    pub slots: Vec<Option<Slot>>,
    spare: Vec<Batch>,
    worker: usize,
}

impl Runtime {
    pub fn new(modules: usize) -> Runtime {
        Runtime {
            slots: (0..modules).map(|_| None).collect(),
            spare: (0..MAX_DEPTH).map(|_| Batch::new()).collect(),
            worker: 0,
        }
    }

    pub fn set_worker(&mut self, worker: usize) {
        self.worker = worker;
    }

    /// Run the task of module `task` and push what it produced through
    /// the graph. Returns (packets, bits) the task produced.
    pub fn run_task(&mut self, task: usize, now: u64) -> (u64, u64) {
        let worker = self.worker;
        let Some(slot) = self.slots.get_mut(task).and_then(|s| s.as_mut()) else {
            return (0, 0);
        };
        let mut ctx = Ctx::new(&mut slot.outs, &slot.attrs, &slot.counters, now, worker);
        slot.module.run_task(&mut ctx);
        let (mut packets, mut bits) = (0u64, 0u64);
        for b in slot.outs.iter() {
            packets += b.len() as u64;
            bits += batch_bits(b);
        }
        self.flush(task, now);
        (packets, bits)
    }

    fn process(&mut self, m: usize, igate: usize, batch: &mut Batch, now: u64) {
        let worker = self.worker;
        let Some(slot) = self.slots.get_mut(m).and_then(|s| s.as_mut()) else {
            batch.clear();
            return;
        };
        let mut ctx = Ctx::new(&mut slot.outs, &slot.attrs, &slot.counters, now, worker);
        slot.module.process(&mut ctx, igate, batch);
        if !batch.is_empty() {
            slot.counters.dropped.add(batch.len() as u64);
            batch.clear();
        }
        self.flush(m, now);
    }

    /// Hand every non-empty output batch of `m` to the module behind it.
    fn flush(&mut self, m: usize, now: u64) {
        let gates = self.slots[m].as_ref().map_or(0, |s| s.outs.len());
        for g in 0..gates {
            let target = self.slots[m]
                .as_ref()
                .and_then(|s| s.targets[g])
                .filter(|&(t, _)| self.slots[t].is_some());
            let Some(slot) = self.slots[m].as_mut() else {
                return;
            };
            if slot.outs[g].is_empty() {
                continue;
            }
            let (Some((t, ig)), Some(mut b)) = (target, self.spare.pop()) else {
                // Unconnected gate, or the walk is too deep (a loop).
                slot.counters.dropped.add(slot.outs[g].len() as u64);
                slot.outs[g].clear();
                continue;
            };
            std::mem::swap(&mut b, &mut slot.outs[g]);
            let (n, bits) = (b.len() as u64, batch_bits(&b));
            slot.ogate_counters[g].count(n, bits);
            if let Some(c) = self.slots[t]
                .as_ref()
                .and_then(|s| s.igate_counters.get(ig))
            {
                c.count(n, bits);
            }
            self.process(t, ig, &mut b, now);
            self.spare.push(b);
        }
    }

    /// Tell every module the workers are pausing.
    pub fn on_pause(&mut self) {
        for s in self.slots.iter_mut().flatten() {
            s.module.on_pause();
        }
    }
}

#[inline]
fn batch_bits(b: &Batch) -> u64 {
    b.iter().map(|p| p.len() as u64 * 8).sum()
}
