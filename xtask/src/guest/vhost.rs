//! The `vhost-user` guest mode: a VM whose own kernel virtio-net driver
//! reaches the network through nfkit.
//!
//! ```text
//! guest kernel virtio-net --(vhost-user socket, shared memfd RAM)--> nfkit nf bridge
//!     --(afpacket on a veth)--> network namespace 10.77.0.2
//! ```
//!
//! On the host: a network namespace with one end of a veth pair
//! (10.77.0.2/24), `nfkit nf bridge --port vhost-user:SOCK --port
//! afpacket:VETH` serving the socket. QEMU's guest RAM is a shared memfd
//! (vhost-user needs the backend to map it) and its NIC a vhost-user
//! netdev on that socket. The guest gives its NIC 10.77.0.1/24, pings
//! the namespace through the bridge, then moves a file each way over TCP
//! (busybox `nc`, the namespace's end is the host's busybox) and the
//! harness compares the bytes that arrived with the ones sent. Every
//! interface stays at its default offload settings: the veth hands
//! nfkit's AF_PACKET port partial checksums and TSO super-frames, which
//! the bridge must complete and cut before the guest sees them.

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
    let bridge = Bridge::start(
        nfkit,
        &format!("vhost-user:{}", sock.display()),
        &[sock.as_path()],
        &net.host_veth,
        &log,
    )?;
    let tcp = TcpFiles::start(img, &net.name)?;
    fs::write(img.share.join("run.sh"), script())?;
    let console = run_guest(qemu(img, &sock), |_| {});
    let nfkit_out = bridge.stop();
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
    Ok(Outcome::Passed(format!(
        "kernel virtio-net over vhost-user, {received}/{PINGS} pings and {} KiB each way over TCP \
         (byte-exact) through `nfkit nf bridge`",
        TCP_BYTES >> 10
    )))
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
IF=$(ls /sys/class/net | grep -v '^lo$' | head -1)
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
"#
    )
}

/// The guest: RAM in a shared memfd (the backend maps it), one
/// virtio-net device on a vhost-user netdev.
fn qemu(img: &Image, sock: &Path) -> Command {
    let mut c = qemu_base(img, Some("/mnt/host/run.sh"), "");
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
    pub(super) fn create(tag: u32) -> Result<Netns> {
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

pub(super) fn ip(args: &[&str]) -> Result<()> {
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

/// `nfkit nf bridge` on the host, serving the vhost-user socket(s);
/// stopped (by its process id) on drop.
pub(super) struct Bridge {
    child: Option<Child>,
    log: PathBuf,
}

impl Bridge {
    /// Bridge `port` (whose vhost-user sockets are `socks`) and the veth.
    pub(super) fn start(
        nfkit: &Path,
        port: &str,
        socks: &[&Path],
        veth: &str,
        log: &Path,
    ) -> Result<Bridge> {
        for sock in socks {
            let _ = fs::remove_file(sock);
        }
        let out = fs::File::create(log)?;
        let child = Command::new(nfkit)
            .env("RUST_LOG", "nfkit_virtio=debug,nfkit_port::bond=info")
            .args(["nf", "bridge", "--port", port])
            .args(["--port", &format!("afpacket:{veth}"), "--seconds", "300"])
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
        while !socks.iter().all(|s| s.exists()) {
            if let Some(status) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "nfkit nf bridge exited with {status}:\n{}",
                    fs::read_to_string(log).unwrap_or_default()
                );
            }
            if started.elapsed() > Duration::from_secs(10) {
                bail!("nfkit did not create {socks:?} within 10 s");
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
