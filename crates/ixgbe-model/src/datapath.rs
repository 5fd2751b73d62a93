//! The DMA side of the device: which queues are live, delayed write-backs,
//! and one `step` of work (the TX engine in `tx.rs`, the RX engine in
//! `rx.rs`). Owned by whoever runs the device (the lock-step caller or
//! the free-running thread), so the engines need no locks of their own.

use crate::device::{Device, Dir, QUEUES};
use crate::dmacache::DmaCache;
use crate::regs::{bits::*, off};
use crate::wire::RxFrame;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// A live descriptor ring.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ring {
    pub live: bool,
    pub base: u64,
    /// Descriptors in the ring.
    pub count: u32,
    /// The device's head (next descriptor it will use).
    pub head: u32,
}

impl Ring {
    pub fn desc_addr(&self, i: u32) -> u64 {
        self.base + 16 * u64::from(i)
    }
}

/// A write-back held back by the `writeback_delay` fault.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Writeback {
    U64(u64, u64),
    U32(u64, u32),
    /// The queue's interrupt cause (§7.3.1), raised after the write-backs
    /// before it so a woken driver finds them.
    Cause(Dir, usize),
}

pub(crate) struct DataPath {
    queue_gen: u64,
    pub rx: Vec<Ring>,
    pub tx: Vec<Ring>,
    pub active_rx: Vec<usize>,
    pub active_tx: Vec<usize>,
    /// TX frame being assembled from descriptors (reused).
    pub frame: Vec<u8>,
    /// TX descriptors of the packet being assembled: (index, qword0, qword1).
    pub descs: Vec<(u32, u64, u64)>,
    /// Each TX queue's contexts (§7.2.3.2.3), cleared when it is enabled.
    pub tx_ctx: Vec<[Option<crate::offload::TxContext>; crate::offload::CONTEXTS]>,
    /// Frames an offloaded packet became (reused).
    pub out: Vec<Vec<u8>>,
    /// A frame waiting for a descriptor (SRRCTL.DROP_EN clear).
    pub held: Option<RxFrame>,
    pending: VecDeque<(u64, Writeback)>,
    pub steps: u64,
    /// Frames received (for `rx_error_every`).
    pub rx_seen: u64,
    /// DMA was needed but not allowed; reported once per episode.
    pub dma_blocked: bool,
    /// Cached windows onto the driver's DMA memory.
    pub mem: DmaCache,
}

impl DataPath {
    pub fn new() -> DataPath {
        DataPath {
            queue_gen: u64::MAX,
            rx: vec![Ring::default(); QUEUES],
            tx: vec![Ring::default(); QUEUES],
            active_rx: Vec::with_capacity(QUEUES),
            active_tx: Vec::with_capacity(QUEUES),
            frame: Vec::with_capacity(16 * 1024),
            descs: Vec::with_capacity(64),
            tx_ctx: vec![[None; crate::offload::CONTEXTS]; QUEUES],
            out: Vec::new(),
            held: None,
            pending: VecDeque::new(),
            steps: 0,
            rx_seen: 0,
            dma_blocked: false,
            mem: DmaCache::new(),
        }
    }

    /// Follow queue enable/disable (and resets) since the last step.
    fn sync_queues(&mut self, dev: &Device) {
        let gen = dev.queue_gen.load(Ordering::Acquire);
        if gen == self.queue_gen {
            return;
        }
        self.queue_gen = gen;
        self.mem.prune();
        self.active_rx.clear();
        self.active_tx.clear();
        for n in 0..QUEUES {
            for dir in [Dir::Rx, Dir::Tx] {
                let (dctl, head_reg, ring) = match dir {
                    Dir::Rx => (off::rxdctl(n), off::rdh(n), &mut self.rx[n]),
                    Dir::Tx => (off::txdctl(n), off::tdh(n), &mut self.tx[n]),
                };
                let on = dev.regs.get(dctl) & DCTL_ENABLE != 0;
                if on && !ring.live {
                    if dir == Dir::Tx {
                        self.tx_ctx[n] = [None; crate::offload::CONTEXTS];
                    }
                    let (base, len) = dev.ring(dir, n);
                    let count = len / 16;
                    *ring = Ring {
                        live: count > 0,
                        base,
                        count,
                        head: dev.regs.get(head_reg) % count.max(1),
                    };
                } else if !on {
                    ring.live = false;
                }
                if ring.live {
                    match dir {
                        Dir::Rx => self.active_rx.push(n),
                        Dir::Tx => self.active_tx.push(n),
                    }
                }
            }
        }
        if self.active_rx.is_empty() {
            if let Some(f) = self.held.take() {
                dev.wire.recycle_rx(f.data);
            }
        }
    }

    /// Write back now, or later under the `writeback_delay` fault.
    pub fn writeback(&mut self, dev: &Device, wb: Writeback) {
        let delay = dev.cfg.faults.writeback_delay;
        if delay > 0 {
            self.pending.push_back((self.steps + u64::from(delay), wb));
        } else {
            do_writeback(&mut self.mem, dev, wb);
        }
    }

    fn flush_pending(&mut self, dev: &Device) -> usize {
        let mut n = 0;
        while let Some(&(due, wb)) = self.pending.front() {
            if due > self.steps {
                break;
            }
            self.pending.pop_front();
            do_writeback(&mut self.mem, dev, wb);
            n += 1;
        }
        n
    }

    /// One pass over all pending work: delayed write-backs, every live TX
    /// queue up to its tail, and the RX packet buffer into descriptors.
    pub fn step(&mut self, dev: &Device) -> usize {
        self.steps += 1;
        self.sync_queues(dev);
        let mut work = self.flush_pending(dev);
        if !self.dma_allowed(dev) {
            return work;
        }
        work += crate::tx::run(self, dev);
        work += crate::rx::run(self, dev);
        work
    }

    /// The device masters the bus only with PCI COMMAND.BME set (§9.3.3.3)
    /// and CTRL.MASTER_DISABLE clear (§5.2.5.3.2). Work that needs DMA
    /// without it is a driver bug, reported once per episode.
    fn dma_allowed(&mut self, dev: &Device) -> bool {
        if dev.may_dma() {
            self.dma_blocked = false;
            return true;
        }
        let wants = !dev.wire.rx_fifo.is_empty()
            || self
                .active_tx
                .iter()
                .any(|&n| dev.regs.get(off::tdt(n)) != self.tx[n].head);
        if wants && !self.dma_blocked {
            self.dma_blocked = true;
            dev.strict.record("9.3.3.3", || {
                "the device has descriptors or frames to move but may not master the bus (PCI COMMAND.Bus Master Enable clear, CTRL.MASTER_DISABLE set, or in reset)".into()
            });
        }
        false
    }
}

fn do_writeback(mem: &mut DmaCache, dev: &Device, wb: Writeback) {
    let r = match wb {
        Writeback::U64(a, v) => mem.write_u64(&dev.dma, a, v),
        Writeback::U32(a, v) => mem.write_u32(&dev.dma, a, v),
        Writeback::Cause(dir, q) => {
            dev.irq.queue_cause(dir == Dir::Tx, q, dev.now());
            return;
        }
    };
    if let Err(e) = r {
        crate::device::bump(&dev.counters.dma_faults, 1);
        dev.strict
            .record("7.1.5", || format!("write-back outside DMA memory: {e}"));
    }
}
