//! The legacy VirtIO PCI interface (VirtIO 1.2 §4.1.4.8): one I/O-port
//! BAR (BAR0) of fixed registers, reached with `pread`/`pwrite` through
//! an [`IoBar`]. Used by transitional devices (1af4:1000, QEMU's
//! `disable-modern=on`).
//!
//! Without MSI-X enabled (uio) the device configuration follows the
//! common header at offset 20; with MSI-X enabled (VFIO) the header
//! gains two vector registers (`config_msix_vector` at 20,
//! `queue_msix_vector` at 22) and the configuration moves to 24.

use super::PciTransport;
use crate::net::Notify;
use crate::virtqueue::{LayoutKind, Virtqueue};
use nfkit_hw::{HwError, IoBar};

/// §4.1.4.8 "Legacy Interfaces: A Note on PCI Device Layout".
mod reg {
    /// le32, read-only: features bits 0-31 (legacy has no more).
    pub const DEVICE_FEATURES: u64 = 0;
    /// le32: the features the driver accepts.
    pub const DRIVER_FEATURES: u64 = 4;
    /// le32: page frame number (address >> 12) of the selected queue.
    pub const QUEUE_ADDRESS: u64 = 8;
    /// le16, read-only: size of the selected queue (fixed by the device).
    pub const QUEUE_SIZE: u64 = 12;
    /// le16: which queue the two registers above refer to.
    pub const QUEUE_SELECT: u64 = 14;
    /// le16: write a queue index to notify it.
    pub const QUEUE_NOTIFY: u64 = 16;
    /// u8: device status (§2.1).
    pub const DEVICE_STATUS: u64 = 18;
    /// u8, read-only: interrupt status; reading it clears it and lowers
    /// the INTx line (§4.1.4.5).
    pub const ISR: u64 = 19;
    /// Device-specific configuration when MSI-X is disabled.
    pub const DEVICE_CONFIG: u64 = 20;
    /// le16, with MSI-X enabled: vector for configuration changes.
    pub const CONFIG_MSIX_VECTOR: u64 = 20;
    /// le16, with MSI-X enabled: vector of the selected queue.
    pub const QUEUE_MSIX_VECTOR: u64 = 22;
    /// Device-specific configuration when MSI-X is enabled.
    pub const DEVICE_CONFIG_MSIX: u64 = 24;
    /// Legacy queue addresses are in 4096-byte frames.
    pub const QUEUE_ADDRESS_SHIFT: u32 = 12;
}

/// A legacy VirtIO PCI device's register block. The ISR register
/// (offset 19) is read only to acknowledge INTx, before a sleeping loop
/// unmasks the line (a device without MSI-X).
#[derive(Debug)]
pub struct LegacyTransport<R: IoBar> {
    bar0: R,
    /// MSI-X is enabled on the function: the header is 4 bytes longer.
    msix: bool,
}

impl<R: IoBar> LegacyTransport<R> {
    /// `bar0` is the device's I/O-port BAR 0 (e.g. `LinuxPci::io_bar(0)`),
    /// on a function without MSI-X enabled.
    pub fn new(bar0: R) -> Self {
        LegacyTransport { bar0, msix: false }
    }
    /// The same on a function whose MSI-X is enabled (VFIO, after
    /// `PciFunction::enable_msix`): the vector registers exist and the
    /// device configuration starts at 24.
    pub fn with_msix(bar0: R) -> Self {
        LegacyTransport { bar0, msix: true }
    }
}

impl<R: IoBar> Notify for LegacyTransport<R> {
    fn notify(&self, queue: u16) -> Result<(), HwError> {
        self.bar0.write16(reg::QUEUE_NOTIFY, queue)
    }
}

impl<R: IoBar> PciTransport for LegacyTransport<R> {
    fn layout(&self) -> LayoutKind {
        LayoutKind::Legacy
    }
    fn status(&self) -> Result<u8, HwError> {
        self.bar0.read8(reg::DEVICE_STATUS)
    }
    fn set_status(&self, status: u8) -> Result<(), HwError> {
        self.bar0.write8(reg::DEVICE_STATUS, status)
    }
    fn device_features(&self) -> Result<u64, HwError> {
        Ok(self.bar0.read32(reg::DEVICE_FEATURES)? as u64)
    }
    fn set_driver_features(&self, features: u64) -> Result<(), HwError> {
        self.bar0.write32(reg::DRIVER_FEATURES, features as u32)
    }
    fn queue_size(&mut self, q: u16, _wanted: u16) -> Result<u16, HwError> {
        self.bar0.write16(reg::QUEUE_SELECT, q)?;
        self.bar0.read16(reg::QUEUE_SIZE)
    }
    fn enable_queue(&mut self, q: u16, vq: &Virtqueue) -> Result<(), HwError> {
        let addr = vq.desc_addr();
        let pfn = addr >> reg::QUEUE_ADDRESS_SHIFT;
        if addr & 0xfff != 0 || pfn > u32::MAX as u64 {
            return Err(HwError::Invalid(format!(
                "legacy queue {q} at {addr:#x}: must be 4096-aligned below 16 TiB"
            )));
        }
        self.bar0.write16(reg::QUEUE_SELECT, q)?;
        // Writing a non-zero frame number activates the queue.
        self.bar0.write32(reg::QUEUE_ADDRESS, pfn as u32)
    }
    fn read_config(&self, offset: usize, buf: &mut [u8]) -> Result<(), HwError> {
        let base = if self.msix {
            reg::DEVICE_CONFIG_MSIX
        } else {
            reg::DEVICE_CONFIG
        };
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.bar0.read8(base + (offset + i) as u64)?;
        }
        Ok(())
    }
    fn has_features_ok(&self) -> bool {
        false
    }
    fn read_isr(&self) -> Result<u8, HwError> {
        self.bar0.read8(reg::ISR)
    }
    /// §4.1.4.8: select the queue, write its vector, read it back.
    fn set_queue_vector(&mut self, q: u16, vector: u16) -> Result<u16, HwError> {
        if !self.msix {
            return Err(HwError::Unsupported("legacy device without MSI-X".into()));
        }
        self.bar0.write16(reg::QUEUE_SELECT, q)?;
        self.bar0.write16(reg::QUEUE_MSIX_VECTOR, vector)?;
        self.bar0.read16(reg::QUEUE_MSIX_VECTOR)
    }
    fn set_config_vector(&mut self, vector: u16) -> Result<u16, HwError> {
        if !self.msix {
            return Err(HwError::Unsupported("legacy device without MSI-X".into()));
        }
        self.bar0.write16(reg::CONFIG_MSIX_VECTOR, vector)?;
        self.bar0.read16(reg::CONFIG_MSIX_VECTOR)
    }
}
