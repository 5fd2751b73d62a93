//! The VFIO ioctls nfkit uses (`include/uapi/linux/vfio.h`), over the
//! struct layouts of the `vfio-bindings` crate.
//!
//! The request numbers are C macros, which bindgen does not carry over:
//! each is `_IO(VFIO_TYPE, VFIO_BASE + n)`, i.e. `(';' << 8) | (100 + n)`,
//! with the argument passed by pointer despite the `_IO` encoding.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use vfio_bindings::bindings::vfio as sys;

pub(super) use sys::{
    vfio_device_info as DeviceInfo, vfio_group_status as GroupStatus,
    vfio_iommu_type1_dma_map as DmaMap, vfio_iommu_type1_dma_unmap as DmaUnmap,
    vfio_irq_info as IrqInfo, vfio_region_info as RegionInfoRaw,
};
pub(super) use sys::{
    VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_DEVICE_FLAGS_RESET, VFIO_DMA_MAP_FLAG_READ,
    VFIO_DMA_MAP_FLAG_WRITE, VFIO_GROUP_FLAGS_VIABLE, VFIO_IRQ_INFO_EVENTFD,
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_TYPE1_IOMMU,
};

const fn io(n: u32) -> libc::Ioctl {
    (((sys::VFIO_TYPE as u32) << 8) | (sys::VFIO_BASE + n)) as libc::Ioctl
}

// On the container fd.
pub(super) const GET_API_VERSION: libc::Ioctl = io(0);
pub(super) const CHECK_EXTENSION: libc::Ioctl = io(1);
pub(super) const SET_IOMMU: libc::Ioctl = io(2);
pub(super) const IOMMU_MAP_DMA: libc::Ioctl = io(13);
pub(super) const IOMMU_UNMAP_DMA: libc::Ioctl = io(14);
// On a group fd.
pub(super) const GROUP_GET_STATUS: libc::Ioctl = io(3);
pub(super) const GROUP_SET_CONTAINER: libc::Ioctl = io(4);
pub(super) const GROUP_GET_DEVICE_FD: libc::Ioctl = io(6);
// On a device fd.
pub(super) const DEVICE_GET_INFO: libc::Ioctl = io(7);
pub(super) const DEVICE_GET_REGION_INFO: libc::Ioctl = io(8);
pub(super) const DEVICE_GET_IRQ_INFO: libc::Ioctl = io(9);
pub(super) const DEVICE_SET_IRQS: libc::Ioctl = io(10);
pub(super) const DEVICE_RESET: libc::Ioctl = io(11);

/// An ioctl whose argument is a plain integer.
pub(super) fn with_value(
    file: &File,
    request: libc::Ioctl,
    value: libc::c_ulong,
) -> io::Result<libc::c_int> {
    // SAFETY: the request numbers above that take an integer argument
    // (GET_API_VERSION, CHECK_EXTENSION, SET_IOMMU, DEVICE_RESET) read no
    // memory of ours; `file` is open for the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, value) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// An ioctl whose argument is a pointer to `arg`, which the kernel reads
/// and may fill in.
///
/// # Safety
/// `T` must be the struct (or, for `GROUP_SET_CONTAINER`, the integer;
/// for `GROUP_GET_DEVICE_FD`, the NUL-terminated string) that `request`
/// expects, with `argsz` set where it has one.
pub(super) unsafe fn with_ptr<T>(
    file: &File,
    request: libc::Ioctl,
    arg: *mut T,
) -> io::Result<libc::c_int> {
    // SAFETY: the caller guarantees `arg` matches `request`; `arg` points
    // to live memory for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), request, arg) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// `argsz` for a struct: its size.
pub(super) fn argsz<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_kernel_header() {
        // values of the `_IO(';', 100 + n)` macros in linux/vfio.h
        assert_eq!(GET_API_VERSION, 0x3b64);
        assert_eq!(SET_IOMMU, 0x3b66);
        assert_eq!(GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(IOMMU_UNMAP_DMA, 0x3b72);
        assert_eq!(DEVICE_GET_IRQ_INFO, 0x3b6d);
        assert_eq!(DEVICE_SET_IRQS, 0x3b6e);
    }

    #[test]
    fn struct_sizes_match_the_kernel_abi() {
        assert_eq!(argsz::<GroupStatus>(), 8);
        assert_eq!(argsz::<RegionInfoRaw>(), 32);
        assert_eq!(argsz::<DmaMap>(), 32);
        assert_eq!(argsz::<DmaUnmap>(), 24);
        assert_eq!(argsz::<IrqInfo>(), 16);
    }
}
