//! Whether the kernel is using a PCI network device, and a guard that
//! takes the device from its kernel driver and gives it back.
//!
//! A device is *in use* when one of the network interfaces the kernel
//! made for it (`<dev>/net/*`, and for VirtIO `<dev>/virtioN/net/*`) is
//! up, has an address or has a route: unbinding its driver would cut the
//! machine off whatever traffic runs over it (on a VM whose only NIC is
//! VirtIO, the machine goes offline). DPDK's `dpdk-devbind` refuses the
//! same, unless forced.
//!
//! [`DriverGuard`] remembers the driver a device had and binds it again
//! when dropped, so a failed start or an exit never leaves a NIC without
//! its driver.

use super::sysfs::{pci_err, SysfsDevice};
use crate::error::HwError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// `IFF_UP` in a netdev's `flags` file (`include/uapi/linux/if.h`).
const IFF_UP: u64 = 0x1;
/// `RTF_UP` in `/proc/net/route` and `/proc/net/ipv6_route`.
const RTF_UP: u64 = 0x1;
/// `RTF_LOCAL`: the local-table route of one of the host's own addresses
/// (the address itself already says the interface is configured).
const RTF_LOCAL: u64 = 0x8000_0000;

/// Where the kernel's network state is read: `/proc/net/{route,
/// ipv6_route}` under `proc_root`, and the interfaces' addresses. Tests
/// build a fake one.
#[derive(Debug, Clone)]
pub struct NetView {
    proc_root: PathBuf,
    addresses: Vec<(String, IpAddr)>,
}

impl NetView {
    /// This machine (this network namespace): `/proc` and the addresses
    /// `getifaddrs(3)` reports.
    pub fn live() -> NetView {
        NetView {
            proc_root: PathBuf::from("/proc"),
            addresses: interface_addresses(),
        }
    }

    /// A view with routes read under `proc_root` and the given addresses.
    pub fn fake(proc_root: impl AsRef<Path>, addresses: Vec<(String, IpAddr)>) -> NetView {
        NetView {
            proc_root: proc_root.as_ref().to_path_buf(),
            addresses,
        }
    }

    /// Addresses of `iface` that show it is configured (IPv6 link-local
    /// addresses come by themselves with `up`, so they are left out).
    fn addresses_of(&self, iface: &str) -> Vec<IpAddr> {
        self.addresses
            .iter()
            .filter(|(n, a)| n == iface && !is_link_local(a))
            .map(|(_, a)| *a)
            .collect()
    }

    /// Routes through `iface`, as `default` or `prefix/len`.
    fn routes_of(&self, iface: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(t) = std::fs::read_to_string(self.proc_root.join("net/route")) {
            for line in t.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 || f[0] != iface {
                    continue;
                }
                let (Some(dest), Some(flags), Some(mask)) = (hex32(f[1]), hex64(f[3]), hex32(f[7]))
                else {
                    continue;
                };
                if flags & RTF_UP == 0 {
                    continue;
                }
                // the kernel prints the network-order word as a native u32
                let dest = Ipv4Addr::from(dest.to_ne_bytes());
                let len = mask.count_ones();
                out.push(if len == 0 {
                    "default".to_string()
                } else {
                    format!("{dest}/{len}")
                });
            }
        }
        if let Ok(t) = std::fs::read_to_string(self.proc_root.join("net/ipv6_route")) {
            for line in t.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 10 || f[9] != iface {
                    continue;
                }
                let (Some(dest), Some(len), Some(flags)) = (hex128(f[0]), hex64(f[1]), hex64(f[8]))
                else {
                    continue;
                };
                let dest = Ipv6Addr::from(dest);
                // link-local and multicast routes come with `up` alone
                if flags & RTF_UP == 0
                    || flags & RTF_LOCAL != 0
                    || is_link_local(&IpAddr::V6(dest))
                    || dest.is_multicast()
                {
                    continue;
                }
                out.push(if len == 0 {
                    "default (IPv6)".to_string()
                } else {
                    format!("{dest}/{len}")
                });
            }
        }
        out
    }
}

fn is_link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn hex32(s: &str) -> Option<u32> {
    u32::from_str_radix(s, 16).ok()
}

fn hex64(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn hex128(s: &str) -> Option<u128> {
    (s.len() == 32).then(|| u128::from_str_radix(s, 16).ok())?
}

/// One kernel network interface of a device, and how it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netdev {
    pub name: String,
    pub up: bool,
    pub addresses: Vec<IpAddr>,
    pub routes: Vec<String>,
}

impl Netdev {
    /// Whether unbinding the driver would take this interface away from
    /// something that uses it.
    pub fn in_use(&self) -> bool {
        self.up || !self.addresses.is_empty() || !self.routes.is_empty()
    }

    /// The strongest reason, short: `route via eth0`, `address on eth0`,
    /// `eth0 is up`.
    pub fn summary(&self) -> String {
        if !self.routes.is_empty() {
            format!("route via {}", self.name)
        } else if !self.addresses.is_empty() {
            format!("address on {}", self.name)
        } else {
            format!("{} is up", self.name)
        }
    }
}

impl fmt::Display for Netdev {
    /// `eth0 (up; addresses 10.0.2.15; routes default, 10.0.2.0/24)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut why = Vec::new();
        if self.up {
            why.push("up".to_string());
        }
        if !self.addresses.is_empty() {
            let a: Vec<String> = self.addresses.iter().map(|a| a.to_string()).collect();
            why.push(format!("addresses {}", a.join(", ")));
        }
        if !self.routes.is_empty() {
            why.push(format!("routes {}", self.routes.join(", ")));
        }
        write!(f, "{} ({})", self.name, why.join("; "))
    }
}

impl SysfsDevice {
    /// Names of the kernel network interfaces of this device:
    /// `net/*`, and `virtioN/net/*` for a VirtIO device.
    pub fn netdev_names(&self) -> Vec<String> {
        let mut dirs = vec![self.path("net")];
        if let Ok(rd) = std::fs::read_dir(self.dir()) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("virtio") {
                    dirs.push(e.path().join("net"));
                }
            }
        }
        let mut names = Vec::new();
        for d in dirs {
            if let Ok(rd) = std::fs::read_dir(&d) {
                names.extend(
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned()),
                );
            }
        }
        names.sort();
        names
    }

    /// The device's interfaces with their state.
    pub fn netdevs(&self, view: &NetView) -> Vec<Netdev> {
        self.netdev_names()
            .into_iter()
            .map(|name| {
                let up = self
                    .netdev_dir(&name)
                    .and_then(|d| std::fs::read_to_string(d.join("flags")).ok())
                    .and_then(|s| hex64(s.trim()))
                    .is_some_and(|flags| flags & IFF_UP != 0);
                Netdev {
                    up,
                    addresses: view.addresses_of(&name),
                    routes: view.routes_of(&name),
                    name,
                }
            })
            .collect()
    }

    /// The interfaces that make this device in use (empty when free).
    pub fn in_use(&self, view: &NetView) -> Vec<Netdev> {
        self.netdevs(view)
            .into_iter()
            .filter(Netdev::in_use)
            .collect()
    }

    fn netdev_dir(&self, name: &str) -> Option<PathBuf> {
        let direct = self.path("net").join(name);
        if direct.is_dir() {
            return Some(direct);
        }
        std::fs::read_dir(self.dir()).ok()?.flatten().find_map(|e| {
            let p = e.path().join("net").join(name);
            (e.file_name().to_string_lossy().starts_with("virtio") && p.is_dir()).then_some(p)
        })
    }

    /// Take the device from its kernel driver: refuse (naming the
    /// interface and why) when the device is in use, unless `force`;
    /// unbind the driver, and bind `bind` (e.g. `uio_pci_generic`) if
    /// given. The guard binds the original driver again when dropped,
    /// and so also when this fails half-way.
    pub fn take_from_kernel(
        &self,
        view: &NetView,
        bind: Option<&str>,
        force: bool,
    ) -> Result<DriverGuard, HwError> {
        let original = self.driver()?;
        if original.is_none() || original.as_deref() == bind {
            // no kernel driver to cut off or give back
            if original.is_none() {
                if let Some(driver) = bind {
                    self.bind_driver(driver)?;
                }
            }
            return Ok(DriverGuard {
                dev: self.clone(),
                original,
                restore: false,
            });
        }
        let used = self.in_use(view);
        if !used.is_empty() {
            let list: Vec<String> = used.iter().map(|n| n.to_string()).collect();
            if !force {
                return Err(pci_err(
                    self.address(),
                    format!(
                        "in use by the kernel: interface {} of driver {}; taking the device would \
                         cut that traffic off. Bring the interface down and remove its addresses \
                         and routes first, or pass --force",
                        list.join(", "),
                        original.as_deref().unwrap_or("?"),
                    ),
                ));
            }
            tracing::warn!(device = %self.address(), interfaces = %list.join(", "),
                "--force: taking a device the kernel is using");
        }
        let guard = DriverGuard {
            dev: self.clone(),
            original,
            restore: true,
        };
        match bind {
            Some(driver) => self.bind_driver(driver)?,
            None => {
                self.unbind_driver()?;
            }
        }
        Ok(guard)
    }
}

/// Gives a device back to the kernel driver it had when dropped: unbinds
/// whatever nfkit bound, clears `driver_override`, binds the original.
#[derive(Debug)]
pub struct DriverGuard {
    dev: SysfsDevice,
    original: Option<String>,
    restore: bool,
}

impl DriverGuard {
    /// The driver the device had before.
    pub fn original(&self) -> Option<&str> {
        self.original.as_deref()
    }

    /// Whether dropping the guard binds a driver again.
    pub fn restores(&self) -> bool {
        self.restore
    }

    /// Give the device back now; reports what failed.
    pub fn restore(mut self) -> Result<(), HwError> {
        self.restore_now()
    }

    fn restore_now(&mut self) -> Result<(), HwError> {
        if !std::mem::take(&mut self.restore) {
            return Ok(());
        }
        let Some(original) = self.original.clone() else {
            return Ok(());
        };
        let dev = &self.dev;
        let addr = dev.address().to_string();
        let overridden = std::fs::read_to_string(dev.path("driver_override"))
            .map(|s| !matches!(s.trim(), "" | "(null)"))
            .unwrap_or(false);
        if dev.driver()?.as_deref() == Some(original.as_str()) && !overridden {
            return Ok(()); // never let go (the unbind failed)
        }
        let _ = dev.unbind_driver();
        // an empty override lets every driver match again
        let _ = dev.write_file(&dev.path("driver_override"), "\n");
        let bind = dev
            .root()
            .join("bus/pci/drivers")
            .join(&original)
            .join("bind");
        if let Err(e) = dev.write_file(&bind, &addr) {
            // the PCI core may have bound it already when the override went
            if dev.driver()?.as_deref() != Some(original.as_str()) {
                return Err(e);
            }
        }
        tracing::info!(device = %addr, driver = %original, "gave the device back to its kernel driver");
        Ok(())
    }
}

impl Drop for DriverGuard {
    fn drop(&mut self) {
        let addr = self.dev.address();
        let original = self.original.clone();
        if let Err(e) = self.restore_now() {
            tracing::error!(device = %addr, driver = ?original,
                "could not give the device back to its kernel driver: {e}; bind it by hand: \
                 echo {addr} > /sys/bus/pci/drivers/<driver>/bind");
        }
    }
}

/// Every address of every interface, from `getifaddrs(3)`.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid
        // until freeifaddrs; its name is a NUL-terminated string and its
        // address, when not null, a sockaddr of the family it names.
        unsafe {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                    .to_string_lossy()
                    .into_owned();
                match (*ifa.ifa_addr).sa_family as i32 {
                    libc::AF_INET => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        let a = Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
                        out.push((name, IpAddr::V4(a)));
                    }
                    libc::AF_INET6 => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        out.push((name, IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr))));
                    }
                    _ => {}
                }
            }
            cur = ifa.ifa_next;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_addresses_include_loopback() {
        let v = NetView::live();
        assert!(
            v.addresses
                .iter()
                .any(|(n, a)| n == "lo" && *a == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{:?}",
            v.addresses
        );
        assert!(v.routes_of("no-such-if0").is_empty());
    }
}
