//! The VFIO platform: a device bound to `vfio-pci`, reached through a
//! container (one IOMMU address space), its IOMMU group and a device fd
//! (Linux `Documentation/driver-api/vfio.rst`).
//!
//! DMA memory is mapped into the IOMMU with, by default, IOVA = virtual
//! address, so a DMA region's device address is its virtual address and
//! no physical address is ever needed: no root, no pagemap. Access is
//! checked by the IOMMU, so a driver bug cannot make the device scribble
//! over arbitrary memory.
//!
//! ```no_run
//! use nfkit_hw::vfio::VfioContainer;
//! use nfkit_hw::{DmaAllocator, PciFunction};
//! # fn main() -> Result<(), nfkit_hw::HwError> {
//! let container = VfioContainer::open()?;
//! let nic = container.device("0000:03:00.0".parse()?)?;
//! nic.enable_bus_master()?;
//! let bar0 = nic.map_bar(0)?;
//! let ring = container.allocate(4096, true)?; // after the first device
//! # let _ = (bar0, ring); Ok(()) }
//! ```

mod container;
mod device;
mod dma;
mod group;
mod ioctl;

pub use container::VfioContainer;
pub use device::{Intx, RegionInfo, VfioDevice};
pub use group::preflight;

use std::path::PathBuf;

/// Where VFIO lives and how it hands out DMA memory.
#[derive(Debug, Clone)]
pub struct VfioConfig {
    /// The VFIO device directory, normally `/dev/vfio`.
    pub dev_vfio: PathBuf,
    /// The sysfs root, normally `/sys`.
    pub sysfs: PathBuf,
    /// What memory DMA regions are made of.
    pub memory: VfioMemory,
    /// How DMA regions get their IOVA.
    pub iova: IovaMode,
}

impl Default for VfioConfig {
    fn default() -> Self {
        VfioConfig {
            dev_vfio: PathBuf::from("/dev/vfio"),
            sysfs: PathBuf::from("/sys"),
            memory: VfioMemory::Auto,
            iova: IovaMode::VirtualAddress,
        }
    }
}

/// Memory behind VFIO DMA regions. The IOMMU makes any of them contiguous
/// in device address space; hugepages need fewer IOMMU (IOTLB) entries and
/// are faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfioMemory {
    /// 2 MiB hugepages, or an error if none are free.
    Hugepages,
    /// Ordinary 4 KiB pages.
    SmallPages,
    /// Hugepages when free ones exist, else 4 KiB pages.
    Auto,
}

/// How DMA regions get their I/O virtual address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IovaMode {
    /// IOVA = the region's virtual address. Needs an IOMMU with a 48-bit
    /// address width (QEMU's intel-iommu defaults to 39 bits in older
    /// versions: add `aw-bits=48`).
    VirtualAddress,
    /// IOVAs handed out upwards from `base`, 2 MiB aligned (for IOMMUs
    /// with a narrower address width). Freed ranges are not reused. On
    /// x86 start above the MSI window at 0xfee00000, e.g. at `1 << 32`.
    Allocated { base: u64 },
}
