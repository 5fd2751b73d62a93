//! # nfkit-hw: the hardware-access layer
//!
//! Every driver in nfkit is written against the small interface in this
//! crate, in the spirit of TinyNF's five environment groups:
//!
//! | group               | here                                              |
//! |---------------------|---------------------------------------------------|
//! | memory              | [`DmaAllocator`], [`DmaRegion`]                    |
//! | address translation | [`DmaRegion::device_addr_at`] (pagemap, IOVA, sim) |
//! | PCI                 | [`PciFunction`] (config space), [`Bar`] (MMIO), [`IoBar`] |
//! | time                | [`Clock`]                                         |
//! | endianness          | [`le`] helpers (identity on x86)                  |
//!
//! Implementations: [`linux`] (sysfs + uio style: hugepages, pagemap,
//! sysfs PCI), [`vfio`] (container/group/device, IOMMU mapping with
//! IOVA = VA) and [`sim`] (ordinary memory with identity device addresses,
//! registered so a device model can check every DMA access).
//!
//! This crate also owns the DMA packet-buffer pool ([`pool`]), because a
//! packet buffer *is* DMA memory handed out in pieces.
//!
//! `unsafe` in nfkit lives here (and in the shared-memory ring code of the
//! software ports); each block carries a `// SAFETY:` comment.

pub mod dma;
pub mod error;
pub mod eventfd;
pub mod le;
pub mod linux;
pub mod mmio;
pub mod pci;
pub mod pool;
pub mod sim;
pub mod time;
pub mod vfio;

pub use dma::{DmaAllocator, DmaRegion};
pub use error::HwError;
pub use eventfd::EventFd;
pub use mmio::{Bar, IoBar, MmioBar};
pub use pci::{PciAddress, PciFunction};
pub use pool::{Batch, ChainError, Mempool, PktBuf, PoolCache, MAX_FRAME, MAX_SEGS};
pub use time::{poll_until, Clock, SystemClock};
