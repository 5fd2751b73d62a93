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
//! netdev on that socket. The guest gives its NIC 10.77.0.1/24 and pings
//! the namespace through the bridge.

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
    fs::write(img.share.join("run.sh"), script())?;
    let console = run_guest(qemu(img, &sock), |_| {});
    let nfkit_out = bridge.stop();
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
    Ok(Outcome::Passed(format!(
        "kernel virtio-net over vhost-user, {received}/{PINGS} pings through `nfkit nf bridge`"
    )))
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
struct Netns {
    name: String,
    host_veth: String,
}

impl Netns {
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
struct Bridge {
    child: Option<Child>,
    log: PathBuf,
}

impl Bridge {
    fn start(nfkit: &Path, sock: &Path, veth: &str, log: &Path) -> Result<Bridge> {
        let _ = fs::remove_file(sock);
        let out = fs::File::create(log)?;
        let child = Command::new(nfkit)
            .env("RUST_LOG", "nfkit_virtio=debug")
            .args(["nf", "bridge", "--port"])
            .arg(format!("vhost-user:{}", sock.display()))
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
        while !sock.exists() {
            if let Some(status) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "nfkit nf bridge exited with {status}:\n{}",
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
    fn stop(mut self) -> String {
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
