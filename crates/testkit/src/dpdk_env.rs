//! What DPDK's EAL needs from the system to run `dpdk-testpmd` beside
//! nfkit (free hugepages, a mounted hugetlbfs), as a guard that puts the
//! system back as it found it: the hugepage pool shrinks back to its
//! previous size, and hugetlbfs is unmounted if the guard mounted it.

use nfkit_hw::linux::{Hugepages, Reservation};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where hugetlbfs is mounted when nothing else has mounted it.
const HUGETLBFS_DIR: &str = "/dev/hugepages";

#[derive(Debug, thiserror::Error)]
pub enum DpdkEnvError {
    #[error("hugepages for DPDK: {0}")]
    Hugepages(#[from] nfkit_hw::HwError),
    #[error("cannot mount hugetlbfs on {}: {why}", dir.display())]
    Mount { dir: PathBuf, why: String },
}

/// Free hugepages and a hugetlbfs mount while it lives.
pub struct DpdkEnv {
    _pages: Reservation,
    mounted: Option<PathBuf>,
}

impl DpdkEnv {
    /// At least `hugepages` free 2 MiB pages and a mounted hugetlbfs.
    pub fn prepare(hugepages: u64) -> Result<DpdkEnv, DpdkEnvError> {
        let pages = Hugepages::system().reserve_free(hugepages)?;
        let mounted = if hugetlbfs_mounted() {
            None
        } else {
            let dir = Path::new(HUGETLBFS_DIR);
            mount_hugetlbfs(dir)?;
            Some(dir.to_path_buf())
        };
        Ok(DpdkEnv {
            _pages: pages,
            mounted,
        })
    }
}

impl Drop for DpdkEnv {
    fn drop(&mut self) {
        if let Some(dir) = &self.mounted {
            match Command::new("umount").arg(dir).status() {
                Ok(s) if s.success() => {}
                other => eprintln!("could not unmount {}: {other:?}", dir.display()),
            }
        }
    }
}

fn hugetlbfs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    })
}

fn mount_hugetlbfs(dir: &Path) -> Result<(), DpdkEnvError> {
    let failed = |why: String| DpdkEnvError::Mount {
        dir: dir.to_path_buf(),
        why,
    };
    std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
    let out = Command::new("mount")
        .args(["-t", "hugetlbfs", "nodev"])
        .arg(dir)
        .output()
        .map_err(|e| failed(format!("cannot run `mount`: {e}")))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}
