//! The QEMU guest harness: boots a small Linux VM under TCG and runs the
//! real `nfkit` command in it (or next to it), with traffic checked at
//! the other end. Modes (`cargo xtask guest run [MODE...]`, all by
//! default):
//!
//! - `pci-uio`: two VirtIO-net PCI devices, one legacy
//!   (`disable-modern=on`, 1af4:1000, I/O-port BAR) and one modern
//!   (`disable-legacy=on`, 1af4:1041, MMIO BAR), both driven by nfkit
//!   through `uio_pci_generic`;
//! - `pci-vfio`: the same, both devices driven through `vfio-pci` behind
//!   an emulated IOMMU (the modern device's DMA goes through the IOMMU,
//!   the legacy one's bypasses it), the modern one with MSI-X, the legacy
//!   one without (`vectors=0`), so it raises INTx; `nfkit fwd` idles
//!   first, and its CPU time over a second shows it asleep on the
//!   interrupts before the first probe frame wakes it;
//! - `vhost-user`: the guest's own kernel virtio-net driver, connected by
//!   a vhost-user netdev to `nfkit nf bridge` on the host, pings a
//!   network namespace behind the bridge (`vhost.rs`);
//! - `lacp`: the guest kernel's `bonding` (802.3ad, `lacp_rate fast`)
//!   over two virtio-net NICs, both vhost-user to one nfkit bond port
//!   (`bond:mode=lacp`), bridged to a namespace (`lacp.rs`).
//!
//! In the PCI modes each NIC's netdev is a UDP socket whose other end is
//! this program (`wire.rs`). The guest runs `nfkit pktgen --rx` on both
//! NICs (we count the frames and reflect them back), then `nfkit fwd`
//! between them (we inject frames into each NIC and count them out of
//! the other, and one 9,000-byte frame each way, which must come out
//! byte-exact: the driver's MRG_RXBUF receive and chained transmit).
//!
//! Everything is built under `target/guest/`:
//!
//! - `kroot/`: the Debian kernel package, unpacked (`apt-get download`,
//!   `dpkg -x`, `depmod`);
//! - `initrd.gz`: static busybox, the module closure of the drivers the
//!   test needs (`modprobe -S --show-depends`), and an `/init` that
//!   mounts what is needed, loads the modules, mounts the 9p share and
//!   runs the script named on the kernel command line, then powers off;
//! - `share/`: shared with the guest over 9p: the statically linked
//!   `nfkit` and the test script.
//!
//! KVM does not work on this machine (see the environment notes), so the
//! guest runs under TCG: a boot, run and power-off cycle takes seconds.
//!
//! `cargo xtask guest build`: only build the kernel and initramfs;
//! `cargo xtask guest run [pci-uio|pci-vfio|vhost-user]`: build, boot,
//! run, check; `cargo xtask guest shell`: boot to an interactive shell
//! (the two PCI NICs, the share mounted on /mnt/host).

mod lacp;
mod vhost;
mod wire;

use anyhow::{bail, Context, Result};
use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{HostWire, Phase};

/// Kernel modules the guest needs (their dependencies come along).
const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "uio_pci_generic",
    "vfio-pci",
    "vfio_iommu_type1",
    "9pnet_virtio",
    "9p",
    // The far ends of nfkit's VLANPush/VLANPop and GeneveEncap/Decap
    // (this host's kernel has neither, issue 18).
    "8021q",
    "geneve",
];

/// Modules in the initramfs that a mode's script loads itself (loaded at
/// boot, `bonding` would add a `bond0` every mode sees).
const ON_DEMAND_MODULES: &[&str] = &["bonding"];

/// Debian packages the harness uses, by the command that proves each.
const PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
    ("modprobe", "kmod"),
];

/// How long one guest run may take (boot + test + power-off).
const GUEST_TIMEOUT: Duration = Duration::from_secs(240);

/// The modes the harness can run.
const MODES: &[&str] = &["pci-uio", "pci-vfio", "vhost-user", "lacp"];
/// The modes `cargo xtask test` and `guest run` without names run: all.
const DEFAULT_MODES: &[&str] = MODES;

/// Frames `nfkit pktgen` sends per NIC in the PCI modes, and its rate.
const PKTGEN_COUNT: u64 = 3000;
const PKTGEN_PPS: u64 = 1500;
/// How long `nfkit fwd` runs in the PCI modes.
const FWD_SECONDS: u64 = 20;
/// pci-vfio: `nfkit fwd` idles this long before its CPU time is read
/// (start-up under TCG), then one second is measured.
const IDLE_SETTLE_SECONDS: u64 = 2;
/// The most CPU an idle, sleeping `nfkit fwd` may take over that second,
/// in clock ticks (USER_HZ = 100: 10% of a core; a polling one takes ~100).
const IDLE_MAX_TICKS: u64 = 10;

/// How a mode ended, when it did not fail.
enum Outcome {
    Passed(String),
    Skipped(String),
}

/// `cargo xtask guest ...`
pub fn main(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("build") => {
            build_image()?;
            Ok(())
        }
        Some("run") => {
            let modes: Vec<&str> = if args.len() > 1 {
                args[1..].iter().map(String::as_str).collect()
            } else {
                DEFAULT_MODES.to_vec()
            };
            if let Some(m) = modes.iter().find(|m| !MODES.contains(m)) {
                bail!("unknown guest mode `{m}`: use {}", MODES.join(", "));
            }
            run_modes(&modes)
        }
        Some("shell") => {
            let img = build_image()?;
            let wire = HostWire::start()?;
            let status = pci_qemu(&img, None, false, &wire.netdevs)
                .stdin(Stdio::inherit())
                .status()?;
            if !status.success() {
                bail!("qemu exited with {status}");
            }
            Ok(())
        }
        _ => bail!(
            "usage: cargo xtask guest build | run [{}] | shell",
            MODES.join("|")
        ),
    }
}

/// Run the in-guest tests from `cargo xtask test`.
pub fn run_guest_tests() -> Result<()> {
    if let Some(why) = cannot_run() {
        eprintln!("SKIP: guest tests: {why}");
        return Ok(());
    }
    run_modes(DEFAULT_MODES)
}

/// Why the guest cannot run here, if it cannot.
fn cannot_run() -> Option<String> {
    if !is_root() && PACKAGES.iter().any(|(cmd, _)| !have(cmd)) {
        return Some(
            "QEMU, busybox, cpio or kmod is missing and we are not root to install them".into(),
        );
    }
    None
}

fn run_modes(modes: &[&str]) -> Result<()> {
    let img = match build_image() {
        Ok(img) => img,
        Err(e) => {
            // No kernel package or QEMU to be had (offline, no apt): say
            // so instead of failing the whole test run, except where
            // nothing may skip (CI).
            if std::env::var("NFKIT_NO_SKIP").is_ok_and(|v| v == "1") {
                return Err(e.context("guest tests: cannot build the guest image"));
            }
            eprintln!("SKIP: guest tests: cannot build the guest image: {e:#}");
            return Ok(());
        }
    };
    let nfkit = build_nfkit()?;
    share_nfkit(&nfkit, &img.share)?;
    let mut failed = Vec::new();
    for mode in modes {
        let started = Instant::now();
        let outcome = match *mode {
            "pci-uio" => pci_mode(&img, false),
            "pci-vfio" => pci_mode(&img, true),
            "vhost-user" => vhost::run(&img, &nfkit),
            "lacp" => lacp::run(&img, &nfkit),
            other => bail!("unknown guest mode `{other}`"),
        };
        match outcome {
            Ok(Outcome::Passed(what)) => {
                eprintln!("guest {mode}: ok in {:.1?}: {what}", started.elapsed())
            }
            Ok(Outcome::Skipped(why)) => eprintln!("SKIP: guest {mode}: {why}"),
            Err(e) => {
                eprintln!("guest {mode}: FAILED in {:.1?}: {e:#}", started.elapsed());
                failed.push(*mode);
            }
        }
    }
    if !failed.is_empty() {
        bail!("guest tests failed: {}", failed.join(", "));
    }
    Ok(())
}

/// A PCI mode: `nfkit pktgen --rx`, then `nfkit fwd`, on the legacy and
/// the modern NIC, with this process as the far end of both wires.
fn pci_mode(img: &Image, vfio: bool) -> Result<Outcome> {
    fs::write(img.share.join("run.sh"), pci_script(vfio))?;
    let wire = HostWire::start()?;
    let cmd = pci_qemu(img, Some("/mnt/host/run.sh"), vfio, &wire.netdevs);
    let console = run_guest(cmd, |line| {
        if line.trim() == "STEP fwd" {
            wire.set_phase(Phase::Inject);
        }
    });
    let counts = wire.finish();
    let console = console?;
    check_pci(&console, &counts, vfio)
        .inspect_err(|_| eprintln!("--- serial console ---\n{console}\n--- end ---"))
}

/// The guest side of a PCI mode. NIC 0 is the legacy device, NIC 1 the
/// modern one (the order of the netdevs and of nfkit's port arguments).
fn pci_script(vfio: bool) -> String {
    let bind_vfio = if vfio {
        r#"for D in $L $M; do
  echo vfio-pci > /sys/bus/pci/devices/$D/driver_override
  [ -e /sys/bus/pci/devices/$D/driver ] && echo $D > /sys/bus/pci/devices/$D/driver/unbind
  echo $D > /sys/bus/pci/drivers_probe
done
echo "device drivers: legacy $(basename $(readlink /sys/bus/pci/devices/$L/driver)) modern $(basename $(readlink /sys/bus/pci/devices/$M/driver))""#
    } else {
        ""
    };
    // pci-vfio: fwd idles first; its CPU time over one second (all its
    // threads, /proc/PID/stat utime + stime) shows it asleep on the
    // interrupts; then the host's first probe must wake it.
    let fwd = if vfio {
        format!(
            r#"/mnt/host/nfkit fwd pci:$L pci:$M --seconds {secs} > /tmp/fwd.log 2>&1 &
FWD=$!
# its set-up takes seconds under TCG on a loaded host: measure only
# once its data path runs
for i in $(seq 50); do grep -q "data path:" /tmp/fwd.log && break; sleep 0.2; done
sleep {IDLE_SETTLE_SECONDS}
ticks() {{ set -- $(cat /proc/$FWD/stat); echo $((${{14}} + ${{15}})); }}
T0=$(ticks)
sleep 1
T1=$(ticks)
echo "IDLE cpu_ticks=$((T1 - T0))"
echo "STEP fwd"
# the vectors' counts, while fwd still holds them (the frames are in by then)
sleep 10
grep -E 'vfio-(msix|intx)' /proc/interrupts | while read n c rest; do echo "IRQ $c $rest"; done
wait $FWD
R=$?
cat /tmp/fwd.log
(exit $R)"#,
            secs = FWD_SECONDS + IDLE_SETTLE_SECONDS + 1
        )
    } else {
        format!(
            r#"echo "STEP fwd"
/mnt/host/nfkit fwd pci:$L pci:$M --seconds {FWD_SECONDS}"#
        )
    };
    // The device-in-use guard, once (uio mode): the legacy NIC's kernel
    // interface gets an address, and `nfkit fwd` (the free modern NIC
    // named first, so it is taken before the refusal) must fail naming
    // that interface, leave it on its driver, and give the modern NIC
    // back to virtio-pci. The address goes again before the real run,
    // which then binds both NICs without --force.
    let in_use = if vfio {
        ""
    } else {
        r#"IFL=$(ls /sys/bus/pci/devices/$L/virtio*/net/ | head -1)
ip link set $IFL up
ip addr add 10.66.0.1/24 dev $IFL
echo "STEP in-use iface=$IFL"
/mnt/host/nfkit fwd pci:$M pci:$L --seconds 2 > /tmp/inuse.txt 2>&1
echo "STEP in-use exit=$?"
cat /tmp/inuse.txt
grep -q "in use by the kernel: interface $IFL" /tmp/inuse.txt && echo "CHECK in-use named"
echo "CHECK in-use drivers: legacy=$(basename $(readlink /sys/bus/pci/devices/$L/driver)) modern=$(basename $(readlink /sys/bus/pci/devices/$M/driver)) iface=$(ls /sys/bus/pci/devices/$L/virtio*/net/)"
ip addr flush dev $IFL
ip link set $IFL down"#
    };
    format!(
        r#"#!/bin/sh
echo 64 > /proc/sys/vm/nr_hugepages
# nfkit says how it reaches the modern device's registers
export RUST_LOG=nfkit_virtio=debug
find_dev() {{
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor)" = 0x1af4 ] && [ "$(cat $d/device)" = "$1" ] && basename $d
  done | head -1
}}
L=$(find_dev 0x1000)
M=$(find_dev 0x1041)
echo "DEVICES legacy=$L modern=$M"
{in_use}
{bind_vfio}
echo "STEP pktgen"
/mnt/host/nfkit pktgen pci:$L pci:$M --count {PKTGEN_COUNT} --rate-pps {PKTGEN_PPS} --rx
echo "STEP pktgen exit=$?"
{fwd}
echo "STEP fwd exit=$?"
"#
    )
}

/// The checks of a PCI mode; on success, a line of figures.
fn check_pci(console: &str, counts: &wire::Counts, vfio: bool) -> Result<Outcome> {
    if !vfio {
        check_in_use(console)?;
    }
    for step in ["pktgen", "fwd"] {
        if !console.contains(&format!("STEP {step} exit=0")) {
            bail!("`nfkit {step}` did not exit with 0 in the guest");
        }
    }
    if !console.contains("modern registers through mapped BARs") {
        bail!("nfkit did not reach the modern device's registers through its mapped BAR");
    }
    let idle = if vfio {
        check_idle(console)?
    } else {
        String::new()
    };
    // `[Device: pci:X] sent S packets, received R back, ...`, one per
    // NIC in port order.
    let results: Vec<(u64, u64)> = console
        .lines()
        .filter_map(|l| {
            let rest = l.split("] sent ").nth(1)?;
            let mut words = rest.split_whitespace();
            let sent = words.next()?.parse().ok()?;
            let recv = rest.split("received ").nth(1)?;
            let recv = recv.split_whitespace().next()?.parse().ok()?;
            Some((sent, recv))
        })
        .collect();
    if results.len() != 2 {
        bail!("expected nfkit pktgen's result line for both NICs");
    }
    let mostly = |got: u64, of: u64| of > 0 && got * 10 >= of * 8;
    let names = ["legacy", "modern"];
    for (i, &(sent, back)) in results.iter().enumerate() {
        let out = counts.pktgen_out[i];
        eprintln!(
            "  pktgen {} NIC: sent {sent}, the wire saw {out}, {back} came back",
            names[i]
        );
        // UDP socket netdevs under TCG lose a few percent: ask for most.
        if sent != PKTGEN_COUNT || !mostly(out, sent) || !mostly(back, sent) {
            bail!("pktgen on the {} NIC: too few frames", names[i]);
        }
    }
    if !counts.fwd_up {
        bail!("no probe frame crossed nfkit fwd in both directions");
    }
    for i in 0..2 {
        eprintln!(
            "  fwd {} -> {}: injected {}, came out {}",
            names[i],
            names[1 - i],
            counts.injected[i],
            counts.crossed[i]
        );
        if counts.injected[i] != wire::FWD_FRAMES || !mostly(counts.crossed[i], counts.injected[i])
        {
            bail!("fwd {} -> {}: too few frames", names[i], names[1 - i]);
        }
    }
    // A 9,000-byte frame each way through the VirtIO PCI driver (legacy
    // in, modern out, and back): chains both ways, byte-exact.
    for i in 0..2 {
        eprintln!(
            "  fwd {} -> {}: {}-byte frame sent {} times, came out byte-exact {} times{}",
            names[i],
            names[1 - i],
            wire::JUMBO_LEN,
            counts.jumbo_sent[i],
            counts.jumbo_exact[i],
            counts.jumbo_bad[i].map_or(String::new(), |n| format!(", changed ({n} bytes)"))
        );
        if counts.jumbo_exact[i] == 0 || counts.jumbo_bad[i].is_some() {
            bail!(
                "fwd {} -> {}: the {}-byte frame did not cross byte-exact",
                names[i],
                names[1 - i],
                wire::JUMBO_LEN
            );
        }
    }
    Ok(Outcome::Passed(format!(
        "pktgen sent {}/{} back {}/{}, fwd crossed {}/{} of {}, jumbo {}/{}{idle}",
        results[0].0,
        results[1].0,
        results[0].1,
        results[1].1,
        counts.crossed[0],
        counts.crossed[1],
        wire::FWD_FRAMES,
        counts.jumbo_exact[0],
        counts.jumbo_exact[1]
    )))
}

/// pci-vfio: the modern NIC's receive queue got an MSI-X vector and the
/// legacy NIC (no MSI-X) sleeps on its INTx line, idle `nfkit fwd`
/// stayed under [`IDLE_MAX_TICKS`] over a second, and its sleeps were
/// ended by interrupts (the probes that crossed it).
fn check_idle(console: &str) -> Result<String> {
    let count = |what: &str| console.lines().filter(|l| l.contains(what)).count();
    let msix = count("MSI-X: 1 of 1 receive queues signal a vector");
    let intx = count("INTx: the 1 receive queues share the device's line");
    // once per run (pktgen, fwd): as many of each
    if msix == 0 || msix != intx {
        bail!("expected the modern NIC on MSI-X and the legacy NIC on INTx, saw {msix} on MSI-X and {intx} on INTx");
    }
    let ticks: u64 = console
        .lines()
        .find_map(|l| l.trim().strip_prefix("IDLE cpu_ticks="))
        .and_then(|t| t.trim().parse().ok())
        .context("the guest printed no idle CPU time")?;
    eprintln!("  idle nfkit fwd: {ticks} ticks of CPU (1/100 s) over 1 s");
    if ticks > IDLE_MAX_TICKS {
        bail!("idle `nfkit fwd` took {ticks} ticks of CPU in 1 s: it did not sleep");
    }
    // `forwarding thread: busy .. (N sleeps: W woken, ...`
    let woken: u64 = console
        .lines()
        .find_map(|l| {
            l.split("sleeps: ")
                .nth(1)?
                .split(" woken")
                .next()?
                .parse()
                .ok()
        })
        .context("no sleep summary from `nfkit fwd`")?;
    eprintln!("  sleeps ended by an interrupt: {woken}");
    // The host's spaced wake probes (guest/wire.rs) each find fwd asleep:
    // 12 of them (6 per NIC) gave 15 wake-ups; ask for a quarter.
    if woken < 3 {
        bail!("interrupts woke `nfkit fwd` {woken} times, fewer than 3 (12 spaced probes)");
    }
    // `IRQ COUNT ... vfio-msix[0](ADDR)` or `... vfio-intx(ADDR)`, from
    // /proc/interrupts after fwd: each device raised its interrupt.
    let raised = |kind: &str| -> Vec<u64> {
        console
            .lines()
            .filter(|l| l.contains(kind))
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("IRQ ")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    };
    let (msix, intx) = (raised("vfio-msix"), raised("vfio-intx"));
    eprintln!("  interrupts raised: MSI-X (modern) {msix:?}, INTx (legacy) {intx:?}");
    if msix.len() != 1 || intx.len() != 1 || msix.contains(&0) || intx.contains(&0) {
        bail!("expected the modern device to raise MSI-X and the legacy one INTx, saw MSI-X {msix:?}, INTx {intx:?}");
    }
    Ok(format!(
        ", idle {ticks}/100 s of CPU, {woken} interrupt wake-ups, MSI-X raised {msix:?}, INTx {intx:?}"
    ))
}

/// The device-in-use step of the uio mode (see `pci_script`).
fn check_in_use(console: &str) -> Result<()> {
    let iface = console
        .lines()
        .find_map(|l| l.trim().strip_prefix("STEP in-use iface="))
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .context("the guest found no kernel interface on the legacy NIC")?;
    if console.contains("STEP in-use exit=0") {
        bail!("`nfkit fwd` took a NIC whose interface {iface} has an address");
    }
    if !console.contains("CHECK in-use named") {
        bail!("`nfkit fwd` on a NIC in use did not name its interface {iface}");
    }
    let want = format!("CHECK in-use drivers: legacy=virtio-pci modern=virtio-pci iface={iface}");
    if !console.lines().any(|l| l.trim() == want) {
        bail!("after the refusal the NICs were not both on virtio-pci with {iface} in place");
    }
    eprintln!("  in-use guard: refused the NIC of {iface}, both NICs back on virtio-pci");
    Ok(())
}

/// Paths of a built guest image.
struct Image {
    kernel: PathBuf,
    initrd: PathBuf,
    share: PathBuf,
}

fn guest_dir() -> PathBuf {
    PathBuf::from("target/guest")
}

fn build_image() -> Result<Image> {
    install_packages()?;
    let dir = guest_dir();
    fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let (kroot, kver) = unpack_kernel(&dir)?;
    let initrd = dir.join("initrd.gz");
    // Rebuilt when the module list changed since it was built.
    let stamp = dir.join("initrd.modules");
    let wanted = format!("{} / {}", MODULES.join(" "), ON_DEMAND_MODULES.join(" "));
    if !initrd.exists() || fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        build_initramfs(&dir, &kroot, &kver)?;
        fs::write(&stamp, &wanted)?;
    }
    let share = dir.join("share");
    fs::create_dir_all(&share)?;
    Ok(Image {
        kernel: kroot.join(format!("boot/vmlinuz-{kver}")),
        initrd,
        share,
    })
}

/// Download and unpack the kernel `linux-image-amd64` depends on.
fn unpack_kernel(dir: &Path) -> Result<(PathBuf, String)> {
    let kroot = dir.join("kroot");
    if let Some(kver) = installed_kver(&kroot) {
        return Ok((kroot, kver));
    }
    let deps = output(Command::new("apt-cache").args(["depends", "linux-image-amd64"]))?;
    let pkg = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
        .context("apt-cache names no linux-image-*-amd64 package: run `apt-get update`")?
        .to_string();
    let debs = dir.join("debs");
    fs::create_dir_all(&debs)?;
    run(Command::new("apt-get")
        .args(["download", &pkg])
        .current_dir(&debs))?;
    let deb = fs::read_dir(&debs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&pkg))
        })
        .context("apt-get download left no .deb")?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&kroot))?;
    let kver =
        installed_kver(&kroot).context("the kernel package has no /lib/modules/<version>")?;
    // The .deb ships no modules.dep; modprobe -d needs one.
    run(Command::new("depmod").arg("-b").arg(&kroot).arg(&kver))?;
    Ok((kroot, kver))
}

fn installed_kver(kroot: &Path) -> Option<String> {
    let modules = kroot.join("lib/modules");
    let kver = fs::read_dir(modules)
        .ok()?
        .filter_map(|e| e.ok())
        .next()?
        .file_name();
    let kver = kver.to_str()?.to_string();
    kroot
        .join(format!("boot/vmlinuz-{kver}"))
        .exists()
        .then_some(kver)
}

const INIT: &str = r#"#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages
for m in MODULES; do modprobe $m; done
for arg in $(cat /proc/cmdline); do
  case $arg in
    share=*) mkdir -p /mnt/host; mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 ${arg#share=} /mnt/host ;;
    rdscript=*) SCRIPT=${arg#rdscript=} ;;
  esac
done
if [ -n "$SCRIPT" ]; then
  echo "GUEST-START"
  sh "$SCRIPT"
  echo "GUEST-END"
  poweroff -f
fi
exec setsid cttyhack sh
"#;

fn build_initramfs(dir: &Path, kroot: &Path, kver: &str) -> Result<()> {
    let root = dir.join("initramfs");
    let _ = fs::remove_dir_all(&root);
    for d in [
        "bin",
        "sbin",
        "proc",
        "sys",
        "dev",
        "tmp",
        "mnt",
        "lib/modules",
    ] {
        fs::create_dir_all(root.join(d))?;
    }
    let busybox = which("busybox").context("busybox-static is not installed")?;
    fs::copy(&busybox, root.join("bin/busybox"))?;
    for applet in output(Command::new(&busybox).arg("--list"))?.lines() {
        // A `busybox` symlink would replace the binary with a self-link.
        if applet != "busybox" && !applet.is_empty() {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
    }
    for m in MODULES.iter().chain(ON_DEMAND_MODULES) {
        let deps = output(Command::new("modprobe").arg("-d").arg(kroot).args([
            "-S",
            kver,
            "--show-depends",
            m,
        ]))?;
        for ko in deps.lines().filter_map(|l| l.strip_prefix("insmod ")) {
            let ko = Path::new(ko.split_whitespace().next().unwrap_or(""));
            let rel = ko.strip_prefix(kroot).unwrap_or(ko);
            let rel = rel.strip_prefix("/").unwrap_or(rel);
            let dst = root.join(rel);
            fs::create_dir_all(dst.parent().context("module path")?)?;
            fs::copy(ko, &dst).with_context(|| format!("copying {}", ko.display()))?;
        }
    }
    run(Command::new("depmod").arg("-b").arg(&root).arg(kver))?;
    let init = root.join("init");
    fs::write(&init, INIT.replace("MODULES", &MODULES.join(" ")))?;
    run(Command::new("chmod").arg("755").arg(&init))?;
    let cpio = format!(
        "cd {} && find . | cpio -o -H newc --quiet | gzip -1 > {}",
        root.display(),
        dir.join("initrd.gz").display()
    );
    run(Command::new("sh").args(["-c", &cpio]))
}

/// The `nfkit` the workspace's debug test build makes (its tests run
/// it), built if need be: after `cargo xtask test`'s debug tests nothing
/// is compiled here. Host-side modes run it as it is; the guest gets it
/// through [`share_nfkit`]. (A static build of its own, with other
/// `RUSTFLAGS`, compiled nfkit's whole dependency tree a third time;
/// `cargo build -p nfkit` alone resolves other features and would
/// replace the binary the tests use.)
fn build_nfkit() -> Result<PathBuf> {
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .envs(crate::debug_env()?)
            .args(["test", "--workspace", "--no-run", "--quiet"]),
    )?;
    let bin = crate::target_base().join("debug/nfkit");
    bin.canonicalize()
        .with_context(|| format!("{} was not built", bin.display()))
}

/// Put `nfkit` into the share for the guest, whose userland is busybox
/// with no C library: the binary as `nfkit.bin`, every shared library
/// `ldd` names (libc, libpcap and what it loads) and the dynamic loader
/// in `lib/`, and `/mnt/host/nfkit`, a script that starts the binary
/// through that loader with that library path.
fn share_nfkit(bin: &Path, share: &Path) -> Result<()> {
    let lib = share.join("lib");
    let _ = fs::remove_dir_all(&lib);
    fs::create_dir_all(&lib)?;
    let mut loader = None;
    for line in output(Command::new("ldd").arg(bin))?.lines() {
        // "libc.so.6 => /lib/.../libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let Some(path) = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(Path::new)
        else {
            continue;
        };
        let name = path
            .file_name()
            .context("a library path with no file name")?;
        fs::copy(path, lib.join(name))
            .with_context(|| format!("copying {} into the share", path.display()))?;
        if name.to_string_lossy().starts_with("ld-linux") {
            loader = Some(name.to_string_lossy().into_owned());
        }
    }
    let loader = loader.context("ldd names no dynamic loader for nfkit")?;
    fs::copy(bin, share.join("nfkit.bin")).context("copying nfkit into the share")?;
    let script = share.join("nfkit");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec /mnt/host/lib/{loader} --library-path /mnt/host/lib /mnt/host/nfkit.bin \"$@\"\n"
        ),
    )?;
    run(Command::new("chmod").arg("755").arg(&script))
}

/// QEMU under TCG with the serial console on stdout and the share over
/// 9p; `append` is added to the kernel command line.
fn qemu_base(img: &Image, script: Option<&str>, append: &str) -> Command {
    let mut cmdline = format!("console=ttyS0 quiet share=hostshare {append}");
    if let Some(s) = script {
        cmdline.push_str(&format!(" rdscript={s}"));
    }
    let mut c = Command::new("qemu-system-x86_64");
    c.args([
        "-accel",
        "tcg",
        "-smp",
        "1",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
    ])
    .arg("-kernel")
    .arg(&img.kernel)
    .arg("-initrd")
    .arg(&img.initrd)
    .args(["-append", &cmdline])
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=hostshare,security_model=none",
        img.share.display()
    ));
    c
}

/// The PCI modes' guest: the legacy NIC on `netdevs[0]`, the modern one
/// on `netdevs[1]` (UDP socket netdev arguments).
fn pci_qemu(img: &Image, script: Option<&str>, viommu: bool, netdevs: &[String; 2]) -> Command {
    let mut c = qemu_base(img, script, if viommu { "intel_iommu=on" } else { "" });
    c.args(["-m", "1024"])
        .args(["-netdev", &format!("socket,id=n0,{}", netdevs[0])])
        .args([
            "-device",
            // pci-vfio: no MSI-X on the legacy NIC, so its INTx is used
            if viommu {
                "virtio-net-pci,netdev=n0,disable-modern=on,romfile=,vectors=0"
            } else {
                "virtio-net-pci,netdev=n0,disable-modern=on,romfile="
            },
        ])
        .args(["-netdev", &format!("socket,id=n1,{}", netdevs[1])])
        .args([
            "-device",
            &format!(
                "virtio-net-pci,netdev=n1,disable-legacy=on,romfile={}",
                // Behind the vIOMMU the device must translate its DMA.
                if viommu {
                    ",iommu_platform=on,ats=on"
                } else {
                    ""
                }
            ),
        ]);
    if viommu {
        // An emulated IOMMU for VFIO; 48-bit addresses so IOVA = VA.
        c.args([
            "-machine",
            "q35",
            "-device",
            "intel-iommu,intremap=on,aw-bits=48",
        ]);
    }
    c
}

/// Boot the guest with `cmd`, hand each console line to `on_line` as it
/// comes, and return the whole console once the guest powers off. The
/// guest is killed (by its process id) after [`GUEST_TIMEOUT`].
fn run_guest(mut cmd: Command, mut on_line: impl FnMut(&str)) -> Result<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (done, timed_out) = (done.clone(), timed_out.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            while !done.load(Ordering::Acquire) {
                if started.elapsed() > GUEST_TIMEOUT {
                    timed_out.store(true, Ordering::Release);
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut console = String::new();
    let mut reader = std::io::BufReader::new(child.stdout.take().context("qemu stdout")?);
    let mut raw = Vec::new();
    while reader.read_until(b'\n', &mut raw).unwrap_or(0) > 0 {
        let line = String::from_utf8_lossy(&raw).replace('\r', "");
        on_line(line.trim_end());
        console.push_str(&line);
        raw.clear();
    }
    let status = child.wait()?;
    done.store(true, Ordering::Release);
    let _ = watchdog.join();
    if timed_out.load(Ordering::Acquire) {
        bail!("the guest did not power off within {GUEST_TIMEOUT:?}; console:\n{console}");
    }
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        bail!("qemu exited with {status}: {err}\nconsole:\n{console}");
    }
    Ok(console)
}

fn install_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(c, _)| !have(c))
        .map(|(_, p)| *p)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages {missing:?}: install them (as root: apt-get install {})",
            missing.join(" ")
        );
    }
    run(Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing))
}

fn have(cmd: &str) -> bool {
    which(cmd).is_some()
}

fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u"))
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = crate::to_lane_log(cmd)
        .status()
        .with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
