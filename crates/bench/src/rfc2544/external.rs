//! The DUTs that are not nfkit, as yardsticks on the same wiring:
//!
//! - **`testpmd:io`, `testpmd:macswap`**: DPDK's `dpdk-testpmd` with one
//!   forwarding lcore on the DUT's core (its main lcore, which only
//!   prints statistics once a second, beside it), over two `net_vhost`
//!   ports (vhost-user; the tester connects nfkit `virtio-user:`
//!   frontends) or two `net_af_packet` ports on veth ends.
//! - **`kernel:forward`, `kernel:bridge`, `kernel:nat`**: the Linux
//!   kernel in a namespace this run makes, holding the DUT's ends of two
//!   veth pairs: IPv4 forwarding between two subnets (a permanent
//!   neighbour entry for the tester's address, so no ARP), a bridge of
//!   the two ends, or the forwarding with nftables masquerade on the
//!   outside end (the NAT peer of nfkit's `nat`: connection tracking and
//!   a source rewrite per packet; needs `nft`, Debian's nftables). The
//!   kernel has no thread of its own: its work is softirq time on
//!   whichever core sends into the veth, shown in the CPU columns.
//!
//! Everything made here (veths, namespace, hugepages, testpmd's runtime
//! files) is undone when the run ends, whatever way it ends.

use super::dut::{Dut, DutKind, Running, Wiring};
use super::tester::Tester;
use crate::testpmd::{on_path, tail, DpdkEnv, TestpmdError, HUGEPAGES, TESTPMD};
use anyhow::{bail, Context, Result};
use nfkit_lab::pktgen::GenConfig;
use nfkit_lab::{registry, SimLab, SimWire};
use nfkit_port::{OpenOptions, Port};
use nfkit_testkit::{Netns, Veth};
use parking_lot::Mutex;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the kernel DUT does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelMode {
    /// IPv4 forwarding (routing) between two subnets.
    Forward,
    /// A Linux bridge of the two ends.
    Bridge,
    /// IPv4 forwarding with nftables masquerade out of the second end.
    Nat,
}

impl KernelMode {
    pub fn name(self) -> &'static str {
        match self {
            KernelMode::Forward => "forward",
            KernelMode::Bridge => "bridge",
            KernelMode::Nat => "nat",
        }
    }
}

/// How long testpmd may take to start forwarding.
const START_LIMIT: Duration = Duration::from_secs(30);
/// Mbufs of testpmd's pool (its default sizes for hardware rings).
const MBUFS: usize = 16384;

/// Two veth pairs: `a` ends are the DUT's, `b` ends the tester's.
pub struct Veths {
    pairs: [Veth; 2],
}

impl Veths {
    /// Both pairs, up, with IPv6 off on every end (no router or
    /// neighbour solicitations among the measured frames).
    pub fn new() -> Result<Veths> {
        let pairs = [
            Veth::new().context("making the veth wiring (needs root)")?,
            Veth::new().context("making the veth wiring (needs root)")?,
        ];
        for v in &pairs {
            for end in [&v.a, &v.b] {
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{end}/disable_ipv6"), "1");
            }
        }
        Ok(Veths { pairs })
    }

    pub fn dut_ends(&self) -> [&str; 2] {
        [&self.pairs[0].a, &self.pairs[1].a]
    }

    pub fn tester_ends(&self) -> [&str; 2] {
        [&self.pairs[0].b, &self.pairs[1].b]
    }

    /// nfkit's ports on the DUT's ends.
    pub fn dut_specs(&self) -> [String; 2] {
        self.dut_ends().map(|e| format!("afpacket:{e}"))
    }

    /// nfkit's ports on the tester's ends.
    pub fn tester_specs(&self) -> [String; 2] {
        self.tester_ends().map(|e| format!("afpacket:{e}"))
    }
}

/// An interface's MAC from sysfs (in this namespace).
fn mac_of(iface: &str) -> Result<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .with_context(|| format!("reading the MAC of {iface}"))?;
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("{iface}: `{}` is not a MAC", text.trim());
    }
    for (m, p) in mac.iter_mut().zip(parts) {
        *m =
            u8::from_str_radix(p, 16).with_context(|| format!("{iface}: MAC `{}`", text.trim()))?;
    }
    Ok(mac)
}

fn mac_text(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// A DUT process and whatever the run set up for the DUT, undone on
/// drop (the process first).
pub struct External {
    child: Mutex<Option<Child>>,
    log: Option<PathBuf>,
    prefix: Option<String>,
    _env: Option<DpdkEnv>,
    _veths: Option<Veths>,
    _ns: Option<Netns>,
}

impl External {
    /// Only the wiring (an nfkit DUT on veth).
    pub fn wiring(veths: Veths) -> External {
        External {
            child: Mutex::new(None),
            log: None,
            prefix: None,
            _env: None,
            _ns: None,
            _veths: Some(veths),
        }
    }

    /// Whether the DUT process ended.
    pub fn ended(&self) -> bool {
        self.child
            .lock()
            .as_mut()
            .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
    }

    fn log_tail(&self) -> String {
        self.log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .map(|t| tail(&t, 15))
            .unwrap_or_default()
    }

    /// SIGINT to the process (SIGKILL after 10 s); an error if it had
    /// ended by itself before.
    pub fn stop(self) -> Result<()> {
        let Some(mut child) = self.child.lock().take() else {
            return Ok(());
        };
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "the DUT process ended by itself ({status}); its last lines:\n{}",
                self.log_tail()
            );
        }
        halt(&mut child);
        Ok(())
    }
}

fn halt(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for External {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.lock().take() {
            halt(&mut c);
        }
        if let Some(l) = &self.log {
            let _ = std::fs::remove_file(l);
        }
        if let Some(p) = &self.prefix {
            let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(p));
        }
    }
}

/// The tester's two ports from their specs.
pub fn tester_ports(specs: &[String; 2]) -> Result<[Box<dyn Port>; 2]> {
    let reg = registry(SimLab::new(SimWire::Open, 1), 1);
    let opts = OpenOptions::default();
    let open = |s: &str| {
        reg.open_str(s, &opts)
            .with_context(|| format!("the tester's port {s}"))
    };
    Ok([open(&specs[0])?, open(&specs[1])?])
}

/// Start an external DUT on `wiring`, its forwarding on `core`.
pub fn start(dut: &Dut, wiring: Wiring, dir: &Path, core: usize) -> Result<(Running, Tester)> {
    match &dut.kind {
        DutKind::Testpmd(mode) => testpmd(mode, wiring, dir, core),
        DutKind::Kernel(k) => kernel(*k, wiring),
        _ => bail!("{} is not an external DUT", dut.name()),
    }
}

fn testpmd(mode: &str, wiring: Wiring, dir: &Path, core: usize) -> Result<(Running, Tester)> {
    if !on_path(TESTPMD) {
        bail!(TestpmdError::NotInstalled);
    }
    let env = DpdkEnv::prepare(HUGEPAGES)?;
    let socks = [dir.join("pmd0.sock"), dir.join("pmd1.sock")];
    let (vdevs, tester_specs, veths) = match wiring {
        Wiring::Vhost => {
            for s in &socks {
                let _ = std::fs::remove_file(s);
            }
            (
                [0, 1].map(|i| format!("net_vhost{i},iface={}", socks[i].display())),
                socks
                    .clone()
                    .map(|s| format!("virtio-user:{}", s.display())),
                None,
            )
        }
        Wiring::Veth => {
            let v = Veths::new()?;
            let ends = v.dut_ends();
            (
                [0, 1].map(|i| format!("net_af_packet{i},iface={}", ends[i])),
                v.tester_specs(),
                Some(v),
            )
        }
        Wiring::Sim => bail!("testpmd runs on vhost-user or veth, not on the simulated 82599"),
    };
    let prefix = format!("nfkit-rfc2544-{}-{}", std::process::id(), mode);
    let log = dir.join(format!("{prefix}.log"));
    let out = std::fs::File::create(&log)?;
    let mut c = Command::new(TESTPMD);
    c.args(["--lcores", &format!("0@{core},1@{core}"), "-n", "1"])
        .args(["--no-pci", "--in-memory", "--single-file-segments"])
        .args(["--file-prefix", &prefix])
        .args(["--log-level", "pmd.net.af_packet:error"]);
    for v in &vdevs {
        c.args(["--vdev", v]);
    }
    c.arg("--")
        .arg(format!("--forward-mode={mode}"))
        .args(["--auto-start", "--stats-period", "1", "--no-flush-rx"])
        .args(["--nb-cores=1", &format!("--total-num-mbufs={MBUFS}")]);
    let command = format!("{c:?}");
    let child = c
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {TESTPMD}"))?;
    let pid = child.id();
    let ext = External {
        child: Mutex::new(Some(child)),
        log: Some(log.clone()),
        prefix: Some(prefix),
        _env: Some(env),
        _ns: None,
        _veths: veths,
    };
    // testpmd prints its first statistics block once forwarding started
    // (a frontend that connects before may lose its first frames).
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Port statistics") {
            break;
        }
        if ext.ended() || started.elapsed() > START_LIMIT {
            bail!(
                "testpmd ({mode}) did not start forwarding within {START_LIMIT:?}: {command}\nits last lines:\n{}",
                tail(&text, 15)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ports = tester_ports(&tester_specs)?;
    let task = worker_task(pid);
    Ok((Running::process(ext, task, None), Tester::ports(ports)))
}

/// testpmd's forwarding thread (`rte-worker-N` or `lcore-worker-N`).
fn worker_task(pid: u32) -> Option<PathBuf> {
    let dir = PathBuf::from(format!("/proc/{pid}/task"));
    std::fs::read_dir(&dir).ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        comm.contains("worker").then(|| e.path())
    })
}

/// The kernel's addresses: the tester's side, the DUT's side, the
/// tester's receiving side.
const TESTER_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 2);
const SINK_IP: Ipv4Addr = Ipv4Addr::new(10, 250, 1, 2);

/// The masquerade ruleset of `kernel:nat`, for the outside end `out`.
fn nat_ruleset(out: &str) -> String {
    format!(
        "table ip nfkit_nat {{\n  chain postrouting {{\n    \
         type nat hook postrouting priority srcnat; policy accept;\n    \
         oifname \"{out}\" masquerade\n  }}\n}}\n"
    )
}

fn kernel(mode: KernelMode, wiring: Wiring) -> Result<(Running, Tester)> {
    if wiring != Wiring::Veth {
        bail!("the kernel DUT runs on --wiring veth");
    }
    if mode == KernelMode::Nat && !on_path("nft") {
        bail!("kernel:nat needs `nft` (Debian's nftables: apt-get install nftables)");
    }
    let ns = Netns::new().context("making the kernel DUT's namespace (needs root)")?;
    let v = Veths::new()?;
    let [d0, d1] = v.dut_ends().map(String::from);
    let [t0, t1] = v.tester_ends().map(String::from);
    let (d0_mac, t0_mac, t1_mac) = (mac_of(&d0)?, mac_of(&t0)?, mac_of(&t1)?);
    ns.run(&[
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ])?;
    for d in [&d0, &d1] {
        nfkit_testkit::ip(&["link", "set", d, "netns", ns.name()])?;
    }
    let mut gen = GenConfig {
        src_mac: t0_mac,
        ..GenConfig::default()
    };
    match mode {
        KernelMode::Forward | KernelMode::Nat => {
            ns.run(&[
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
            ])?;
            ns.run(&["ip", "addr", "add", "10.250.0.1/24", "dev", &d0])?;
            ns.run(&["ip", "addr", "add", "10.250.1.1/24", "dev", &d1])?;
            for d in [&d0, &d1] {
                ns.run(&["ip", "link", "set", d, "up"])?;
            }
            ns.run(&[
                "ip",
                "neigh",
                "replace",
                &SINK_IP.to_string(),
                "lladdr",
                &mac_text(t1_mac),
                "dev",
                &d1,
                "nud",
                "permanent",
            ])?;
            if mode == KernelMode::Nat {
                let rules = std::env::temp_dir()
                    .join(format!("nfkit-rfc2544-{}-nat.nft", std::process::id()));
                std::fs::write(&rules, nat_ruleset(&d1))?;
                let r = ns.run(&["nft", "-f", &rules.to_string_lossy()]);
                let _ = std::fs::remove_file(&rules);
                r.context("loading the masquerade ruleset with nft")?;
            }
            gen.dst_mac = d0_mac;
            gen.src_ip = TESTER_IP;
            gen.dst_ip = SINK_IP;
        }
        KernelMode::Bridge => {
            ns.run(&["ip", "link", "add", "br0", "type", "bridge"])?;
            for d in [&d0, &d1] {
                ns.run(&["ip", "link", "set", d, "master", "br0"])?;
                ns.run(&["ip", "link", "set", d, "up"])?;
            }
            ns.run(&["ip", "link", "set", "br0", "up"])?;
            gen.dst_mac = t1_mac;
        }
    }
    let ports = tester_ports(&v.tester_specs())?;
    let ext = External {
        child: Mutex::new(None),
        log: None,
        prefix: None,
        _env: None,
        _veths: Some(v),
        _ns: Some(ns),
    };
    Ok((Running::process(ext, None, Some(gen)), Tester::ports(ports)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yardsticks_parse_and_take_their_wirings() {
        let pmd = Dut::parse("testpmd:macswap").unwrap();
        assert_eq!(pmd.name(), "testpmd-macswap");
        let k = Dut::parse("kernel:bridge").unwrap();
        assert_eq!(k.kind, DutKind::Kernel(KernelMode::Bridge));
        assert!(Wiring::Veth.takes(&k) && !Wiring::Vhost.takes(&k) && !Wiring::Sim.takes(&k));
        assert!(Wiring::Vhost.takes(&pmd) && Wiring::Veth.takes(&pmd) && !Wiring::Sim.takes(&pmd));
        let nat = Dut::parse("kernel:nat").unwrap();
        assert_eq!(nat.name(), "kernel-nat");
        assert!(Wiring::Veth.takes(&nat) && !Wiring::Vhost.takes(&nat));
        for bad in ["testpmd:rxonly", "kernel:masquerade", "kernel"] {
            assert!(Dut::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_nat_ruleset_masquerades_out_of_the_outside_end() {
        let r = nat_ruleset("veth7a");
        assert!(
            r.contains("type nat hook postrouting priority srcnat"),
            "{r}"
        );
        assert!(r.contains("oifname \"veth7a\" masquerade"), "{r}");
    }
}
