//! PCI configuration checks that come before any register access
//! (datasheet chapter 9: PCIe programming interface).

use crate::error::{AtStep, InitError, Step};
use nfkit_hw::pci::config;
use nfkit_hw::{Bar, PciFunction};

/// Intel's PCI vendor ID.
pub const VENDOR_INTEL: u16 = 0x8086;

/// 82599 device IDs this driver accepts: the SKUs share the MAC and the
/// register set and differ in the PHY side, which the EEPROM configures.
pub const DEVICE_IDS_82599: &[u16] = &[
    0x10F7, // KX4
    0x10F8, // combined backplane
    0x10F9, // CX4
    0x10FB, // SFI/SFP+ (82599ES), the part TinyNF and ixy target
    0x10FC, // XAUI
    0x1514, // KX4 mezzanine
    0x1517, // KR
    0x151C, // 10GBASE-T (X520-T2)
    0x1529, // SFP+ with FCoE
    0x152A, // backplane with FCoE
    0x154D, // SFP+ (SF2)
    0x1557, // SFP+ (SF_QP)
];

/// Size of the register part of BAR0 ("128 KB + Flash_Size", §8.1).
pub const BAR0_REGISTER_BYTES: usize = 128 * 1024;

/// PMCSR is at offset 4 of the power-management capability (§9.3.7.1.4).
const PMCSR_OFFSET: u16 = 4;
const PMCSR_POWER_STATE: u16 = 0b11;
/// Device Status is at offset 0x0A of the PCIe capability (§9.3.10.6).
const PCIE_DEVICE_STATUS_OFFSET: u16 = 0x0A;
const DEVICE_STATUS_TRANSACTIONS_PENDING: u16 = 1 << 5;

/// Run the PCI checks and map BAR0.
pub(crate) fn open<P: PciFunction>(pci: &P) -> Result<P::Bar, InitError> {
    check_identity(pci)?;
    check_power_state_d0(pci)?;
    enable_memory_and_bus_master(pci)?;
    check_bar0_is_64bit_memory(pci)?;
    map_bar0(pci)
}

/// §9.3.3.1-2: vendor and device ID.
fn check_identity<P: PciFunction>(pci: &P) -> Result<(), InitError> {
    let step = Step::PciIdentity;
    let vendor = pci.config_read16(config::VENDOR_ID).at(step)?;
    let device = pci.config_read16(config::DEVICE_ID).at(step)?;
    if vendor != VENDOR_INTEL || !DEVICE_IDS_82599.contains(&device) {
        return Err(InitError::Device {
            step,
            what: format!(
                "{} is {vendor:04x}:{device:04x}, not an Intel 82599 (8086:10fb and its siblings)",
                pci.address()
            ),
        });
    }
    Ok(())
}

/// §9.3.7.1.4: the function must be in D0. Leaving D3 resets the device
/// and loses the BAR programming, so the driver refuses rather than
/// transitions it.
fn check_power_state_d0<P: PciFunction>(pci: &P) -> Result<(), InitError> {
    let step = Step::PciPowerState;
    let Some(pm) = pci.find_capability(config::CAP_ID_PM).at(step)? else {
        return Err(InitError::Device {
            step,
            what: "no power-management capability in configuration space".into(),
        });
    };
    let pmcsr = pci.config_read16(pm + PMCSR_OFFSET).at(step)?;
    let state = pmcsr & PMCSR_POWER_STATE;
    if state != 0 {
        return Err(InitError::Device {
            step,
            what: format!("device is in power state D{state}, not D0: wake it (e.g. `setpci` or rebind) first"),
        });
    }
    Ok(())
}

/// §9.3.3.3: memory space and bus mastering on (the device reads and
/// writes descriptors by DMA); legacy INTx off, since the driver polls.
/// I/O space is left as it is: the driver never uses the I/O BAR.
fn enable_memory_and_bus_master<P: PciFunction>(pci: &P) -> Result<(), InitError> {
    let step = Step::PciCommand;
    let command = pci.config_read16(config::COMMAND).at(step)?;
    let wanted = command
        | config::COMMAND_MEMORY
        | config::COMMAND_BUS_MASTER
        | config::COMMAND_INTX_DISABLE;
    pci.config_write16(config::COMMAND, wanted).at(step)?;
    let now = pci.config_read16(config::COMMAND).at(step)?;
    if now & (config::COMMAND_MEMORY | config::COMMAND_BUS_MASTER)
        != config::COMMAND_MEMORY | config::COMMAND_BUS_MASTER
    {
        return Err(InitError::Device {
            step,
            what: format!("COMMAND register reads {now:#06x} after enabling memory and bus master"),
        });
    }
    Ok(())
}

/// §9.3.6.1 (Table 9-4): BAR0 is a 64-bit memory BAR (bit 0 = 0 memory,
/// bits 2:1 = 10b 64-bit).
fn check_bar0_is_64bit_memory<P: PciFunction>(pci: &P) -> Result<(), InitError> {
    let step = Step::PciBar0;
    let bar0 = pci.config_read32(config::BAR0).at(step)?;
    if bar0 & 0b111 != 0b100 {
        return Err(InitError::Device {
            step,
            what: format!("BAR0 = {bar0:#010x} is not a 64-bit memory BAR"),
        });
    }
    Ok(())
}

/// §8.1: map the register space.
fn map_bar0<P: PciFunction>(pci: &P) -> Result<P::Bar, InitError> {
    let step = Step::MapBar0;
    let bar = pci.map_bar(0).at(step)?;
    if bar.len() < BAR0_REGISTER_BYTES {
        return Err(InitError::Device {
            step,
            what: format!(
                "BAR0 maps {} bytes, the registers need {BAR0_REGISTER_BYTES}",
                bar.len()
            ),
        });
    }
    Ok(bar)
}

/// §5.2.5.3.2 fallback: whether the PCIe Device Status register reports
/// transactions still pending.
pub(crate) fn transactions_pending<P: PciFunction>(pci: &P) -> Result<bool, InitError> {
    let step = Step::MasterDisable;
    let Some(pcie) = pci.find_capability(config::CAP_ID_PCIE).at(step)? else {
        return Err(InitError::Device {
            step,
            what: "no PCIe capability: cannot check Device Status.Transactions Pending".into(),
        });
    };
    let status = pci
        .config_read16(pcie + PCIE_DEVICE_STATUS_OFFSET)
        .at(step)?;
    Ok(status & DEVICE_STATUS_TRANSACTIONS_PENDING != 0)
}
