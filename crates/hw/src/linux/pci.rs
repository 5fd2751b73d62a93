//! A PCI function reached through sysfs, uio style: configuration space
//! through the `config` file, memory BARs by `mmap` of `resourceN`, I/O-port
//! BARs by `pread`/`pwrite` of `resourceN`. No IOMMU is involved, so the
//! device must be given physical addresses ([`super::HugepageDma`]).
//!
//! Before use the kernel driver must let go of the device: either unbind
//! it ([`LinuxPci::unbind_driver`]) or bind `uio_pci_generic`.

use super::mapping::Mapping;
use super::sysfs::{check_bar_index, not_permitted, pci_err, BarKind, SysfsDevice};
use crate::error::HwError;
use crate::mmio::{FileIoBar, MmioBar};
use crate::pci::{config, PciAddress, PciFunction};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Configuration space is 256 bytes (conventional) or 4 KiB (PCIe).
const CONFIG_SPACE_MAX: usize = 4096;

/// A PCI function opened through sysfs.
#[derive(Debug)]
pub struct LinuxPci {
    dev: SysfsDevice,
    config: File,
    config_writable: bool,
}

impl LinuxPci {
    /// Open `addr` through `/sys`.
    pub fn open(addr: PciAddress) -> Result<Self, HwError> {
        LinuxPci::open_in("/sys", addr)
    }

    /// Open `addr` through the sysfs tree at `sysfs_root` (tests use a
    /// fake tree). Without root the configuration space opens read-only
    /// and writes fail with an error that says so.
    pub fn open_in(sysfs_root: impl AsRef<Path>, addr: PciAddress) -> Result<Self, HwError> {
        let dev = SysfsDevice::new(sysfs_root, addr)?;
        let path = dev.path("config");
        let (config, config_writable) = match OpenOptions::new().read(true).write(true).open(&path)
        {
            Ok(f) => (f, true),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                (File::open(&path).map_err(|e| HwError::io(&path, e))?, false)
            }
            Err(e) => return Err(HwError::io(&path, e)),
        };
        Ok(LinuxPci {
            dev,
            config,
            config_writable,
        })
    }

    /// The device's sysfs directory: identity, driver, IOMMU group.
    pub fn sysfs(&self) -> &SysfsDevice {
        &self.dev
    }

    /// Unbind the kernel driver (so it stops touching the device); returns
    /// the driver's name if one was bound.
    pub fn unbind_driver(&self) -> Result<Option<String>, HwError> {
        self.dev.unbind_driver()
    }

    /// Let the device master the bus, i.e. issue DMA (COMMAND bit 2, PCI
    /// Local Bus 3.0 §6.2.2). See [`enable_bus_master`].
    pub fn enable_bus_master(&self) -> Result<(), HwError> {
        enable_bus_master(self)
    }

    /// I/O-port BAR `index`, accessed with `pread`/`pwrite` on `resourceN`
    /// (the kernel turns each into `in`/`out` instructions; the file
    /// cannot be mapped).
    pub fn io_bar(&self, index: u8) -> Result<FileIoBar, HwError> {
        self.expect_bar(index, BarKind::Io, "a memory BAR: use map_bar")?;
        let (file, path) = self.open_resource(index)?;
        Ok(FileIoBar::new(file, 0, path))
    }

    fn expect_bar(&self, index: u8, want: BarKind, otherwise: &str) -> Result<(), HwError> {
        match self.dev.bar_kind(index)? {
            k if k == want => Ok(()),
            BarKind::Absent => Err(pci_err(
                self.address(),
                format!("BAR {index} is not implemented"),
            )),
            _ => Err(pci_err(
                self.address(),
                format!("BAR {index} is {otherwise}"),
            )),
        }
    }

    fn open_resource(&self, index: u8) -> Result<(File, std::path::PathBuf), HwError> {
        let path = self.dev.path(&format!("resource{index}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            // uncached access, as the kernel requires for register BARs
            .custom_flags(libc::O_SYNC)
            .open(&path)
            .map_err(|e| match e.kind() {
                ErrorKind::PermissionDenied => not_permitted(self.address(), &path),
                _ => HwError::io(&path, e),
            })?;
        Ok((file, path))
    }

    fn check_config_range(&self, offset: u16, len: usize) -> Result<(), HwError> {
        if offset as usize + len > CONFIG_SPACE_MAX {
            return Err(HwError::Invalid(format!(
                "configuration space access of {len} bytes at {offset:#x} is past 4 KiB"
            )));
        }
        Ok(())
    }
}

impl PciFunction for LinuxPci {
    type Bar = MmioBar;

    fn address(&self) -> PciAddress {
        self.dev.address()
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), HwError> {
        self.check_config_range(offset, buf.len())?;
        self.config.read_exact_at(buf, offset as u64).map_err(|e| match e.kind() {
            // the kernel shows non-root users only the first 64 bytes
            ErrorKind::UnexpectedEof if !self.config_writable => pci_err(
                self.address(),
                format!("configuration space past {offset:#x} is hidden from non-root users: run as root"),
            ),
            _ => HwError::io(self.dev.path("config"), e),
        })
    }

    fn config_write(&self, offset: u16, bytes: &[u8]) -> Result<(), HwError> {
        self.check_config_range(offset, bytes.len())?;
        if !self.config_writable {
            return Err(not_permitted(self.address(), &self.dev.path("config")));
        }
        self.config
            .write_all_at(bytes, offset as u64)
            .map_err(|e| HwError::io(self.dev.path("config"), e))
    }

    /// Map memory BAR `index` (its whole `resourceN` file, whose size is
    /// the BAR's size).
    fn map_bar(&self, index: u8) -> Result<MmioBar, HwError> {
        check_bar_index(self.address(), index)?;
        self.expect_bar(index, BarKind::Memory, "an I/O-port BAR: use io_bar")?;
        let (file, path) = self.open_resource(index)?;
        let len = file.metadata().map_err(|e| HwError::io(&path, e))?.len();
        let len = usize::try_from(len)
            .map_err(|_| pci_err(self.address(), format!("BAR {index} is too large")))?;
        if len == 0 {
            return Err(pci_err(self.address(), format!("BAR {index} has size 0")));
        }
        let mapping = Mapping::file(file.as_fd(), len, 0).map_err(|e| {
            pci_err(
                self.address(),
                format!("cannot mmap {}: {e}", path.display()),
            )
        })?;
        // SAFETY: `mapping` is a live shared mapping of the whole BAR that
        // the returned `MmioBar` owns; the file may close, the mapping
        // stays valid until `mapping` drops.
        Ok(unsafe { MmioBar::from_raw_parts(mapping.ptr(), len, Box::new(mapping)) })
    }
}

/// Set COMMAND.Bus Master Enable (bit 2; PCI Local Bus 3.0 §6.2.2) so the
/// function may issue DMA; unbinding a kernel driver clears it. The other
/// bits (I/O and memory decoding, INTx) are left as firmware set them.
pub fn enable_bus_master(pci: &(impl PciFunction + ?Sized)) -> Result<(), HwError> {
    let command = pci.config_read16(config::COMMAND)?;
    let wanted = command | config::COMMAND_BUS_MASTER;
    if wanted != command {
        pci.config_write16(config::COMMAND, wanted)?;
    }
    Ok(())
}
