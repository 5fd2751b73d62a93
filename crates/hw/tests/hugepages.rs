//! Hugepage DMA memory and pagemap translation on the real kernel.
//!
//! As root the tests reserve the hugepages they need and give them back
//! afterwards (a `Reservation` guard restores `nr_hugepages`, also when a
//! test fails). The non-root behaviour is checked by re-running this test
//! binary as `nobody` (uid 65534): it must get clear errors, not zero
//! physical addresses.

mod fake_sysfs;

use nfkit_hw::dma::Translation;
use nfkit_hw::linux::{HugepageDma, Hugepages, LinuxPci, Pagemap, Reservation, HUGEPAGE_SIZE};
use nfkit_hw::{DmaAllocator, HwError, PciFunction};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::sync::{Mutex, MutexGuard};

/// The tests of this binary share the kernel's hugepage pool.
static POOL: Mutex<()> = Mutex::new(());

const CHILD_ENV: &str = "NFKIT_HW_NONROOT_CHILD_SYSFS";
const CHILD_OK: &str = "nonroot child: all checks passed";
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Serialise on the pool and make sure `pages` hugepages are free, or say
/// why the test cannot run.
fn reserve(test: &str, pages: u64) -> Option<(MutexGuard<'static, ()>, Reservation)> {
    if !is_root() {
        eprintln!("SKIP {test}: needs root (reserves hugepages, reads physical addresses)");
        return None;
    }
    let lock = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match Hugepages::system().reserve_free(pages) {
        Ok(reservation) => Some((lock, reservation)),
        Err(e) => {
            eprintln!("SKIP {test}: cannot reserve {pages} hugepages: {e}");
            None
        }
    }
}

#[test]
fn hugepage_memory_is_zeroed_and_translates_to_stable_device_addresses() {
    let Some((_lock, _reservation)) = reserve("hugepage_memory_is_zeroed...", 4) else {
        return;
    };
    let dma = HugepageDma::new().unwrap();
    let pagemap = Pagemap::open_self().unwrap();

    let mut ring = dma.allocate(64 * 1024, true).unwrap();
    assert_eq!(ring.len(), 64 * 1024);
    assert_eq!(ring.contiguous_len(), 64 * 1024);
    assert_eq!(ring.virt_addr() % HUGEPAGE_SIZE, 0);
    assert_eq!(
        ring.device_addr() % HUGEPAGE_SIZE as u64,
        0,
        "a hugepage is physically aligned"
    );
    assert!(matches!(ring.translation(), Translation::Contiguous(_)));
    assert!(
        ring.slice(0, ring.len()).unwrap().iter().all(|&b| b == 0),
        "zeroed"
    );

    ring.fill(0xa5);
    ring.write_u64(8, 0x0123_4567_89ab_cdef);
    assert_eq!(ring.read_u64(8), 0x0123_4567_89ab_cdef);
    for offset in [0, 8, 4096, 60_000] {
        assert_eq!(
            pagemap.translate(ring.virt_addr() + offset).unwrap(),
            ring.device_addr_at(offset),
            "device address of byte {offset} is still what the pagemap says after writes"
        );
    }
}

#[test]
fn large_allocations_get_one_device_address_per_hugepage() {
    let Some((_lock, _reservation)) = reserve("large_allocations...", 3) else {
        return;
    };
    let dma = HugepageDma::new().unwrap();
    let pagemap = Pagemap::open_self().unwrap();

    let len = 3 * HUGEPAGE_SIZE - 100;
    let buffers = dma.allocate(len, false).unwrap();
    let Translation::Pages { page_shift, addrs } = buffers.translation() else {
        panic!(
            "three hugepages need per-page translation: {:?}",
            buffers.translation()
        );
    };
    assert_eq!(1usize << page_shift, HUGEPAGE_SIZE);
    assert_eq!(addrs.len(), 3);
    for (i, &addr) in addrs.iter().enumerate() {
        let virt = buffers.virt_addr() + i * HUGEPAGE_SIZE;
        assert_eq!(pagemap.translate(virt + 7).unwrap(), addr + 7);
        assert_eq!(buffers.device_addr_at(i * HUGEPAGE_SIZE + 7), addr + 7);
    }
    let contiguous = buffers.contiguous_len();
    assert!(contiguous >= HUGEPAGE_SIZE.min(len) && contiguous <= len);
    assert!(contiguous == len || contiguous.is_multiple_of(HUGEPAGE_SIZE));

    let err = dma.allocate(HUGEPAGE_SIZE + 1, true).unwrap_err();
    assert!(matches!(err, HwError::TooLargeContiguous { .. }), "{err}");
}

#[test]
fn more_memory_than_free_hugepages_explains_how_to_reserve_them() {
    let Some((_lock, _reservation)) = reserve("more_memory_than_free...", 1) else {
        return;
    };
    let free = Hugepages::system().free().unwrap() as usize;
    let err = HugepageDma::new()
        .unwrap()
        .allocate((free + 1) * HUGEPAGE_SIZE, false)
        .unwrap_err();
    assert!(matches!(err, HwError::NoHugepages { .. }), "{err}");
    assert!(err.to_string().contains("nr_hugepages"), "{err}");
}

#[test]
fn without_root_translation_and_sysfs_access_fail_clearly() {
    let Some((_lock, _reservation)) = reserve("without_root...", 1) else {
        return;
    };
    let fake = fake_sysfs::FakeSysfs::new(fake_sysfs::Options::default());
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(&exe)
        .args([
            "--exact",
            "nonroot_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, fake.root())
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "SKIP without_root...: cannot run {} as uid {NOBODY}: {e}",
                exe.display()
            );
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("Permission denied") && !stdout.contains("running 1 test") {
        eprintln!(
            "SKIP without_root...: uid {NOBODY} cannot execute {}: {stderr}",
            exe.display()
        );
        return;
    }
    assert!(
        output.status.success() && stdout.contains(CHILD_OK),
        "unprivileged child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// The unprivileged half of the test above; does nothing on its own.
#[test]
#[ignore = "run as uid 65534 by without_root_translation_and_sysfs_access_fail_clearly"]
fn nonroot_child() {
    let Some(sysfs) = std::env::var_os(CHILD_ENV) else {
        eprintln!(
            "SKIP nonroot_child: only meaningful as the unprivileged child of its parent test"
        );
        return;
    };
    assert!(!is_root(), "the child must run without root");

    let err = HugepageDma::new()
        .unwrap()
        .allocate(4096, true)
        .unwrap_err();
    assert!(matches!(err, HwError::PagemapNeedsRoot), "{err}");
    assert!(
        err.to_string().contains("run as root") && err.to_string().contains("VFIO"),
        "{err}"
    );

    let addr = fake_sysfs::ADDR;
    let pci = LinuxPci::open_in(&sysfs, addr.parse().unwrap()).unwrap();
    assert_eq!(
        pci.config_read16(0).unwrap(),
        0x8086,
        "the config header is readable by anyone"
    );
    for err in [
        pci.config_write16(4, 0x0406).unwrap_err(),
        pci.map_bar(0).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("not permitted") && msg.contains(&format!("vfio:{addr}")),
            "{msg}"
        );
    }
    println!("{CHILD_OK}");
}
