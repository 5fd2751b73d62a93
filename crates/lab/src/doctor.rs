//! `nfkit doctor`: checks what this machine offers each kind of port and
//! prints the fix for what is missing (hugepages, IOMMU and VFIO, device
//! bindings, permissions, TUN, BPF). It only reads the system.
//!
//! A device the kernel is using (one of its interfaces is up, addressed
//! or routed) is listed as in use, with no advice to unbind it: that
//! advice would cut the machine off. The command exits non-zero only when
//! a check fails; optional parts that are missing are notes.

use nfkit_hw::linux::{NetView, SysfsDevice};
use nfkit_hw::PciAddress;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Intel 82599-family device IDs nfkit drives.
pub const IXGBE_DEVICE_IDS: &[(u16, &str)] = &[
    (0x10FB, "82599ES SFI/SFP+"),
    (0x10F8, "82599 backplane"),
    (0x10F9, "82599 CX4"),
    (0x10FC, "82599 XAUI/BX4"),
    (0x1517, "82599 KR"),
    (0x151C, "82599 10GBASE-T"),
    (0x1529, "82599 SFP (FCoE)"),
    (0x154D, "X520-SR (82599 SFP+ SF2)"),
    (0x1557, "82599 SFP+ SF-QP"),
    (0x10D8, "82599 (EEPROM-less default ID)"),
];

/// How a finding counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Ok,
    /// Worth knowing (an optional part is missing, a device is in use),
    /// not a failure.
    Note,
    Fail,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub level: Level,
    pub what: String,
    /// How to fix it, when not ok.
    pub fix: Option<String>,
}

impl Check {
    fn ok(what: impl Into<String>) -> Check {
        Check {
            level: Level::Ok,
            what: what.into(),
            fix: None,
        }
    }
    fn bad(what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            level: Level::Fail,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
    fn note(what: impl Into<String>, fix: Option<String>) -> Check {
        Check {
            level: Level::Note,
            what: what.into(),
            fix,
        }
    }
    /// The same finding as a note (an optional part).
    fn optional(mut self) -> Check {
        if self.level == Level::Fail {
            self.level = Level::Note;
        }
        self
    }
}

/// How many checks failed.
pub fn failures(checks: &[Check]) -> usize {
    checks.iter().filter(|c| c.level == Level::Fail).count()
}

/// Where the system files are (a fake tree in tests), and the kernel's
/// interfaces, addresses and routes.
#[derive(Debug, Clone)]
pub struct System {
    pub root: PathBuf,
    pub euid_is_root: bool,
    pub net: NetView,
}

impl System {
    pub fn live() -> System {
        let euid_is_root = fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
            })
            .unwrap_or(false);
        System {
            root: PathBuf::from("/"),
            euid_is_root,
            net: NetView::live(),
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    fn read(&self, p: &str) -> Option<String> {
        fs::read_to_string(self.path(p)).ok()
    }

    fn exists(&self, p: &str) -> bool {
        self.path(p).exists()
    }
}

fn meminfo(sys: &System, key: &str) -> Option<u64> {
    sys.read("/proc/meminfo")?
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// All checks, in the order a user climbs the tiers: simulator, software
/// ports, VirtIO/82599 over uio, over VFIO.
pub fn checks(sys: &System) -> Vec<Check> {
    let mut out = vec![Check::ok(
        "sim: ports (simulated 82599) need nothing: `nfkit demo` runs here",
    )];
    out.push(if sys.euid_is_root {
        Check::ok("running as root")
    } else {
        Check::bad(
            "not root: AF_PACKET, AF_XDP, TAP and uio need CAP_NET_RAW/CAP_NET_ADMIN/CAP_SYS_ADMIN",
            "run with sudo, or use VFIO (chown the /dev/vfio/N node to your user) and sim:/pcap:/null: ports",
        )
    });
    out.push(if sys.exists("/dev/net/tun") {
        Check::ok("/dev/net/tun present (tap: ports)")
    } else {
        Check::bad("/dev/net/tun missing (tap: ports)", "modprobe tun")
    });
    let bpffs = sys.read("/proc/mounts").is_some_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("bpf"))
    });
    out.push(if bpffs {
        Check::ok("bpffs mounted")
    } else {
        Check::bad(
            "bpffs not mounted (only needed to pin AF_XDP programs)",
            "mount -t bpf bpf /sys/fs/bpf",
        )
        .optional()
    });
    let (devices, takeable) = device_checks(sys);
    // hugepages matter only with a PCI device nfkit may take
    let hugepages = hugepage_check(sys);
    out.push(if takeable {
        hugepages
    } else {
        hugepages.optional()
    });
    out.push(hugetlbfs_check(sys).optional());
    out.push(iommu_check(sys).optional());
    out.extend(devices);
    out
}

fn hugepage_check(sys: &System) -> Check {
    match (
        meminfo(sys, "HugePages_Total:"),
        meminfo(sys, "HugePages_Free:"),
    ) {
        (Some(total), Some(free)) if free > 0 => Check::ok(format!(
            "{free} of {total} hugepages free (pci: ports over uio)"
        )),
        (Some(total), _) => Check::bad(
            format!("no free hugepages ({total} reserved): pci: ports over uio need them"),
            "echo 512 > /proc/sys/vm/nr_hugepages",
        ),
        _ => Check::bad("cannot read /proc/meminfo", "is /proc mounted?"),
    }
}

fn hugetlbfs_check(sys: &System) -> Check {
    let mounted = sys.read("/proc/mounts").is_some_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    });
    if mounted {
        Check::ok("hugetlbfs mounted (needed by DPDK peers and vhost-user shared memory)")
    } else {
        Check::bad(
            "hugetlbfs not mounted (DPDK peers in the benchmarks need it; nfkit itself does not)",
            "mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages",
        )
    }
}

fn iommu_check(sys: &System) -> Check {
    let groups = fs::read_dir(sys.path("/sys/kernel/iommu_groups"))
        .map(|d| d.count())
        .unwrap_or(0);
    if groups == 0 {
        return Check::bad(
            "no IOMMU groups: VFIO is unavailable (uio still works as root)",
            "boot with intel_iommu=on (or amd_iommu=on); in QEMU add -machine q35 -device intel-iommu and intel_iommu=on",
        );
    }
    if !sys.exists("/dev/vfio/vfio") {
        return Check::bad(
            format!("{groups} IOMMU groups, but /dev/vfio/vfio is missing"),
            "modprobe vfio-pci",
        );
    }
    Check::ok(format!(
        "{groups} IOMMU groups and /dev/vfio/vfio (vfio: ports)"
    ))
}

fn read_hex(path: &Path) -> Option<u16> {
    let s = fs::read_to_string(path).ok()?;
    u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// The checks of the 82599 and VirtIO-net devices, and whether one of
/// them is free for nfkit to take.
fn device_checks(sys: &System) -> (Vec<Check>, bool) {
    let mut out = Vec::new();
    let mut takeable = false;
    let Ok(dir) = fs::read_dir(sys.path("/sys/bus/pci/devices")) else {
        return (
            vec![Check::bad("cannot list PCI devices", "is /sys mounted?")],
            false,
        );
    };
    let mut entries: Vec<_> = dir.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let addr = e.file_name().to_string_lossy().to_string();
        let (Some(vendor), Some(device)) =
            (read_hex(&p.join("vendor")), read_hex(&p.join("device")))
        else {
            continue;
        };
        let kind = match (vendor, device) {
            (0x8086, d) => match IXGBE_DEVICE_IDS.iter().find(|(id, _)| *id == d) {
                Some((_, name)) => format!("Intel {name}"),
                None => continue,
            },
            (0x1af4, 0x1000) => "VirtIO-net (legacy/transitional)".to_string(),
            (0x1af4, 0x1041) => "VirtIO-net (modern)".to_string(),
            _ => continue,
        };
        let driver = fs::read_link(p.join("driver"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().to_string()));
        let what = format!(
            "{addr}: {kind}, driver {}",
            driver.as_deref().unwrap_or("none")
        );
        let in_use = addr
            .parse::<PciAddress>()
            .ok()
            .and_then(|a| SysfsDevice::new(sys.path("/sys"), a).ok())
            .map(|d| d.in_use(&sys.net))
            .unwrap_or_default();
        takeable |= in_use.is_empty();
        out.push(match driver.as_deref() {
            None | Some("uio_pci_generic") | Some("vfio-pci") => Check::ok(format!("{what}: usable as pci:{addr}")),
            Some(_) if !in_use.is_empty() => {
                let why: Vec<String> = in_use.iter().map(|n| n.summary()).collect();
                let detail: Vec<String> = in_use.iter().map(|n| n.to_string()).collect();
                Check::note(
                    format!(
                        "{what}: in use ({}): the kernel carries traffic over it ({}); nfkit refuses to take it",
                        why.join(", "),
                        detail.join(", ")
                    ),
                    None,
                )
            }
            Some(other) => Check::bad(
                format!("{what}: bound to the kernel driver {other}, not in use (no interface up, addressed or routed)"),
                format!(
                    "echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind  (or bind to vfio-pci: \
                     echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override && echo {addr} > /sys/bus/pci/drivers_probe); \
                     nfkit unbinds it itself and binds {other} again on exit"
                ),
            ),
        });
    }
    if out.is_empty() {
        out.push(Check::ok(
            "no 82599 or VirtIO-net devices (use sim:, afpacket:, afxdp:, tap:, pcap: or null: ports)",
        ));
    }
    (out, takeable)
}

/// The report as text.
pub fn report(checks: &[Check]) -> String {
    let mut s = String::new();
    for c in checks {
        let tag = match c.level {
            Level::Ok => " ok ",
            Level::Note => "note",
            Level::Fail => "FAIL",
        };
        let _ = writeln!(s, "[{tag}] {}", c.what);
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "       fix: {fix}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, p: &str, s: &str) {
        let f = root.join(p);
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(f, s).unwrap();
    }

    #[test]
    fn fake_system_reports_fixes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(
            r,
            "proc/meminfo",
            "HugePages_Total:       0\nHugePages_Free:        0\n",
        );
        write(r, "proc/mounts", "proc /proc proc rw 0 0\n");
        write(r, "sys/bus/pci/devices/0000:03:00.0/vendor", "0x8086\n");
        write(r, "sys/bus/pci/devices/0000:03:00.0/device", "0x10fb\n");
        fs::create_dir_all(r.join("sys/bus/pci/drivers/ixgbe")).unwrap();
        std::os::unix::fs::symlink(
            r.join("sys/bus/pci/drivers/ixgbe"),
            r.join("sys/bus/pci/devices/0000:03:00.0/driver"),
        )
        .unwrap();
        // a VirtIO NIC carrying the machine's traffic: eth0, up and routed
        let vio = "sys/bus/pci/devices/0000:00:03.0";
        write(r, &format!("{vio}/vendor"), "0x1af4\n");
        write(r, &format!("{vio}/device"), "0x1041\n");
        write(r, &format!("{vio}/virtio0/net/eth0/flags"), "0x1003\n");
        fs::create_dir_all(r.join("sys/bus/pci/drivers/virtio-pci")).unwrap();
        std::os::unix::fs::symlink(
            r.join("sys/bus/pci/drivers/virtio-pci"),
            r.join(format!("{vio}/driver")),
        )
        .unwrap();
        write(
            r,
            "proc/net/route",
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
             eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\n",
        );
        write(r, "sys/bus/pci/devices/0000:00:04.0/vendor", "0x1af4\n");
        write(r, "sys/bus/pci/devices/0000:00:04.0/device", "0x1000\n");
        let sys = System {
            root: r.to_path_buf(),
            euid_is_root: false,
            net: NetView::fake(r.join("proc"), vec![]),
        };
        let all = checks(&sys);
        let text = report(&all);
        assert!(
            text.contains("[note] 0000:00:03.0: VirtIO-net (modern), driver virtio-pci: in use (route via eth0)"),
            "{text}"
        );
        assert!(
            !text.contains("echo 0000:00:03.0"),
            "no advice that would cut the machine off: {text}"
        );
        // not root, no TUN, no hugepages (with a free 82599), the free
        // 82599 bound to ixgbe
        assert_eq!(failures(&all), 4, "{text}");
        assert!(
            text.contains("echo 512 > /proc/sys/vm/nr_hugepages"),
            "{text}"
        );
        assert!(
            text.contains(
                "0000:03:00.0: Intel 82599ES SFI/SFP+, driver ixgbe: bound to the kernel driver"
            ),
            "{text}"
        );
        assert!(text.contains("0000:00:04.0: VirtIO-net (legacy/transitional), driver none: usable as pci:0000:00:04.0"), "{text}");
        assert!(text.contains("boot with intel_iommu=on"), "{text}");
        assert!(text.contains("not root"), "{text}");
    }
}
