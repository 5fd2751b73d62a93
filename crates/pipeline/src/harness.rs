//! A test bench for one module, in the style of BESS's module tests: put
//! crafted packets into an input gate, get back the exact bytes that left
//! each output gate.
//!
//! ```
//! use nfkit_pipeline::harness::run_module;
//! use nfkit_pipeline::modules::MacSwap;
//! let frame: Vec<u8> = (0..14).collect();
//! let out = run_module(&mut MacSwap, 0, &[frame]);
//! assert_eq!(out[0][0][..12], [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5]);
//! ```

use crate::counters::ModuleCounters;
use crate::metadata::{Attr, META_SIZE_BYTES};
use crate::module::{Ctx, Module};
use crate::ports::PortTable;
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool, PktBuf};

/// Most output gates the harness gives a module.
pub const HARNESS_GATES: usize = 1024;

/// Packets out of each output gate, as bytes.
pub type GateOutput = Vec<Vec<Vec<u8>>>;

/// Runs one module outside any pipeline.
pub struct Harness {
    pool: Mempool,
    now_ns: u64,
    worker: usize,
    counters: ModuleCounters,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    /// A bench with its own pool of 1024 buffers of 2 KiB.
    pub fn new() -> Harness {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "harness", 1024, 2048).expect("simulated DMA memory");
        Harness {
            pool,
            now_ns: 0,
            worker: 0,
            counters: ModuleCounters::default(),
        }
    }

    pub fn pool(&self) -> &Mempool {
        &self.pool
    }
    /// Scheduler time the module sees.
    pub fn set_time(&mut self, ns: u64) {
        self.now_ns = ns;
    }
    pub fn set_worker(&mut self, w: usize) {
        self.worker = w;
    }
    /// The module's counters so far (created, consumed, dropped).
    pub fn counters(&self) -> (u64, u64, u64) {
        (
            self.counters.created.get(),
            self.counters.consumed.get(),
            self.counters.dropped.get(),
        )
    }

    /// Where the bench puts the module's attributes: one after another,
    /// in declaration order (no sharing, nothing checked).
    pub fn attrs(module: &dyn Module) -> Vec<Attr> {
        let mut off = 0;
        module
            .attrs()
            .iter()
            .map(|a| {
                let at = Attr::at(off.min(META_SIZE_BYTES - a.size), a.size);
                off += a.size;
                at
            })
            .collect()
    }

    /// Make a packet holding `bytes`.
    pub fn packet(&self, bytes: &[u8]) -> PktBuf {
        let mut p = self.pool.alloc().expect("harness pool has room");
        p.copy_from(bytes).expect("packet fits a 2 KiB buffer");
        p
    }

    /// Feed `packets` to input gate `igate`; `init(i, pkt, attrs)` may
    /// set metadata first.
    pub fn run_with(
        &mut self,
        module: &mut dyn Module,
        igate: usize,
        packets: &[Vec<u8>],
        mut init: impl FnMut(usize, &mut PktBuf, &[Attr]),
    ) -> GateOutput {
        let attrs = Harness::attrs(module);
        let mut outs = Harness::outs(module);
        let mut result: GateOutput = vec![Vec::new(); outs.len()];
        for chunk in packets.chunks(nfkit_hw::pool::MAX_BATCH) {
            let mut batch = Batch::new();
            for (i, bytes) in chunk.iter().enumerate() {
                let mut p = self.packet(bytes);
                init(i, &mut p, &attrs);
                let _ = batch.push(p);
            }
            let mut trash = Batch::new();
            let (mut ports, bind) = PortTable::claim_all(&module.ports());
            let mut ctx = self
                .ctx(&mut outs, &mut trash, &attrs)
                .with_ports(&mut ports, &bind);
            module.process(&mut ctx, igate, &mut batch);
            self.counters.dropped.add(batch.len() as u64);
            collect(&mut outs, &mut result);
        }
        result
    }

    /// One batch per output gate, for at most [`HARNESS_GATES`] gates
    /// (a module with BESS's 8,192 sends to a gate beyond them as to an
    /// unconnected one: a counted drop).
    fn outs(module: &dyn Module) -> Vec<Batch> {
        (0..module.ogates().min(HARNESS_GATES))
            .map(|_| Batch::new())
            .collect()
    }

    /// The context a module sees here: its outputs, a trash batch for
    /// its drops, its attributes, the harness's counters and clock.
    fn ctx<'a>(
        &'a self,
        outs: &'a mut [Batch],
        trash: &'a mut Batch,
        attrs: &'a [Attr],
    ) -> Ctx<'a> {
        Ctx::new(outs, trash, attrs, &self.counters, self.now_ns, self.worker)
    }

    /// Feed `packets` to input gate `igate`.
    pub fn run(
        &mut self,
        module: &mut dyn Module,
        igate: usize,
        packets: &[Vec<u8>],
    ) -> GateOutput {
        self.run_with(module, igate, packets, |_, _, _| {})
    }

    /// Feed one batch to input gate `igate` and return the batches that
    /// left each output gate, packets and metadata intact.
    pub fn process(
        &mut self,
        module: &mut dyn Module,
        igate: usize,
        mut batch: Batch,
    ) -> Vec<Batch> {
        let attrs = Harness::attrs(module);
        let mut outs = Harness::outs(module);
        let mut trash = Batch::new();
        let (mut ports, bind) = PortTable::claim_all(&module.ports());
        let mut ctx = self
            .ctx(&mut outs, &mut trash, &attrs)
            .with_ports(&mut ports, &bind);
        module.process(&mut ctx, igate, &mut batch);
        self.counters.dropped.add(batch.len() as u64);
        outs
    }

    /// Run the module's task once and return the batches that left
    /// each output gate, packets and metadata intact.
    pub fn run_task_batch(&mut self, module: &mut dyn Module) -> Vec<Batch> {
        let attrs = Harness::attrs(module);
        let mut outs = Harness::outs(module);
        let mut trash = Batch::new();
        let (mut ports, bind) = PortTable::claim_all(&module.ports());
        let mut ctx = self
            .ctx(&mut outs, &mut trash, &attrs)
            .with_ports(&mut ports, &bind);
        module.run_task(&mut ctx);
        outs
    }

    /// Run the module's task once.
    pub fn run_task(&mut self, module: &mut dyn Module) -> GateOutput {
        let attrs = Harness::attrs(module);
        let mut outs = Harness::outs(module);
        let mut result: GateOutput = vec![Vec::new(); outs.len()];
        let mut trash = Batch::new();
        let (mut ports, bind) = PortTable::claim_all(&module.ports());
        let mut ctx = self
            .ctx(&mut outs, &mut trash, &attrs)
            .with_ports(&mut ports, &bind);
        module.run_task(&mut ctx);
        collect(&mut outs, &mut result);
        result
    }
}

fn collect(outs: &mut [Batch], result: &mut GateOutput) {
    for (g, b) in outs.iter_mut().enumerate() {
        result[g].extend(b.iter().map(|p| p.data().to_vec()));
        b.clear();
    }
}

/// Feed `packets` to input gate `igate` of `module` on a fresh bench and
/// return the packets that left each output gate.
pub fn run_module(module: &mut dyn Module, igate: usize, packets: &[Vec<u8>]) -> GateOutput {
    Harness::new().run(module, igate, packets)
}
