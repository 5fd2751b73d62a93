//! The data path of one worker: modules by id, their gate batches, and
//! the walk that moves a task's output through the graph.
//!
//! Every batch the walk uses is allocated at commit: each output gate
//! has one, plus a stack of spare batches (one per level of the walk).
//! Handing a gate's packets downstream swaps its batch with a spare, so
//! nothing is allocated or copied per packet.

use crate::counters::{GateCounters, ModuleCounters};
use crate::hooks::Tap;
use crate::metadata::Attr;
use crate::module::{Ctx, Module};
use crate::ports::{Owners, PortTable, PortUse};
use nfkit_hw::Batch;
use std::sync::Arc;

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
    igate_taps: Box<[Option<Tap>]>,
    ogate_taps: Box<[Option<Tap>]>,
    /// Where the module's declared ports are in the worker's table.
    port_bind: Box<[usize]>,
}

/// Where a slot's gates lead and what it counts into.
pub(crate) struct Wiring {
    /// Per output gate: (module, input gate), or nowhere.
    pub targets: Box<[Option<(usize, usize)>]>,
    pub counters: Arc<ModuleCounters>,
    pub igate_counters: Box<[Arc<GateCounters>]>,
    pub ogate_counters: Box<[Arc<GateCounters>]>,
    /// Gate hooks, per input and output gate.
    pub igate_taps: Box<[Option<Tap>]>,
    pub ogate_taps: Box<[Option<Tap>]>,
}

impl Slot {
    /// `is_half`: the task-only half of a module whose input side runs
    /// elsewhere. `port_bind`: where its declared ports are in the
    /// worker's table.
    pub fn new(
        module: Box<dyn Module>,
        attrs: Vec<Attr>,
        wiring: Wiring,
        is_half: bool,
        port_bind: Box<[usize]>,
    ) -> Slot {
        Slot {
            module,
            is_half,
            attrs: attrs.into(),
            outs: wiring.targets.iter().map(|_| Batch::new()).collect(),
            targets: wiring.targets,
            counters: wiring.counters,
            igate_counters: wiring.igate_counters,
            ogate_counters: wiring.ogate_counters,
            igate_taps: wiring.igate_taps,
            ogate_taps: wiring.ogate_taps,
            port_bind,
        }
    }
}

/// The modules one worker runs.
pub(crate) struct Runtime {
    pub slots: Vec<Option<Slot>>,
    /// The ports (or queues of them) this worker polls, owned while it runs.
    pub ports: PortTable,
    spare: Vec<Batch>,
    /// What the running module dropped; freed in runs after each call.
    trash: Batch,
    worker: usize,
    /// The receive queues this worker's modules poll: (table index,
    /// queue), what a sleeping worker watches.
    rx_queues: Vec<(usize, usize)>,
    /// Doorbells of the tasks this worker runs that other workers feed
    /// ([`Module::task_doorbell`](crate::Module::task_doorbell)).
    bells: Vec<std::sync::Arc<nfkit_port::Doorbell>>,
}

impl Runtime {
    /// A runtime for a graph of `modules` whose longest walk crosses
    /// `depth` modules (checked against the graph's limit at commit):
    /// one spare batch per level.
    pub fn new(modules: usize, depth: usize) -> Runtime {
        Runtime {
            slots: (0..modules).map(|_| None).collect(),
            ports: PortTable::default(),
            spare: (0..depth.max(1)).map(|_| Batch::new()).collect(),
            trash: Batch::new(),
            worker: 0,
            rx_queues: Vec::new(),
            bells: Vec::new(),
        }
    }

    /// Plan the ports a module declares (`uses`), as run on worker `w`: the index
    /// of each use in this worker's table (none for a queue another
    /// worker owns).
    pub fn bind_ports(&mut self, owners: &Owners, uses: &[PortUse], w: usize) -> Box<[usize]> {
        uses.iter()
            .map(|u| {
                if owners.owns(u, w) {
                    let i = self.ports.plan(&u.port, owners.claim(&u.port, w));
                    if u.dir == crate::ports::Dir::Rx {
                        for q in u.resolve(w) {
                            if !self.rx_queues.contains(&(i, q)) {
                                self.rx_queues.push((i, q));
                            }
                        }
                    }
                    i
                } else {
                    usize::MAX
                }
            })
            .collect()
    }

    /// Whether this worker may sleep when idle: every task it runs
    /// ([`Module::task_sleeps`](crate::Module::task_sleeps)) gets work
    /// only from its receive queues, its class's timer or a doorbell
    /// (collected here for [`Runtime::wake_set`]).
    pub fn tasks_sleep(&mut self, tasks: impl IntoIterator<Item = usize>) -> bool {
        self.bells.clear();
        let mut all = true;
        for t in tasks {
            let Some(s) = self.slots.get(t).and_then(|s| s.as_ref()) else {
                all = false;
                continue;
            };
            all &= s.module.task_sleeps();
            self.bells.extend(s.module.task_doorbell());
        }
        all
    }

    /// The receive queues this worker polls and its tasks' doorbells, as
    /// a set a sleeping loop watches.
    pub fn wake_set(&mut self) -> crate::ports::WorkerWake<'_> {
        crate::ports::WorkerWake::new(&mut self.ports, &self.rx_queues, &self.bells)
    }

    pub fn set_worker(&mut self, worker: usize) {
        self.worker = worker;
    }

    /// Run the task of module `task` and push what it produced through
    /// the graph. Returns (packets, bits) the task produced.
    pub fn run_task(&mut self, task: usize, now: u64) -> (u64, u64) {
        if !self.call(task, now, |module, ctx| module.run_task(ctx)) {
            return (0, 0);
        }
        self.flush(task, now)
    }

    fn process(&mut self, m: usize, igate: usize, batch: &mut Batch, now: u64) {
        let called = self.call(m, now, |module, ctx| {
            module.process(ctx, igate, batch);
            // What the module neither passed on nor released: its drops.
            ctx.count_dropped(batch.len() as u64);
        });
        batch.clear();
        if called {
            self.flush(m, now);
        }
    }

    /// Call `f` with module `m` and its context, then free what it
    /// dropped. False (and no call) if this worker does not run `m`.
    fn call(&mut self, m: usize, now: u64, f: impl FnOnce(&mut dyn Module, &mut Ctx<'_>)) -> bool {
        let Some(slot) = self.slots.get_mut(m).and_then(|s| s.as_mut()) else {
            return false;
        };
        let mut ctx = Ctx::new(
            &mut slot.outs,
            &mut self.trash,
            &slot.attrs,
            &slot.counters,
            now,
            self.worker,
        )
        .with_ports(&mut self.ports, &slot.port_bind);
        f(&mut *slot.module, &mut ctx);
        self.trash.clear();
        true
    }

    /// Hand every non-empty output batch of `m` to the module behind it.
    /// Returns the (packets, bits) that left `m`'s gates, handed on or
    /// dropped (each batch's bits are summed once, here).
    fn flush(&mut self, m: usize, now: u64) -> (u64, u64) {
        let (mut packets, mut bits) = (0u64, 0u64);
        let gates = self.slots[m].as_ref().map_or(0, |s| s.outs.len());
        for g in 0..gates {
            let target = self.slots[m]
                .as_ref()
                .and_then(|s| s.targets[g])
                .filter(|&(t, _)| self.slots[t].is_some());
            let Some(slot) = self.slots[m].as_mut() else {
                break;
            };
            if slot.outs[g].is_empty() {
                continue;
            }
            let (n, b) = (slot.outs[g].len() as u64, batch_bits(&slot.outs[g]));
            packets += n;
            bits += b;
            // The target first: a spare popped for an unconnected gate
            // would be lost (and deep walks starved of spares later).
            let Some((t, ig)) = target else {
                slot.counters.dropped.add(n);
                slot.outs[g].clear();
                continue;
            };
            let Some(mut batch) = self.spare.pop() else {
                // A walk deeper than the graph's (the commit refuses it).
                slot.counters.dropped.add(n);
                slot.outs[g].clear();
                continue;
            };
            std::mem::swap(&mut batch, &mut slot.outs[g]);
            slot.ogate_counters[g].count(n, b);
            if let Some(tap) = &slot.ogate_taps[g] {
                tap.tap(&batch);
            }
            if let Some(s) = self.slots[t].as_ref() {
                if let Some(c) = s.igate_counters.get(ig) {
                    c.count(n, b);
                }
                if let Some(Some(tap)) = s.igate_taps.get(ig) {
                    tap.tap(&batch);
                }
            }
            self.process(t, ig, &mut batch, now);
            self.spare.push(batch);
        }
        (packets, bits)
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
