//! A VFIO container: one IOMMU address space that groups join. All
//! devices of one nfkit process share a container, so every device sees
//! every DMA region at the same IOVA.

use super::{group, ioctl, VfioConfig};
use crate::error::HwError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A VFIO container and the groups attached to it. Cheap to clone; it is
/// also the [`crate::DmaAllocator`] for its devices.
#[derive(Clone)]
pub struct VfioContainer {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) file: File,
    pub(super) cfg: VfioConfig,
    iommu_type: u32,
    /// Next IOVA for [`super::IovaMode::Allocated`].
    pub(super) next_iova: AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    groups: HashMap<u32, Arc<File>>,
    iommu_set: bool,
}

impl std::fmt::Debug for VfioContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("VfioContainer")
            .field("groups", &state.groups.keys().collect::<Vec<_>>())
            .field("iommu_set", &state.iommu_set)
            .finish()
    }
}

impl VfioContainer {
    /// Open a container on `/dev/vfio/vfio` with default settings.
    pub fn open() -> Result<Self, HwError> {
        VfioContainer::open_with(VfioConfig::default())
    }

    /// Open a container with the given paths and memory settings.
    pub fn open_with(cfg: VfioConfig) -> Result<Self, HwError> {
        let path = cfg.dev_vfio.join("vfio");
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| {
            HwError::Vfio(match e.kind() {
                ErrorKind::NotFound => format!(
                    "{} does not exist: load VFIO with `modprobe vfio-pci` (the kernel needs CONFIG_VFIO \
                     and an IOMMU)",
                    path.display()
                ),
                ErrorKind::PermissionDenied => {
                    format!("no permission to open {}: run as root", path.display())
                }
                _ => format!("opening {}: {e}", path.display()),
            })
        })?;
        let not_vfio =
            |e| HwError::Vfio(format!("{} is not a VFIO container ({e})", path.display()));
        let version = ioctl::with_value(&file, ioctl::GET_API_VERSION, 0).map_err(not_vfio)?;
        if version != ioctl::VFIO_API_VERSION as i32 {
            return Err(HwError::Vfio(format!(
                "the kernel's VFIO API version is {version}, nfkit speaks {}",
                ioctl::VFIO_API_VERSION
            )));
        }
        let iommu_type = choose_iommu_type(&file)?;
        Ok(VfioContainer {
            inner: Arc::new(Inner {
                file,
                next_iova: AtomicU64::new(match cfg.iova {
                    super::IovaMode::Allocated { base } => base,
                    super::IovaMode::VirtualAddress => 0,
                }),
                cfg,
                iommu_type,
                state: Mutex::new(State::default()),
            }),
        })
    }

    /// The settings the container was opened with.
    pub fn config(&self) -> &VfioConfig {
        &self.inner.cfg
    }

    /// Attach group `n` (once), and set the IOMMU type when the first
    /// group joins (the kernel only accepts it then).
    pub(super) fn attach_group(&self, n: u32) -> Result<Arc<File>, HwError> {
        let mut state = self.inner.state.lock();
        if let Some(g) = state.groups.get(&n) {
            return Ok(g.clone());
        }
        let group = Arc::new(group::open(&self.inner.cfg, n)?);
        let mut container_fd = self.inner.file.as_raw_fd();
        // SAFETY: GROUP_SET_CONTAINER takes a pointer to the container fd.
        unsafe { ioctl::with_ptr(&group, ioctl::GROUP_SET_CONTAINER, &mut container_fd) }.map_err(
            |e| HwError::Vfio(format!("attaching IOMMU group {n} to the container: {e}")),
        )?;
        if !state.iommu_set {
            ioctl::with_value(
                &self.inner.file,
                ioctl::SET_IOMMU,
                self.inner.iommu_type as libc::c_ulong,
            )
            .map_err(|e| HwError::Vfio(format!("setting the IOMMU type: {e}")))?;
            state.iommu_set = true;
        }
        state.groups.insert(n, group.clone());
        Ok(group)
    }

    /// Whether a group has joined, so DMA can be mapped.
    pub(super) fn iommu_ready(&self) -> bool {
        self.inner.state.lock().iommu_set
    }
}

/// Type 1 v2 (the one with sane unmap semantics), else type 1.
fn choose_iommu_type(file: &File) -> Result<u32, HwError> {
    for t in [ioctl::VFIO_TYPE1v2_IOMMU, ioctl::VFIO_TYPE1_IOMMU] {
        if ioctl::with_value(file, ioctl::CHECK_EXTENSION, t as libc::c_ulong).is_ok_and(|r| r > 0)
        {
            return Ok(t);
        }
    }
    Err(HwError::Vfio(
        "the kernel offers no type 1 IOMMU: `modprobe vfio_iommu_type1`".into(),
    ))
}
