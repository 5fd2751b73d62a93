//! End-to-end smoke check of the Linux and VFIO platforms on real (or
//! QEMU-emulated) PCI devices; meant for the guest harness.
//!
//! ```text
//! hw_smoke <legacy-virtio-bdf> [<modern-virtio-bdf>]
//! ```
//!
//! - with a modern VirtIO device (1af4:1041, no driver bound): sysfs PCI
//!   (identity, bus mastering, capability walk, BAR4 mmap) and hugepage
//!   DMA memory translated through the pagemap;
//! - with a legacy VirtIO device (1af4:1000): binds it to vfio-pci, opens
//!   it through a container, reads its MAC through the I/O-port BAR
//!   region, maps DMA memory (hugepages and 4 KiB pages) into the IOMMU.
//!
//! Checked in a TCG guest (Debian 6.1 kernel, vfio-pci and
//! vfio_iommu_type1 loaded, virtio_pci not loaded) started with
//! `-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on,aw-bits=48`,
//! `-append intel_iommu=on`, and the two devices
//! `-device virtio-net-pci,netdev=n0,disable-modern=on,romfile=` and
//! `-device virtio-net-pci,netdev=n1,disable-legacy=on,romfile=`. Without
//! `aw-bits=48` QEMU's IOMMU has 39 address bits, IOVA = VA fails, and
//! this run falls back to allocated IOVAs. Build it static
//! (`RUSTFLAGS="-C target-feature=+crt-static"`) to run it in a
//! busybox initramfs.

use nfkit_hw::linux::{HugepageDma, Hugepages, LinuxPci, SysfsDevice};
use nfkit_hw::pci::config;
use nfkit_hw::vfio::{IovaMode, VfioConfig, VfioContainer, VfioMemory};
use nfkit_hw::{Bar, DmaAllocator, HwError, IoBar, PciAddress, PciFunction};
use std::error::Error;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(legacy) = args.first() else {
        return Err("usage: hw_smoke <legacy-virtio-bdf> [<modern-virtio-bdf>]".into());
    };
    let _hugepages = Hugepages::system().reserve_free(8)?;
    if let Some(modern) = args.get(1) {
        sysfs_and_pagemap(modern.parse()?)?;
    }
    for memory in [VfioMemory::Hugepages, VfioMemory::SmallPages] {
        vfio(legacy.parse()?, memory)?;
    }
    println!("hw_smoke: OK");
    Ok(())
}

fn sysfs_and_pagemap(addr: PciAddress) -> Result<()> {
    let pci = LinuxPci::open(addr)?;
    let dev = pci.sysfs();
    println!(
        "{addr}: {:04x}:{:04x} class {:06x}, driver {:?}, IOMMU group {:?}",
        dev.vendor_id()?,
        dev.device_id()?,
        dev.class()?,
        dev.driver()?,
        dev.iommu_group()?
    );
    pci.unbind_driver()?;
    pci.enable_bus_master()?;
    check(
        pci.config_read16(config::COMMAND)? & config::COMMAND_BUS_MASTER != 0,
        "bus master bit set",
    )?;
    check(
        pci.find_capability(config::CAP_ID_VENDOR)?.is_some(),
        "VirtIO vendor capability found",
    )?;
    let bar4 = pci.map_bar(4)?;
    println!("{addr}: BAR4 mapped, {} bytes", bar4.len());

    let dma = HugepageDma::new()?;
    let ring = dma.allocate(8192, true)?;
    println!("hugepage ring: {ring:?}");
    let buffers = dma.allocate(5 << 20, false)?;
    println!("hugepage buffers: {:?}", buffers.translation());
    Ok(())
}

fn vfio(addr: PciAddress, memory: VfioMemory) -> Result<()> {
    SysfsDevice::new("/sys", addr)?.bind_driver("vfio-pci")?;
    let by_va = VfioConfig {
        memory,
        ..VfioConfig::default()
    };
    match vfio_with(addr, by_va) {
        Err(HwError::Vfio(msg)) if msg.contains("aw-bits") => {
            println!("IOVA = VA refused ({msg}); trying allocated IOVAs");
            let allocated = VfioConfig {
                memory,
                iova: IovaMode::Allocated { base: 1 << 32 },
                ..VfioConfig::default()
            };
            Ok(vfio_with(addr, allocated)?)
        }
        other => Ok(other?),
    }
}

fn vfio_with(addr: PciAddress, cfg: VfioConfig) -> std::result::Result<(), HwError> {
    let container = VfioContainer::open_with(cfg)?;
    let nic = container.device(addr)?;
    nic.enable_bus_master()?;
    let io = nic.io_bar(0)?;
    let mac: Vec<u8> = (0..6)
        .map(|i| io.read8(20 + i))
        .collect::<std::result::Result<_, _>>()?;
    println!(
        "{addr} via VFIO: MAC {mac:02x?}, host features {:#x}",
        io.read32(0)?
    );
    let ring = container.allocate(64 << 10, true)?;
    let buffers = container.allocate(3 << 20, true)?;
    println!(
        "VFIO DMA ({:?}): {ring:?}, {buffers:?}",
        container.config().memory
    );
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}
