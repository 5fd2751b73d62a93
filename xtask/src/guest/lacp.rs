//! The `lacp` guest mode: Linux's `bonding` driver as nfkit's LACP
//! partner (this machine's kernel has none; the guest's Debian kernel
//! has).
//!
//! ```text
//! guest bond0 (802.3ad, lacp_rate fast, layer3+4)
//!   eth0 --vhost-user A--\
//!                         nfkit bond:mode=lacp --nf bridge-- afpacket veth -- namespace
//!   eth1 --vhost-user B--/
//! ```
//!
//! The guest enslaves both virtio-net NICs (reported 10 Gbit/s full
//! duplex: 802.3ad aggregates only full-duplex ports), waits for the
//! aggregate, prints `/proc/net/bonding/bond0` (the partner must be
//! nfkit's system MAC), then pings four addresses of the namespace at 5
//! per second each (layer3+4 hashing spreads them over both links) and
//! takes `eth1` down half-way. Checked: the partner MAC, both of nfkit's
//! members received and sent traffic (its log), and the pings lost are
//! at most 3 s of those offered (the short LACP timeout).

use super::vhost::{Bridge, Netns};
use super::{qemu_base, run_guest, Image, Outcome};
use anyhow::{bail, Result};
use std::fs;
use std::path::Path;
use std::process::Command;

const GUEST_IP: &str = "10.77.0.1";
/// The namespace's addresses the guest pings (one flow each), chosen so
/// that nfkit's bond sends two of the reply flows on each member
/// (`nfkit_port::bond::flow_hash` modulo 2: .2 and .3 on the first, .7
/// and .8 on the second; .2 to .5 all hash to the first).
const NS_IPS: [&str; 4] = ["10.77.0.2", "10.77.0.3", "10.77.0.7", "10.77.0.8"];
const SYSTEM: &str = "02:6e:66:6b:00:01";
/// Pings per address, 5 a second.
const PINGS: u32 = 60;
const PER_SECOND: u32 = 5;

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
    let addrs: Vec<String> = NS_IPS.iter().map(|a| format!("{a}/24")).collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let net = Netns::create_with(&format!("nfklacp{tag}"), &addrs, "02:00:00:77:00:02", 1500)?;
    let socks =
        [0, 1].map(|i| std::env::temp_dir().join(format!("nfkit-guest-lacp-{tag}-{i}.sock")));
    let _ = fs::remove_file(&socks[1]);
    let port = format!(
        "bond:mode=lacp,rate=fast,system={SYSTEM},members=vhost-user:{}+vhost-user:{}",
        socks[0].display(),
        socks[1].display()
    );
    let log = img.share.join("lacp-nfkit.log");
    let args: Vec<String> = [
        "nf",
        "bridge",
        "--port",
        &port,
        "--port",
        &format!("afpacket:{}", net.host_veth),
        "--seconds",
        "300",
    ]
    .map(String::from)
    .to_vec();
    // The bond opens both members at once: the second socket follows the first.
    let bridge = Bridge::start_with(nfkit, &socks[0], &args, &log)?;
    let started = std::time::Instant::now();
    while !socks[1].exists() && started.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fs::write(img.share.join("run.sh"), script())?;
    let console = run_guest(qemu(img, &socks), |_| {});
    let nfkit_out = bridge.stop();
    let console = console?;
    let dump =
        || format!("--- serial console ---\n{console}\n--- nfkit ---\n{nfkit_out}\n--- end ---");
    let check = check(&console, &nfkit_out);
    if check.is_err() {
        eprintln!("{}", dump());
    }
    check
}

fn check(console: &str, nfkit_out: &str) -> Result<Outcome> {
    // /proc/net/bonding/bond0 while aggregated: nfkit is the partner.
    let before = console
        .split("BONDING-BEFORE")
        .nth(1)
        .and_then(|s| s.split("BONDING-END").next())
        .unwrap_or("");
    let partner = format!("Partner Mac Address: {SYSTEM}");
    if !before.contains(&partner) {
        bail!("/proc/net/bonding/bond0 does not show `{partner}`");
    }
    let members: Vec<(u64, u64)> = nfkit_out
        .lines()
        .filter_map(|l| {
            let rest = l.split("bond member ").nth(1)?;
            let num = |key: &str| -> Option<u64> {
                rest.split(key)
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            };
            Some((num("rx=")?, num("tx=")?))
        })
        .collect();
    if members.len() != 2 || members.iter().any(|&(rx, tx)| rx == 0 || tx == 0) {
        bail!("nfkit's bond members did not both carry traffic both ways: {members:?} (rx, tx)");
    }
    let received: u32 = console
        .lines()
        .filter_map(|l| l.trim().strip_prefix("CHECK received="))
        .filter_map(|v| v.trim().parse::<u32>().ok())
        .sum();
    let offered = PINGS * NS_IPS.len() as u32;
    let allowed = 3 * PER_SECOND * NS_IPS.len() as u32;
    let lost = offered.saturating_sub(received);
    eprintln!(
        "  LACP with Linux bonding: partner {SYSTEM}, members (rx, tx) {members:?}, \
         pings {received}/{offered} with eth1 taken down (at most {allowed} may be lost)"
    );
    if lost > allowed {
        bail!(
            "{lost} of {offered} pings lost after `ip link set eth1 down` (at most {allowed}: 3 s)"
        );
    }
    Ok(Outcome::Passed(format!(
        "Linux 802.3ad bond over two vhost-user NICs to nfkit's bond port: partner {SYSTEM}, \
         both links used, {lost} of {offered} pings lost after eth1 went down"
    )))
}

fn script() -> String {
    let pings: String = NS_IPS
        .iter()
        .enumerate()
        .map(|(i, a)| format!("ping -i 0.2 -c {PINGS} -W 1 {a} > /tmp/ping{i}.txt 2>&1 &\n"))
        .collect();
    format!(
        r#"#!/bin/sh
modprobe bonding max_bonds=0
B=/sys/class/net/bond0/bonding
[ -d $B ] || echo +bond0 > /sys/class/net/bonding_masters
echo 802.3ad > $B/mode
echo fast > $B/lacp_rate
echo layer3+4 > $B/xmit_hash_policy
echo 100 > $B/miimon
for i in eth0 eth1; do cat /sys/class/net/$i/speed /sys/class/net/$i/duplex 2>&1 | tr '\n' ' '; echo "$i"; ip link set $i down; echo +$i > $B/slaves; done
ip link set bond0 up
ip addr add {GUEST_IP}/24 dev bond0
# The aggregate: both ports distributing (up to 20 s under TCG).
for t in $(seq 1 40); do
  N=$(grep -c 'Actor Churn State: none' /proc/net/bonding/bond0)
  A=$(grep 'Number of ports' /proc/net/bonding/bond0 | head -1)
  case "$A" in *2*) [ "$N" = 2 ] && break ;; esac
  sleep 0.5
done
echo BONDING-BEFORE
cat /proc/net/bonding/bond0
echo BONDING-END
{pings}sleep 6
echo "STEP eth1 down"
ip link set eth1 down
wait
for i in 0 1 2 3; do
  tail -3 /tmp/ping$i.txt
  echo "CHECK received=$(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping$i.txt)"
done
cat /proc/net/bonding/bond0
"#
    )
}

/// The guest: RAM in a shared memfd, two virtio-net devices on
/// vhost-user netdevs, reported 10 Gbit/s full duplex.
fn qemu(img: &Image, socks: &[std::path::PathBuf; 2]) -> Command {
    let mut c = qemu_base(img, Some("/mnt/host/run.sh"), "");
    c.args(["-m", "512"]).args([
        "-object",
        "memory-backend-memfd,id=mem,size=512M,share=on",
        "-numa",
        "node,memdev=mem",
    ]);
    for (i, sock) in socks.iter().enumerate() {
        c.args(["-chardev", &format!("socket,id=c{i},path={}", sock.display())])
            .args(["-netdev", &format!("vhost-user,id=n{i},chardev=c{i}")])
            .args([
                "-device",
                &format!(
                    "virtio-net-pci,netdev=n{i},mac=52:54:00:77:01:0{i},romfile=,vectors=0,speed=10000,duplex=full"
                ),
            ]);
    }
    c
}
