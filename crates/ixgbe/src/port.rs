//! The 82599 as a queue-model [`Port`], and the [`opener`] that makes
//! one from a spec: `pci:ADDR` (a real device) or `sim:N` (a simulated
//! one, made by a [`SimSource`] such as `nfkit-lab`'s `SimLab`). Each port
//! queue is one hardware RX/TX queue pair over a pool shared by the
//! port's queues.

use crate::{
    Device, DeviceConfig, InitError, LinkIrq, QueueIrq, RxQueue, TxQueue, MIN_RX_DATA_ROOM,
};
use nfkit_hw::pool::{Mempool, DEFAULT_BUF_SIZE};
use nfkit_hw::{Bar, Batch, Clock, DmaAllocator, PciAddress, PciFunction, SystemClock};
use nfkit_port::{
    LinkStatus, NicOptions, OpenOptions, Opener, Port, PortError, PortSpec, QueueStats, RxWake,
};
use std::sync::Arc;

/// Ring slots per queue.
pub const RING_SIZE: usize = 512;
/// Pool entry size: the data room must hold [`MIN_RX_DATA_ROOM`].
pub const BUF_SIZE: usize = 2 * DEFAULT_BUF_SIZE;
const _: () = assert!(BUF_SIZE - nfkit_hw::pool::HEADROOM >= MIN_RX_DATA_ROOM);

/// The queues of one 82599 as a [`Port`], or one queue pair of it
/// ([`Port::split_queues`]).
pub struct IxgbePort<B: Bar + 'static> {
    name: String,
    dev: Device<B>,
    /// The queues held: `rx[i]` is receive queue `base + i` (all of them
    /// from 0, or the one pair of a part).
    rx: Vec<RxQueue<B>>,
    tx: Vec<TxQueue<B>>,
    base: usize,
    /// The whole port's queue counts.
    rx_count: usize,
    tx_count: usize,
    pool: Mempool,
    /// `irq[i]`: the MSI-X vector of `rx[i]`, if interrupts are set up.
    irq: Vec<Option<QueueIrq<B>>>,
    /// The link-change vector (the whole port only).
    link_irq: Option<LinkIrq<B>>,
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
            base: 0,
            rx_count: nrx,
            tx_count: ntx,
            pool,
            irq: Vec::new(),
            link_irq: None,
        })
    }

    pub fn device(&self) -> &Device<B> {
        &self.dev
    }

    /// Set up MSI-X (`Device::enable_interrupts`) so that a loop that
    /// sleeps when idle is woken by a queue's interrupt. Where the
    /// platform has no MSI-X (sysfs/uio) this is logged and the port is
    /// polled; other errors are returned. Call before splitting the port.
    pub fn enable_interrupts<P: PciFunction<Bar = B>>(
        &mut self,
        pci: &P,
    ) -> Result<bool, PortError> {
        match self.dev.enable_interrupts(pci) {
            Ok(irq) => {
                self.irq = irq.queues;
                self.link_irq = Some(irq.link);
                Ok(true)
            }
            Err(nfkit_hw::HwError::Unsupported(why)) => {
                tracing::info!(port = %self.name, "82599 without interrupts ({why}): the port is polled");
                Ok(false)
            }
            Err(e) => Err(PortError::Hw {
                port: self.name.clone(),
                source: e,
            }),
        }
    }

    /// The link-change interrupt, when interrupts are set up.
    pub fn link_irq(&self) -> Option<&LinkIrq<B>> {
        self.link_irq.as_ref()
    }

    fn queue_irq(&self, queue: usize) -> Option<&QueueIrq<B>> {
        self.irq
            .get(queue.wrapping_sub(self.base))
            .and_then(|i| i.as_ref())
    }
}

impl<B: Bar + 'static> Port for IxgbePort<B> {
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_queues(&self) -> usize {
        self.rx_count
    }
    fn tx_queues(&self) -> usize {
        self.tx_count
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        match self.rx.get_mut(queue.wrapping_sub(self.base)) {
            Some(q) => q.rx_batch(batch),
            None => 0,
        }
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize {
        match self.tx.get_mut(queue.wrapping_sub(self.base)) {
            Some(q) => q.tx_batch(batch),
            None => 0,
        }
    }
    fn queue_stats(&self, queue: usize) -> QueueStats {
        let mut s = QueueStats::default();
        let i = queue.wrapping_sub(self.base);
        if let Some(q) = self.rx.get(i) {
            let c = q.counters();
            s.rx_packets = c.packets;
            s.rx_bytes = c.bytes;
            s.rx_errors = c.errors;
        }
        if let Some(q) = self.tx.get(i) {
            let c = q.counters();
            s.tx_packets = c.packets;
            s.tx_bytes = c.bytes;
            s.tx_errors = c.errors;
        }
        if queue == 0 && self.base == 0 {
            // Device-wide drops (no descriptor, packet buffer full) and
            // oversize frames are only counted per device: reported on
            // queue 0.
            let d = self.dev.stats();
            s.rx_dropped = d.rx_dropped();
            s.rx_errors += d.rx_oversize;
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
    /// A TSO send (`TSO_MAX_SEND`); a frame sent whole is at most the
    /// configured largest frame less its CRC, larger ones are dropped
    /// and counted by the transmit queue.
    fn max_frame(&self) -> usize {
        crate::queue::TSO_MAX_SEND
    }
    /// Chains go out as one data descriptor per segment (§7.2.3.2.4).
    fn tx_chains(&self) -> bool {
        true
    }
    /// IPv4 header, TCP and UDP checksums, the outer IPv4 checksum of a
    /// tunnel, VLAN insertion and TCP segmentation through the context
    /// descriptor (§7.2.3.2.3); receive verdicts when
    /// `DeviceConfig::rx_checksum`.
    fn capabilities(&self) -> nfkit_port::Caps {
        use nfkit_port::cap;
        let mut flags = cap::TX_IP_CSUM
            | cap::TX_L4_CSUM
            | cap::TX_OUTER_IP_CSUM
            | cap::TX_VLAN_INSERT
            | cap::TX_TSO;
        if self.dev.config().rx_checksum {
            flags |= cap::RX_IP_CSUM | cap::RX_L4_CSUM;
        }
        nfkit_port::Caps::new(flags, self.dev.config().max_frame - 4)
    }
    /// The queue's MSI-X eventfd (VFIO or the model); without MSI-X
    /// (uio) the loop keeps polling.
    fn rx_wake(&self, queue: usize) -> RxWake {
        match self.queue_irq(queue) {
            Some(irq) => RxWake::Fd(irq.fd()),
            None => RxWake::Poll,
        }
    }
    fn rx_arm(&mut self, queue: usize) -> bool {
        self.queue_irq(queue).is_some_and(|irq| irq.arm())
    }
    fn rx_disarm(&mut self, queue: usize) {
        if let Some(irq) = self.queue_irq(queue) {
            irq.disarm();
        }
    }
    /// One part per queue pair: receive queue `q` and transmit queue `q`
    /// with the device and the pool shared. Each queue has its own
    /// descriptor ring and its own head and tail registers (RDH/RDT
    /// §8.2.3.8.4-5, TDH/TDT §8.2.3.9.8-9), so parts on different threads
    /// touch no common ring or register on the data path; the pool's
    /// shared paths are thread-safe, and device-wide counters (read on
    /// part 0's queue 0) sit behind the device's own lock.
    fn split_queues(&mut self) -> Option<Vec<Box<dyn Port>>> {
        if self.base != 0 || self.rx.len() != self.rx_count || self.tx.len() != self.tx_count {
            return None; // already a part
        }
        let mut rx = std::mem::take(&mut self.rx).into_iter();
        let mut tx = std::mem::take(&mut self.tx).into_iter();
        let mut irq = std::mem::take(&mut self.irq).into_iter();
        let mut link_irq = self.link_irq.take();
        let parts = (0..self.rx_count.max(self.tx_count))
            .map(|q| {
                Box::new(IxgbePort {
                    name: self.name.clone(),
                    dev: self.dev.clone(),
                    rx: rx.next().into_iter().collect(),
                    tx: tx.next().into_iter().collect(),
                    base: q,
                    rx_count: self.rx_count,
                    tx_count: self.tx_count,
                    pool: self.pool.clone(),
                    irq: irq.next().into_iter().collect(),
                    link_irq: if q == 0 { link_irq.take() } else { None },
                }) as Box<dyn Port>
            })
            .collect();
        Some(parts)
    }
}

/// Initialize the 82599 behind `pci` with `queues` receive and transmit
/// queues, on the system clock.
pub fn init_device<P: PciFunction>(
    pci: &P,
    dma: Arc<dyn DmaAllocator>,
    queues: usize,
) -> Result<Device<P::Bar>, InitError>
where
    P::Bar: 'static,
{
    init_device_with(pci, dma, queues, &NicOptions::default())
}

// The spec parser bounds `mtu=` by the driver's largest frame.
const _: () = assert!(
    nfkit_port::spec::MAX_NIC_MTU + nfkit_port::spec::MTU_OVERHEAD
        == crate::device::MAX_JUMBO_FRAME
);

/// The device configuration a port spec's options ask for: `mtu=` sets
/// the largest frame (MTU + 18, jumbo frames above 1518), `rx_csum=on`
/// the receive checksum verdicts.
pub fn device_config(queues: usize, opts: &NicOptions) -> DeviceConfig {
    DeviceConfig {
        rx_queues: queues,
        tx_queues: queues,
        max_frame: opts.max_frame(),
        rx_checksum: opts.rx_csum,
        ..DeviceConfig::default()
    }
}

/// [`init_device`] with a spec's options ([`device_config`]).
pub fn init_device_with<P: PciFunction>(
    pci: &P,
    dma: Arc<dyn DmaAllocator>,
    queues: usize,
    opts: &NicOptions,
) -> Result<Device<P::Bar>, InitError>
where
    P::Bar: 'static,
{
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    Device::init(pci, dma, clock, device_config(queues, opts))
}

/// Where `sim:N` devices come from: something above this driver that
/// owns the device models (`nfkit-lab`). The driver only initializes
/// what it is given, as it does for a real device.
pub trait SimSource: Send + Sync {
    /// The simulated PCI function.
    type Pci: PciFunction;
    /// Make simulated device `n` (its model running, its wire connected)
    /// and return its PCI function and the memory its DMA reaches.
    fn create(&self, n: usize) -> Result<(Self::Pci, Arc<dyn DmaAllocator>), PortError>;
}

fn init_err(name: &str) -> impl Fn(InitError) -> PortError + '_ {
    move |e| PortError::config(name, format!("initializing {name}: {e}"))
}

/// Simulated device `n` of `sim`, initialized, as a port.
pub fn open_sim<S: SimSource>(
    sim: &S,
    n: usize,
    name: &str,
    queues: usize,
    opts: &NicOptions,
) -> Result<Box<dyn Port>, PortError>
where
    <S::Pci as PciFunction>::Bar: 'static,
{
    let (pci, dma) = sim.create(n)?;
    let dev = init_device_with(&pci, dma.clone(), queues, opts).map_err(init_err(name))?;
    let mut port = IxgbePort::new(name, dev, &*dma).map_err(init_err(name))?;
    port.enable_interrupts(&pci)?;
    Ok(Box::new(port))
}

/// Open a real 82599 at `addr`: VFIO when the device is bound to
/// vfio-pci, else sysfs/uio with hugepage memory. A device whose kernel
/// interface is up, addressed or routed is refused unless `force`; the
/// kernel driver taken from it is bound again when the port is dropped,
/// or at once if opening fails.
pub fn open_pci(
    addr: PciAddress,
    name: &str,
    queues: usize,
    nic: &NicOptions,
    force: bool,
) -> Result<Box<dyn Port>, PortError> {
    let hw = |e: nfkit_hw::HwError| PortError::Hw {
        port: name.to_string(),
        source: e,
    };
    let sysfs_driver = std::fs::read_link(format!("/sys/bus/pci/devices/{addr}/driver"))
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().to_string()));
    if sysfs_driver.as_deref() == Some("vfio-pci") {
        let container = nfkit_hw::vfio::VfioContainer::open().map_err(hw)?;
        let pci = container.device(addr).map_err(hw)?;
        let dma: Arc<dyn DmaAllocator> = Arc::new(container);
        let dev = init_device_with(&pci, dma.clone(), queues, nic).map_err(init_err(name))?;
        let mut port = IxgbePort::new(name, dev, &*dma).map_err(init_err(name))?;
        port.enable_interrupts(&pci)?;
        return Ok(Box::new(port));
    }
    let pci = nfkit_hw::linux::LinuxPci::open(addr).map_err(hw)?;
    let guard = pci
        .sysfs()
        .take_from_kernel(&nfkit_hw::linux::NetView::live(), None, force)
        .map_err(hw)?;
    let dma: Arc<dyn DmaAllocator> = Arc::new(nfkit_hw::linux::HugepageDma::new().map_err(hw)?);
    let dev = init_device_with(&pci, dma.clone(), queues, nic).map_err(init_err(name))?;
    let mut port = IxgbePort::new(name, dev, &*dma).map_err(init_err(name))?;
    // uio_pci_generic has no MSI-X: this logs it and the port is polled
    port.enable_interrupts(&pci)?;
    Ok(nfkit_port::with_guard(Box::new(port), guard))
}

/// The opener of 82599 ports: `pci:ADDR` (any PCI device a registry asks
/// about: add VirtIO's opener after this one so that it is asked first)
/// and `sim:N` from `sim`, each with `queues` queue pairs and the spec's
/// `mtu=` and `rx_csum=` ([`device_config`]).
pub fn opener<S: SimSource + 'static>(queues: usize, sim: Arc<S>) -> impl Opener
where
    <S::Pci as PciFunction>::Bar: 'static,
{
    move |spec: &PortSpec, opts: &OpenOptions| {
        let name = spec.to_string();
        match spec {
            PortSpec::Sim(n, nic) => Some(open_sim(&*sim, *n, &name, queues, nic)),
            PortSpec::Pci(addr, nic) => Some(open_pci(*addr, &name, queues, nic, opts.force)),
            _ => None,
        }
    }
}

impl crate::DeviceStats {
    /// The device-wide counters as a port's: misses and descriptor
    /// shortages are receive drops, CRC and length errors and oversize
    /// frames receive errors.
    pub fn as_port_stats(&self) -> QueueStats {
        QueueStats {
            rx_packets: self.rx_packets,
            rx_bytes: self.rx_bytes,
            rx_dropped: self.rx_missed + self.rx_no_descriptor,
            rx_errors: self.rx_crc_errors + self.rx_length_errors + self.rx_oversize,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            ..QueueStats::default()
        }
    }
}
