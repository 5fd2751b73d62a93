//! The sysfs PCI platform against a fake sysfs tree (see `fake_sysfs`):
//! identity, configuration space, BAR mapping and I/O-port access, driver
//! unbinding/binding and IOMMU groups.

mod fake_sysfs;

use fake_sysfs::{FakeSysfs, Options, ADDR, BAR0_LEN};
use nfkit_hw::linux::{BarKind, LinuxPci, SysfsDevice};
use nfkit_hw::mmio::IoBar;
use nfkit_hw::pci::config;
use nfkit_hw::{Bar, PciAddress, PciFunction};

fn addr() -> PciAddress {
    ADDR.parse().unwrap()
}

fn open(fake: &FakeSysfs) -> LinuxPci {
    LinuxPci::open_in(fake.root(), addr()).unwrap()
}

#[test]
fn identity_comes_from_the_sysfs_files() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    assert_eq!(pci.address(), addr());
    let dev = pci.sysfs();
    assert_eq!(dev.vendor_id().unwrap(), 0x8086);
    assert_eq!(dev.device_id().unwrap(), 0x10fb);
    assert_eq!(dev.class().unwrap(), 0x020000);
    assert_eq!(dev.driver().unwrap().as_deref(), Some("ixgbe"));
    assert_eq!(dev.iommu_group().unwrap(), Some(7));
}

#[test]
fn a_device_without_iommu_or_driver_says_so() {
    let fake = FakeSysfs::new(Options {
        driver: None,
        iommu_group: None,
    });
    let dev = SysfsDevice::new(fake.root(), addr()).unwrap();
    assert_eq!(dev.driver().unwrap(), None);
    assert_eq!(dev.iommu_group().unwrap(), None);
    assert_eq!(dev.unbind_driver().unwrap(), None, "nothing to unbind");
}

#[test]
fn a_missing_device_names_the_fix() {
    let fake = FakeSysfs::new(Options::default());
    let err = LinuxPci::open_in(fake.root(), "0000:04:00.1".parse().unwrap()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("0000:04:00.1") && msg.contains("lspci -D"),
        "{msg}"
    );
}

#[test]
fn configuration_space_reads_and_writes_the_config_file() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    assert_eq!(pci.config_read16(config::VENDOR_ID).unwrap(), 0x8086);
    assert_eq!(pci.config_read16(config::DEVICE_ID).unwrap(), 0x10fb);
    assert_eq!(
        pci.find_capability(config::CAP_ID_PCIE).unwrap(),
        Some(0x50)
    );
    assert_eq!(pci.find_capability(config::CAP_ID_VENDOR).unwrap(), None);
    pci.config_write32(0x60, 0xdead_beef).unwrap();
    assert_eq!(
        &fake.read_device("config")[0x60..0x64],
        &0xdead_beefu32.to_le_bytes()
    );
    assert!(pci.config_read32(4094).is_err(), "past 4 KiB");
}

#[test]
fn bus_mastering_sets_only_command_bit_2() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    pci.enable_bus_master().unwrap();
    let command = u16::from_le_bytes(fake.read_device("config")[4..6].try_into().unwrap());
    assert_eq!(command, 0x0402 | config::COMMAND_BUS_MASTER);
}

#[test]
fn memory_bar_maps_the_resource_file() {
    let fake = FakeSysfs::new(Options::default());
    let res0 = fake.device_dir().join("resource0");
    let mut bytes = std::fs::read(&res0).unwrap();
    bytes[0x8..0xc].copy_from_slice(&0x1234_5678u32.to_le_bytes());
    std::fs::write(&res0, &bytes).unwrap();

    let pci = open(&fake);
    assert_eq!(pci.sysfs().bar_kind(0).unwrap(), BarKind::Memory);
    let bar = pci.map_bar(0).unwrap();
    assert_eq!(bar.len(), BAR0_LEN);
    assert_eq!(bar.read32(0x8), 0x1234_5678);
    bar.write32(0x100, 0xcafe_f00d);
    drop(bar);
    assert_eq!(
        &fake.read_device("resource0")[0x100..0x104],
        &0xcafe_f00du32.to_le_bytes()
    );
}

#[test]
fn io_port_bar_goes_through_pread_and_pwrite() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    assert_eq!(pci.sysfs().bar_kind(2).unwrap(), BarKind::Io);
    let io = pci.io_bar(2).unwrap();
    io.write16(18, 0xabcd).unwrap();
    io.write8(20, 0x52).unwrap();
    assert_eq!(io.read16(18).unwrap(), 0xabcd);
    assert_eq!(io.read32(16).unwrap(), 0xabcd_0000);
    assert_eq!(&fake.read_device("resource2")[18..21], &[0xcd, 0xab, 0x52]);
    assert!(io.read32(30).is_err(), "past the end of the 32-byte BAR");
}

#[test]
fn wrong_kind_of_bar_is_a_clear_error() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    let cases = [
        (pci.map_bar(2).err(), "I/O-port BAR: use io_bar"),
        (pci.io_bar(0).err(), "memory BAR: use map_bar"),
        (pci.map_bar(1).err(), "BAR 1 is not implemented"),
        (pci.map_bar(6).err(), "BARs are 0 to 5"),
    ];
    for (err, want) in cases {
        let msg = err.expect("must fail").to_string();
        assert!(msg.contains(want) && msg.contains(ADDR), "{msg}");
    }
}

#[test]
fn unbinding_writes_the_address_to_the_drivers_unbind_file() {
    let fake = FakeSysfs::new(Options::default());
    let pci = open(&fake);
    assert_eq!(pci.unbind_driver().unwrap().as_deref(), Some("ixgbe"));
    assert_eq!(fake.read("bus/pci/drivers/ixgbe/unbind"), ADDR.as_bytes());
}

#[test]
fn binding_sets_driver_override_and_reprobes() {
    let fake = FakeSysfs::new(Options::default());
    let dev = SysfsDevice::new(fake.root(), addr()).unwrap();
    dev.bind_driver("vfio-pci").unwrap();
    assert_eq!(fake.read("bus/pci/drivers/ixgbe/unbind"), ADDR.as_bytes());
    assert_eq!(fake.read_device("driver_override"), b"vfio-pci");
    assert_eq!(fake.read("bus/pci/drivers_probe"), ADDR.as_bytes());
}

#[test]
fn a_malformed_resource_table_is_an_error_not_a_guess() {
    let fake = FakeSysfs::new(Options::default());
    std::fs::write(fake.device_dir().join("resource"), "garbage\n").unwrap();
    let pci = open(&fake);
    let msg = pci.map_bar(0).unwrap_err().to_string();
    assert!(msg.contains("malformed"), "{msg}");
}
