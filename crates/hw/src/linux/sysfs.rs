//! A PCI function's directory in sysfs, `<root>/bus/pci/devices/<addr>/`
//! (Linux `Documentation/ABI/testing/sysfs-bus-pci`): identity, driver
//! binding, IOMMU group and the BAR (`resource`) table. Reading these
//! needs no privileges, so `nfkit doctor` can use this as any user; the
//! sysfs root is configurable so tests can build a fake tree.

use crate::error::HwError;
use crate::pci::PciAddress;
use std::path::{Path, PathBuf};

/// Kernel resource flags in the `resource` file (`include/linux/ioport.h`).
const IORESOURCE_IO: u64 = 0x100;
const IORESOURCE_MEM: u64 = 0x200;

/// What a BAR decodes, from the `resource` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// A memory BAR: map it.
    Memory,
    /// An I/O-port BAR: `pread`/`pwrite` it.
    Io,
    /// Not implemented by the device (or the upper half of a 64-bit BAR).
    Absent,
}

/// One PCI function's sysfs directory.
#[derive(Debug, Clone)]
pub struct SysfsDevice {
    addr: PciAddress,
    root: PathBuf,
    dir: PathBuf,
}

impl SysfsDevice {
    /// The function `addr` under sysfs root `root` (normally `/sys`).
    /// Fails if the kernel does not know the device.
    pub fn new(root: impl AsRef<Path>, addr: PciAddress) -> Result<Self, HwError> {
        let root = root.as_ref().to_path_buf();
        let dir = root.join("bus/pci/devices").join(addr.to_string());
        if !dir.is_dir() {
            return Err(pci_err(
                addr,
                format!(
                    "no such device ({} does not exist): list devices with `lspci -D`",
                    dir.display()
                ),
            ));
        }
        Ok(SysfsDevice { addr, root, dir })
    }

    pub fn address(&self) -> PciAddress {
        self.addr
    }

    /// The device's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sysfs root the device was found under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A file in the device's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// PCI vendor ID (`vendor`).
    pub fn vendor_id(&self) -> Result<u16, HwError> {
        self.read_hex("vendor")
            .and_then(|v| self.narrow("vendor", v))
    }

    /// PCI device ID (`device`).
    pub fn device_id(&self) -> Result<u16, HwError> {
        self.read_hex("device")
            .and_then(|v| self.narrow("device", v))
    }

    /// Class code, 24 bits: base class, subclass, programming interface
    /// (`class`; 0x020000 is an Ethernet controller).
    pub fn class(&self) -> Result<u32, HwError> {
        let v = self.read_hex("class")?;
        u32::try_from(v).map_err(|_| pci_err(self.addr, format!("class {v:#x} is out of range")))
    }

    /// Name of the bound kernel driver, if any (`driver` symlink).
    pub fn driver(&self) -> Result<Option<String>, HwError> {
        link_name(&self.path("driver"))
    }

    /// The IOMMU group, if the device is behind an enabled IOMMU
    /// (`iommu_group` symlink to `.../kernel/iommu_groups/N`).
    pub fn iommu_group(&self) -> Result<Option<u32>, HwError> {
        match link_name(&self.path("iommu_group"))? {
            None => Ok(None),
            Some(name) => name.parse().map(Some).map_err(|_| {
                pci_err(
                    self.addr,
                    format!("iommu_group links to `{name}`, not a group number"),
                )
            }),
        }
    }

    /// Unbind the kernel driver, if one is bound; returns its name.
    pub fn unbind_driver(&self) -> Result<Option<String>, HwError> {
        let Some(driver) = self.driver()? else {
            return Ok(None);
        };
        self.write_file(&self.path("driver/unbind"), &self.addr.to_string())?;
        tracing::info!(device = %self.addr, %driver, "unbound kernel driver");
        Ok(Some(driver))
    }

    /// Bind the device to `driver` (e.g. `vfio-pci`, `uio_pci_generic`):
    /// unbind the current driver, set `driver_override` and ask the PCI
    /// core to probe again. The driver's module must be loaded.
    pub fn bind_driver(&self, driver: &str) -> Result<(), HwError> {
        if self.driver()?.as_deref() == Some(driver) {
            return Ok(());
        }
        self.unbind_driver()?;
        self.write_file(&self.path("driver_override"), driver)?;
        self.write_file(
            &self.root.join("bus/pci/drivers_probe"),
            &self.addr.to_string(),
        )?;
        Ok(())
    }

    /// What kind of BAR `index` (0-5) is, from the `resource` table.
    pub fn bar_kind(&self, index: u8) -> Result<BarKind, HwError> {
        check_bar_index(self.addr, index)?;
        let table = self.read_text("resource")?;
        let line = table.lines().nth(index as usize).unwrap_or("");
        let flags = line
            .split_whitespace()
            .nth(2)
            .and_then(parse_hex)
            .ok_or_else(|| {
                pci_err(
                    self.addr,
                    format!("`resource` line {index} is malformed: `{line}`"),
                )
            })?;
        Ok(if flags & IORESOURCE_IO != 0 {
            BarKind::Io
        } else if flags & IORESOURCE_MEM != 0 {
            BarKind::Memory
        } else {
            BarKind::Absent
        })
    }

    fn read_text(&self, name: &str) -> Result<String, HwError> {
        let path = self.path(name);
        std::fs::read_to_string(&path).map_err(|e| HwError::io(path, e))
    }

    fn read_hex(&self, name: &str) -> Result<u64, HwError> {
        let text = self.read_text(name)?;
        parse_hex(text.trim()).ok_or_else(|| {
            pci_err(
                self.addr,
                format!("`{name}` holds `{}`, not a hex number", text.trim()),
            )
        })
    }

    fn narrow(&self, name: &str, v: u64) -> Result<u16, HwError> {
        u16::try_from(v).map_err(|_| pci_err(self.addr, format!("{name} {v:#x} is out of range")))
    }

    pub(crate) fn write_file(&self, path: &Path, text: &str) -> Result<(), HwError> {
        std::fs::write(path, text).map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => not_permitted(self.addr, path),
            _ => HwError::io(path, e),
        })
    }
}

/// BARs are numbered 0 to 5.
pub(crate) fn check_bar_index(addr: PciAddress, index: u8) -> Result<(), HwError> {
    if index > 5 {
        return Err(pci_err(
            addr,
            format!("BAR {index} does not exist (BARs are 0 to 5)"),
        ));
    }
    Ok(())
}

/// The final component of a symlink's target, or `None` without a link.
fn link_name(link: &Path) -> Result<Option<String>, HwError> {
    match std::fs::read_link(link) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HwError::io(link, e)),
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

pub(crate) fn pci_err(addr: PciAddress, what: impl Into<String>) -> HwError {
    HwError::Pci {
        addr: addr.to_string(),
        what: what.into(),
    }
}

/// The error for a sysfs file only root may open, with both ways out.
pub(crate) fn not_permitted(addr: PciAddress, path: &Path) -> HwError {
    pci_err(
        addr,
        format!(
            "not permitted to open {}: run as root, or bind the device to vfio-pci and use vfio:{addr}",
            path.display()
        ),
    )
}
