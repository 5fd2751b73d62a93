//! A VFIO device: a PCI function whose configuration space and BARs are
//! regions of one device fd (vfio-pci numbers BAR0-5 as regions 0-5 and
//! configuration space as region 7).

use super::container::VfioContainer;
use super::{group, ioctl};
use crate::error::HwError;
use crate::linux::enable_bus_master;
use crate::linux::mapping::Mapping;
use crate::mmio::{FileIoBar, MmioBar};
use crate::pci::{config, PciAddress, PciFunction};
use crate::EventFd;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Where one region of the device fd is and what it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    pub index: u32,
    pub flags: u32,
    /// Size in bytes; 0 when the BAR is not implemented.
    pub size: u64,
    /// Offset of the region in the device fd.
    pub offset: u64,
}

impl RegionInfo {
    /// Whether the region may be `mmap`ed (memory BARs usually; never
    /// I/O-port BARs or configuration space).
    pub fn mappable(&self) -> bool {
        self.flags & ioctl::VFIO_REGION_INFO_FLAG_MMAP != 0
    }
}

/// A PCI function opened through VFIO.
pub struct VfioDevice {
    addr: PciAddress,
    file: File,
    config: RegionInfo,
    /// `VFIO_DEVICE_FLAGS_*` from DEVICE_GET_INFO.
    flags: u32,
    _group: Arc<File>,
    _container: VfioContainer,
}

impl std::fmt::Debug for VfioDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDevice")
            .field("addr", &self.addr)
            .finish()
    }
}

impl VfioContainer {
    /// Open PCI function `addr` (bound to vfio-pci), attaching its IOMMU
    /// group to this container first if needed.
    pub fn device(&self, addr: PciAddress) -> Result<VfioDevice, HwError> {
        let group_no = group::preflight(self.config(), addr)?;
        let group = self.attach_group(group_no)?;
        let name = CString::new(addr.to_string()).map_err(|e| HwError::Invalid(e.to_string()))?;
        // SAFETY: GROUP_GET_DEVICE_FD takes a NUL-terminated device name.
        let fd = unsafe {
            ioctl::with_ptr(&group, ioctl::GROUP_GET_DEVICE_FD, name.as_ptr().cast_mut())
        }
        .map_err(|e| {
            HwError::Vfio(format!(
                "getting a device fd for {addr} from group {group_no}: {e}"
            ))
        })?;
        // SAFETY: the ioctl returned a new file descriptor that nothing
        // else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        VfioDevice::new(addr, file, group, self.clone())
    }
}

impl VfioDevice {
    pub(super) fn new(
        addr: PciAddress,
        file: File,
        group: Arc<File>,
        container: VfioContainer,
    ) -> Result<Self, HwError> {
        let mut info = ioctl::DeviceInfo {
            argsz: ioctl::argsz::<ioctl::DeviceInfo>(),
            ..Default::default()
        };
        // SAFETY: DEVICE_GET_INFO takes a `vfio_device_info` with argsz set.
        unsafe { ioctl::with_ptr(&file, ioctl::DEVICE_GET_INFO, &mut info) }
            .map_err(|e| HwError::Vfio(format!("device {addr}: VFIO_DEVICE_GET_INFO: {e}")))?;
        if info.num_regions <= ioctl::VFIO_PCI_CONFIG_REGION_INDEX {
            return Err(HwError::Vfio(format!(
                "device {addr} has {} VFIO regions, not a PCI device's 9",
                info.num_regions
            )));
        }
        let config = region_info(&file, addr, ioctl::VFIO_PCI_CONFIG_REGION_INDEX)?;
        Ok(VfioDevice {
            addr,
            file,
            config,
            flags: info.flags,
            _group: group,
            _container: container,
        })
    }

    /// Region `index` of the device fd (0-5: BARs, 7: configuration space).
    pub fn region(&self, index: u32) -> Result<RegionInfo, HwError> {
        region_info(&self.file, self.addr, index)
    }

    /// Let the device issue DMA (COMMAND bit 2); vfio-pci clears it when
    /// the device is opened.
    pub fn enable_bus_master(&self) -> Result<(), HwError> {
        enable_bus_master(self)
    }

    /// Reset the function (FLR or another method vfio-pci found), if the
    /// device supports one.
    pub fn reset(&self) -> Result<(), HwError> {
        if self.flags & ioctl::VFIO_DEVICE_FLAGS_RESET == 0 {
            return Err(HwError::Unsupported(format!(
                "device {} offers VFIO no reset method",
                self.addr
            )));
        }
        ioctl::with_value(&self.file, ioctl::DEVICE_RESET, 0)
            .map(drop)
            .map_err(|e| HwError::Vfio(format!("device {}: reset: {e}", self.addr)))
    }

    /// I/O-port BAR `index`, accessed with `pread`/`pwrite` on its region.
    pub fn io_bar(&self, index: u8) -> Result<FileIoBar, HwError> {
        let region = self.bar_region(index)?;
        if !self.bar_is_io(index)? {
            return Err(self.err(format!("BAR {index} is a memory BAR: use map_bar")));
        }
        let file = self
            .file
            .try_clone()
            .map_err(|e| self.err(format!("duplicating the device fd: {e}")))?;
        Ok(FileIoBar::new(
            file,
            region.offset,
            format!("vfio:{} BAR{index}", self.addr),
        ))
    }

    /// The region of an implemented BAR.
    fn bar_region(&self, index: u8) -> Result<RegionInfo, HwError> {
        crate::linux::sysfs::check_bar_index(self.addr, index)?;
        let region = self.region(index as u32)?;
        if region.size == 0 {
            return Err(self.err(format!("BAR {index} is not implemented")));
        }
        Ok(region)
    }

    /// Bit 0 of a BAR register says it decodes I/O space (PCI Local Bus
    /// 3.0 §6.2.5.1).
    fn bar_is_io(&self, index: u8) -> Result<bool, HwError> {
        Ok(self.config_read32(config::BAR0 + 4 * index as u16)? & 1 == 1)
    }

    fn err(&self, what: String) -> HwError {
        HwError::Vfio(format!("device {}: {what}", self.addr))
    }
}

impl PciFunction for VfioDevice {
    type Bar = MmioBar;

    fn address(&self) -> PciAddress {
        self.addr
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), HwError> {
        self.check_config_range(offset, buf.len())?;
        self.file
            .read_exact_at(buf, self.config.offset + offset as u64)
            .map_err(|e| self.err(format!("reading configuration space at {offset:#x}: {e}")))
    }

    fn config_write(&self, offset: u16, bytes: &[u8]) -> Result<(), HwError> {
        self.check_config_range(offset, bytes.len())?;
        self.file
            .write_all_at(bytes, self.config.offset + offset as u64)
            .map_err(|e| self.err(format!("writing configuration space at {offset:#x}: {e}")))
    }

    /// MSI-X through VFIO: one eventfd per vector, bound with
    /// `VFIO_DEVICE_SET_IRQS` (DATA_EVENTFD | ACTION_TRIGGER); vfio-pci
    /// programs the MSI-X table and enables MSI-X in configuration space.
    fn enable_msix(&self, count: u32) -> Result<Vec<Arc<EventFd>>, HwError> {
        let offered = self.msix_count()?;
        if count == 0 || count > offered {
            return Err(HwError::Unsupported(format!(
                "device {}: {count} MSI-X vectors asked, the device offers {offered}",
                self.addr
            )));
        }
        let fds = (0..count)
            .map(|_| EventFd::new().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(format!("creating an eventfd: {e}")))?;
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        self.set_msix(&raw)?;
        Ok(fds)
    }

    fn map_bar(&self, index: u8) -> Result<MmioBar, HwError> {
        let region = self.bar_region(index)?;
        if self.bar_is_io(index)? {
            return Err(self.err(format!("BAR {index} is an I/O-port BAR: use io_bar")));
        }
        if !region.mappable() {
            return Err(self.err(format!("VFIO does not allow mapping BAR {index}")));
        }
        let len = usize::try_from(region.size)
            .map_err(|_| self.err(format!("BAR {index} is too large")))?;
        let mapping = Mapping::file(self.file.as_fd(), len, region.offset)
            .map_err(|e| self.err(format!("mmap of BAR {index}: {e}")))?;
        // SAFETY: a live shared mapping of the whole BAR region, owned by
        // the returned `MmioBar`.
        Ok(unsafe { MmioBar::from_raw_parts(mapping.ptr(), len, Box::new(mapping)) })
    }
}

/// The header of `struct vfio_irq_set` in 32-bit words (argsz, flags,
/// index, start, count); the eventfds follow as 32-bit ints.
const IRQ_SET_HEADER_WORDS: usize = 5;

/// The legacy INTx line of a device through VFIO: `trigger` is signalled
/// when the device raises it, and VFIO then masks the line (it is level
/// triggered) until [`Intx::unmask`]. A driver reads its device's
/// interrupt status (which lowers the line) before it unmasks; a line
/// still raised at the unmask signals again at once.
#[derive(Debug)]
pub struct Intx {
    pub trigger: Arc<EventFd>,
    unmask: EventFd,
}

impl Intx {
    /// Unmask the line (VFIO_IRQ_SET_ACTION_UNMASK bound to an eventfd:
    /// a plain write, no ioctl).
    pub fn unmask(&self) -> std::io::Result<()> {
        self.unmask.signal()
    }
}

impl VfioDevice {
    /// How many MSI-X vectors the device offers through VFIO (0: none).
    pub fn msix_count(&self) -> Result<u32, HwError> {
        self.irq_count(ioctl::VFIO_PCI_MSIX_IRQ_INDEX, "MSI-X")
    }

    /// Interrupts of VFIO index `index` that can signal an eventfd.
    fn irq_count(&self, index: u32, what: &str) -> Result<u32, HwError> {
        let mut info = ioctl::IrqInfo {
            argsz: ioctl::argsz::<ioctl::IrqInfo>(),
            index,
            ..Default::default()
        };
        // SAFETY: DEVICE_GET_IRQ_INFO takes a `vfio_irq_info` with argsz
        // and index set.
        unsafe { ioctl::with_ptr(&self.file, ioctl::DEVICE_GET_IRQ_INFO, &mut info) }
            .map_err(|e| self.err(format!("{what} interrupt info: {e}")))?;
        if info.flags & ioctl::VFIO_IRQ_INFO_EVENTFD == 0 {
            return Ok(0);
        }
        Ok(info.count)
    }

    /// The INTx line (for a device without MSI-X): its trigger and unmask
    /// eventfds bound with VFIO_DEVICE_SET_IRQS. `Unsupported` when the
    /// device has no interrupt pin (VFIO reports no INTx then).
    pub fn enable_intx(&self) -> Result<Intx, HwError> {
        if self.irq_count(ioctl::VFIO_PCI_INTX_IRQ_INDEX, "INTx")? == 0 {
            return Err(HwError::Unsupported(format!(
                "device {}: no INTx line (no interrupt pin)",
                self.addr
            )));
        }
        let new = || EventFd::new().map_err(|e| self.err(format!("creating an eventfd: {e}")));
        let (trigger, unmask) = (Arc::new(new()?), new()?);
        self.set_irqs(
            ioctl::VFIO_PCI_INTX_IRQ_INDEX,
            ioctl::VFIO_IRQ_SET_ACTION_TRIGGER,
            &[trigger.as_raw_fd()],
            "INTx trigger",
        )?;
        self.set_irqs(
            ioctl::VFIO_PCI_INTX_IRQ_INDEX,
            ioctl::VFIO_IRQ_SET_ACTION_UNMASK,
            &[unmask.as_raw_fd()],
            "INTx unmask",
        )?;
        Ok(Intx { trigger, unmask })
    }

    /// VFIO_DEVICE_SET_IRQS on the MSI-X index: `fds` (one per vector
    /// from 0) with DATA_EVENTFD|ACTION_TRIGGER, or, when empty, DATA_NONE
    /// with count 0, which disables MSI-X.
    fn set_msix(&self, fds: &[i32]) -> Result<(), HwError> {
        self.set_irqs(
            ioctl::VFIO_PCI_MSIX_IRQ_INDEX,
            ioctl::VFIO_IRQ_SET_ACTION_TRIGGER,
            fds,
            "MSI-X",
        )
    }

    /// VFIO_DEVICE_SET_IRQS on `index` with `action`: `fds` from 0 with
    /// DATA_EVENTFD, or DATA_NONE with count 0 when empty.
    fn set_irqs(&self, index: u32, action: u32, fds: &[i32], what: &str) -> Result<(), HwError> {
        let data = if fds.is_empty() {
            ioctl::VFIO_IRQ_SET_DATA_NONE
        } else {
            ioctl::VFIO_IRQ_SET_DATA_EVENTFD
        };
        let mut buf = vec![0u32; IRQ_SET_HEADER_WORDS + fds.len()];
        buf[0] = (buf.len() * 4) as u32;
        buf[1] = data | action;
        buf[2] = index;
        buf[3] = 0;
        buf[4] = fds.len() as u32;
        for (w, fd) in buf[IRQ_SET_HEADER_WORDS..].iter_mut().zip(fds) {
            *w = *fd as u32;
        }
        // SAFETY: `buf` is a `vfio_irq_set` (five u32 fields) followed by
        // `count` 32-bit descriptors, `argsz` bytes in all, alive for the
        // call; the kernel only reads it.
        unsafe { ioctl::with_ptr(&self.file, ioctl::DEVICE_SET_IRQS, buf.as_mut_ptr()) }
            .map(drop)
            .map_err(|e| {
                self.err(format!(
                    "VFIO_DEVICE_SET_IRQS ({what}, {} descriptors): {e}",
                    fds.len()
                ))
            })
    }

    /// Disable MSI-X again (closing the device fd does it too).
    pub fn disable_msix(&self) -> Result<(), HwError> {
        self.set_msix(&[])
    }

    fn check_config_range(&self, offset: u16, len: usize) -> Result<(), HwError> {
        if offset as u64 + len as u64 > self.config.size {
            return Err(HwError::Invalid(format!(
                "configuration space access of {len} bytes at {offset:#x} is past its {} bytes",
                self.config.size
            )));
        }
        Ok(())
    }
}

fn region_info(file: &File, addr: PciAddress, index: u32) -> Result<RegionInfo, HwError> {
    let mut info = ioctl::RegionInfoRaw {
        argsz: ioctl::argsz::<ioctl::RegionInfoRaw>(),
        index,
        ..Default::default()
    };
    // SAFETY: DEVICE_GET_REGION_INFO takes a `vfio_region_info` with argsz
    // and index set.
    unsafe { ioctl::with_ptr(file, ioctl::DEVICE_GET_REGION_INFO, &mut info) }
        .map_err(|e| HwError::Vfio(format!("device {addr}: region {index} info: {e}")))?;
    Ok(RegionInfo {
        index,
        flags: info.flags,
        size: info.size,
        offset: info.offset,
    })
}
