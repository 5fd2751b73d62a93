//! An in-memory port for tests: queues of frames in, frames out.
#![allow(dead_code)]

use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_pipeline::ports::SharedPort;
use nfkit_port::{Port, QueueStats};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Frames waiting to be received and frames sent, per queue.
#[derive(Default)]
pub struct Wire {
    pub rx: Vec<VecDeque<Vec<u8>>>,
    pub tx: Vec<Vec<Vec<u8>>>,
    /// Refuse to send more than this many frames per call.
    pub tx_limit: Option<usize>,
    pub stats: Vec<QueueStats>,
    /// What the port says it does itself (`Port::capabilities`).
    pub caps: nfkit_port::Caps,
    /// The offload state each sent frame still had, in order.
    pub tx_offload: Vec<Option<nfkit_hw::pool::Offload>>,
}

pub struct MemPort {
    name: String,
    pool: Mempool,
    pub wire: Arc<Mutex<Wire>>,
    /// A part of a split port: the one queue it serves and counts.
    only: Option<usize>,
}

impl MemPort {
    pub fn new(name: &str, queues: usize) -> MemPort {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, name, 4096, 2048).unwrap();
        let wire = Wire {
            rx: vec![VecDeque::new(); queues],
            tx: vec![Vec::new(); queues],
            tx_limit: None,
            stats: vec![QueueStats::default(); queues],
            caps: nfkit_port::Caps::NONE,
            tx_offload: Vec::new(),
        };
        MemPort {
            name: name.into(),
            pool,
            wire: Arc::new(Mutex::new(wire)),
            only: None,
        }
    }
    /// The port as modules take it, and a handle on its wire.
    pub fn shared(name: &str, queues: usize) -> (SharedPort, Arc<Mutex<Wire>>) {
        let p = MemPort::new(name, queues);
        let wire = p.wire.clone();
        (SharedPort::new(Box::new(p)), wire)
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.wire.lock().rx.len()
    }
    fn tx_queues(&self) -> usize {
        self.wire.lock().tx.len()
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let mut w = self.wire.lock();
        let mut n = 0;
        while !batch.is_full() {
            let Some(f) = w.rx[queue].pop_front() else {
                break;
            };
            let mut p = self.pool.alloc().unwrap();
            p.copy_from(&f).unwrap();
            let _ = batch.push(p);
            w.stats[queue].rx_packets += 1;
            w.stats[queue].rx_bytes += f.len() as u64;
            n += 1;
        }
        n
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        let mut w = self.wire.lock();
        let n = w.tx_limit.unwrap_or(usize::MAX).min(batch.len());
        for p in batch.drain_front(n).collect::<Vec<_>>() {
            w.stats[queue].tx_packets += 1;
            w.stats[queue].tx_bytes += p.len() as u64;
            w.tx[queue].push(p.data().to_vec());
            w.tx_offload.push(p.offload().copied());
        }
        n
    }
    fn queue_stats(&self, queue: usize) -> QueueStats {
        if self.only.is_some_and(|q| q != queue) {
            return QueueStats::default();
        }
        self.wire.lock().stats[queue]
    }
    fn mac(&self) -> [u8; 6] {
        [2, 0, 0, 0, 0, 1]
    }
    fn capabilities(&self) -> nfkit_port::Caps {
        self.wire.lock().caps
    }
    fn pool(&self) -> &Mempool {
        &self.pool
    }
    /// Every part shares the wire (each queue has its own lists).
    fn split_queues(&mut self) -> Option<Vec<Box<dyn Port>>> {
        let queues = self.wire.lock().rx.len();
        Some(
            (0..queues)
                .map(|q| {
                    Box::new(MemPort {
                        name: self.name.clone(),
                        pool: self.pool.clone(),
                        wire: self.wire.clone(),
                        only: Some(q),
                    }) as Box<dyn Port>
                })
                .collect(),
        )
    }
}

/// An Ethernet/IPv4/UDP frame from `sport` to `dport` with `payload`.
pub fn udp(src_mac: [u8; 6], dst_mac: [u8; 6], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

/// An Ethernet/IPv4/TCP frame.
pub fn tcp(src_ip: [u8; 4], dst_ip: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src_ip, dst_ip, 64)
        .tcp(sport, dport, 1, 1024);
    let mut out = Vec::with_capacity(b.size(0));
    b.write(&mut out, &[]).unwrap();
    out
}
