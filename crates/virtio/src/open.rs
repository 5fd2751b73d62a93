//! Opening VirtIO ports from what a user names: a PCI address, a
//! vhost-user socket to serve, a vhost-user socket to connect to. The
//! CLI adds [`opener`] to its port registry so that `pci:ADDR` reaches
//! this driver when ADDR is a VirtIO-net device.
//!
//! PCI access: a device bound to `vfio-pci` is driven through VFIO, with
//! MSI-X interrupts (`VFIO_DEVICE_SET_IRQS`, one vector per receive
//! queue) so that an idle loop sleeps. A modern device does its DMA
//! through the IOMMU (QEMU: `iommu_platform=on`); a legacy device
//! bypasses a (v)IOMMU, so it gets hugepage memory at physical addresses
//! while VFIO gives its registers and interrupts. Any other device is
//! bound to `uio_pci_generic` and driven with hugepage DMA memory and
//! physical addresses, polled (uio offers no MSI-X).

use crate::error::VirtioError;
use crate::pci::{check_device, LegacyTransport, ModernTransport, NetConfig, PciNet, PciTransport};
use crate::spec::net as spec;
use crate::vhost_user::{self, BackendConfig, FrontendConfig, VhostUserBackend};
use nfkit_hw::linux::{HugepageDma, LinuxPci, NetView, SysfsDevice};
use nfkit_hw::vfio::{Intx, VfioContainer};
use nfkit_hw::{DmaAllocator, EventFd, PciAddress, PciFunction, SystemClock};
use nfkit_port::{OpenOptions, Opener, Port, PortError, PortSpec};
use std::path::Path;
use std::sync::Arc;

fn port_err(name: &str) -> impl Fn(VirtioError) -> PortError + '_ {
    move |e| PortError::config(name, e.to_string())
}

/// Open the VirtIO-net device at `addr` with `queues` queue pairs.
pub fn open_pci(
    addr: PciAddress,
    queues: u16,
    opts: &OpenOptions,
) -> Result<Box<dyn Port>, PortError> {
    let name = format!("pci:{addr}");
    let err = port_err(&name);
    let sysfs = SysfsDevice::new("/sys", addr).map_err(|e| err(e.into()))?;
    let cfg = NetConfig {
        name: name.clone(),
        queue_pairs: queues.max(1),
        pool_size: opts.pool_buffers,
        ..NetConfig::default()
    };
    let clock = Arc::new(SystemClock::default());
    let vfio = sysfs.driver().map_err(|e| err(e.into()))?.as_deref() == Some("vfio-pci");
    let device = sysfs.device_id().map_err(|e| err(e.into()))?;
    if vfio {
        let container = VfioContainer::open().map_err(|e| err(e.into()))?;
        let dev = container.device(addr).map_err(|e| err(e.into()))?;
        check_device(&dev).map_err(&err)?;
        dev.enable_bus_master().map_err(|e| err(e.into()))?;
        let vectors = msix_vectors(&dev, cfg.queue_pairs, &name);
        let intx = if vectors.is_empty() {
            intx_line(&dev, &name)
        } else {
            None
        };
        if device == spec::PCI_DEVICE_ID_MODERN {
            return init_modern(dev, &container, clock, &cfg, vectors, intx).map_err(&err);
        }
        // Legacy: DMA at physical addresses (the device ignores the
        // IOMMU); the configuration moves behind the vector registers
        // once MSI-X is on.
        let dma = HugepageDma::new().map_err(|e| err(e.into()))?;
        let bar0 = dev.io_bar(0).map_err(|e| err(e.into()))?;
        let t = if vectors.is_empty() {
            LegacyTransport::new(bar0)
        } else {
            LegacyTransport::with_msix(bar0)
        };
        let mut net = PciNet::init_with_vectors(t, &dma, clock, &cfg, vectors).map_err(&err)?;
        if let Some(intx) = intx {
            net = net.with_intx(intx);
        }
        return Ok(Box::new(net.keep_alive(Box::new(dev))));
    }
    let pci = LinuxPci::open(addr).map_err(|e| err(e.into()))?;
    check_device(&pci).map_err(&err)?;
    // Refuses a device the kernel is using; from here on the kernel
    // driver is bound again on any failure and when the port is dropped.
    let guard = sysfs
        .take_from_kernel(&NetView::live(), Some("uio_pci_generic"), opts.force)
        .map_err(|e| err(e.into()))?;
    pci.enable_bus_master().map_err(|e| err(e.into()))?;
    let dma = HugepageDma::new().map_err(|e| err(e.into()))?;
    let port: Box<dyn Port> = if device == spec::PCI_DEVICE_ID_LEGACY {
        let bar0 = pci.io_bar(0).map_err(|e| err(e.into()))?;
        let t = LegacyTransport::new(bar0);
        Box::new(PciNet::init(t, &dma, clock, &cfg).map_err(&err)?)
    } else {
        init_modern(pci, &dma, clock, &cfg, Vec::new(), None).map_err(&err)?
    };
    Ok(nfkit_port::with_guard(port, guard))
}

/// A modern device: registers through the mapped BARs (one load or store
/// each), or through the configuration-space window (§4.1.4.9) when a BAR
/// cannot be mapped.
fn init_modern<P: PciFunction + 'static>(
    pci: P,
    dma: &dyn DmaAllocator,
    clock: Arc<SystemClock>,
    cfg: &NetConfig,
    vectors: Vec<Arc<EventFd>>,
    intx: Option<Intx>,
) -> Result<Box<dyn Port>, VirtioError> {
    fn finish<T: PciTransport + 'static>(net: PciNet<T>, intx: Option<Intx>) -> Box<dyn Port> {
        match intx {
            Some(i) => Box::new(net.with_intx(i)),
            None => Box::new(net),
        }
    }
    match ModernTransport::over_mapped_bars(pci) {
        Ok(t) => {
            tracing::debug!(port = %cfg.name, "modern registers through mapped BARs");
            let net = PciNet::init_with_vectors(t, dma, clock, cfg, vectors)?;
            Ok(finish(net, intx))
        }
        Err((why, pci)) => {
            tracing::info!(port = %cfg.name, "cannot map the register BARs ({why}): using the configuration-space window");
            let t = ModernTransport::over_config_space(pci)?;
            let net = PciNet::init_with_vectors(t, dma, clock, cfg, vectors)?;
            Ok(finish(net, intx))
        }
    }
}

/// The INTx line through VFIO, for a device without MSI-X; none (the
/// queues are polled, logged) when it has none or binding it fails.
fn intx_line(dev: &nfkit_hw::vfio::VfioDevice, name: &str) -> Option<Intx> {
    match dev.enable_intx() {
        Ok(i) => Some(i),
        Err(e) => {
            tracing::warn!(port = %name, "no MSI-X and no INTx ({e}): the queues are polled");
            None
        }
    }
}

/// MSI-X through VFIO, one vector per receive queue (as many as the
/// device offers); none (the queues are polled, logged) when the device
/// offers no MSI-X or enabling it fails.
fn msix_vectors(dev: &nfkit_hw::vfio::VfioDevice, pairs: u16, name: &str) -> Vec<Arc<EventFd>> {
    let offered = match dev.msix_count() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(port = %name, "reading the MSI-X capability: {e}; polling");
            return Vec::new();
        }
    };
    let want = u32::from(pairs.max(1)).min(offered);
    if want == 0 {
        tracing::info!(port = %name, "the device offers no MSI-X vector: trying its INTx line");
        return Vec::new();
    }
    match dev.enable_msix(want) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(port = %name, "enabling MSI-X: {e}; polling");
            Vec::new()
        }
    }
}

/// A vhost-user backend port listening on `path`.
pub fn open_vhost_user(
    path: &Path,
    queues: u16,
    tso: bool,
    opts: &OpenOptions,
) -> Result<Box<dyn Port>, PortError> {
    let name = format!("vhost-user:{}", path.display());
    let pool = nfkit_port::software_pool(&name, opts.pool_buffers)?;
    let cfg = BackendConfig {
        name: name.clone(),
        path: path.to_path_buf(),
        queue_pairs: queues.max(1),
        mac: [0x02, 0, 0, 0, 0, 0x10],
        host_tso: tso,
    };
    Ok(Box::new(
        VhostUserBackend::listen(cfg, pool).map_err(port_err(&name))?,
    ))
}

/// A vhost-user frontend port connected to the backend at `path`.
pub fn open_virtio_user(
    path: &Path,
    queues: u16,
    tso: bool,
    opts: &OpenOptions,
) -> Result<Box<dyn Port>, PortError> {
    let name = format!("virtio-user:{}", path.display());
    let cfg = FrontendConfig {
        name: name.clone(),
        queue_pairs: queues.max(1),
        pool_size: opts.pool_buffers,
        guest_tso: tso,
        ..FrontendConfig::default()
    };
    Ok(Box::new(
        vhost_user::connect(path, &cfg).map_err(port_err(&name))?,
    ))
}

/// Whether the PCI function at `addr` is a VirtIO-net device (by sysfs).
pub fn is_virtio_net(addr: PciAddress) -> bool {
    let Ok(dev) = SysfsDevice::new("/sys", addr) else {
        return false;
    };
    dev.vendor_id().ok() == Some(spec::PCI_VENDOR_ID)
        && matches!(
            dev.device_id().ok(),
            Some(spec::PCI_DEVICE_ID_LEGACY | spec::PCI_DEVICE_ID_MODERN)
        )
}

/// A registry opener: takes `pci:ADDR` when ADDR is a VirtIO-net device
/// (one queue pair), `vhost-user:PATH` and `virtio-user:PATH`, and passes
/// every other spec (an 82599's `pci:ADDR` among them) on.
pub fn opener() -> impl Opener {
    |spec: &PortSpec, opts: &OpenOptions| match spec {
        PortSpec::Pci(addr, nic) if is_virtio_net(*addr) => Some(if nic.is_default() {
            open_pci(*addr, 1, opts)
        } else {
            Err(PortError::config(
                &spec.to_string(),
                "mtu= and rx_csum= are 82599 options: a VirtIO-net device takes none \
                 (what it carries and offloads is negotiated with the device)",
            ))
        }),
        PortSpec::VhostUser(v) => {
            Some(open_vhost_user(&v.path, queue_pairs(v.queues), v.tso, opts))
        }
        PortSpec::VirtioUser(v) => Some(open_virtio_user(
            &v.path,
            queue_pairs(v.queues),
            v.tso,
            opts,
        )),
        _ => None,
    }
}

/// The spec parser bounds queues to 1..=64.
fn queue_pairs(queues: usize) -> u16 {
    u16::try_from(queues).unwrap_or(u16::MAX)
}
