//! The module interface: what one node of the dataflow graph implements.
//!
//! A module receives a batch on one of its input gates, and moves each
//! packet to one of its output gates with [`Ctx::emit`] /
//! [`Ctx::forward`], or drops it. Packets still in the input batch when
//! `process` returns are dropped and counted. A module that produces
//! packets on its own (a port input, a source, the far side of a queue)
//! is a *task*: the scheduler calls its [`Module::run_task`].

use crate::args::{ArgError, Args, Value};
use crate::counters::ModuleCounters;
use crate::metadata::{Attr, AttrSpec};
use crate::ports::{PortTable, PortUse};
use nfkit_hw::{Batch, PktBuf};

/// Most gates a module may have in either direction (BESS's `MAX_GATES`).
/// The graph keeps per-gate state only up to the highest gate in use.
pub const MAX_GATES: usize = 8192;
/// Default largest batch a task produces (SoftNIC §4.5 caps at 32).
pub const DEFAULT_BURST: usize = 32;

/// One node of the pipeline graph.
pub trait Module: Send {
    /// The class name as the config language spells it (`MACSwap`).
    fn class(&self) -> &'static str;
    /// Number of input gates accepted.
    fn igates(&self) -> usize {
        1
    }
    /// Number of output gates.
    fn ogates(&self) -> usize {
        1
    }
    /// Metadata attributes this module reads, writes or updates; the
    /// pipeline assigns their offsets, available through [`Ctx::attr`]
    /// in the same order.
    fn attrs(&self) -> Vec<AttrSpec> {
        Vec::new()
    }
    /// Ports this module polls, and which of their queues; the pipeline
    /// gives each queue one owning worker and the module reaches the
    /// port through [`Ctx::port_rx`] / [`Ctx::port_tx`] with the index
    /// of the use in this list.
    fn ports(&self) -> Vec<PortUse> {
        Vec::new()
    }
    /// Handle a batch that arrived on input gate `igate`.
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch);
    /// Whether the module has a task the scheduler runs.
    fn is_task(&self) -> bool {
        false
    }
    /// Produce packets into the output gates (only if [`is_task`](Module::is_task)).
    fn run_task(&mut self, _ctx: &mut Ctx<'_>) {}
    /// Whether an idle worker may sleep over this task: once a run found
    /// nothing to do, only a packet on a receive queue it declares in
    /// [`ports`](Module::ports) (whose descriptor then wakes the worker)
    /// or its class's rate-limit timer gives it work again. The default,
    /// false, keeps the worker polling (a task fed by another worker, or
    /// paced by its own clock).
    fn task_sleeps(&self) -> bool {
        false
    }
    /// For a task another worker feeds (the `Queue`'s far side): the
    /// doorbell its producer rings, which a sleeping worker watches next
    /// to its receive queues (so [`task_sleeps`](Module::task_sleeps)
    /// may say true).
    fn task_doorbell(&self) -> Option<std::sync::Arc<nfkit_port::Doorbell>> {
        None
    }
    /// For a module whose input side and task may run on different
    /// workers (the `Queue`): a second module that runs only the task,
    /// sharing state with `self`. `None` means the module cannot span
    /// two workers.
    fn task_half(&mut self) -> Option<Box<dyn Module>> {
        None
    }
    /// Called when the workers pause (flush files and buffers).
    fn on_pause(&mut self) {}
    /// Module-specific values for statistics (name, value).
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// A run-time command (BESS's ModuleCommand: `add`, `delete`,
    /// `clear`, `set_default_gate`, ...) with its argument record, run
    /// between batches ([`Pipeline::command`](crate::Pipeline::command),
    /// `.nfk`'s `NAME.CMD(args)`). An implementation reads every
    /// argument, calls `args.finish(cmd)`, checks everything, and only
    /// then changes its state: a command that fails changes nothing.
    /// Returns a result record (an empty list when there is nothing to
    /// say).
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        let _ = args;
        Err(ArgError::general(format!(
            "{} has no command `{cmd}`",
            self.class()
        )))
    }
}

/// What a command that reports nothing returns.
pub fn no_reply() -> Value {
    Value::List(Vec::new())
}

/// What a module sees while it runs: its output gates, its attributes,
/// its counters and the time.
pub struct Ctx<'a> {
    pub(crate) outs: &'a mut [Batch],
    /// Packets dropped during this call, freed together by whoever runs
    /// the module (one pool lock per run of them, not one per packet).
    pub(crate) trash: &'a mut Batch,
    pub(crate) attrs: &'a [Attr],
    pub(crate) counters: &'a ModuleCounters,
    pub(crate) now_ns: u64,
    pub(crate) worker: usize,
    /// The worker's ports, and where the module's declared ones are in it.
    ports: Option<(&'a mut PortTable, &'a [usize])>,
}

impl<'a> Ctx<'a> {
    /// A context over the given parts (for harnesses and custom runners).
    /// Packets the module drops collect in `trash`; the caller clears it
    /// (`Batch::clear` frees them in runs).
    pub fn new(
        outs: &'a mut [Batch],
        trash: &'a mut Batch,
        attrs: &'a [Attr],
        counters: &'a ModuleCounters,
        now_ns: u64,
        worker: usize,
    ) -> Ctx<'a> {
        Ctx {
            outs,
            trash,
            attrs,
            counters,
            now_ns,
            worker,
            ports: None,
        }
    }

    /// The same context with the ports the module declared: use `k` of
    /// [`Module::ports`] is entry `bind[k]` of `table`.
    pub(crate) fn with_ports(mut self, table: &'a mut PortTable, bind: &'a [usize]) -> Ctx<'a> {
        self.ports = Some((table, bind));
        self
    }

    /// Receive into `batch` from queue `queue` of the module's `port`th
    /// declared port ([`Module::ports`]); 0 if this worker does not own
    /// that queue. No lock: the worker owns the queue.
    #[inline]
    pub fn port_rx(&mut self, port: usize, queue: usize, batch: &mut Batch) -> usize {
        match &mut self.ports {
            Some((table, bind)) => match bind.get(port) {
                Some(&i) => crate::ports::rx(table, i, queue, batch),
                None => 0,
            },
            None => 0,
        }
    }

    /// Send from the front of `batch` on queue `queue` of the module's
    /// `port`th declared port; returns how many were sent (0 if this
    /// worker does not own that queue). Unsent packets stay in `batch`.
    #[inline]
    pub fn port_tx(&mut self, port: usize, queue: usize, batch: &mut Batch) -> usize {
        match &mut self.ports {
            Some((table, bind)) => match bind.get(port) {
                Some(&i) => crate::ports::tx(table, i, queue, batch),
                None => 0,
            },
            None => 0,
        }
    }

    /// Send one packet out of `gate`. A packet for a gate the module does
    /// not have, or for a full gate batch, is dropped and counted.
    #[inline]
    pub fn emit(&mut self, gate: usize, pkt: PktBuf) {
        match self.outs.get_mut(gate) {
            Some(out) => {
                if let Some(pkt) = out.push(pkt) {
                    self.drop_packet(pkt);
                }
            }
            None => self.drop_packet(pkt),
        }
    }

    /// Send every packet of `batch` out of `gate` (O(1) when the gate's
    /// batch is empty: the two batches swap buffers).
    #[inline]
    pub fn forward(&mut self, gate: usize, batch: &mut Batch) {
        match self.outs.get_mut(gate) {
            Some(out) if out.is_empty() => std::mem::swap(out, batch),
            Some(_) => {
                for p in batch.drain() {
                    self.emit(gate, p);
                }
            }
            None => {
                self.counters.dropped.add(batch.len() as u64);
                if self.trash.is_empty() {
                    std::mem::swap(self.trash, batch);
                } else {
                    batch.clear();
                }
            }
        }
    }

    /// The pending batch of output gate `gate`, to fill in place (a port
    /// receiving straight into it). Whatever is in it leaves the gate
    /// when the module returns.
    #[inline]
    pub fn output(&mut self, gate: usize) -> Option<&mut Batch> {
        self.outs.get_mut(gate)
    }

    /// Drop a packet, counted as the module's drop.
    #[inline]
    pub fn drop_packet(&mut self, pkt: PktBuf) {
        if let Some(pkt) = self.trash.push(pkt) {
            self.trash.clear();
            let _ = self.trash.push(pkt);
        }
        self.counters.dropped.add(1);
    }

    /// Count `n` drops of packets the module already released.
    #[inline]
    pub fn count_dropped(&mut self, n: u64) {
        self.counters.dropped.add(n);
    }

    /// Count `n` packets that left the pipeline on purpose (sent, sunk).
    #[inline]
    pub fn count_consumed(&mut self, n: u64) {
        self.counters.consumed.add(n);
    }

    /// Count `n` packets the module made (received from a port, copied).
    #[inline]
    pub fn count_created(&mut self, n: u64) {
        self.counters.created.add(n);
    }

    /// The `i`th attribute the module declared in [`Module::attrs`].
    #[inline(always)]
    pub fn attr(&self, i: usize) -> Attr {
        self.attrs.get(i).copied().unwrap_or(Attr::UNUSED)
    }

    /// Scheduler time, in nanoseconds, when this batch started.
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Index of the worker running the module.
    #[inline(always)]
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Number of output gates available.
    pub fn ogates(&self) -> usize {
        self.outs.len()
    }
}

/// Batch-size control for tasks (SoftNIC §4.5, after IX): ask for few
/// packets while the input keeps up, and double the request, up to the
/// cap, while every request comes back full (a queue is building up).
#[derive(Debug, Clone, Copy)]
pub struct AdaptiveBurst {
    current: usize,
    cap: usize,
}

impl AdaptiveBurst {
    pub fn new(cap: usize) -> AdaptiveBurst {
        let cap = cap.clamp(1, nfkit_hw::pool::MAX_BATCH);
        AdaptiveBurst {
            current: cap.min(4),
            cap,
        }
    }
    /// How many packets to ask for now.
    #[inline(always)]
    pub fn next(&self) -> usize {
        self.current
    }
    /// Record that the last request returned `got` packets.
    #[inline]
    pub fn record(&mut self, got: usize) {
        if got >= self.current {
            self.current = (self.current * 2).min(self.cap);
        } else if got < self.current / 2 {
            self.current = (self.current / 2).max(got).max(1);
        }
    }
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::AdaptiveBurst;

    #[test]
    fn burst_grows_under_load_and_shrinks_when_idle() {
        let mut b = AdaptiveBurst::new(32);
        assert_eq!(b.next(), 4);
        for _ in 0..5 {
            let n = b.next();
            b.record(n);
        }
        assert_eq!(b.next(), 32);
        b.record(20);
        assert_eq!(b.next(), 32, "a partly full batch keeps the size");
        b.record(1);
        assert_eq!(b.next(), 16);
        for _ in 0..10 {
            b.record(0);
        }
        assert_eq!(b.next(), 1);
    }
}
