//! The VFIO platform: container, group and device; DMA mapped through the
//! IOMMU with IOVA = virtual address.
//!
//! (Being written: see issue 2.)
