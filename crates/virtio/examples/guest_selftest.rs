//! Drive a VirtIO-net PCI device with nfkit's driver, inside a VM (see
//! `cargo xtask guest`): bind it to uio_pci_generic, bring it up, send
//! `count` frames and count what arrives for `secs` seconds.
//!
//! ```text
//! guest_selftest legacy-uio|modern-uio|modern-vfio [count] [secs]
//! ```
//!
//! `modern-vfio` needs a vIOMMU and the device's `iommu_platform=on`.
//!
//! Prints `RESULT <mode> tx=<sent> rx=<received>` on success.

use anyhow::{bail, Context, Result};
use nfkit_hw::linux::{HugepageDma, LinuxPci};
use nfkit_hw::vfio::VfioContainer;
use nfkit_hw::{Batch, PciAddress, SystemClock};
use nfkit_port::Port;
use nfkit_virtio::spec::net::{PCI_DEVICE_ID_LEGACY, PCI_DEVICE_ID_MODERN, PCI_VENDOR_ID};
use nfkit_virtio::{LegacyTransport, ModernTransport, NetConfig, PciNet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first PCI function with this vendor and device ID.
fn find(vendor: u16, device: u16) -> Result<PciAddress> {
    let hex = |p: std::path::PathBuf| -> Option<u16> {
        let s = std::fs::read_to_string(p).ok()?;
        u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
    };
    for e in std::fs::read_dir("/sys/bus/pci/devices")? {
        let path = e?.path();
        if hex(path.join("vendor")) == Some(vendor) && hex(path.join("device")) == Some(device) {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            return Ok(name.parse()?);
        }
    }
    bail!("no PCI device {vendor:04x}:{device:04x}")
}

/// A broadcast frame of a local experimental EtherType carrying `seq`.
fn frame(src: [u8; 6], seq: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x88b5u16.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0);
    f
}

fn run(port: &mut dyn Port, count: u32, secs: u64) -> Result<(u32, u64)> {
    let mac = port.mac();
    let mut sent = 0u32;
    let start = Instant::now();
    while sent < count && start.elapsed() < Duration::from_secs(secs) {
        let mut batch = Batch::new();
        for seq in sent..(sent + 32).min(count) {
            let mut b = port.pool().alloc().context("pool empty")?;
            b.copy_from(&frame(mac, seq))?;
            batch.push(b);
        }
        sent += port.tx_batch(0, &mut batch) as u32;
        // Pace for the TCG guest's receiver.
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut batch = Batch::new();
    while start.elapsed() < Duration::from_secs(secs) {
        if port.rx_batch(0, &mut batch) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        batch.clear();
    }
    Ok((sent, port.stats().rx_packets))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("legacy-uio");
    let count: u32 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let secs: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let cfg = NetConfig {
        name: mode.to_string(),
        ..NetConfig::default()
    };
    let clock = Arc::new(SystemClock::default());
    let (sent, received) = match mode {
        "legacy-uio" => {
            let addr = find(PCI_VENDOR_ID, PCI_DEVICE_ID_LEGACY)?;
            let pci = LinuxPci::open(addr)?;
            pci.sysfs().bind_driver("uio_pci_generic")?;
            pci.enable_bus_master()?;
            let dma = HugepageDma::new()?;
            let mut net = PciNet::init(LegacyTransport::new(pci.io_bar(0)?), &dma, clock, &cfg)?;
            println!("UP {mode} {addr} mac {:02x?}", net.mac());
            run(&mut net, count, secs)?
        }
        "modern-uio" => {
            let addr = find(PCI_VENDOR_ID, PCI_DEVICE_ID_MODERN)?;
            let pci = LinuxPci::open(addr)?;
            pci.sysfs().bind_driver("uio_pci_generic")?;
            pci.enable_bus_master()?;
            let dma = HugepageDma::new()?;
            let t = ModernTransport::over_config_space(pci)?;
            let mut net = PciNet::init(t, &dma, clock, &cfg)?;
            println!("UP {mode} {addr} mac {:02x?}", net.mac());
            run(&mut net, count, secs)?
        }
        "modern-vfio" => {
            let addr = find(PCI_VENDOR_ID, PCI_DEVICE_ID_MODERN)?;
            nfkit_hw::linux::SysfsDevice::new("/sys", addr)?.bind_driver("vfio-pci")?;
            let container = VfioContainer::open()?;
            let dev = container.device(addr)?;
            dev.enable_bus_master()?;
            let t = ModernTransport::over_config_space(dev)?;
            let mut net = PciNet::init(t, &container, clock, &cfg)?;
            println!("UP {mode} {addr} mac {:02x?}", net.mac());
            run(&mut net, count, secs)?
        }
        other => bail!("unknown mode `{other}` (legacy-uio, modern-uio, modern-vfio)"),
    };
    println!("RESULT {mode} tx={sent} rx={received}");
    Ok(())
}
