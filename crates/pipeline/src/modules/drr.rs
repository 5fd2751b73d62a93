//! DRR (BESS): deficit round robin (Shreedhar & Varghese, SIGCOMM'95)
//! over flows (IPv4 addresses, protocol and ports; everything else is one
//! flow). Packets into gate 0 wait in their flow's queue; the module's
//! task sends them out of gate 0, each active flow in turn getting
//! `quantum` bytes of credit per round. A packet whose flow queue is
//! full, or that would start a flow beyond `num_flows`, is dropped.
//! Queues are linked lists in one slab fixed at start: nothing is
//! allocated per packet.
//!
//! Arguments: `num_flows=N` (default 4096, at most 65536), `quantum=B`
//! (default 1500), `max_flow_queue_size=N` (default 2048), `burst=N`.
//! Commands: `set_quantum_size(quantum=B)`, `set_max_flow_queue_size(max_queue_size=N)`.

use super::classify::{ip, FxMap};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module, DEFAULT_BURST};
use nfkit_hw::{Batch, PktBuf};
use std::collections::VecDeque;

crate::modules::declare_class!("DRR" => build);

pub const MAX_FLOWS: usize = 1 << 16;
/// Packets held by all flows together, at most.
pub const MAX_HELD: usize = 1 << 16;
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Flow {
    key: u128,
    head: u32,
    tail: u32,
    len: u32,
    deficit: u64,
    /// Credit for this turn already given (the last run stopped mid-flow).
    granted: bool,
}

pub struct Drr {
    map: FxMap<u128, u32>,
    flows: Vec<Flow>,
    free_flows: Vec<u32>,
    active: VecDeque<u32>,
    slab: Vec<Option<PktBuf>>,
    next: Vec<u32>,
    free_slot: u32,
    quantum: u64,
    max_queue: u32,
    burst: usize,
}

fn flow_key(d: &[u8]) -> u128 {
    let Some((ihl, proto)) = ip::header(d) else {
        return 0;
    };
    let (sp, dp) = ip::ports(d, ihl, proto).unwrap_or((0, 0));
    (ip::addr(d, ip::IP_SRC) as u128) << 72
        | (ip::addr(d, ip::IP_DST) as u128) << 40
        | (proto as u128) << 32
        | (sp as u128) << 16
        | dp as u128
        | 1 << 127
}

impl Drr {
    pub fn new(num_flows: usize, quantum: u64, max_queue: u32, burst: usize) -> Drr {
        let held = MAX_HELD.min(num_flows * max_queue as usize).max(1);
        let mut map = FxMap::default();
        map.reserve(num_flows);
        Drr {
            map,
            flows: vec![
                Flow {
                    key: 0,
                    head: NIL,
                    tail: NIL,
                    len: 0,
                    deficit: 0,
                    granted: false
                };
                num_flows
            ],
            free_flows: (0..num_flows as u32).rev().collect(),
            active: VecDeque::with_capacity(num_flows),
            slab: (0..held).map(|_| None).collect(),
            next: (1..=held as u32)
                .map(|i| if i as usize == held { NIL } else { i })
                .collect(),
            free_slot: 0,
            quantum,
            max_queue,
            burst,
        }
    }

    fn enqueue(&mut self, p: PktBuf) -> Result<(), PktBuf> {
        let slot = self.free_slot;
        if slot == NIL {
            return Err(p);
        }
        let key = flow_key(p.data());
        let f = match self.map.get(&key) {
            Some(&f) if self.flows[f as usize].len >= self.max_queue => return Err(p),
            Some(&f) => f,
            None => {
                let Some(f) = self.free_flows.pop() else {
                    return Err(p);
                };
                self.map.insert(key, f);
                self.flows[f as usize] = Flow {
                    key,
                    head: NIL,
                    tail: NIL,
                    len: 0,
                    deficit: 0,
                    granted: false,
                };
                self.active.push_back(f);
                f
            }
        };
        self.free_slot = self.next[slot as usize];
        self.slab[slot as usize] = Some(p);
        self.next[slot as usize] = NIL;
        let flow = &mut self.flows[f as usize];
        if flow.tail == NIL {
            flow.head = slot;
        } else {
            self.next[flow.tail as usize] = slot;
        }
        flow.tail = slot;
        flow.len += 1;
        Ok(())
    }

    fn head_len(&self, f: &Flow) -> Option<u64> {
        self.slab
            .get(f.head as usize)?
            .as_ref()
            .map(|p| p.len() as u64)
    }

    fn dequeue(&mut self, fi: u32) -> Option<PktBuf> {
        let f = &mut self.flows[fi as usize];
        let slot = f.head;
        let p = self.slab.get_mut(slot as usize)?.take()?;
        f.head = self.next[slot as usize];
        if f.head == NIL {
            f.tail = NIL;
        }
        f.len -= 1;
        self.next[slot as usize] = self.free_slot;
        self.free_slot = slot;
        Some(p)
    }
}

impl Module for Drr {
    fn class(&self) -> &'static str {
        "DRR"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            if let Err(p) = self.enqueue(p) {
                ctx.drop_packet(p);
            }
        }
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let mut sent = 0;
        while sent < self.burst {
            let Some(&fi) = self.active.front() else {
                break;
            };
            let mut f = self.flows[fi as usize];
            if !f.granted {
                f.deficit += self.quantum;
                f.granted = true;
            }
            self.flows[fi as usize] = f;
            while sent < self.burst {
                let Some(len) = self.head_len(&self.flows[fi as usize]) else {
                    break;
                };
                if len > self.flows[fi as usize].deficit {
                    break;
                }
                self.flows[fi as usize].deficit -= len;
                if let Some(p) = self.dequeue(fi) {
                    ctx.emit(0, p);
                    sent += 1;
                }
            }
            let fits = self
                .head_len(&self.flows[fi as usize])
                .map(|l| l <= self.flows[fi as usize].deficit);
            match fits {
                None => {
                    // Empty: the flow ends (and its credit with it).
                    let key = self.flows[fi as usize].key;
                    self.active.pop_front();
                    self.map.remove(&key);
                    self.free_flows.push(fi);
                }
                // The burst ended mid-turn: the flow keeps its turn.
                Some(true) => {}
                Some(false) => {
                    self.flows[fi as usize].granted = false;
                    self.active.pop_front();
                    self.active.push_back(fi);
                }
            }
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "set_quantum_size" => {
                let q = args.u64("quantum")?.filter(|&q| q > 0).ok_or_else(|| {
                    ArgError::new("quantum", "must be a positive number of bytes")
                })?;
                args.finish(cmd)?;
                self.quantum = q;
            }
            "set_max_flow_queue_size" => {
                let q = args
                    .u64("max_queue_size")?
                    .filter(|&q| q > 0 && q <= MAX_HELD as u64)
                    .ok_or_else(|| {
                        ArgError::new("max_queue_size", format!("must be 1 to {MAX_HELD}"))
                    })?;
                args.finish(cmd)?;
                self.max_queue = q as u32;
            }
            _ => return Err(ArgError::general(format!("DRR has no command `{cmd}`"))),
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        let held: u32 = self
            .active
            .iter()
            .map(|&f| self.flows[f as usize].len)
            .sum();
        vec![("flows", self.active.len() as u64), ("held", held as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let num_flows = args.usize_in("num_flows", 4096, 1, MAX_FLOWS)?;
    let quantum = args.u64_or("quantum", 1500)?;
    if quantum == 0 {
        return Err(ArgError::new(
            "quantum",
            "must be a positive number of bytes",
        ));
    }
    let max_queue = args.usize_in("max_flow_queue_size", 2048, 1, MAX_HELD)?;
    let burst = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
    Ok(Box::new(Drr::new(
        num_flows,
        quantum,
        max_queue as u32,
        burst,
    )))
}
