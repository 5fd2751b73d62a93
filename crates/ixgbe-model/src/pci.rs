//! PCI side of the model: the PCI function a driver opens (configuration
//! space reads and writes, PCI 3.0 §6.1, 82599 datasheet §9.3) and BAR0.

use crate::config_space::{Config, PMCSR};
use crate::device::Device;
use crate::regfile::BAR0_LEN;
use nfkit_hw::pci::config::*;
use nfkit_hw::{Bar, HwError, PciAddress, PciFunction};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// BAR0 size: 128 KB registers (+ flash, not modelled), §8.1.
const BAR0_SIZE: u32 = BAR0_LEN as u32;

/// The simulated PCI function of one port.
#[derive(Clone)]
pub struct SimPci {
    dev: Arc<Device>,
    config: Arc<Mutex<Config>>,
}

impl std::fmt::Debug for SimPci {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPci")
            .field("address", &self.address())
            .finish()
    }
}

impl SimPci {
    pub(crate) fn new(dev: Arc<Device>) -> SimPci {
        let config = dev.pci.config.clone();
        SimPci { dev, config }
    }
}

impl PciFunction for SimPci {
    type Bar = SimBar;

    fn address(&self) -> PciAddress {
        PciAddress {
            domain: 0,
            bus: 0x5E,
            device: 0,
            function: self.dev.cfg.function,
        }
    }

    /// MSI-X as VFIO gives it: `count` eventfds, vector `i` signalling
    /// the `i`-th (the model's stand-in for VFIO_DEVICE_SET_IRQS; its
    /// configuration space has no MSI-X capability to program).
    fn enable_msix(&self, count: u32) -> Result<Vec<Arc<nfkit_hw::EventFd>>, HwError> {
        if count == 0 || count as usize > crate::irq::VECTORS {
            return Err(HwError::Unsupported(format!(
                "{count} MSI-X vectors asked; the 82599 has {} (§7.3.1)",
                crate::irq::VECTORS
            )));
        }
        let fds = (0..count)
            .map(|_| nfkit_hw::EventFd::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| HwError::Invalid(format!("creating an eventfd: {e}")))?;
        self.dev.irq.set_vectors(fds.clone());
        Ok(fds)
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), HwError> {
        let o = offset as usize;
        let end = o
            .checked_add(buf.len())
            .filter(|e| *e <= 256)
            .ok_or_else(|| {
                HwError::Invalid(format!(
                    "config read of {} bytes at {offset:#x} is outside the 256-byte config space",
                    buf.len()
                ))
            })?;
        buf.copy_from_slice(&self.config.lock().bytes[o..end]);
        Ok(())
    }

    fn config_write(&self, offset: u16, bytes: &[u8]) -> Result<(), HwError> {
        let o = offset as usize;
        o.checked_add(bytes.len())
            .filter(|e| *e <= 256)
            .ok_or_else(|| {
                HwError::Invalid(format!(
                    "config write of {} bytes at {offset:#x} is outside the 256-byte config space",
                    bytes.len()
                ))
            })?;
        let mut c = self.config.lock();
        for (i, &b) in bytes.iter().enumerate() {
            let at = o + i;
            match at {
                // COMMAND: I/O, memory, bus master, ..., INTx disable (bits 10:0)
                0x04 => c.bytes[at] = b & 0x47,
                0x05 => c.bytes[at] = b & 0x05,
                // BAR0 low: sizing writes read back the size mask
                0x10..=0x13 => {
                    let shift = (at - 0x10) * 8;
                    let cur = u32::from_le_bytes(c.bytes[0x10..0x14].try_into().expect("4 bytes"));
                    let mut v = (cur & !(0xFF << shift)) | (u32::from(b) << shift);
                    v = (v & !(BAR0_SIZE - 1)) | 0x4;
                    c.bytes[0x10..0x14].copy_from_slice(&v.to_le_bytes());
                }
                0x14..=0x17 => c.bytes[at] = b,
                // PMCSR power state (bits 1:0) and PME status
                x if x == PMCSR as usize => c.bytes[at] = b & 0x03,
                _ => {
                    self.dev.strict.record("9.3", || {
                        format!("write to read-only config space byte {at:#x}")
                    });
                }
            }
        }
        let command = u16::from_le_bytes([c.bytes[4], c.bytes[5]]);
        self.dev.pci.command.store(command, Ordering::Release);
        Ok(())
    }

    fn map_bar(&self, index: u8) -> Result<SimBar, HwError> {
        if index != 0 {
            return Err(HwError::Invalid(format!(
                "the 82599 model has only memory BAR0 (asked for BAR{index})"
            )));
        }
        Ok(SimBar {
            dev: self.dev.clone(),
        })
    }
}

/// BAR0 of the model: register reads and writes with their side effects.
#[derive(Clone)]
pub struct SimBar {
    dev: Arc<Device>,
}

impl std::fmt::Debug for SimBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBar").finish()
    }
}

impl Bar for SimBar {
    fn read32(&self, offset: usize) -> u32 {
        if !self.memory_enabled() {
            return u32::MAX;
        }
        self.dev.read(offset)
    }

    fn write32(&self, offset: usize, value: u32) {
        if !self.memory_enabled() {
            return;
        }
        self.dev.write(offset, value)
    }

    fn len(&self) -> usize {
        BAR0_LEN
    }
}

impl SimBar {
    /// PCI COMMAND.MEM (§9.3.3.3): with memory decoding off, the BAR does
    /// not answer (reads all-ones, like a master abort).
    fn memory_enabled(&self) -> bool {
        let on = self.dev.pci.command.load(Ordering::Relaxed) & COMMAND_MEMORY != 0;
        if !on {
            self.dev.strict.record("9.3.3.3", || {
                "BAR0 accessed with PCI COMMAND.Memory Access Enable clear".into()
            });
        }
        on
    }
}
