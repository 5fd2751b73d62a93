//! Finding and opening a device's IOMMU group, with an error that names
//! the fix for each way this goes wrong (IOMMU off, wrong driver, VFIO
//! modules missing, permissions, group not viable).

use super::ioctl;
use super::VfioConfig;
use crate::error::HwError;
use crate::linux::SysfsDevice;
use crate::pci::PciAddress;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;

/// Check, without any ioctl, that `addr` can be opened through VFIO:
/// the device exists, sits in an IOMMU group, is bound to `vfio-pci`, and
/// its group device `/dev/vfio/N` exists. Returns the group number.
/// (`nfkit doctor` runs this too.)
pub fn preflight(cfg: &VfioConfig, addr: PciAddress) -> Result<u32, HwError> {
    let dev = SysfsDevice::new(&cfg.sysfs, addr)?;
    let group = dev.iommu_group()?.ok_or_else(|| {
        HwError::Vfio(format!(
            "device {addr} has no IOMMU group, so the IOMMU is off: boot with intel_iommu=on \
             (or amd_iommu=on); in a QEMU guest add `-machine q35 -device intel-iommu,intremap=on,aw-bits=48` \
             and boot it with intel_iommu=on. Without an IOMMU use the sysfs platform as root"
        ))
    })?;
    let driver = dev.driver()?;
    if driver.as_deref() != Some("vfio-pci") {
        let dir = dev.dir().display();
        let unbind = match &driver {
            Some(_) => format!("echo {addr} > {dir}/driver/unbind; "),
            None => String::new(),
        };
        return Err(HwError::Vfio(format!(
            "device {addr} is bound to {}, not vfio-pci: run `modprobe vfio-pci; \
             echo vfio-pci > {dir}/driver_override; {unbind}echo {addr} > /sys/bus/pci/drivers_probe`",
            driver.as_deref().unwrap_or("no driver"),
        )));
    }
    let group_path = cfg.dev_vfio.join(group.to_string());
    if !group_path.exists() {
        return Err(HwError::Vfio(format!(
            "{} does not exist although {addr} is bound to vfio-pci: is /dev mounted (devtmpfs)? \
             try `modprobe vfio-pci vfio_iommu_type1`",
            group_path.display()
        )));
    }
    Ok(group)
}

/// Open group `group` and check that it is viable (every device in it is
/// bound to vfio-pci or to no driver).
pub(super) fn open(cfg: &VfioConfig, group: u32) -> Result<File, HwError> {
    let path = cfg.dev_vfio.join(group.to_string());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            HwError::Vfio(match e.kind() {
                ErrorKind::NotFound => format!(
                    "{} does not exist: bind the device to vfio-pci",
                    path.display()
                ),
                ErrorKind::PermissionDenied => format!(
                    "no permission to open {}: run as root or `chown $USER {}`",
                    path.display(),
                    path.display()
                ),
                _ if e.raw_os_error() == Some(libc::EBUSY) => {
                    format!(
                        "{} is busy: the IOMMU group is already open, by another process or by \
                         another VfioContainer (or its devices and BARs) in this one: open all \
                         devices through one container",
                        path.display()
                    )
                }
                _ => format!("opening {}: {e}", path.display()),
            })
        })?;
    let mut status = ioctl::GroupStatus {
        argsz: ioctl::argsz::<ioctl::GroupStatus>(),
        flags: 0,
    };
    // SAFETY: GROUP_GET_STATUS takes a `vfio_group_status` with argsz set.
    unsafe { ioctl::with_ptr(&file, ioctl::GROUP_GET_STATUS, &mut status) }
        .map_err(|e| HwError::Vfio(format!("{} is not a VFIO group ({e})", path.display())))?;
    if status.flags & ioctl::VFIO_GROUP_FLAGS_VIABLE == 0 {
        return Err(HwError::Vfio(format!(
            "IOMMU group {group} is not viable: every device listed in \
             {}/kernel/iommu_groups/{group}/devices must be bound to vfio-pci or to no driver",
            cfg.sysfs.display()
        )));
    }
    Ok(file)
}
