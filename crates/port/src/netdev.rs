//! What sysfs says about a kernel interface (`/sys/class/net/IFACE`,
//! Documentation/ABI/testing/sysfs-class-net): its MAC address and link
//! state. Read when asked (stats, start-up), never on the data path.

use crate::LinkStatus;

/// `IFF_UP` in the interface's `flags` (linux/if.h).
const IFF_UP: u32 = 0x1;

fn attr(ifname: &str, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{name}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The MAC address of an interface.
pub fn read_mac(ifname: &str) -> Option<[u8; 6]> {
    let s = attr(ifname, "address")?;
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for m in mac.iter_mut() {
        *m = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    Some(mac)
}

/// Up when the interface is administratively up (`IFF_UP`) and has
/// carrier (a veth whose peer is down, or a TAP nobody holds, has none;
/// `carrier` cannot be read at all while the interface is down). The
/// speed is the driver's (`speed`; veth says 10000), none when it says
/// -1 or nothing. An interface that is gone is down.
pub fn link_status(ifname: &str) -> LinkStatus {
    let flags = attr(ifname, "flags")
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok());
    let admin_up = flags.is_some_and(|f| f & IFF_UP != 0);
    let carrier = attr(ifname, "carrier").as_deref() == Some("1");
    let speed_mbps = attr(ifname, "speed")
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&s| s > 0)
        .and_then(|s| u32::try_from(s).ok());
    LinkStatus {
        up: admin_up && carrier,
        speed_mbps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_down_without_a_mac() {
        assert!(!link_status("nfkit-none0").up);
        assert_eq!(read_mac("nfkit-none0"), None);
    }

    #[test]
    fn loopback_is_up() {
        if std::path::Path::new("/sys/class/net/lo").exists() {
            assert!(link_status("lo").up);
            assert_eq!(read_mac("lo"), Some([0; 6]));
        } else {
            eprintln!("SKIP: no /sys/class/net/lo (no sysfs here)");
        }
    }
}
