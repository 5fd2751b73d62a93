//! The QEMU guest harness: boots a small Linux VM under TCG with two
//! VirtIO-net PCI devices (one legacy, `disable-modern=on`, 1af4:1000;
//! one modern, `disable-legacy=on`, 1af4:1041), paired back to back by
//! UDP socket netdevs, and runs nfkit's driver inside it.
//!
//! Everything is built under `target/guest/`:
//!
//! - `kroot/`: the Debian kernel package, unpacked (`apt-get download`,
//!   `dpkg -x`, `depmod`);
//! - `initrd.gz`: static busybox, the module closure of the drivers the
//!   test needs (`modprobe -S --show-depends`), and an `/init` that
//!   mounts what is needed, loads the modules, mounts the 9p share and
//!   runs the script named on the kernel command line, then powers off;
//! - `share/`: shared with the guest over 9p: the statically linked test
//!   binary and the test script.
//!
//! Results come back on the serial console (QEMU's stdout): lines
//! starting with `RESULT` or `CHECK`. KVM does not work on this machine
//! (see the environment notes), so the guest runs under TCG: a boot, run
//! and power-off cycle takes seconds.
//!
//! `cargo xtask guest build`: only build the kernel and initramfs;
//! `cargo xtask guest run [legacy-uio]`: build, boot, run, check;
//! `cargo xtask guest shell`: boot to an interactive shell.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Kernel modules the guest needs (their dependencies come along).
const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "uio_pci_generic",
    "vfio-pci",
    "vfio_iommu_type1",
    "9pnet_virtio",
    "9p",
];

/// Debian packages the harness uses, by the command that proves each.
const PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
    ("modprobe", "kmod"),
];

/// How long one guest run may take (boot + test + power-off).
const GUEST_TIMEOUT: Duration = Duration::from_secs(240);

/// The in-guest modes the harness can run.
const MODES: &[&str] = &["legacy-uio", "modern-uio", "modern-vfio"];

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
                MODES.to_vec()
            };
            run_modes(&modes)
        }
        Some("shell") => {
            let img = build_image()?;
            let status = qemu(&img, None, false).stdin(Stdio::inherit()).status()?;
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
    run_modes(MODES)
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
    let img = build_image()?;
    let bin = build_test_binary()?;
    fs::copy(&bin, img.share.join("guest_selftest"))?;
    let mut failed = Vec::new();
    for mode in modes {
        let started = Instant::now();
        let script = test_script(mode)?;
        fs::write(img.share.join("run.sh"), script)?;
        let out = run_guest(&img, mode.ends_with("vfio"))?;
        let ok = check_output(mode, &out);
        eprintln!(
            "guest {mode}: {} in {:.1?}",
            if ok { "ok" } else { "FAILED" },
            started.elapsed()
        );
        if !ok {
            eprintln!("--- serial console ---\n{out}\n--- end ---");
            failed.push(*mode);
        }
    }
    if !failed.is_empty() {
        bail!("guest tests failed: {}", failed.join(", "));
    }
    Ok(())
}

/// What the guest printed must show traffic both ways.
fn check_output(mode: &str, out: &str) -> bool {
    let result = out.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("RESULT {mode} "))
            .map(str::to_string)
    });
    let Some(result) = result else { return false };
    let field = |name: &str| -> u64 {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let peer_rx: u64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("CHECK peer_rx="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    eprintln!(
        "guest {mode}: driver sent {} received {}; the peer NIC received {peer_rx}",
        field("tx"),
        field("rx")
    );
    // UDP socket netdevs under TCG lose a few percent: ask for most.
    field("tx") > 0 && peer_rx * 10 >= field("tx") * 8 && field("rx") > 0
}

/// The script the guest runs for `mode`. The peer NIC (the modern
/// device, left to the kernel's virtio_net) counts what our driver
/// sends and sends ARP broadcasts for it to receive.
fn test_script(mode: &str) -> Result<String> {
    // The peer is the other device, left to the kernel's virtio_net; it
    // counts what our driver sends and sends ARP broadcasts back.
    let peer = match mode {
        "legacy-uio" => "0x1041",
        "modern-uio" | "modern-vfio" => "0x1000",
        other => bail!("unknown guest mode `{other}`"),
    };
    Ok(format!(
        r#"#!/bin/sh
echo 64 > /proc/sys/vm/nr_hugepages
PEER=$(for d in /sys/class/net/*; do [ "$(cat $d/device/../device 2>/dev/null)" = "{peer}" ] && basename $d; done | head -1)
echo "peer interface: $PEER"
ip link set "$PEER" up
ip addr add 10.99.0.1/24 dev "$PEER"
BEFORE=$(cat /sys/class/net/$PEER/statistics/rx_packets)
/mnt/host/guest_selftest {mode} 1000 8 &
PID=$!
sleep 4
arping -c 20 -w 3 -I "$PEER" 10.99.0.2 >/dev/null 2>&1
wait $PID
echo "exit status $?"
AFTER=$(cat /sys/class/net/$PEER/statistics/rx_packets)
echo "CHECK peer_rx=$((AFTER - BEFORE))"
"#
    ))
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
    if !initrd.exists() {
        build_initramfs(&dir, &kroot, &kver)?;
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
    for m in MODULES {
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

/// Build the in-guest test program, statically linked.
fn build_test_binary() -> Result<PathBuf> {
    let target_dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let target_dir = PathBuf::from(target_dir).join("guest-build");
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env("CARGO_TARGET_DIR", &target_dir)
            .args([
                "build",
                "--target",
                "x86_64-unknown-linux-gnu",
                "-p",
                "nfkit-virtio",
                "--example",
                "guest_selftest",
            ]),
    )?;
    Ok(target_dir.join("x86_64-unknown-linux-gnu/debug/examples/guest_selftest"))
}

/// The QEMU command line: TCG, serial console on stdout, the two NICs
/// paired by UDP sockets on loopback, the share over 9p.
fn qemu(img: &Image, script: Option<&str>, viommu: bool) -> Command {
    let base = 20000 + (std::process::id() % 10000) as u16 * 2;
    let (a, b) = (base, base + 1);
    let mut append = "console=ttyS0 quiet share=hostshare".to_string();
    if viommu {
        append.push_str(" intel_iommu=on");
    }
    if let Some(s) = script {
        append.push_str(&format!(" rdscript={s}"));
    }
    let mut c = Command::new("qemu-system-x86_64");
    c.args([
        "-accel",
        "tcg",
        "-m",
        "1024",
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
    .args(["-append", &append])
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=hostshare,security_model=none",
        img.share.display()
    ))
    .args([
        "-netdev",
        &format!("socket,id=n0,udp=127.0.0.1:{b},localaddr=127.0.0.1:{a}"),
    ])
    .args([
        "-device",
        "virtio-net-pci,netdev=n0,disable-modern=on,romfile=",
    ])
    .args([
        "-netdev",
        &format!("socket,id=n1,udp=127.0.0.1:{a},localaddr=127.0.0.1:{b}"),
    ])
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

/// Boot the guest on `run.sh` and return its console output.
fn run_guest(img: &Image, viommu: bool) -> Result<String> {
    let mut child = qemu(img, Some("/mnt/host/run.sh"), viommu)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let mut stdout = child.stdout.take().context("qemu stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if started.elapsed() > GUEST_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the guest did not power off within {GUEST_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(reader.join().unwrap_or_default())
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
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
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
