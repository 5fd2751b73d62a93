//! An initialized 82599 ([`Device`]) seen as a queue-model [`Port`]: each
//! port queue is one hardware RX/TX queue pair over a shared pool.

use nfkit_hw::pool::{Mempool, DEFAULT_BUF_SIZE};
use nfkit_hw::{Bar, Batch, DmaAllocator};
use nfkit_ixgbe::{Device, InitError, RxQueue, TxQueue, MIN_RX_DATA_ROOM};
use nfkit_port::{LinkStatus, Port, QueueStats};

/// Ring slots per queue.
pub const RING_SIZE: usize = 512;
/// Pool entry size: the data room must hold [`MIN_RX_DATA_ROOM`].
pub const BUF_SIZE: usize = 2 * DEFAULT_BUF_SIZE;
const _: () = assert!(BUF_SIZE - nfkit_hw::pool::HEADROOM >= MIN_RX_DATA_ROOM);

/// The queues of one 82599 as a [`Port`].
pub struct IxgbePort<B: Bar + 'static> {
    name: String,
    dev: Device<B>,
    rx: Vec<RxQueue<B>>,
    tx: Vec<TxQueue<B>>,
    pool: Mempool,
}

impl<B: Bar + 'static> IxgbePort<B> {
    /// Open every queue the device was initialized with, with a pool of
    /// enough buffers to fill all rings twice over.
    pub fn new(
        name: &str,
        dev: Device<B>,
        dma: &dyn DmaAllocator,
    ) -> Result<IxgbePort<B>, InitError> {
        let (nrx, ntx) = (dev.config().rx_queues, dev.config().tx_queues);
        let buffers = ((nrx + ntx) * RING_SIZE * 2).max(4096);
        let pool = Mempool::new(dma, name, buffers, BUF_SIZE)
            .map_err(|e| InitError::Config(format!("pool for {name}: {e}")))?;
        let rx = (0..nrx)
            .map(|q| dev.rx_queue(q, &pool, RING_SIZE))
            .collect::<Result<_, _>>()?;
        let tx = (0..ntx)
            .map(|q| dev.tx_queue(q, &pool, RING_SIZE))
            .collect::<Result<_, _>>()?;
        Ok(IxgbePort {
            name: name.to_string(),
            dev,
            rx,
            tx,
            pool,
        })
    }

    pub fn device(&self) -> &Device<B> {
        &self.dev
    }
}

impl<B: Bar + 'static> Port for IxgbePort<B> {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.rx.len()
    }
    fn tx_queues(&self) -> usize {
        self.tx.len()
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        match self.rx.get_mut(queue) {
            Some(q) => q.rx_batch(batch),
            None => 0,
        }
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        match self.tx.get_mut(queue) {
            Some(q) => q.tx_batch(batch),
            None => 0,
        }
    }
    fn queue_stats(&self, queue: usize) -> QueueStats {
        let mut s = QueueStats::default();
        if let Some(q) = self.rx.get(queue) {
            let c = q.counters();
            s.rx_packets = c.packets;
            s.rx_bytes = c.bytes;
            s.rx_errors = c.errors;
        }
        if let Some(q) = self.tx.get(queue) {
            let c = q.counters();
            s.tx_packets = c.packets;
            s.tx_bytes = c.bytes;
            s.tx_errors = c.errors;
        }
        if queue == 0 {
            // Device-wide drops (no descriptor, packet buffer full) are
            // only counted per device: reported on queue 0.
            s.rx_dropped = self.dev.stats().rx_dropped();
        }
        s
    }
    fn link(&self) -> LinkStatus {
        let l = self.dev.link();
        LinkStatus {
            up: l.up,
            speed_mbps: l.speed_mbps,
        }
    }
    fn mac(&self) -> [u8; 6] {
        self.dev.mac()
    }
    fn pool(&self) -> &Mempool {
        &self.pool
    }
}
