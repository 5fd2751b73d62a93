//! The bytes of the model's PCI configuration space (PCI 3.0 §6.1, 82599
//! datasheet §9.3), made with the device and shared by every handle of
//! its PCI function.

use nfkit_hw::pci::config::*;
use parking_lot::Mutex;
use std::sync::Arc;

/// Offsets of our capability list (§9.3.7 PM at 0x40, §9.3.10 PCIe at 0xA0).
const PM_CAP: usize = 0x40;
const PCIE_CAP: usize = 0xA0;
/// PCIe Device Status (capability + 0x0A): bit 5 Transaction Pending.
pub const PCIE_DEVICE_STATUS: u16 = (PCIE_CAP + 0x0A) as u16;
/// PMCSR (PM capability + 4): bits 1:0 power state, 00 = D0.
pub const PMCSR: u16 = (PM_CAP + 4) as u16;

/// The writable parts of configuration space.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) bytes: [u8; 256],
}

impl Config {
    fn new(device_id: u16) -> Config {
        let mut b = [0u8; 256];
        let put16 =
            |b: &mut [u8; 256], o: usize, v: u16| b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |b: &mut [u8; 256], o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        put16(&mut b, 0x00, 0x8086);
        put16(&mut b, 0x02, device_id);
        put16(&mut b, 0x04, COMMAND_MEMORY);
        put16(&mut b, 0x06, STATUS_CAP_LIST);
        // revision 1, class 02 (network) / 00 (Ethernet) / 00
        put32(&mut b, 0x08, 0x0200_0001);
        // BAR0: 64-bit (bits 2:1 = 10b), non-prefetchable memory (§9.3.6.1)
        put32(&mut b, 0x10, 0xF000_0004);
        put32(&mut b, 0x14, 0x0000_0000);
        b[0x34] = PM_CAP as u8;
        b[0x3D] = 1; // INTA
                     // PM capability: ID, next, PMC (version 1.2), PMCSR = D0
        b[PM_CAP] = CAP_ID_PM;
        b[PM_CAP + 1] = PCIE_CAP as u8;
        put16(&mut b, PM_CAP + 2, 0x0003);
        put16(&mut b, PM_CAP + 4, 0x0000);
        // PCIe capability (version 2, endpoint); Device Status = 0
        b[PCIE_CAP] = CAP_ID_PCIE;
        b[PCIE_CAP + 1] = 0;
        put16(&mut b, PCIE_CAP + 2, 0x0002);
        Config { bytes: b }
    }
}

/// The config-space bytes of a device, created with it (shared by every
/// `SimPci` handle of the port).
pub(crate) fn new_config(device_id: u16) -> Arc<Mutex<ConfigSpace>> {
    Arc::new(Mutex::new(Config::new(device_id)))
}

pub(crate) type ConfigSpace = Config;
