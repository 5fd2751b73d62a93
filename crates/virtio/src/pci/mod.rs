//! VirtIO over PCI: the device-initialisation sequence of VirtIO 1.2
//! §3.1.1, written once against [`PciTransport`], which the legacy
//! (I/O-port BAR0, §4.1.4.8) and modern (capabilities, §4.1.4)
//! register layouts implement.
//!
//! Interrupts: with MSI-X enabled on the function (VFIO,
//! `PciFunction::enable_msix`), receive queue *k* signals vector *k*
//! (`queue_msix_vector`, §4.1.5.1.2 modern, §4.1.4.8 legacy) and an idle
//! loop sleeps on its eventfd ([`nfkit_port::Port::rx_wake`]); transmit
//! and control queues and configuration changes get no vector. A device
//! without MSI-X over VFIO raises its INTx line instead: every receive
//! queue sleeps on the line's eventfd, and arming a queue reads the ISR
//! (which lowers the line) before it unmasks the line ([`PciNet::with_intx`]).
//! Without either (uio) the queues are polled.

pub mod legacy;
pub mod modern;

use crate::ctrl::ControlQueue;
use crate::error::VirtioError;
use crate::net::{NetDevice, NetParts, Notify, RxQueue, TxQueue};
use crate::spec::{feature, net as spec, status};
use crate::virtqueue::{LayoutKind, Virtqueue};
use nfkit_hw::{poll_until, Clock, DmaAllocator, EventFd, HwError, Mempool, PciFunction};
use std::sync::Arc;
use std::time::Duration;

pub use legacy::LegacyTransport;
pub use modern::ModernTransport;

/// One register layout of a VirtIO PCI device.
pub trait PciTransport: Notify + Sync {
    /// Which ring layout the device expects.
    fn layout(&self) -> LayoutKind;
    fn status(&self) -> Result<u8, HwError>;
    fn set_status(&self, status: u8) -> Result<(), HwError>;
    fn device_features(&self) -> Result<u64, HwError>;
    fn set_driver_features(&self, features: u64) -> Result<(), HwError>;
    /// Select queue `q`, settle its size (legacy: the device's; modern:
    /// at most `wanted`), return it (0 = no such queue).
    fn queue_size(&mut self, q: u16, wanted: u16) -> Result<u16, HwError>;
    /// Tell the device where queue `q` lives and enable it.
    fn enable_queue(&mut self, q: u16, vq: &Virtqueue) -> Result<(), HwError>;
    /// Read the network device configuration (§5.1.4).
    fn read_config(&self, offset: usize, buf: &mut [u8]) -> Result<(), HwError>;
    /// Whether FEATURES_OK exists (modern) or not (legacy, §3.1.2).
    fn has_features_ok(&self) -> bool;
    /// Give queue `q` MSI-X vector `vector` ([`NO_VECTOR`]: none); returns
    /// what the device reads back (NO_VECTOR if it refused).
    fn set_queue_vector(&mut self, q: u16, vector: u16) -> Result<u16, HwError> {
        let _ = (q, vector);
        Err(HwError::Unsupported("no MSI-X vector registers".into()))
    }
    /// Read (and so clear) the ISR status (§4.1.4.5): acknowledges INTx.
    fn read_isr(&self) -> Result<u8, HwError> {
        Err(HwError::Unsupported("no ISR register".into()))
    }
    /// The vector for configuration changes, read back likewise.
    fn set_config_vector(&mut self, vector: u16) -> Result<u16, HwError> {
        let _ = vector;
        Err(HwError::Unsupported("no MSI-X vector registers".into()))
    }
}

/// The MSI-X vector value that means "no vector" (§4.1.4.3, §4.1.4.8).
pub const NO_VECTOR: u16 = 0xffff;

/// What to ask of the device.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Name of the port (its spec string).
    pub name: String,
    /// Queue pairs wanted (more than 1 needs VIRTIO_NET_F_MQ).
    pub queue_pairs: u16,
    /// Largest ring size wanted (modern devices accept smaller rings).
    pub queue_size: u16,
    /// Packet buffers in the receive pool (0: 2 × rings + 512).
    pub pool_size: usize,
    pub promiscuous: bool,
    /// Bound of each wait on the device.
    pub timeout: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            name: "virtio".into(),
            queue_pairs: 1,
            queue_size: 256,
            pool_size: 0,
            promiscuous: true,
            timeout: Duration::from_millis(500),
        }
    }
}

/// A network device on PCI, with its control queue.
pub struct PciNet<T: PciTransport> {
    dev: NetDevice<T>,
    ctrl: Option<ControlQueue>,
    clock: Arc<dyn Clock>,
    /// Per receive queue, the eventfd its MSI-X vector signals (`None`:
    /// polled).
    wake: Vec<Option<Arc<EventFd>>>,
    /// The INTx line every receive queue sleeps on, without MSI-X.
    intx: Option<nfkit_hw::vfio::Intx>,
    /// What must outlive the device's use (the VFIO device of a legacy
    /// function, whose registers go through another descriptor).
    _keep: Option<Box<dyn std::any::Any + Send>>,
}

impl<T: PciTransport> std::fmt::Debug for PciNet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PciNet").field("dev", &self.dev).finish()
    }
}

/// Check that `pci` is a VirtIO network device; returns its device ID.
pub fn check_device(pci: &impl PciFunction) -> Result<u16, VirtioError> {
    let vendor = pci.config_read16(nfkit_hw::pci::config::VENDOR_ID)?;
    let device = pci.config_read16(nfkit_hw::pci::config::DEVICE_ID)?;
    let addr = pci.address().to_string();
    if vendor == 0xffff {
        return Err(VirtioError::NoDevice { addr });
    }
    if vendor != spec::PCI_VENDOR_ID
        || !matches!(
            device,
            spec::PCI_DEVICE_ID_LEGACY | spec::PCI_DEVICE_ID_MODERN
        )
    {
        return Err(VirtioError::NotVirtioNet {
            addr,
            vendor,
            device,
        });
    }
    Ok(device)
}

/// Features this driver can use, given what the device offers.
fn wanted_features(
    t: &impl PciTransport,
    offered: u64,
    cfg: &NetConfig,
) -> Result<u64, VirtioError> {
    let mut want = feature::NET_F_MAC
        | feature::NET_F_STATUS
        | feature::NET_F_CTRL_VQ
        | feature::NET_F_CTRL_RX
        | feature::F_EVENT_IDX
        | feature::NET_F_CTRL_GUEST_OFFLOADS
        | crate::vnet::DRIVER_OFFLOADS;
    if cfg.queue_pairs > 1 {
        want |= feature::NET_F_MQ;
    }
    let need = match t.layout() {
        // §5.1.6.6: without ANY_LAYOUT a legacy device wants the header
        // in a descriptor of its own; we always put it in the headroom.
        LayoutKind::Legacy => ("VIRTIO_F_ANY_LAYOUT", feature::F_ANY_LAYOUT),
        // §6: a modern device must be offered VERSION_1 back.
        LayoutKind::Modern => ("VIRTIO_F_VERSION_1", feature::F_VERSION_1),
    };
    if offered & need.1 == 0 {
        return Err(VirtioError::MissingFeature {
            name: need.0,
            bit: need.1.trailing_zeros(),
        });
    }
    // ACCESS_PLATFORM: the device translates our addresses through the
    // platform (IOMMU); refusing it makes such a device fail FEATURES_OK.
    want |= need.1 | feature::F_ACCESS_PLATFORM;
    Ok(offered & want)
}

impl<T: PciTransport> PciNet<T> {
    /// Initialise the device as VirtIO 1.2 §3.1.1 orders, set up
    /// `cfg.queue_pairs` queue pairs, and start receiving.
    pub fn init(
        t: T,
        dma: &dyn DmaAllocator,
        clock: Arc<dyn Clock>,
        cfg: &NetConfig,
    ) -> Result<Self, VirtioError> {
        Self::init_with_vectors(t, dma, clock, cfg, Vec::new())
    }

    /// [`PciNet::init`] on a function whose MSI-X is enabled: vector `k`
    /// (signalling `vectors[k]`) goes to receive queue `k`; a queue
    /// beyond the vectors, or whose vector the device refuses, is polled
    /// (logged).
    pub fn init_with_vectors(
        mut t: T,
        dma: &dyn DmaAllocator,
        clock: Arc<dyn Clock>,
        cfg: &NetConfig,
        vectors: Vec<Arc<EventFd>>,
    ) -> Result<Self, VirtioError> {
        // 1. Reset, and wait until the device says it is reset.
        t.set_status(status::RESET)?;
        wait(&*clock, cfg.timeout, "reset", || {
            Ok(t.status()? == status::RESET)
        })?;
        // 2-3. We noticed it, and we can drive it.
        t.set_status(status::ACKNOWLEDGE)?;
        t.set_status(status::ACKNOWLEDGE | status::DRIVER)?;
        // 4. Negotiate.
        let offered = t.device_features()?;
        let features = wanted_features(&t, offered, cfg)?;
        t.set_driver_features(features)?;
        let mut s = status::ACKNOWLEDGE | status::DRIVER;
        if t.has_features_ok() {
            // 5-6. FEATURES_OK, and check that it stuck.
            s |= status::FEATURES_OK;
            t.set_status(s)?;
            if t.status()? & status::FEATURES_OK == 0 {
                t.set_status(status::FAILED)?;
                return Err(VirtioError::FeaturesRefused {
                    offered,
                    wanted: features,
                });
            }
        }
        // 7. Device-specific setup: the queues (§5.1.5).
        let (rx, tx, ctrl, max_pairs, vectored) =
            match setup_queues(&mut t, dma, features, cfg, vectors.len()) {
                Ok(q) => q,
                Err(e) => {
                    t.set_status(status::FAILED)?;
                    return Err(e);
                }
            };
        // 8. DRIVER_OK: the device is live.
        t.set_status(s | status::DRIVER_OK)?;
        let after = t.status()?;
        if after & (status::FAILED | status::DEVICE_NEEDS_RESET) != 0 {
            return Err(VirtioError::DeviceFailed {
                step: "DRIVER_OK",
                status: after,
            });
        }
        let mac = read_mac(&t, features)?;
        let pairs = rx.len();
        let pool_size = match cfg.pool_size {
            0 => rx.iter().map(|q| q.vq.size() as usize * 2).sum::<usize>() + 512,
            n => n,
        };
        let pool = Mempool::new(
            dma,
            &format!("{}-rx", cfg.name),
            pool_size,
            nfkit_hw::pool::DEFAULT_BUF_SIZE,
        )?;
        // §5.1.6: num_buffers is there with VERSION_1 or MRG_RXBUF.
        let hdr_len = if features & (feature::F_VERSION_1 | feature::NET_F_MRG_RXBUF) != 0 {
            spec::HDR_LEN_MODERN
        } else {
            spec::HDR_LEN_LEGACY
        };
        let dev = NetDevice::start(NetParts {
            name: cfg.name.clone(),
            mac,
            notify: t,
            hdr_len,
            features,
            pool,
            rx,
            tx,
        })?;
        let wake: Vec<Option<Arc<EventFd>>> = vectored
            .iter()
            .enumerate()
            .map(|(k, &ok)| ok.then(|| vectors[k].clone()))
            .collect();
        if !vectors.is_empty() {
            let n = wake.iter().flatten().count();
            tracing::info!(port = %cfg.name, "MSI-X: {n} of {pairs} receive queues signal a vector; an idle loop sleeps on them");
        }
        let mut net = PciNet {
            dev,
            ctrl,
            clock,
            wake,
            intx: None,
            _keep: None,
        };
        // §5.1.6.5.5: the device starts with one pair; ask for more.
        if pairs > 1 {
            net.control(|c, n, clk| c.set_queue_pairs(n, clk, pairs as u16))?;
        }
        // §5.1.6.5.6: say which guest offloads the device may use: those
        // negotiated, which the receive path maps (`crate::vnet`).
        if features & feature::NET_F_CTRL_GUEST_OFFLOADS != 0 {
            // A device whose backend has no offloads may answer ERR (QEMU
            // over a socket netdev does): it then uses none, as negotiated.
            let bits = features & crate::vnet::GUEST_OFFLOADS;
            if let Err(e) = net.control(|c, n, clk| c.set_guest_offloads(n, clk, bits)) {
                tracing::info!(port = %cfg.name, "guest offloads {bits:#x} not set: {e}");
            }
        }
        if cfg.promiscuous && features & feature::NET_F_CTRL_RX != 0 {
            net.control(|c, n, clk| c.set_promiscuous(n, clk, true))?;
        }
        tracing::info!(port = %cfg.name, pairs, max_pairs, features = format_args!("{features:#x}"), "VirtIO-net up");
        Ok(net)
    }

    fn control(
        &mut self,
        f: impl FnOnce(&mut ControlQueue, &dyn Notify, &dyn Clock) -> Result<(), VirtioError>,
    ) -> Result<(), VirtioError> {
        let ctrl = self.ctrl.as_mut().ok_or(VirtioError::MissingFeature {
            name: "VIRTIO_NET_F_CTRL_VQ",
            bit: 17,
        })?;
        f(ctrl, self.dev.transport(), &*self.clock)
    }

    /// Turn promiscuous mode on or off (§5.1.6.5.1).
    pub fn set_promiscuous(&mut self, on: bool) -> Result<(), VirtioError> {
        self.control(|c, n, clk| c.set_promiscuous(n, clk, on))
    }

    /// Sleep on the device's INTx line (VFIO, a device without MSI-X):
    /// every receive queue wakes the loop through its trigger eventfd.
    pub fn with_intx(mut self, intx: nfkit_hw::vfio::Intx) -> Self {
        use nfkit_port::Port;
        let n = self.dev.rx_queues();
        self.wake = vec![Some(intx.trigger.clone()); n];
        self.intx = Some(intx);
        tracing::info!(port = %self.dev.name(), "INTx: the {n} receive queues share the device's line; an idle loop sleeps on it");
        self
    }

    /// Keep `owner` alive as long as the device (a VFIO device whose
    /// interrupts or registers the transport uses).
    pub fn keep_alive(mut self, owner: Box<dyn std::any::Any + Send>) -> Self {
        self._keep = Some(owner);
        self
    }

    /// The network device (also reachable through `Port`).
    pub fn device(&self) -> &NetDevice<T> {
        &self.dev
    }
    pub fn device_mut(&mut self) -> &mut NetDevice<T> {
        &mut self.dev
    }
}

impl<T: PciTransport> Drop for PciNet<T> {
    /// Reset the device (§2.1: writing 0 resets it) before the rings and
    /// buffers it may still write to are freed.
    fn drop(&mut self) {
        if let Err(e) = self.dev.transport().set_status(status::RESET) {
            tracing::warn!("resetting the VirtIO device on close: {e}");
        }
    }
}

/// Receive, transmit and control queues, the pairs the device offers,
/// and per receive queue whether it has an MSI-X vector.
type Queues = (
    Vec<RxQueue>,
    Vec<TxQueue>,
    Option<ControlQueue>,
    u16,
    Vec<bool>,
);

fn setup_queues<T: PciTransport>(
    t: &mut T,
    dma: &dyn DmaAllocator,
    features: u64,
    cfg: &NetConfig,
    vectors: usize,
) -> Result<Queues, VirtioError> {
    let max_pairs = if features & feature::NET_F_MQ != 0 {
        let mut b = [0u8; 2];
        t.read_config(spec::CFG_MAX_VIRTQUEUE_PAIRS, &mut b)?;
        u16::from_le_bytes(b).max(1)
    } else {
        1
    };
    let pairs = cfg.queue_pairs.clamp(1, max_pairs);
    let event_idx = features & feature::F_EVENT_IDX != 0;
    let make = |q: u16, t: &mut T| -> Result<Virtqueue, VirtioError> {
        let size = t.queue_size(q, cfg.queue_size)?;
        if size == 0 {
            return Err(VirtioError::NoQueue { queue: q });
        }
        let vq = Virtqueue::new(dma, t.layout(), size, event_idx)?;
        t.enable_queue(q, &vq)?;
        Ok(vq)
    };
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    let mut vectored = Vec::new();
    if vectors > 0 {
        // No interrupt on configuration changes: the link is read when asked.
        t.set_config_vector(NO_VECTOR)?;
    }
    for p in 0..pairs {
        rx.push(RxQueue::new(make(2 * p, t)?, 2 * p));
        tx.push(TxQueue::new(make(2 * p + 1, t)?, 2 * p + 1));
        let mut ok = false;
        if (p as usize) < vectors {
            let got = t.set_queue_vector(2 * p, p)?;
            ok = got == p;
            if !ok {
                tracing::warn!(port = %cfg.name, queue = 2 * p, "the device refused MSI-X vector {p} (read back {got:#x}): this queue is polled");
            }
            // Sent buffers are reclaimed on the next transmit: no vector.
            t.set_queue_vector(2 * p + 1, NO_VECTOR)?;
        }
        vectored.push(ok);
    }
    let ctrl = if features & feature::NET_F_CTRL_VQ != 0 {
        let q = 2 * max_pairs;
        let size = t.queue_size(q, 16)?;
        if size == 0 {
            return Err(VirtioError::NoQueue { queue: q });
        }
        let c = ControlQueue::new(dma, t.layout(), size, q)?;
        t.enable_queue(q, c.virtqueue())?;
        Some(c)
    } else {
        None
    };
    Ok((rx, tx, ctrl, max_pairs, vectored))
}

fn read_mac(t: &impl PciTransport, features: u64) -> Result<[u8; 6], VirtioError> {
    let mut mac = [0u8; 6];
    if features & feature::NET_F_MAC != 0 {
        t.read_config(spec::CFG_MAC, &mut mac)?;
    } else {
        // No MAC from the device: a locally administered one (§5.1.5).
        mac = [0x02, 0, 0, 0, 0, 1];
    }
    Ok(mac)
}

/// A bounded wait on the device; register errors end it early.
pub(crate) fn wait(
    clock: &dyn Clock,
    timeout: Duration,
    step: &'static str,
    mut cond: impl FnMut() -> Result<bool, HwError>,
) -> Result<(), VirtioError> {
    let mut err = None;
    let ok = poll_until(clock, timeout, || match cond() {
        Ok(done) => done,
        Err(e) => {
            err = Some(e);
            true
        }
    });
    if let Some(e) = err {
        return Err(e.into());
    }
    if !ok {
        return Err(VirtioError::Timeout {
            step,
            timeout_ms: timeout.as_millis() as u64,
        });
    }
    Ok(())
}

impl<T: PciTransport> nfkit_port::Port for PciNet<T> {
    fn name(&self) -> &str {
        self.dev.name()
    }
    fn rx_queues(&self) -> usize {
        self.dev.rx_queues()
    }
    fn tx_queues(&self) -> usize {
        self.dev.tx_queues()
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut nfkit_hw::Batch) -> usize {
        self.dev.rx_batch(queue, batch)
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut nfkit_hw::Batch) -> usize {
        self.dev.tx_batch(queue, batch)
    }
    fn tx_refused(&mut self, queue: usize, n: u64) {
        self.dev.tx_refused(queue, n)
    }
    fn queue_stats(&self, queue: usize) -> nfkit_port::QueueStats {
        self.dev.queue_stats(queue)
    }
    fn link(&self) -> nfkit_port::LinkStatus {
        self.dev.link()
    }
    fn mac(&self) -> [u8; 6] {
        self.dev.mac()
    }
    fn pool(&self) -> &Mempool {
        self.dev.pool()
    }
    // What was negotiated: without these the port said one buffer and
    // no chains, and the loops dropped every jumbo frame it received.
    fn max_frame(&self) -> usize {
        nfkit_port::Port::max_frame(&self.dev)
    }
    fn tx_chains(&self) -> bool {
        nfkit_port::Port::tx_chains(&self.dev)
    }
    fn capabilities(&self) -> nfkit_port::Caps {
        nfkit_port::Port::capabilities(&self.dev)
    }
    /// The eventfd of the queue's MSI-X vector, if it has one.
    fn rx_wake(&self, queue: usize) -> nfkit_port::RxWake {
        use std::os::fd::AsRawFd;
        match self.wake.get(queue) {
            Some(Some(fd)) => nfkit_port::RxWake::Fd(fd.as_raw_fd()),
            _ => nfkit_port::RxWake::Poll,
        }
    }
    /// Ask for an interrupt at the next used buffer (event index). On
    /// INTx, then acknowledge what the line carried (reading the ISR
    /// lowers it), forget old signals and unmask it: a used buffer from
    /// now on raises it again (VFIO signals at once if it already is).
    fn rx_arm(&mut self, queue: usize) -> bool {
        if !self.dev.rx_arm(queue) {
            return false;
        }
        let Some(intx) = &self.intx else {
            return true;
        };
        let step = self
            .dev
            .transport()
            .read_isr()
            .map(drop)
            .map_err(|e| e.to_string())
            .and_then(|_| intx.trigger.drain().map(drop).map_err(|e| e.to_string()))
            .and_then(|_| intx.unmask().map_err(|e| e.to_string()));
        if let Err(e) = step {
            tracing::warn!(port = %self.dev.name(), queue, "arming INTx: {e}; polling");
            return false;
        }
        true
    }
    /// Suppress interrupts again and reset the vector's eventfd.
    fn rx_disarm(&mut self, queue: usize) {
        self.dev.rx_disarm(queue);
        if let Some(Some(fd)) = self.wake.get(queue) {
            if let Err(e) = fd.drain() {
                tracing::debug!(port = %self.dev.name(), queue, "draining the interrupt eventfd: {e}");
            }
        }
    }
}
