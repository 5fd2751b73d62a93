//! VFIO without `/dev/vfio`: the checks that run before any ioctl, against
//! a fake sysfs tree and a fake `/dev/vfio`, and the errors a machine
//! without VFIO gives. (The end-to-end test, in a QEMU guest with a
//! virtual IOMMU, lives with the guest harness.)

mod fake_sysfs;

use fake_sysfs::{FakeSysfs, Options, ADDR};
use nfkit_hw::vfio::{preflight, VfioConfig, VfioContainer};
use nfkit_hw::PciAddress;
use std::path::Path;

fn addr() -> PciAddress {
    ADDR.parse().unwrap()
}

fn config(fake: &FakeSysfs, dev_vfio: &Path) -> VfioConfig {
    VfioConfig {
        sysfs: fake.root().to_path_buf(),
        dev_vfio: dev_vfio.to_path_buf(),
        ..VfioConfig::default()
    }
}

fn preflight_error(opts: Options<'_>, make_group_node: bool) -> String {
    let fake = FakeSysfs::new(opts);
    let dev = tempfile::tempdir().unwrap();
    if make_group_node {
        std::fs::write(dev.path().join("7"), "").unwrap();
    }
    preflight(&config(&fake, dev.path()), addr())
        .unwrap_err()
        .to_string()
}

#[test]
fn no_iommu_group_means_the_iommu_is_off() {
    let msg = preflight_error(
        Options {
            driver: Some("vfio-pci"),
            iommu_group: None,
        },
        true,
    );
    assert!(
        msg.contains("no IOMMU group") && msg.contains("intel_iommu=on"),
        "{msg}"
    );
}

#[test]
fn wrong_driver_names_the_rebinding_commands() {
    let msg = preflight_error(Options::default(), true);
    assert!(msg.contains("bound to ixgbe, not vfio-pci"), "{msg}");
    assert!(
        msg.contains("modprobe vfio-pci") && msg.contains("driver_override"),
        "{msg}"
    );
    assert!(msg.contains("driver/unbind"), "{msg}");

    let msg = preflight_error(
        Options {
            driver: None,
            iommu_group: Some(7),
        },
        true,
    );
    assert!(
        msg.contains("bound to no driver") && !msg.contains("driver/unbind"),
        "{msg}"
    );
}

#[test]
fn missing_group_node_is_reported() {
    let opts = Options {
        driver: Some("vfio-pci"),
        iommu_group: Some(7),
    };
    let msg = preflight_error(opts, false);
    assert!(
        msg.contains("/7 does not exist") && msg.contains("modprobe"),
        "{msg}"
    );
}

#[test]
fn a_ready_device_passes_preflight_with_its_group() {
    let fake = FakeSysfs::new(Options {
        driver: Some("vfio-pci"),
        iommu_group: Some(7),
    });
    let dev = tempfile::tempdir().unwrap();
    std::fs::write(dev.path().join("7"), "").unwrap();
    assert_eq!(preflight(&config(&fake, dev.path()), addr()).unwrap(), 7);
}

#[test]
fn missing_dev_vfio_says_to_load_the_module() {
    let dev = tempfile::tempdir().unwrap();
    let cfg = VfioConfig {
        dev_vfio: dev.path().join("vfio-absent"),
        ..VfioConfig::default()
    };
    let msg = VfioContainer::open_with(cfg).unwrap_err().to_string();
    assert!(
        msg.contains("does not exist") && msg.contains("modprobe vfio-pci"),
        "{msg}"
    );
}

#[test]
fn a_file_that_is_not_a_container_is_rejected() {
    let dev = tempfile::tempdir().unwrap();
    std::fs::write(dev.path().join("vfio"), "").unwrap();
    let cfg = VfioConfig {
        dev_vfio: dev.path().to_path_buf(),
        ..VfioConfig::default()
    };
    let msg = VfioContainer::open_with(cfg).unwrap_err().to_string();
    assert!(msg.contains("is not a VFIO container"), "{msg}");
}

#[test]
fn this_machine_without_vfio_gets_the_same_advice() {
    if Path::new("/dev/vfio/vfio").exists() {
        eprintln!("SKIP: /dev/vfio/vfio exists here; this test covers machines without VFIO");
        return;
    }
    let msg = VfioContainer::open().unwrap_err().to_string();
    assert!(
        msg.contains("/dev/vfio/vfio does not exist") && msg.contains("modprobe vfio-pci"),
        "{msg}"
    );
}
