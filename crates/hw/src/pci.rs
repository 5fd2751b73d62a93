//! PCI functions: addresses, configuration space and BAR mapping.

use crate::error::HwError;
use crate::mmio::MmioBar;
use std::fmt;
use std::str::FromStr;

/// A PCI address `domain:bus:device.function`, e.g. `0000:03:00.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddress {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciAddress {
    type Err = HwError;
    /// Accepts `DDDD:BB:DD.F` and the short `BB:DD.F` (domain 0).
    fn from_str(s: &str) -> Result<Self, HwError> {
        let bad = || HwError::Invalid(format!("`{s}` is not a PCI address like 0000:03:00.0"));
        let (head, func) = s.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (*d, *b, *dev),
            [b, dev] => ("0", *b, *dev),
            _ => return Err(bad()),
        };
        let function = u8::from_str_radix(func, 16).map_err(|_| bad())?;
        let device = u8::from_str_radix(device, 16).map_err(|_| bad())?;
        if device > 31 || function > 7 {
            return Err(bad());
        }
        Ok(PciAddress {
            domain: u16::from_str_radix(domain, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            device,
            function,
        })
    }
}

/// Standard configuration-space offsets (PCI Local Bus 3.0 §6.1).
pub mod config {
    pub const VENDOR_ID: u16 = 0x00;
    pub const DEVICE_ID: u16 = 0x02;
    pub const COMMAND: u16 = 0x04;
    pub const STATUS: u16 = 0x06;
    pub const CLASS_REVISION: u16 = 0x08;
    pub const BAR0: u16 = 0x10;
    pub const CAP_PTR: u16 = 0x34;
    /// COMMAND bits.
    pub const COMMAND_IO: u16 = 1 << 0;
    pub const COMMAND_MEMORY: u16 = 1 << 1;
    pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
    pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
    /// STATUS bit: a capability list is present.
    pub const STATUS_CAP_LIST: u16 = 1 << 4;
    /// Capability IDs.
    pub const CAP_ID_PM: u8 = 0x01;
    pub const CAP_ID_VENDOR: u8 = 0x09;
    pub const CAP_ID_PCIE: u8 = 0x10;
}

/// One PCI function: its configuration space and its BARs.
pub trait PciFunction: Send + Sync {
    /// The memory BAR type this function maps to.
    type Bar: crate::mmio::Bar;

    /// The function's address (or a synthetic one for the simulator).
    fn address(&self) -> PciAddress;

    /// Read `buf.len()` bytes of configuration space at `offset`.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), HwError>;
    /// Write bytes of configuration space at `offset`.
    fn config_write(&self, offset: u16, bytes: &[u8]) -> Result<(), HwError>;

    /// Map memory BAR `index`.
    fn map_bar(&self, index: u8) -> Result<Self::Bar, HwError>;

    /// Enable MSI-X with `count` vectors, vector `i` signalling the
    /// `i`-th eventfd returned (VFIO: `VFIO_DEVICE_SET_IRQS` on the
    /// MSI-X index). The default has none: sysfs/uio
    /// (`uio_pci_generic`) offers the legacy INTx line at most, so a
    /// driver there polls.
    fn enable_msix(&self, count: u32) -> Result<Vec<std::sync::Arc<crate::EventFd>>, HwError> {
        let _ = count;
        Err(HwError::Unsupported(format!(
            "{}: no MSI-X through this platform (uio offers none): poll",
            self.address()
        )))
    }

    fn config_read8(&self, offset: u16) -> Result<u8, HwError> {
        let mut b = [0u8; 1];
        self.config_read(offset, &mut b)?;
        Ok(b[0])
    }
    fn config_read16(&self, offset: u16) -> Result<u16, HwError> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    fn config_read32(&self, offset: u16) -> Result<u32, HwError> {
        let mut b = [0u8; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn config_write16(&self, offset: u16, v: u16) -> Result<(), HwError> {
        self.config_write(offset, &v.to_le_bytes())
    }
    fn config_write32(&self, offset: u16, v: u32) -> Result<(), HwError> {
        self.config_write(offset, &v.to_le_bytes())
    }

    /// Find a capability by ID in the capability list (bounded walk).
    fn find_capability(&self, id: u8) -> Result<Option<u16>, HwError> {
        if self.config_read16(config::STATUS)? & config::STATUS_CAP_LIST == 0 {
            return Ok(None);
        }
        let mut ptr = self.config_read8(config::CAP_PTR)? & 0xFC;
        // at most 48 capabilities fit in 256 bytes: bounds a looping list
        for _ in 0..48 {
            if ptr < 0x40 {
                return Ok(None);
            }
            if self.config_read8(ptr as u16)? == id {
                return Ok(Some(ptr as u16));
            }
            ptr = self.config_read8(ptr as u16 + 1)? & 0xFC;
        }
        Ok(None)
    }
}

/// Convenience alias: most real functions map to an [`MmioBar`].
pub type RealBar = MmioBar;
