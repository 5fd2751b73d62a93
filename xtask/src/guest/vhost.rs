//! The `vhost-user` guest mode: a VM whose own kernel virtio-net driver
//! reaches the network through nfkit.
//!
//! ```text
//! guest kernel virtio-net --(vhost-user socket, shared memfd RAM)--> nfkit run: TSO / LRO
//!     --(afpacket on a veth)--> network namespace 10.77.0.2
//! ```
//!
//! On the host: a network namespace with one end of a veth pair
//! (10.77.0.2/24), `nfkit run` of a pipeline serving the socket
//! (`vhost-user:SOCK,tso=on` -> `TSO` -> `afpacket:VETH`, back through
//! `LRO`). QEMU's guest RAM is a shared memfd
//! (vhost-user needs the backend to map it) and its NIC a vhost-user
//! netdev on that socket. The guest gives its NIC 10.77.0.1/24, pings
//! the namespace through the bridge, then moves a file each way over TCP
//! (busybox `nc`, the namespace's end is the host's busybox) and the
//! harness compares the bytes that arrived with the ones sent. Every
//! interface stays at its default offload settings: the veth hands
//! nfkit's AF_PACKET port partial checksums and TSO super-frames, which
//! the bridge must complete and cut before the guest sees them; the
//! guest's kernel, with HOST_TSO4 negotiated, sends 64 KB TSO frames
//! that nfkit's `TSO` must cut (its counters show it did).

use super::{qemu_base, run_guest, Image, Outcome};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GUEST_IP: &str = "10.77.0.1";
const NS_IP: &str = "10.77.0.2";
const PINGS: u32 = 10;
/// Replies wanted out of `PINGS` (the first may wait for ARP).
const PINGS_NEEDED: u32 = 7;
/// TCP ports in the namespace: the guest uploads to the first and
/// downloads from the second.
const UP_PORT: u16 = 5701;
const DOWN_PORT: u16 = 5702;
/// Bytes moved each way (several hundred full segments, enough for the
/// kernel to build TSO/GRO super-frames; seconds under TCG).
const TCP_BYTES: usize = 3 << 20;
/// The jumbo part: MTU 9000 on the guest's NIC and the namespace's veth,
/// 9000-byte IPv4 packets (8972 bytes of ICMP payload), don't fragment.
const JUMBO_MTU: u32 = 9000;
const JUMBO_PAYLOAD: u32 = JUMBO_MTU - 28;
const JUMBO_PINGS: u32 = 3;

/// Run the mode; skips (with the reason) if `ip` or root is missing.
pub fn run(img: &Image, nfkit: &Path) -> Result<Outcome> {
    if !super::is_root() {
        return Ok(Outcome::Skipped(
            "needs root for a network namespace".into(),
        ));
    }
    if !super::have("ip") {
        return Ok(Outcome::Skipped(
            "the `ip` command (iproute2) is missing".into(),
        ));
    }
    let tag = std::process::id() % 100_000;
    let net = Netns::create(tag)?;
    let sock = std::env::temp_dir().join(format!("nfkit-guest-vu-{tag}.sock"));
    let log = img.share.join("vhost-nfkit.log");
    let bridge = Bridge::start(nfkit, &sock, &net.host_veth, &log)?;
    let tunnels = Tunnels::start(img, nfkit, tag)?;
    let tcp = TcpFiles::start(img, &net.name)?;
    fs::write(img.share.join("run.sh"), script())?;
    let console = run_guest(qemu(img, &sock, &tunnels.sock), |_| {});
    let nfkit_out = bridge.stop();
    let tunnel_result = match &console {
        Ok(c) => tunnels.check(c),
        Err(_) => Err(anyhow::anyhow!("the guest did not run")),
    };
    let tcp_result = tcp.check();
    let console = console?;
    let received = console
        .lines()
        .find_map(|l| l.trim().strip_prefix("CHECK ping_received="))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    eprintln!("  guest ping through nfkit's bridge: {received} of {PINGS} replies");
    if received < PINGS_NEEDED {
        eprintln!("--- serial console ---\n{console}\n--- nfkit ---\n{nfkit_out}\n--- end ---");
        bail!("the guest got {received} of {PINGS} ping replies through nfkit (wanted {PINGS_NEEDED})");
    }
    if let Err(e) = tcp_result {
        eprintln!("--- serial console ---\n{console}\n--- nfkit ---\n{nfkit_out}\n--- end ---");
        return Err(e);
    }
    eprintln!(
        "  TCP through nfkit's bridge at default offloads: {TCP_BYTES} bytes each way, byte-exact"
    );
    let tso = tso_check(&nfkit_out).inspect_err(|_| {
        eprintln!("--- serial console ---\n{console}\n--- nfkit ---\n{nfkit_out}\n--- end ---");
    })?;
    eprintln!("  {tso}");
    let jumbo = console
        .lines()
        .find_map(|l| l.trim().strip_prefix("CHECK jumbo_received="))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    eprintln!(
        "  9000-byte don't-fragment pings at MTU {JUMBO_MTU}: {jumbo} of {JUMBO_PINGS} replies"
    );
    if jumbo == 0 {
        eprintln!("--- serial console ---\n{console}\n--- nfkit ---\n{nfkit_out}\n--- end ---");
        bail!("no 9000-byte ping came back through nfkit at MTU {JUMBO_MTU}");
    }
    if !nfkit_out.contains("max frame") {
        bail!("nfkit's start-up lines do not state the ports' largest frame:\n{nfkit_out}");
    }
    let tunnels = match tunnel_result {
        Ok(t) => t,
        Err(e) => {
            eprintln!("--- serial console ---\n{console}\n--- end ---");
            return Err(e);
        }
    };
    Ok(Outcome::Passed(format!(
        "kernel virtio-net over vhost-user, {received}/{PINGS} pings, {} KiB each way over TCP \
         (byte-exact) and {jumbo}/{JUMBO_PINGS} 9000-byte pings at MTU {JUMBO_MTU} through nfkit; \
         {tso}; {tunnels}",
        TCP_BYTES >> 10
    )))
}

/// Value `key=N` on the summary line of module `name` in `nfkit run`'s
/// output.
fn module_value(out: &str, name: &str, key: &str) -> Option<u64> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} (")))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The guest's TSO frames reached nfkit and `TSO` cut them: super-frames
/// segmented, none dropped or refused, nothing dropped on the veth.
fn tso_check(out: &str) -> Result<String> {
    let v = |m: &str, k: &str| module_value(out, m, k).unwrap_or(0);
    let (frames, segments) = (v("tso", "segmented"), v("tso", "segments"));
    if frames == 0 || segments <= frames {
        bail!("nfkit's TSO cut no super-frame of the guest ({frames} into {segments}): was HOST_TSO4 negotiated?");
    }
    for (m, k) in [("tso", "dropped"), ("tov", "dropped"), ("lro", "dropped")] {
        if v(m, k) > 0 {
            bail!("{m} {k}={} in nfkit's summary", v(m, k));
        }
    }
    Ok(format!(
        "the guest's TSO: {frames} super-frames cut into {segments} segments by nfkit's TSO; \
         LRO: {} frames of {} segments to the guest",
        v("lro", "frames"),
        v("lro", "merged")
    ))
}

/// The TCP transfer's namespace end: two one-shot busybox `nc`
/// listeners, one storing what the guest uploads, one serving the file
/// the guest downloads (into the share). Killed by process id on drop.
struct TcpFiles {
    up_sent: PathBuf,
    up_recv: PathBuf,
    down_sent: PathBuf,
    down_recv: PathBuf,
    listeners: Vec<Child>,
}

impl TcpFiles {
    fn start(img: &Image, netns: &str) -> Result<TcpFiles> {
        let busybox = super::which("busybox").context("busybox-static is not installed")?;
        let t = TcpFiles {
            up_sent: img.share.join("tcp-up.bin"),
            up_recv: img.share.join("tcp-up.recv"),
            down_sent: img.share.join("tcp-down.bin"),
            down_recv: img.share.join("tcp-down.recv"),
            listeners: Vec::new(),
        };
        fs::write(&t.up_sent, pseudo_random(TCP_BYTES, 1))?;
        fs::write(&t.down_sent, pseudo_random(TCP_BYTES, 2))?;
        let _ = fs::remove_file(&t.down_recv);
        let mut t = t;
        let nc = |port: u16, stdin: Stdio, stdout: Stdio| {
            Command::new("ip")
                .args(["netns", "exec", netns])
                .arg(&busybox)
                .args(["nc", "-l", "-p", &port.to_string()])
                .stdin(stdin)
                .stdout(stdout)
                .stderr(Stdio::null())
                .spawn()
                .context("starting busybox nc in the namespace")
        };
        // busybox nc exits at the first end of input from the socket, and
        // half-closes it at the end of its stdin: the receiver's stdin is
        // a pipe we keep open, so it stops only when the guest is done.
        let up = nc(
            UP_PORT,
            Stdio::piped(),
            fs::File::create(&t.up_recv)?.into(),
        )?;
        t.listeners.push(up);
        let down = nc(
            DOWN_PORT,
            fs::File::open(&t.down_sent)?.into(),
            Stdio::null(),
        )?;
        t.listeners.push(down);
        Ok(t)
    }

    /// Both files arrived whole and unchanged.
    fn check(mut self) -> Result<()> {
        self.stop();
        for (what, sent, recv) in [
            ("guest -> namespace", &self.up_sent, &self.up_recv),
            ("namespace -> guest", &self.down_sent, &self.down_recv),
        ] {
            let sent = fs::read(sent)?;
            let recv = fs::read(recv).unwrap_or_default();
            if recv != sent {
                let first_diff = sent.iter().zip(&recv).position(|(a, b)| a != b);
                bail!(
                    "TCP {what} through nfkit: {} of {} bytes arrived{}",
                    recv.len(),
                    sent.len(),
                    match first_diff {
                        Some(at) => format!(", first difference at byte {at}"),
                        None => String::new(),
                    }
                );
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        for mut c in self.listeners.drain(..) {
            // a listener that already served its connection has exited
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(2) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TcpFiles {
    fn drop(&mut self) {
        self.stop();
        for p in [
            &self.up_sent,
            &self.up_recv,
            &self.down_sent,
            &self.down_recv,
        ] {
            let _ = fs::remove_file(p);
        }
    }
}

/// `len` bytes of a xorshift stream (incompressible enough that a
/// shifted or repeated segment shows).
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn script() -> String {
    format!(
        r#"#!/bin/sh
mac_if() {{ for i in /sys/class/net/*; do [ "$(cat $i/address)" = "$1" ] && basename $i; done; }}
received() {{ grep -o '[0-9]* [a-z ]*received' "$1" | head -1 | cut -d' ' -f1; }}
# iproute2 and iputils from the host's root, read only (busybox's make no
# Geneve device and cannot forbid fragmenting)
mkdir -p /mnt/root
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 hostroot /mnt/root
IP="chroot /mnt/root /usr/bin/ip"
PING="chroot /mnt/root /usr/bin/ping"
IF=$(mac_if 52:54:00:77:00:01)
echo "guest interface: $IF"
ip link set "$IF" up
ip addr add {GUEST_IP}/24 dev "$IF"
ping -c {PINGS} -W 2 {NS_IP} > /tmp/ping.txt 2>&1
cat /tmp/ping.txt
N=$(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping.txt)
echo "CHECK ping_received=$N"
# TCP both ways at default offloads; the harness compares the bytes
timeout 90 nc {NS_IP} {UP_PORT} < /mnt/host/tcp-up.bin
echo "CHECK tcp_up_exit=$?"
# stdin that never ends: nc exits when the far end has sent everything
mkfifo /tmp/hold
timeout 90 nc {NS_IP} {DOWN_PORT} 0<>/tmp/hold > /tmp/down.bin
echo "CHECK tcp_down_exit=$? bytes=$(wc -c < /tmp/down.bin)"
cp /tmp/down.bin /mnt/host/tcp-down.recv
grep -E 'InCsumErrors|Tcp:' /proc/net/snmp
# jumbo frames: a 9000-byte don't-fragment ping (MRG_RXBUF, chains)
ip link set "$IF" mtu {JUMBO_MTU}
$PING -c {JUMBO_PINGS} -W 2 -M do -s {JUMBO_PAYLOAD} {NS_IP} > /tmp/jping.txt 2>&1
cat /tmp/jping.txt
echo "CHECK jumbo_received=$(received /tmp/jping.txt)"
{tunnel}"#,
        tunnel = tunnel_script()
    )
}

/// The second NIC's address and the tunnels' far ends (see [`Tunnels`]).
const GUEST2_MAC: &str = "52:54:00:77:00:02";
const GUEST2_IP: &str = "192.168.77.1";
const NFKIT_UNDERLAY_IP: &str = "192.168.77.2";
const NFKIT_UNDERLAY_MAC: &str = "02:00:00:77:00:02";
const GENEVE_MAC: &str = "02:00:00:79:00:01";
const TUNNEL_NS_MAC: &str = "02:00:00:78:00:02";
const VLAN_ID: u16 = 10;
const VNI: u32 = 42;
const TUNNEL_PINGS: u32 = 3;

/// The guest's half of the tunnel test: a VLAN and a Geneve device on
/// its second NIC (iproute2 from the host's root), static neighbours for
/// the namespace behind nfkit, a ping through each.
fn tunnel_script() -> String {
    format!(
        r#"# VLAN {VLAN_ID} and Geneve VNI {VNI}: nfkit's VLANPop/VLANPush and GeneveDecap/GeneveEncap are the far ends
IF2=$(mac_if {GUEST2_MAC})
echo "tunnel interface: $IF2"
$IP link set "$IF2" up
$IP addr add {GUEST2_IP}/24 dev "$IF2"
$IP link add link "$IF2" name vl{VLAN_ID} type vlan id {VLAN_ID}
$IP link set vl{VLAN_ID} up
$IP addr add 10.78.0.1/24 dev vl{VLAN_ID}
$IP neigh add 10.78.0.2 lladdr {TUNNEL_NS_MAC} dev vl{VLAN_ID}
$IP link add gnv0 address {GENEVE_MAC} type geneve id {VNI} remote {NFKIT_UNDERLAY_IP}
$IP link set gnv0 up
$IP addr add 10.79.0.1/24 dev gnv0
$IP neigh add 10.79.0.2 lladdr {TUNNEL_NS_MAC} dev gnv0
ping -c {TUNNEL_PINGS} -W 2 10.78.0.2 > /tmp/vping.txt 2>&1
cat /tmp/vping.txt
echo "CHECK vlan_received=$(received /tmp/vping.txt)"
ping -c {TUNNEL_PINGS} -W 2 10.79.0.2 > /tmp/gping.txt 2>&1
cat /tmp/gping.txt
echo "CHECK geneve_received=$(received /tmp/gping.txt)"
"#
    )
}

/// Little-endian integer of dotted or colon-separated bytes, as
/// SetMetadata's `value` takes them (network order in memory).
fn le_value(bytes: &[u8]) -> String {
    let v = bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| acc << 8 | u64::from(b));
    format!("{v:#x}")
}

fn mac_bytes(mac: &str) -> Vec<u8> {
    mac.split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap_or(0))
        .collect()
}

fn ip_bytes(ip: &str) -> Vec<u8> {
    ip.split('.').map(|d| d.parse().unwrap_or(0)).collect()
}

/// The far end of the guest's VLAN and Geneve devices: `nfkit run` of a
/// pipeline between the guest's second NIC (vhost-user) and a veth into
/// a namespace holding 10.78.0.2 and 10.79.0.2 (no tags, no tunnel):
/// VLAN 10 frames lose their tag (VLANSplit), Geneve frames their
/// outer headers (GeneveDecap), ARP for nfkit's underlay address is
/// answered (ArpResponder); the way back is chosen by destination MAC
/// (ExactMatch): VLANPush, or SetMetadata + GeneveEncap + IPEncap +
/// EtherEncap. Every frame on the guest's side is also written to a
/// pcap file, which `tshark` dissects afterwards.
struct Tunnels {
    sock: PathBuf,
    pcap: PathBuf,
    runner: Bridge,
    _net: Netns,
}

impl Tunnels {
    fn start(img: &Image, nfkit: &Path, tag: u32) -> Result<Tunnels> {
        let net = Netns::create_with(
            &format!("nfkvt{tag}"),
            &["10.78.0.2/24", "10.79.0.2/24"],
            TUNNEL_NS_MAC,
            1500,
        )?;
        let inside = |args: &[&str]| -> Result<()> {
            let mut v = vec!["-n", net.name.as_str()];
            v.extend_from_slice(args);
            ip(&v)
        };
        let peer = net.peer();
        inside(&[
            "neigh",
            "add",
            "10.78.0.1",
            "lladdr",
            GUEST2_MAC,
            "dev",
            &peer,
        ])?;
        inside(&[
            "neigh",
            "add",
            "10.79.0.1",
            "lladdr",
            GENEVE_MAC,
            "dev",
            &peer,
        ])?;
        let sock = std::env::temp_dir().join(format!("nfkit-guest-vt-{tag}.sock"));
        let pcap = img.share.join("tunnels.pcap");
        let _ = fs::remove_file(&pcap);
        let hex = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        let nfk = format!(
            r#"port g = "vhost-user:{sock}"
port v = "afpacket:{veth}"
port cap = "pcap-out:{pcap}"
tog::PortOut(port=g)
tov::PortOut(port=v)
tocap::PortOut(port=cap)
PortInc(port=g) -> rg::Replicate(gates=2)
rg:1 -> tocap
rg:0 -> split::VLANSplit(gates={gates})
split:{VLAN_ID} -> tov
split:0 -> et::ExactMatch(fields=[(offset=12, num_bytes=2)], gates=3)
et.add(gate=1, fields=[0x0806])
et.add(gate=2, fields=[0x0800])
et:1 -> ArpResponder(ip="{NFKIT_UNDERLAY_IP}", mac_addr="{NFKIT_UNDERLAY_MAC}") -> rv::Replicate(gates=2)
et:2 -> GeneveDecap() -> tov
PortInc(port=v) -> mac::ExactMatch(fields=[(offset=0, num_bytes=6)], gates=3)
mac.add(gate=1, fields=[{guest_mac:#x}])
mac.add(gate=2, fields=[{geneve_mac:#x}])
mac:1 -> VLANPush(tci={VLAN_ID}) -> rv
mac:2 -> SetMetadata(attribute=tun_ip_src, size=4, value={src})
  -> SetMetadata(attribute=tun_ip_dst, size=4, value={dst})
  -> SetMetadata(attribute=tun_id, size=4, value={vni})
  -> SetMetadata(attribute=ether_src, size=6, value={esrc})
  -> SetMetadata(attribute=ether_dst, size=6, value={edst})
  -> GeneveEncap() -> IPEncap() -> EtherEncap() -> rv
rv:0 -> tog
rv:1 -> tocap
"#,
            sock = sock.display(),
            veth = net.host_veth,
            pcap = pcap.display(),
            gates = VLAN_ID + 1,
            guest_mac = hex(&mac_bytes(GUEST2_MAC)),
            geneve_mac = hex(&mac_bytes(GENEVE_MAC)),
            src = le_value(&ip_bytes(NFKIT_UNDERLAY_IP)),
            dst = le_value(&ip_bytes(GUEST2_IP)),
            vni = le_value(&VNI.to_be_bytes()),
            esrc = le_value(&mac_bytes(NFKIT_UNDERLAY_MAC)),
            edst = le_value(&mac_bytes(GUEST2_MAC)),
        );
        let file = img.share.join("tunnels.nfk");
        fs::write(&file, nfk)?;
        let log = img.share.join("tunnels-nfkit.log");
        let args = [
            "run".to_string(),
            file.display().to_string(),
            "--seconds".into(),
            "300".into(),
        ];
        let runner = Bridge::start_with(nfkit, &sock, &args, &log)?;
        Ok(Tunnels {
            sock,
            pcap,
            runner,
            _net: net,
        })
    }

    /// The pings came back through both tunnels, and `tshark` finds
    /// VLAN 10 tags and Geneve VNI 42 headers both ways in the
    /// guest side's capture.
    fn check(self, console: &str) -> Result<String> {
        let out = self.runner.stop();
        let got = |what: &str| {
            console
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("CHECK {what}=")))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        };
        let (vlan, geneve) = (got("vlan_received"), got("geneve_received"));
        eprintln!("  guest pings through nfkit's VLANPop/VLANPush: {vlan} of {TUNNEL_PINGS}, GeneveDecap/GeneveEncap: {geneve} of {TUNNEL_PINGS}");
        if vlan == 0 || geneve == 0 {
            bail!(
                "no ping came back through the VLAN ({vlan}) or the Geneve tunnel ({geneve}):
--- nfkit run ---
{out}"
            );
        }
        let count = |filter: &str| -> Result<usize> {
            let o = Command::new("tshark")
                .arg("-r")
                .arg(&self.pcap)
                .args(["-Y", filter])
                .output()
                .context("running tshark")?;
            if !o.status.success() {
                bail!(
                    "tshark -Y '{filter}': {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            Ok(String::from_utf8_lossy(&o.stdout).lines().count())
        };
        let checks = [
            (
                format!("vlan.id == {VLAN_ID} && icmp.type == 8"),
                "VLAN-tagged echo requests",
            ),
            (
                format!("vlan.id == {VLAN_ID} && icmp.type == 0"),
                "VLAN-tagged echo replies",
            ),
            (
                format!("geneve.vni == {VNI} && icmp.type == 8"),
                "Geneve echo requests",
            ),
            (
                format!("geneve.vni == {VNI} && icmp.type == 0"),
                "Geneve echo replies",
            ),
        ];
        let mut seen = Vec::new();
        for (filter, what) in &checks {
            let n = count(filter)?;
            if n == 0 {
                bail!("tshark finds no {what} ({filter}) in the guest side's capture");
            }
            seen.push(format!("{n} {what}"));
        }
        Ok(format!("tshark: {}", seen.join(", ")))
    }
}

/// The guest: RAM in a shared memfd (the backend maps it), one
/// virtio-net device on a vhost-user netdev.
fn qemu(img: &Image, sock: &Path, tunnel_sock: &Path) -> Command {
    let mut c = qemu_base(img, Some("/mnt/host/run.sh"), "");
    // The second NIC: the tunnels' (`Tunnels`); the host's root, read
    // only, for iproute2 (busybox's `ip` makes no Geneve device).
    c.args([
        "-chardev",
        &format!("socket,id=c1,path={}", tunnel_sock.display()),
    ])
    .args(["-netdev", "vhost-user,id=n1,chardev=c1"])
    .args([
        "-device",
        &format!("virtio-net-pci,netdev=n1,mac={GUEST2_MAC},romfile=,vectors=0"),
    ])
    .args([
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
    ]);
    c.args(["-m", "512"])
        .args([
            "-object",
            "memory-backend-memfd,id=mem,size=512M,share=on",
            "-numa",
            "node,memdev=mem",
        ])
        .args(["-chardev", &format!("socket,id=c0,path={}", sock.display())])
        .args(["-netdev", "vhost-user,id=n0,chardev=c0"])
        .args([
            "-device",
            "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:01,romfile=,vectors=0",
        ]);
    c
}

/// A network namespace holding one end of a veth pair; removed on drop.
pub(super) struct Netns {
    pub(super) name: String,
    pub(super) host_veth: String,
}

impl Netns {
    /// The peer veth's name (inside the namespace).
    fn peer(&self) -> String {
        format!("{}b", self.name)
    }

    /// A namespace `name` with veth `{name}a` here and `{name}b` inside,
    /// holding `addrs`, with MAC `mac` and MTU `mtu` on both ends.
    pub(super) fn create_with(name: &str, addrs: &[&str], mac: &str, mtu: u32) -> Result<Netns> {
        let n = Netns {
            name: name.to_string(),
            host_veth: format!("{name}a"),
        };
        let peer = n.peer();
        let _ = n.remove();
        ip(&["netns", "add", &n.name])?;
        ip(&[
            "link",
            "add",
            &n.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &n.name])?;
        let mtu = mtu.to_string();
        ip(&["link", "set", &n.host_veth, "mtu", &mtu, "up"])?;
        let inside = |args: &[&str]| -> Result<()> {
            let mut v = vec!["-n", n.name.as_str()];
            v.extend_from_slice(args);
            ip(&v)
        };
        inside(&["link", "set", &peer, "address", mac, "mtu", &mtu])?;
        for a in addrs {
            inside(&["addr", "add", a, "dev", &peer])?;
        }
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(n)
    }

    fn create(tag: u32) -> Result<Netns> {
        let n = Netns {
            name: format!("nfkvu{tag}"),
            host_veth: format!("nfkvu{tag}a"),
        };
        let peer = format!("nfkvu{tag}b");
        let _ = n.remove();
        ip(&["netns", "add", &n.name])?;
        ip(&[
            "link",
            "add",
            &n.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &n.name])?;
        ip(&["link", "set", &n.host_veth, "up"])?;
        let inside = |args: &[&str]| -> Result<()> {
            let mut v = vec!["-n", n.name.as_str()];
            v.extend_from_slice(args);
            ip(&v)
        };
        inside(&["addr", "add", &format!("{NS_IP}/24"), "dev", &peer])?;
        // The jumbo part's far end (the test's own veth pair).
        let mtu = JUMBO_MTU.to_string();
        ip(&["link", "set", &n.host_veth, "mtu", &mtu])?;
        inside(&["link", "set", &peer, "mtu", &mtu])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(n)
    }

    fn remove(&self) -> Result<()> {
        let _ = ip(&["link", "del", &self.host_veth]);
        ip(&["netns", "del", &self.name])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `nfkit nf bridge` on the host, serving the vhost-user socket; stopped
/// (by its process id) on drop.
pub(super) struct Bridge {
    child: Option<Child>,
    log: PathBuf,
}

impl Bridge {
    /// `nfkit run` of the guest's main NIC to the namespace's veth:
    /// vhost-user with `tso=on` (HOST_TSO4/6 offered: the guest's kernel
    /// sends its 64 KB TSO frames), cut by `TSO` before the veth; the
    /// namespace's segments coalesced by `LRO` on the way back (the guest
    /// negotiated GUEST_TSO4/6 and takes them whole).
    fn start(nfkit: &Path, sock: &Path, veth: &str, log: &Path) -> Result<Bridge> {
        let nfk = log.with_file_name("vhost-tso.nfk");
        fs::write(
            &nfk,
            format!(
                "port g = \"vhost-user:{},tso=on\"\nport v = \"afpacket:{veth}\"\n\
                 PortInc(port=g) -> tso::TSO() -> tov::PortOut(port=v)\n\
                 PortInc(port=v) -> lro::LRO() -> PortOut(port=g)\n",
                sock.display()
            ),
        )?;
        let args = [
            "run".to_string(),
            nfk.display().to_string(),
            "--seconds".into(),
            "300".into(),
        ];
        Bridge::start_with(nfkit, sock, &args, log)
    }

    /// `nfkit ARGS`, which serves the vhost-user socket `sock`.
    pub(super) fn start_with(
        nfkit: &Path,
        sock: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Bridge> {
        let _ = fs::remove_file(sock);
        let out = fs::File::create(log)?;
        let child = Command::new(nfkit)
            .env("RUST_LOG", "nfkit_virtio=debug,nfkit_port::bond=info")
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting nfkit nf bridge")?;
        let mut b = Bridge {
            child: Some(child),
            log: log.to_path_buf(),
        };
        let started = Instant::now();
        while !sock.exists() {
            if let Some(status) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "nfkit {} exited with {status}:\n{}",
                    args.join(" "),
                    fs::read_to_string(log).unwrap_or_default()
                );
            }
            if started.elapsed() > Duration::from_secs(10) {
                bail!("nfkit did not create {} within 10 s", sock.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(b)
    }

    /// Stop nfkit (SIGINT: it prints its summary) and return its output.
    pub(super) fn stop(mut self) -> String {
        self.halt();
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn halt(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.halt();
    }
}
