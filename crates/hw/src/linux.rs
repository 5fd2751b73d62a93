//! The Linux platform (sysfs + uio style): hugepage DMA memory translated
//! through `/proc/self/pagemap`, PCI functions through sysfs.
//!
//! (Being written: see issue 2.)
