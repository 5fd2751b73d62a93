//! A fake sysfs tree in a temporary directory, shaped like the kernel's:
//! `bus/pci/devices/<addr>/` with `config`, `vendor`, `device`, `class`,
//! `resource`, `resourceN`, `driver` and `iommu_group` symlinks, plus the
//! driver's `unbind` file and `bus/pci/drivers_probe`.

#![allow(dead_code)] // each test binary uses a different part

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

pub const ADDR: &str = "0000:03:00.0";
/// Memory BAR 0 (16 KiB), I/O-port BAR 2 (32 bytes); BAR 1 absent.
pub const BAR0_LEN: usize = 16 * 1024;
pub const BAR2_LEN: usize = 32;

pub struct FakeSysfs {
    pub dir: tempfile::TempDir,
}

pub struct Options<'a> {
    pub driver: Option<&'a str>,
    pub iommu_group: Option<u32>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            driver: Some("ixgbe"),
            iommu_group: Some(7),
        }
    }
}

impl FakeSysfs {
    pub fn new(opts: Options<'_>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // readable by the unprivileged child of the non-root tests
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let fake = FakeSysfs { dir };
        let dev = fake.device_dir();
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), "0x8086\n").unwrap();
        std::fs::write(dev.join("device"), "0x10fb\n").unwrap();
        std::fs::write(dev.join("class"), "0x020000\n").unwrap();
        std::fs::write(dev.join("config"), config_space()).unwrap();
        std::fs::write(dev.join("resource"), resource_table()).unwrap();
        std::fs::write(dev.join("resource0"), vec![0u8; BAR0_LEN]).unwrap();
        std::fs::write(dev.join("resource2"), vec![0u8; BAR2_LEN]).unwrap();
        std::fs::write(dev.join("driver_override"), "(null)\n").unwrap();
        std::fs::write(fake.root().join("bus/pci/drivers_probe"), "").unwrap();
        // as in sysfs: config readable by all, BARs by root only
        chmod(&dev.join("config"), 0o644);
        chmod(&dev.join("resource0"), 0o600);
        chmod(&dev.join("resource2"), 0o600);
        if let Some(driver) = opts.driver {
            let drv = fake.root().join("bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&drv).unwrap();
            std::fs::write(drv.join("unbind"), "").unwrap();
            std::fs::write(drv.join("bind"), "").unwrap();
            symlink(format!("../../drivers/{driver}"), dev.join("driver")).unwrap();
        }
        if let Some(group) = opts.iommu_group {
            std::fs::create_dir_all(
                fake.root()
                    .join(format!("kernel/iommu_groups/{group}/devices")),
            )
            .unwrap();
            symlink(
                format!("../../../../kernel/iommu_groups/{group}"),
                dev.join("iommu_group"),
            )
            .unwrap();
        }
        fake
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn device_dir(&self) -> PathBuf {
        self.root().join("bus/pci/devices").join(ADDR)
    }

    /// A kernel network interface of the device with `flags` (0x1 is
    /// up): `net/<name>/`, or `virtio0/net/<name>/` as for VirtIO.
    pub fn add_netdev(&self, name: &str, flags: u32, virtio: bool) {
        let base = if virtio {
            self.device_dir().join("virtio0")
        } else {
            self.device_dir()
        };
        let dir = base.join("net").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("flags"), format!("{flags:#x}\n")).unwrap();
    }

    /// The fake `/proc` (for `net/route`, `net/ipv6_route`).
    pub fn proc_root(&self) -> PathBuf {
        let p = self.root().join("proc");
        std::fs::create_dir_all(p.join("net")).unwrap();
        p
    }

    /// Write `/proc/net/route` with these lines after the header.
    pub fn set_routes(&self, lines: &[&str]) {
        let mut t = String::from(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n",
        );
        for l in lines {
            t += l;
            t += "\n";
        }
        std::fs::write(self.proc_root().join("net/route"), t).unwrap();
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root().join(rel)).unwrap()
    }

    pub fn read_device(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.device_dir().join(name)).unwrap()
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// 256 bytes of conventional configuration space: an 82599 with memory
/// decoding on, bus mastering off, and a capability list PM (0x40) ->
/// PCIe (0x50).
fn config_space() -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0..2].copy_from_slice(&0x8086u16.to_le_bytes());
    c[2..4].copy_from_slice(&0x10fbu16.to_le_bytes());
    c[4..6].copy_from_slice(&0x0402u16.to_le_bytes()); // INTx disable + memory space
    c[6..8].copy_from_slice(&0x0010u16.to_le_bytes()); // capability list
    c[0x10..0x14].copy_from_slice(&0xfe00_0000u32.to_le_bytes());
    c[0x18..0x1c].copy_from_slice(&0x0000_e001u32.to_le_bytes()); // BAR2: I/O
    c[0x34] = 0x40;
    c[0x40] = 0x01;
    c[0x41] = 0x50;
    c[0x50] = 0x10;
    c[0x51] = 0x00;
    c
}

/// The `resource` table: start, end, flags per BAR (then ROM and bridge
/// windows, left empty).
fn resource_table() -> String {
    let line = |start: u64, len: u64, flags: u64| {
        let end = if len == 0 { 0 } else { start + len - 1 };
        format!("{start:#018x} {end:#018x} {flags:#018x}\n")
    };
    let mut t = String::new();
    t += &line(0xfe00_0000, BAR0_LEN as u64, 0x0004_0200);
    t += &line(0, 0, 0);
    t += &line(0xe000, BAR2_LEN as u64, 0x0004_0101);
    for _ in 3..13 {
        t += &line(0, 0, 0);
    }
    t
}
