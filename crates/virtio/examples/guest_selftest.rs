//! Drive a VirtIO-net PCI device with nfkit's driver, inside a VM (see
//! `cargo xtask guest`): open it with `nfkit_virtio::open_pci` (uio, or
//! VFIO in `modern-vfio` mode), send `count` frames and count what
//! arrives for `secs` seconds.
//!
//! ```text
//! guest_selftest legacy-uio|modern-uio|modern-vfio [count] [secs]
//! ```
//!
//! `modern-vfio` needs a vIOMMU and the device's `iommu_platform=on`.
//!
//! Prints `RESULT <mode> tx=<sent> rx=<received>` on success.

use anyhow::{bail, Context, Result};
use nfkit_hw::linux::SysfsDevice;
use nfkit_hw::{Batch, PciAddress};
use nfkit_port::{OpenOptions, Port};
use nfkit_virtio::spec::net::{PCI_DEVICE_ID_LEGACY, PCI_DEVICE_ID_MODERN, PCI_VENDOR_ID};
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
    let device = match mode {
        "legacy-uio" => PCI_DEVICE_ID_LEGACY,
        "modern-uio" | "modern-vfio" => PCI_DEVICE_ID_MODERN,
        other => bail!("unknown mode `{other}` (legacy-uio, modern-uio, modern-vfio)"),
    };
    let addr = find(PCI_VENDOR_ID, device)?;
    if mode == "modern-vfio" {
        // open_pci drives a device bound to vfio-pci through VFIO.
        SysfsDevice::new("/sys", addr)?.bind_driver("vfio-pci")?;
    }
    let mut port = nfkit_virtio::open_pci(addr, 1, &OpenOptions::default())?;
    println!("UP {mode} {addr} mac {:02x?}", port.mac());
    let (sent, received) = run(&mut *port, count, secs)?;
    println!("RESULT {mode} tx={sent} rx={received}");
    Ok(())
}
