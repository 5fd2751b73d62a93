//! Typed errors of the hardware-access layer.

use std::path::PathBuf;

/// Errors from memory, PCI and BAR access. Messages name the fix where
/// there is one.
#[derive(Debug, thiserror::Error)]
pub enum HwError {
    #[error("no hugepages available for {size} bytes of DMA memory: reserve some with `echo 64 > /proc/sys/vm/nr_hugepages` (as root) ({source})")]
    NoHugepages {
        size: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("DMA allocation of {size} bytes is larger than one {page} byte page and must be physically contiguous")]
    TooLargeContiguous { size: usize, page: usize },
    #[error("cannot translate virtual address {virt:#x} through /proc/self/pagemap: {reason}")]
    Translation { virt: usize, reason: String },
    #[error("reading /proc/self/pagemap gives no physical frame numbers without CAP_SYS_ADMIN: run as root, or use VFIO (vfio: ports) which needs no physical addresses")]
    PagemapNeedsRoot,
    #[error("PCI device {addr}: {what}")]
    Pci { addr: String, what: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("VFIO: {0}")]
    Vfio(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("packet buffer pool exhausted")]
    PoolEmpty,
}

impl HwError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HwError::Io {
            path: path.into(),
            source,
        }
    }
}
