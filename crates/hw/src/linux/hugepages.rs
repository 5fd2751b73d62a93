//! The kernel's pool of 2 MiB hugepages: how many are reserved and free,
//! and reserving more (for tests and `nfkit doctor`).
//!
//! The knobs are the 2 MiB-specific ones in
//! `/sys/kernel/mm/hugepages/hugepages-2048kB/`; when 2 MiB is the default
//! hugepage size (it is on x86-64) `nr_hugepages` there is the same
//! counter as `/proc/sys/vm/nr_hugepages`.

use crate::error::HwError;
use std::path::{Path, PathBuf};

const SYSTEM_DIR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// The 2 MiB hugepage pool: the `nr_hugepages` and `free_hugepages`
/// counters (paths configurable so tests can use fake files).
#[derive(Debug, Clone)]
pub struct Hugepages {
    nr_path: PathBuf,
    free_path: PathBuf,
}

impl Hugepages {
    /// The running kernel's 2 MiB pool.
    pub fn system() -> Self {
        Hugepages::at(
            Path::new(SYSTEM_DIR).join("nr_hugepages"),
            Path::new(SYSTEM_DIR).join("free_hugepages"),
        )
    }

    /// A pool whose counters live in the given files.
    pub fn at(nr_path: impl Into<PathBuf>, free_path: impl Into<PathBuf>) -> Self {
        Hugepages {
            nr_path: nr_path.into(),
            free_path: free_path.into(),
        }
    }

    /// Hugepages reserved in the pool (`nr_hugepages`).
    pub fn nr(&self) -> Result<u64, HwError> {
        read_count(&self.nr_path)
    }

    /// Reserved hugepages not yet mapped by anyone (`free_hugepages`).
    pub fn free(&self) -> Result<u64, HwError> {
        read_count(&self.free_path)
    }

    /// Ask the kernel for `n` reserved hugepages (needs root). The kernel
    /// may grant fewer when memory is fragmented; returns how many the
    /// pool holds afterwards.
    pub fn set_nr(&self, n: u64) -> Result<u64, HwError> {
        std::fs::write(&self.nr_path, format!("{n}\n")).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                HwError::Unsupported(format!(
                    "cannot write {}: reserving hugepages needs root",
                    self.nr_path.display()
                ))
            } else {
                HwError::io(&self.nr_path, e)
            }
        })?;
        self.nr()
    }

    /// Make sure at least `free` hugepages are free, growing the pool if
    /// needed. The returned guard puts `nr_hugepages` back to its previous
    /// value when dropped (also when a test fails and unwinds).
    pub fn reserve_free(&self, free: u64) -> Result<Reservation, HwError> {
        let previous = self.nr()?;
        let guard = Reservation {
            pool: self.clone(),
            previous,
        };
        let now_free = self.free()?;
        if now_free >= free {
            return Ok(guard);
        }
        self.set_nr(previous + (free - now_free))?;
        let got = self.free()?;
        if got < free {
            // `guard` restores the previous size as it drops.
            return Err(HwError::Unsupported(format!(
                "asked the kernel for {free} free 2 MiB hugepages but it granted only {got} \
                 (memory too fragmented or too small; try right after boot, or fewer pages)"
            )));
        }
        Ok(guard)
    }
}

/// Restores `nr_hugepages` when dropped. See [`Hugepages::reserve_free`].
#[derive(Debug)]
pub struct Reservation {
    pool: Hugepages,
    previous: u64,
}

impl Reservation {
    /// The pool size that will be restored.
    pub fn previous(&self) -> u64 {
        self.previous
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.pool.nr().ok() == Some(self.previous) {
            return;
        }
        if let Err(e) = self.pool.set_nr(self.previous) {
            tracing::warn!(previous = self.previous, error = %e, "could not restore nr_hugepages");
        }
    }
}

fn read_count(path: &Path) -> Result<u64, HwError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            HwError::Unsupported(format!(
                "{} does not exist: this kernel has no 2 MiB hugepage support (CONFIG_HUGETLBFS)",
                path.display()
            ))
        } else {
            HwError::io(path, e)
        }
    })?;
    text.trim().parse().map_err(|_| {
        HwError::Invalid(format!(
            "{} holds `{}`, not a page count",
            path.display(),
            text.trim()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_grows_the_pool_and_restores_it() {
        let dir = tempfile::tempdir().unwrap();
        // One file for both counters: a fake kernel whose new pages are
        // all free.
        let knob = dir.path().join("nr_hugepages");
        std::fs::write(&knob, "3\n").unwrap();
        let pool = Hugepages::at(&knob, &knob);
        {
            let r = pool.reserve_free(8).unwrap();
            assert_eq!(r.previous(), 3);
            assert_eq!(pool.nr().unwrap(), 8);
        }
        assert_eq!(pool.nr().unwrap(), 3);
    }

    #[test]
    fn a_short_grant_is_an_error_and_the_pool_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let nr = dir.path().join("nr_hugepages");
        let free = dir.path().join("free_hugepages");
        std::fs::write(&nr, "2\n").unwrap();
        std::fs::write(&free, "0\n").unwrap();
        let pool = Hugepages::at(&nr, &free);
        let err = pool.reserve_free(4).unwrap_err();
        assert!(err.to_string().contains("granted only 0"), "{err}");
        assert_eq!(pool.nr().unwrap(), 2);
    }

    #[test]
    fn garbage_and_missing_counters_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let nr = dir.path().join("nr_hugepages");
        std::fs::write(&nr, "lots\n").unwrap();
        let pool = Hugepages::at(&nr, dir.path().join("absent"));
        assert!(pool
            .nr()
            .unwrap_err()
            .to_string()
            .contains("not a page count"));
        assert!(pool
            .free()
            .unwrap_err()
            .to_string()
            .contains("no 2 MiB hugepage support"));
    }
}
