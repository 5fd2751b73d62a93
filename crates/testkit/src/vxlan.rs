//! The host kernel's VXLAN as the far end of nfkit's tunnel: what the
//! pipeline's `vxlan_kernel` tests and `nfkit bench offloads` share
//! (the kernel's tunnel end, nfkit's overlay `.nfk`, the counters).
//!
//! Addresses: underlay 192.168.N.0/24 (nfkit or the other kernel end at
//! .1, the kernel's `vx0` end at .2 unless told), overlay 10.N.0.0/24,
//! VNI 42, UDP port 4789.

use crate::Netns;
use anyhow::{Context, Result};

/// The Ethernet address of `dev` in `ns`.
pub fn mac_of(ns: &Netns, dev: &str) -> Result<String> {
    let out = ns.run(&["ip", "link", "show", "dev", dev])?;
    out.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_string)
        .with_context(|| format!("{dev} has no Ethernet address"))
}

/// `nstat` counter `name` in `ns` (absolute), 0 if absent.
pub fn nstat(ns: &Netns, name: &str) -> u64 {
    let out = ns.run(&["nstat", "-az", name]).unwrap_or_default();
    out.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// MAC bytes as the little-endian integer SetMetadata writes.
pub fn mac_le(mac: &str) -> u64 {
    mac.split(':')
        .filter_map(|x| u64::from_str_radix(x, 16).ok())
        .rev()
        .fold(0, |v, x| v << 8 | x)
}

/// The kernel's end of the tunnel in `ns`: `vx0` (VNI 42, UDP 4789)
/// over `dev` from 192.168.N.`me` to 192.168.N.(3 - `me`), overlay
/// 10.N.0.`me`/24 (`me` is 1 or 2; `dev` already has its underlay
/// address); false when this kernel has no vxlan devices.
pub fn kernel_vxlan_end(ns: &Netns, dev: &str, n: u8, me: u8) -> bool {
    let (local, remote) = (
        format!("192.168.{n}.{me}"),
        format!("192.168.{n}.{}", 3 - me),
    );
    let vx = [
        "ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "remote", &remote, "local",
        &local, "dstport", "4789", "dev", dev,
    ];
    if ns.run(&vx).is_err() {
        return false;
    }
    ns.run(&[
        "ip",
        "addr",
        "add",
        &format!("10.{n}.0.{me}/24"),
        "dev",
        "vx0",
    ])
    .and_then(|_| ns.run(&["ip", "link", "set", "vx0", "up"]))
    .is_ok()
}

/// nfkit's side: overlay port `pa`'s frames encapsulated towards
/// `dst_mac` (then `encap_tail`, ending in EtherEncap and what follows)
/// onto the underlay AF_PACKET port on `hb`; the underlay's VXLAN
/// decapsulated (then `decap_tail`) back to `pa`; ARP for nfkit's
/// underlay address 192.168.N.1 answered as `nfkit_mac`. Modules named
/// `enc`, `dec`, `outa`, `outb`, `sel`.
pub fn overlay_nfk(
    pa: &str,
    hb: &str,
    n: u8,
    nfkit_mac: &str,
    dst_mac: &str,
    encap_tail: &str,
    decap_tail: &str,
) -> String {
    format!(
        r#"
port pa = "{pa}"
port pb = "afpacket:{hb}"
outa::PortOut(port=pa)
outb::PortOut(port=pb)
PortInc(port=pa)
  -> SetMetadata(attribute=tun_ip_src, size=4, value=0x01{n:02x}a8c0)
  -> SetMetadata(attribute=tun_ip_dst, size=4, value=0x02{n:02x}a8c0)
  -> SetMetadata(attribute=tun_id, size=4, value=0x2a000000)
  -> SetMetadata(attribute=ether_src, size=6, value={src_mac})
  -> SetMetadata(attribute=ether_dst, size=6, value={dst_mac})
  -> enc::VXLANEncap() -> IPEncap() -> {encap_tail} -> outb
PortInc(port=pb) -> sel::BPF(gates=3, filters=[(filter="udp dst port 4789", gate=1), (filter="arp", gate=2)])
sel:1 -> dec::VXLANDecap(){decap_tail} -> outa
sel:2 -> ArpResponder(ip="192.168.{n}.1", mac_addr="{nfkit_mac}") -> outb
"#,
        src_mac = mac_le(nfkit_mac),
        dst_mac = mac_le(dst_mac),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn mac_le_is_the_bytes_little_endian() {
        assert_eq!(super::mac_le("02:00:00:97:00:01"), 0x0100_9700_0002);
    }
}
