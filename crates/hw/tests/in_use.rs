//! The device-in-use guard against a fake sysfs tree: a device whose
//! kernel interface is up, addressed or routed is refused (naming the
//! interface and why) unless forced, and the original driver is bound
//! again on drop and when taking the device fails half-way.

mod fake_sysfs;

use fake_sysfs::{FakeSysfs, Options, ADDR};
use nfkit_hw::linux::{NetView, SysfsDevice};
use std::net::IpAddr;

fn dev(fake: &FakeSysfs) -> SysfsDevice {
    SysfsDevice::new(fake.root(), ADDR.parse().unwrap()).unwrap()
}

fn view(fake: &FakeSysfs, addrs: &[(&str, &str)]) -> NetView {
    NetView::fake(
        fake.proc_root(),
        addrs
            .iter()
            .map(|(n, a)| (n.to_string(), a.parse::<IpAddr>().unwrap()))
            .collect(),
    )
}

fn bound_back(fake: &FakeSysfs) -> bool {
    fake.read("bus/pci/drivers/ixgbe/bind") == ADDR.as_bytes()
}

#[test]
fn a_routed_virtio_interface_is_refused_with_its_name_and_why() {
    let fake = FakeSysfs::new(Options::default());
    fake.add_netdev("eth0", 0x1003, true);
    fake.set_routes(&[
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0",
        "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0",
    ]);
    let v = view(&fake, &[("eth0", "192.0.2.15"), ("eth0", "fe80::1")]);
    let d = dev(&fake);
    assert_eq!(d.netdev_names(), vec!["eth0".to_string()]);
    let used = d.in_use(&v);
    assert_eq!(used.len(), 1);
    assert_eq!(used[0].summary(), "route via eth0");
    assert_eq!(
        used[0].to_string(),
        "eth0 (up; addresses 192.0.2.15; routes default, 192.0.2.0/24)"
    );
    let err = d
        .take_from_kernel(&v, Some("uio_pci_generic"), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("in use") && err.contains("eth0") && err.contains("--force"),
        "{err}"
    );
    // nothing was touched
    assert!(fake.read("bus/pci/drivers/ixgbe/unbind").is_empty());
    assert_eq!(fake.read_device("driver_override"), b"(null)\n");
}

#[test]
fn up_or_addressed_alone_is_in_use_and_down_is_free() {
    let fake = FakeSysfs::new(Options::default());
    fake.add_netdev("enp3s0", 0x1002, false); // down
    let d = dev(&fake);
    assert!(d.in_use(&view(&fake, &[])).is_empty());
    assert!(d.in_use(&view(&fake, &[("enp3s0", "fe80::2")])).is_empty());
    let addressed = d.in_use(&view(&fake, &[("enp3s0", "10.1.2.3")]));
    assert_eq!(addressed[0].summary(), "address on enp3s0");
    fake.add_netdev("enp3s0", 0x1003, false);
    let up = d.in_use(&view(&fake, &[]));
    assert_eq!(up[0].summary(), "enp3s0 is up");
}

#[test]
fn force_takes_it_and_drop_gives_it_back() {
    let fake = FakeSysfs::new(Options::default());
    fake.add_netdev("eth0", 0x1003, false);
    let v = view(&fake, &[]);
    let d = dev(&fake);
    let guard = d
        .take_from_kernel(&v, Some("uio_pci_generic"), true)
        .unwrap();
    assert_eq!(guard.original(), Some("ixgbe"));
    assert_eq!(fake.read("bus/pci/drivers/ixgbe/unbind"), ADDR.as_bytes());
    assert_eq!(fake.read_device("driver_override"), b"uio_pci_generic");
    assert!(!bound_back(&fake));
    drop(guard);
    assert!(bound_back(&fake), "the original driver is bound again");
    assert_eq!(
        fake.read_device("driver_override"),
        b"\n",
        "override cleared"
    );
}

#[test]
fn a_failure_half_way_binds_the_original_driver_again() {
    let fake = FakeSysfs::new(Options::default());
    // the PCI core refuses the probe (as with a driver that is not loaded)
    let probe = fake.root().join("bus/pci/drivers_probe");
    std::fs::remove_file(&probe).unwrap();
    std::fs::create_dir(&probe).unwrap();
    let d = dev(&fake);
    let err = d
        .take_from_kernel(&view(&fake, &[]), Some("uio_pci_generic"), false)
        .unwrap_err();
    assert!(err.to_string().contains("drivers_probe"), "{err}");
    assert!(bound_back(&fake), "restored after the failure");
}

#[test]
fn a_free_device_is_taken_and_unbind_only_restores_too() {
    let fake = FakeSysfs::new(Options::default());
    let d = dev(&fake);
    let guard = d.take_from_kernel(&view(&fake, &[]), None, false).unwrap();
    assert!(guard.restores());
    // as the kernel does on unbind
    std::fs::remove_file(fake.device_dir().join("driver")).unwrap();
    guard.restore().unwrap();
    assert!(bound_back(&fake));
}

#[test]
fn a_device_without_a_driver_or_on_the_wanted_one_needs_no_restore() {
    let fake = FakeSysfs::new(Options {
        driver: None,
        iommu_group: None,
    });
    let guard = dev(&fake)
        .take_from_kernel(&view(&fake, &[]), Some("uio_pci_generic"), false)
        .unwrap();
    assert!(!guard.restores());
    assert_eq!(fake.read_device("driver_override"), b"uio_pci_generic");
    let fake = FakeSysfs::new(Options {
        driver: Some("uio_pci_generic"),
        iommu_group: None,
    });
    fake.add_netdev("eth9", 0x1003, false); // stale, but uio has no netdev
    let guard = dev(&fake)
        .take_from_kernel(&view(&fake, &[]), Some("uio_pci_generic"), false)
        .unwrap();
    assert!(!guard.restores());
}
