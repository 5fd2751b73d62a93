//! The Linux platform, sysfs + uio style: DMA memory from 2 MiB hugepages
//! whose physical addresses come from `/proc/self/pagemap`, and PCI
//! functions through sysfs (`config`, `resourceN`, driver binding).
//!
//! Without an IOMMU the device sees physical memory, so this needs root
//! (pagemap hides physical frames from other users). The [`crate::vfio`]
//! platform is the non-root, IOMMU-protected alternative.
//!
//! ```no_run
//! use nfkit_hw::linux::{HugepageDma, LinuxPci};
//! use nfkit_hw::{DmaAllocator, PciFunction};
//! # fn main() -> Result<(), nfkit_hw::HwError> {
//! let nic = LinuxPci::open("0000:03:00.0".parse()?)?;
//! nic.unbind_driver()?;
//! nic.enable_bus_master()?;
//! let bar0 = nic.map_bar(0)?;
//! let ring = HugepageDma::new()?.allocate(4096, true)?;
//! # let _ = (bar0, ring); Ok(()) }
//! ```

pub mod hugepages;
mod in_use;
pub(crate) mod mapping;
mod memory;
pub mod pagemap;
mod pci;
pub mod sysfs;

pub use hugepages::{Hugepages, Reservation};
pub use in_use::{DriverGuard, NetView, Netdev};
pub use mapping::{Mapping, HUGEPAGE_SIZE};
pub use memory::HugepageDma;
pub use pagemap::Pagemap;
pub use pci::{enable_bus_master, LinuxPci};
pub use sysfs::{BarKind, SysfsDevice};
