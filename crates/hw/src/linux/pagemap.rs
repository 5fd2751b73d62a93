//! Virtual-to-physical translation through `/proc/self/pagemap`.
//!
//! The file holds one little-endian u64 per virtual page of the base page
//! size (Linux `Documentation/admin-guide/mm/pagemap.rst`): bit 63 says the
//! page is present, bit 62 that it is swapped, bits 0-54 hold the page
//! frame number (PFN). Since Linux 4.2 the PFN reads as zero without
//! `CAP_SYS_ADMIN`, so a present page with PFN 0 means "not root".

use crate::error::HwError;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const PFN_MASK: u64 = (1 << 55) - 1;

/// An open pagemap file and the base page size its entries describe.
#[derive(Debug)]
pub struct Pagemap {
    file: File,
    path: PathBuf,
    page_size: usize,
}

impl Pagemap {
    /// This process's pagemap, `/proc/self/pagemap`.
    pub fn open_self() -> Result<Self, HwError> {
        Pagemap::open(Path::new("/proc/self/pagemap"))
    }

    /// A pagemap file at `path` (tests point this at a fake one).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, HwError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| HwError::io(&path, e))?;
        Ok(Pagemap {
            file,
            path,
            page_size: base_page_size(),
        })
    }

    /// The base page size entries are indexed by (4096 on x86-64).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Physical address of virtual address `virt`, which must be in a
    /// present (populated) page.
    pub fn translate(&self, virt: usize) -> Result<u64, HwError> {
        let page = (virt / self.page_size) as u64;
        let mut entry = [0u8; 8];
        self.file
            .read_exact_at(&mut entry, page * 8)
            .map_err(|e| HwError::Translation {
                virt,
                reason: format!("reading entry {page} of {}: {e}", self.path.display()),
            })?;
        let entry = u64::from_le_bytes(entry);
        if entry & PRESENT == 0 {
            let why = if entry & SWAPPED != 0 {
                "swapped out"
            } else {
                "not present"
            };
            return Err(HwError::Translation {
                virt,
                reason: format!("the page is {why} (DMA memory must be populated and locked)"),
            });
        }
        let pfn = entry & PFN_MASK;
        if pfn == 0 {
            return Err(HwError::PagemapNeedsRoot);
        }
        Ok(pfn * self.page_size as u64 + (virt % self.page_size) as u64)
    }
}

fn base_page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake pagemap with the given entries at the given virtual pages.
    fn fake(entries: &[(usize, u64)]) -> (tempfile::TempDir, Pagemap) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pagemap");
        let file = File::create(&path).unwrap();
        let page = base_page_size();
        for &(virt, entry) in entries {
            file.write_all_at(&entry.to_le_bytes(), (virt / page * 8) as u64)
                .unwrap();
        }
        let map = Pagemap::open(&path).unwrap();
        (dir, map)
    }

    #[test]
    fn present_page_translates_with_its_offset() {
        let page = base_page_size();
        let virt = 0x40 * page;
        let (_d, map) = fake(&[(virt, PRESENT | 0x1234)]);
        assert_eq!(
            map.translate(virt + 0x10).unwrap(),
            0x1234 * page as u64 + 0x10
        );
    }

    #[test]
    fn zero_pfn_means_not_root() {
        let page = base_page_size();
        let (_d, map) = fake(&[(3 * page, PRESENT)]);
        let err = map.translate(3 * page).unwrap_err();
        assert!(matches!(err, HwError::PagemapNeedsRoot), "{err}");
        assert!(err.to_string().contains("run as root"));
    }

    #[test]
    fn absent_swapped_and_unknown_pages_are_translation_errors() {
        let page = base_page_size();
        let (_d, map) = fake(&[(page, 0), (2 * page, SWAPPED | 7)]);
        for (virt, what) in [
            (page, "not present"),
            (2 * page, "swapped out"),
            (100 * page, "reading entry"),
        ] {
            let err = map.translate(virt).unwrap_err();
            assert!(
                matches!(err, HwError::Translation { .. }) && err.to_string().contains(what),
                "{err}"
            );
        }
    }
}
