//! DMA memory for VFIO devices: anonymous (hugepage or 4 KiB) memory
//! mapped into the container's IOMMU address space with
//! `VFIO_IOMMU_MAP_DMA`, which also pins it. The device address of every
//! byte is IOVA + offset, so any allocation is contiguous.

use super::container::{Inner, VfioContainer};
use super::{ioctl, IovaMode, VfioMemory};
use crate::dma::{DmaAllocator, DmaBacking, DmaRegion, Translation};
use crate::error::HwError;
use crate::linux::mapping::{Mapping, HUGEPAGE_SIZE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const SMALL_PAGE: usize = 4096;

/// Memory mapped into the IOMMU; unmapped from it, then from the process,
/// on drop.
struct IommuMapping {
    container: Arc<Inner>,
    iova: u64,
    mapping: Mapping,
}

impl DmaBacking for IommuMapping {}

impl Drop for IommuMapping {
    fn drop(&mut self) {
        let mut unmap = ioctl::DmaUnmap {
            argsz: ioctl::argsz::<ioctl::DmaUnmap>(),
            iova: self.iova,
            size: self.mapping.len() as u64,
            ..Default::default()
        };
        // SAFETY: IOMMU_UNMAP_DMA takes a `vfio_iommu_type1_dma_unmap`
        // with argsz set; it only removes our own IOMMU mapping.
        if let Err(e) =
            unsafe { ioctl::with_ptr(&self.container.file, ioctl::IOMMU_UNMAP_DMA, &mut unmap) }
        {
            tracing::warn!(iova = self.iova, error = %e, "VFIO_IOMMU_UNMAP_DMA failed");
        }
        // `self.mapping` is unmapped from the process after this.
    }
}

impl VfioContainer {
    fn map_memory(&self, size: usize) -> Result<Mapping, HwError> {
        let huge = |size: usize| Mapping::hugepages(size.div_ceil(HUGEPAGE_SIZE) * HUGEPAGE_SIZE);
        let small = |size: usize| Mapping::small_pages(size.div_ceil(SMALL_PAGE) * SMALL_PAGE);
        let no_hugepages = |e: std::io::Error| HwError::NoHugepages { size, source: e };
        match self.inner.cfg.memory {
            VfioMemory::Hugepages => huge(size).map_err(no_hugepages),
            VfioMemory::SmallPages => small(size).map_err(|e| HwError::io("anonymous memory", e)),
            VfioMemory::Auto => huge(size).or_else(|e| {
                tracing::debug!(size, error = %e, "no hugepages for VFIO DMA memory, using 4 KiB pages");
                small(size).map_err(|e| HwError::io("anonymous memory", e))
            }),
        }
    }

    fn next_iova(&self, mapping: &Mapping) -> u64 {
        match self.inner.cfg.iova {
            IovaMode::VirtualAddress => mapping.ptr().as_ptr() as u64,
            IovaMode::Allocated { .. } => {
                // keep IOVAs 2 MiB aligned so the IOMMU can use large pages
                let step = mapping.len().div_ceil(HUGEPAGE_SIZE) * HUGEPAGE_SIZE;
                self.inner
                    .next_iova
                    .fetch_add(step as u64, Ordering::Relaxed)
            }
        }
    }

    fn map_dma(&self, mapping: &Mapping, iova: u64) -> Result<(), HwError> {
        let mut map = ioctl::DmaMap {
            argsz: ioctl::argsz::<ioctl::DmaMap>(),
            flags: ioctl::VFIO_DMA_MAP_FLAG_READ | ioctl::VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: mapping.ptr().as_ptr() as u64,
            iova,
            size: mapping.len() as u64,
        };
        // SAFETY: IOMMU_MAP_DMA takes a `vfio_iommu_type1_dma_map` with
        // argsz set; `vaddr..vaddr+size` is our live mapping, which stays
        // mapped until the IOMMU mapping is removed (`IommuMapping`).
        unsafe { ioctl::with_ptr(&self.inner.file, ioctl::IOMMU_MAP_DMA, &mut map) }.map_err(|e| {
            let len = mapping.len();
            HwError::Vfio(match e.raw_os_error() {
                Some(libc::ENOMEM) | Some(libc::EPERM) => format!(
                    "pinning {len} bytes of DMA memory failed ({e}): raise the locked-memory limit \
                     (`ulimit -l`) or run as root"
                ),
                _ => format!(
                    "VFIO_IOMMU_MAP_DMA of {len} bytes at IOVA {iova:#x} failed ({e}): if the IOVA is \
                     beyond the IOMMU's address width, use IovaMode::Allocated or, in QEMU, \
                     `-device intel-iommu,aw-bits=48`"
                ),
            })
        })?;
        Ok(())
    }
}

impl DmaAllocator for VfioContainer {
    /// Any size may be contiguous: the IOMMU maps the region to one IOVA
    /// range. Needs a device opened first (the IOMMU type is set when the
    /// first group joins the container).
    fn allocate(&self, size: usize, _contiguous: bool) -> Result<DmaRegion, HwError> {
        if size == 0 {
            return Err(HwError::Invalid("zero-sized DMA allocation".into()));
        }
        if !self.iommu_ready() {
            return Err(HwError::Vfio(
                "open a device (VfioContainer::device) before allocating DMA memory: \
                 the container has no IOMMU until a group joins it"
                    .into(),
            ));
        }
        let mapping = self.map_memory(size)?;
        let iova = self.next_iova(&mapping);
        self.map_dma(&mapping, iova)?;
        let ptr = mapping.ptr();
        let backing = IommuMapping {
            container: self.inner.clone(),
            iova,
            mapping,
        };
        // SAFETY: `ptr` starts a fresh, kernel-zeroed mapping of at least
        // `size` bytes, pinned by the IOMMU mapping; both are owned by
        // `backing`, which the region keeps until it drops. The IOMMU maps
        // the whole range to `iova..`, so it is contiguous.
        Ok(unsafe {
            DmaRegion::from_raw_parts(
                ptr,
                size,
                Translation::Contiguous(iova),
                size,
                Box::new(backing),
            )
        })
    }

    /// Translation is one contiguous range; 2 MiB keeps packet buffers
    /// within one hugepage (and one IOMMU large page).
    fn page_size(&self) -> usize {
        HUGEPAGE_SIZE
    }
}
