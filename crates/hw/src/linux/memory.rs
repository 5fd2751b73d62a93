//! DMA memory without an IOMMU: 2 MiB hugepages whose physical addresses
//! come from the pagemap.
//!
//! The pages are anonymous `MAP_HUGETLB` memory, so no hugetlbfs mount is
//! needed, only reserved pages ([`super::Hugepages`]).
//!
//! A hugepage is physically contiguous, so one pagemap lookup per 2 MiB
//! gives the device address of every byte in it. Hugetlb pages are never
//! swapped out and the mapping is populated and `mlock`ed, so the
//! addresses stay valid for the life of the region. (The kernel can still
//! migrate a hugepage to offline memory or to make room for a contiguous
//! (CMA) allocation; like every uio-style driver, nfkit assumes neither
//! happens while the device runs. VFIO has no such caveat: its IOMMU
//! mapping pins the pages.)

use super::mapping::{Mapping, HUGEPAGE_SIZE};
use super::pagemap::Pagemap;
use crate::dma::{DmaAllocator, DmaRegion, Translation};
use crate::error::HwError;

const HUGEPAGE_SHIFT: u32 = HUGEPAGE_SIZE.trailing_zeros();

/// Hugepage DMA memory translated through the pagemap (needs root).
#[derive(Debug)]
pub struct HugepageDma {
    pagemap: Pagemap,
}

impl HugepageDma {
    /// Translate through this process's `/proc/self/pagemap`.
    pub fn new() -> Result<Self, HwError> {
        Ok(HugepageDma::with_pagemap(Pagemap::open_self()?))
    }

    /// Translate through another pagemap (tests).
    pub fn with_pagemap(pagemap: Pagemap) -> Self {
        HugepageDma { pagemap }
    }

    /// Map and lock enough hugepages for `size` bytes.
    fn map(size: usize) -> Result<Mapping, HwError> {
        let len = size.div_ceil(HUGEPAGE_SIZE) * HUGEPAGE_SIZE;
        let mapping = Mapping::hugepages(len).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOMEM) => HwError::NoHugepages { size, source: e },
            _ => HwError::Unsupported(format!(
                "mapping {len} bytes of 2 MiB hugepages failed: {e}"
            )),
        })?;
        // Hugetlb pages are never swapped out, so the lock is a second
        // guarantee rather than the first: if `ulimit -l` refuses it, say
        // so and carry on.
        if let Err(e) = mapping.lock() {
            tracing::warn!(len, error = %e, "mlock of hugepage DMA memory failed (raise `ulimit -l`)");
        }
        Ok(mapping)
    }

    /// The physical address of each hugepage of `mapping`.
    fn page_addrs(&self, mapping: &Mapping) -> Result<Vec<u64>, HwError> {
        let base = mapping.ptr().as_ptr() as usize;
        (0..mapping.len() / HUGEPAGE_SIZE)
            .map(|i| self.pagemap.translate(base + i * HUGEPAGE_SIZE))
            .collect()
    }
}

/// Bytes from the start that are physically contiguous, given the
/// physical address of each hugepage.
fn contiguous_prefix(addrs: &[u64]) -> usize {
    let adjacent = addrs
        .windows(2)
        .take_while(|w| w[1] == w[0] + HUGEPAGE_SIZE as u64)
        .count();
    if addrs.is_empty() {
        0
    } else {
        (adjacent + 1) * HUGEPAGE_SIZE
    }
}

impl DmaAllocator for HugepageDma {
    /// Contiguous allocations must fit in one hugepage (two hugepages are
    /// rarely physically adjacent); others get one translation per page.
    fn allocate(&self, size: usize, contiguous: bool) -> Result<DmaRegion, HwError> {
        if size == 0 {
            return Err(HwError::Invalid("zero-sized DMA allocation".into()));
        }
        if contiguous && size > HUGEPAGE_SIZE {
            return Err(HwError::TooLargeContiguous {
                size,
                page: HUGEPAGE_SIZE,
            });
        }
        let mapping = Self::map(size)?;
        let addrs = self.page_addrs(&mapping)?;
        let contiguous_len = contiguous_prefix(&addrs);
        let translation = match addrs.as_slice() {
            [one] => Translation::Contiguous(*one),
            _ => Translation::Pages {
                page_shift: HUGEPAGE_SHIFT,
                addrs,
            },
        };
        tracing::debug!(size, virt = ?mapping.ptr(), ?translation, "hugepage DMA region");
        // SAFETY: `mapping` is a fresh, kernel-zeroed, populated and locked
        // hugepage mapping of at least `size` bytes that the region owns
        // (it unmaps on drop); `translation` holds the pagemap address of
        // each hugepage, and `contiguous_len` is the physically adjacent
        // prefix.
        Ok(unsafe {
            DmaRegion::from_raw_parts(
                mapping.ptr(),
                size,
                translation,
                contiguous_len,
                Box::new(mapping),
            )
        })
    }

    fn page_size(&self) -> usize {
        HUGEPAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_prefix_stops_at_the_first_gap() {
        let p = HUGEPAGE_SIZE as u64;
        assert_eq!(contiguous_prefix(&[]), 0);
        assert_eq!(contiguous_prefix(&[10 * p]), HUGEPAGE_SIZE);
        assert_eq!(
            contiguous_prefix(&[10 * p, 11 * p, 3 * p, 4 * p]),
            2 * HUGEPAGE_SIZE
        );
    }

    #[test]
    fn oversized_contiguous_request_is_refused_before_mapping() {
        let dma = HugepageDma::with_pagemap(Pagemap::open("/dev/null").unwrap());
        let err = dma.allocate(HUGEPAGE_SIZE + 1, true).unwrap_err();
        assert!(matches!(err, HwError::TooLargeContiguous { .. }), "{err}");
        assert!(matches!(dma.allocate(0, false), Err(HwError::Invalid(_))));
    }
}
