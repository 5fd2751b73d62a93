//! `nfkit bench offloads`: SoftNIC's Table 1 (§6.1) on this machine
//! (issue 19). TCP over VXLAN between two namespaces, the same run:
//!
//! - **kernel**: namespace A's kernel `vxlan` device over a veth to
//!   namespace B's (the host stack both ways);
//! - **nfkit**: A's TCP through a TAP with vnet headers and TSO
//!   negotiated (`tap:NAME,tso=1`: the kernel hands nfkit its 64 KB
//!   frames and takes coalesced ones back), nfkit's `VXLANEncap` and
//!   software `TSO` onto the veth to B's kernel `vxlan`; back,
//!   `VXLANDecap` and `LRO` (one pipeline worker). The veth's port is
//!   `afpacket:VETH,tso=1`: B's GSO super-frames (underlay `defaults`)
//!   come in whole and go to the TAP as they are.
//!
//! B is the kernel's VXLAN in both, so the rows differ only in A's
//! side. Each direction is one iperf3 transfer of a fixed byte count:
//! A -> B is A's transmit (kernel GSO or nfkit's TSO), B -> A its
//! receive (kernel GRO or nfkit's LRO).
//!
//! The underlay is measured two ways: `wire`, where the veth carries
//! what a wire does (the transmitting veth ends' segmentation offloads
//! off, so every frame on it is at most the MTU, and GRO on at the
//! kernel's receiving ends as a NIC driver has it), SoftNIC's setting;
//! and `defaults`, the veths as created, where the kernel hands 64 KB
//! GSO frames through the veth unsegmented (no wire could).
//!
//! CPU: cycles per byte of every participating thread, at the nominal
//! clock (`cpu MHz` in /proc/cpuinfo; this machine has no PMU): the
//! iperf3 sender and receiver (their user and system time, from this
//! process's waited-for children), the kernel's softirq time on every
//! CPU (/proc/stat, less its rate in the half second before the
//! transfer: the machine is shared), and nfkit's worker counted at 100%
//! of its core for the transfer's wall time, as SoftNIC counted its
//! cores (its measured share is printed beside). Bits per cycle =
//! 8 / total cycles per byte; the ratio is nfkit's over the kernel's.
//!
//! The 82599 half: driver instructions per 64 KB TSO send (lock step,
//! callgrind, the model's segmentation excluded; [`crate::drivers`]).

use anyhow::{anyhow, bail, Context, Result};
use nfkit_pipeline::Pipeline;
use nfkit_port::{OpenOptions, PortSpec};
use nfkit_testkit::vxlan::{kernel_vxlan_end, mac_of, overlay_nfk};
use nfkit_testkit::{Netns, Veth};
use std::time::{Duration, Instant};

/// How the underlay veth is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Underlay {
    /// Frames on the veth at most the MTU (transmit segmentation offloads
    /// off), GRO on where the kernel receives: a wire and a NIC.
    Wire,
    /// The veths as created (64 KB GSO frames cross them whole).
    Defaults,
}

impl Underlay {
    fn name(self) -> &'static str {
        match self {
            Underlay::Wire => "wire",
            Underlay::Defaults => "defaults",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Kernel,
    Nfkit,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Kernel => "kernel VXLAN",
            Path::Nfkit => "nfkit VXLAN+TSO/LRO, TAP",
        }
    }
}

pub struct Options {
    /// Bytes per transfer (iperf3 `-n`, K/M/G suffixes).
    pub bytes: String,
    /// Parallel TCP streams (iperf3 `-P`).
    pub streams: usize,
    pub underlays: Vec<Underlay>,
    /// 82599 TSO sends under callgrind (0: skip).
    pub sends: u64,
}

/// One transfer's figures.
#[derive(Debug, Clone)]
pub struct Row {
    pub underlay: Underlay,
    pub path: Path,
    /// true: A -> B (A transmits), false: B -> A.
    pub tx: bool,
    pub gbps: f64,
    pub bytes: u64,
    pub wall: Duration,
    pub sender_cpu: Duration,
    pub receiver_cpu: Duration,
    pub softirq_cpu: Duration,
    /// nfkit's worker: its measured CPU time (counted at 100% of `wall`).
    pub nfkit_cpu: Option<Duration>,
    /// Mean frame on the veth in the data's direction (bytes).
    pub veth_frame: f64,
    /// TSO: super-frames, segments; LRO: frames, merged segments.
    pub gso: Option<[u64; 4]>,
}

impl Row {
    /// Cycles per byte of (sender, receiver, softirq, nfkit at 100%).
    fn cpb(&self, hz: f64) -> [f64; 4] {
        let c = |d: Duration| d.as_secs_f64() * hz / self.bytes.max(1) as f64;
        [
            c(self.sender_cpu),
            c(self.receiver_cpu),
            c(self.softirq_cpu),
            self.nfkit_cpu.map_or(0.0, |_| c(self.wall)),
        ]
    }

    pub fn total_cpb(&self, hz: f64) -> f64 {
        self.cpb(hz).iter().sum()
    }

    /// The total with nfkit's worker at the CPU time it used (on a shared
    /// machine it waits for a core part of the wall time).
    pub fn used_cpb(&self, hz: f64) -> f64 {
        let c = self.cpb(hz);
        let used = self
            .nfkit_cpu
            .map_or(0.0, |d| d.as_secs_f64() * hz / self.bytes.max(1) as f64);
        c[0] + c[1] + c[2] + used
    }

    /// Share of a core nfkit's worker used (percent), if any.
    fn nfkit_pct(&self) -> Option<f64> {
        self.nfkit_cpu
            .map(|d| 100.0 * d.as_secs_f64() / self.wall.as_secs_f64().max(1e-9))
    }
}

/// Clock ticks per second of /proc/stat and /proc/PID/stat.
fn clk_tck() -> f64 {
    nfkit_testkit::run(&["getconf", "CLK_TCK"])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Softirq time of every CPU so far (ticks).
fn softirq_ticks() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/stat")?;
    let line = s.lines().next().unwrap_or_default();
    line.split_whitespace()
        .nth(7)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no softirq column in /proc/stat: {line}"))
}

/// User plus system time of this process's waited-for children (ticks).
fn children_ticks() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name's closing parenthesis: state is 3,
    // cutime 16, cstime 17.
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or_default();
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(13)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() != 2 {
        bail!("/proc/self/stat: {s}");
    }
    Ok(f[0] + f[1])
}

fn thread_ns(tid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (bytes, frames) `dev` in `ns` received and sent so far.
fn dev_counts(ns: &Netns, dev: &str) -> Result<[u64; 4]> {
    let s = ns.run(&["cat", "/proc/net/dev"])?;
    let line = s
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{dev}:")))
        .ok_or_else(|| anyhow!("{dev} not in /proc/net/dev"))?;
    let v: Vec<u64> = line
        .split_once(':')
        .map(|x| x.1)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    if v.len() < 10 {
        bail!("/proc/net/dev: {line}");
    }
    Ok([v[0], v[1], v[8], v[9]])
}

/// Two namespaces and what runs between them.
struct Setup {
    a: Netns,
    b: Netns,
    /// Its `a` end is B's underlay device.
    vb: Veth,
    pipeline: Option<Box<Pipeline>>,
}

const ETHTOOL_WIRE_TX: [&str; 8] = [
    "tso",
    "off",
    "gso",
    "off",
    "tx-udp_tnl-segmentation",
    "off",
    "tx-udp_tnl-csum-segmentation",
    "off",
];

/// A kernel end's veth made wire-like: no segmentation offload on
/// transmit, GRO on receive.
fn wire(ns: &Netns, dev: &str) -> Result<()> {
    let mut args = vec!["ethtool", "-K", dev];
    args.extend(ETHTOOL_WIRE_TX);
    args.extend(["gro", "on"]);
    ns.run(&args).map(|_| ())
}

impl Setup {
    fn new(path: Path, underlay: Underlay) -> Result<Setup> {
        let n: u8 = match path {
            Path::Kernel => 96,
            Path::Nfkit => 95,
        };
        let (a, b) = (Netns::new()?, Netns::new()?);
        let mut vb = Veth::new()?;
        vb.move_a(&b, &format!("192.168.{n}.2/24"))?;
        if !kernel_vxlan_end(&b, &vb.a, n, 2) {
            bail!("this kernel has no vxlan devices");
        }
        if underlay == Underlay::Wire {
            wire(&b, &vb.a)?;
        }
        let pipeline = match path {
            Path::Kernel => {
                nfkit_testkit::ip(&["link", "set", &vb.b, "netns", a.name()])?;
                a.run(&[
                    "ip",
                    "addr",
                    "add",
                    &format!("192.168.{n}.1/24"),
                    "dev",
                    &vb.b,
                ])?;
                a.run(&["ip", "link", "set", &vb.b, "up"])?;
                if !kernel_vxlan_end(&a, &vb.b, n, 1) {
                    bail!("this kernel has no vxlan devices");
                }
                if underlay == Underlay::Wire {
                    wire(&a, &vb.b)?;
                }
                None
            }
            Path::Nfkit => {
                let tap = nfkit_testkit::unique_name("t");
                let src = overlay_nfk(
                    &format!("tap:{tap},tso=1"),
                    &format!("{},tso=1", vb.b),
                    n,
                    "02:00:00:95:00:01",
                    &mac_of(&b, &vb.a)?,
                    "EtherEncap() -> tso::TSO()",
                    " -> lro::LRO()",
                );
                let mut p = nfkit_pipeline::parse(&src, "bench-offloads.nfk")?.build(&|s| {
                    let spec = s
                        .parse::<PortSpec>()
                        .map_err(|e| nfkit_port::PortError::config(s, e.to_string()))?;
                    nfkit_port::open(&spec, &OpenOptions::default())
                })?;
                nfkit_testkit::ip(&["link", "set", &tap, "netns", a.name()])?;
                a.run(&["ip", "addr", "add", &format!("10.{n}.0.1/24"), "dev", &tap])?;
                // The overlay MTU: the underlay's less VXLAN's 50 bytes
                // (what the kernel gives its own vxlan device).
                a.run(&["ip", "link", "set", "dev", &tap, "mtu", "1450", "up"])?;
                p.start()?;
                Some(Box::new(p))
            }
        };
        let s = Setup { a, b, vb, pipeline };
        let peer = format!("10.{n}.0.2");
        let up = (0..20).any(|_| {
            s.a.command(&["ping", "-c", "1", "-W", "1", &peer])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if !up {
            bail!("no ping from A to B's overlay address {peer}");
        }
        Ok(s)
    }

    fn addr(&self, side_b: bool) -> String {
        let n = if self.pipeline.is_some() { 95 } else { 96 };
        format!("10.{n}.0.{}", if side_b { 2 } else { 1 })
    }

    /// TSO's and LRO's counters so far (pauses the pipeline to read
    /// them, then starts it again).
    fn gso_counters(&mut self) -> Result<Option<[u64; 4]>> {
        let Some(p) = self.pipeline.as_mut() else {
            return Ok(None);
        };
        p.pause()?;
        let stats = p.stats();
        p.start()?;
        let extra = |m: &str, k: &str| {
            stats
                .module(m)
                .and_then(|s| s.extra.iter().find(|(n, _)| *n == k).map(|x| x.1))
                .unwrap_or(0)
        };
        Ok(Some([
            extra("tso", "segmented"),
            extra("tso", "segments"),
            extra("lro", "frames"),
            extra("lro", "merged"),
        ]))
    }

    /// One iperf3 transfer, A -> B if `tx`, else B -> A.
    fn transfer(&mut self, opts: &Options, tx: bool, port: u16) -> Result<Row> {
        let dst = self.addr(tx);
        let port = port.to_string();
        let tck = clk_tck();
        let worker = self
            .pipeline
            .as_ref()
            .and_then(|p| p.worker_tids().first().copied().flatten());
        let gso0 = self.gso_counters()?;
        let (from, to) = if tx {
            (&self.a, &self.b)
        } else {
            (&self.b, &self.a)
        };
        let server = to.spawn(&["iperf3", "-s", "-1", "-p", &port])?;
        // The softirq rate of the machine at rest (others' work).
        let q0 = softirq_ticks()?;
        std::thread::sleep(Duration::from_millis(500));
        let base_rate = (softirq_ticks()? - q0) as f64 / 0.5;
        let streams = opts.streams.to_string();
        let veth0 = dev_counts(&self.b, &self.vb.a)?;
        let (kids0, soft0) = (children_ticks()?, softirq_ticks()?);
        let w0 = worker.and_then(thread_ns);
        let t0 = Instant::now();
        let out = from
            .command(&[
                "iperf3",
                "-c",
                &dst,
                "-p",
                &port,
                "-n",
                &opts.bytes,
                "-P",
                &streams,
                "-J",
            ])
            .output()
            .context("running iperf3")?;
        let wall = t0.elapsed();
        let (soft1, kids1) = (softirq_ticks()?, children_ticks()?);
        let w1 = worker.and_then(thread_ns);
        let veth1 = dev_counts(&self.b, &self.vb.a)?;
        server
            .wait(Duration::from_secs(10))
            .context("the iperf3 server")?;
        let kids2 = children_ticks()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "iperf3 to {dst} failed: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let j: serde_json::Value = serde_json::from_str(&text).context("iperf3's JSON")?;
        let end = &j["end"];
        let bytes = end["sum_sent"]["bytes"]
            .as_u64()
            .ok_or_else(|| anyhow!("no sum_sent.bytes in iperf3's JSON"))?;
        let bps = end["sum_received"]["bits_per_second"]
            .as_f64()
            .ok_or_else(|| anyhow!("no sum_received in iperf3's JSON"))?;
        let secs = |ticks: f64| Duration::from_secs_f64(ticks.max(0.0) / tck);
        let soft = (soft1 - soft0) as f64 - base_rate * wall.as_secs_f64();
        // B's veth end: it receives A's data, sends B's.
        let (db, df) = if tx {
            (veth1[0] - veth0[0], veth1[1] - veth0[1])
        } else {
            (veth1[2] - veth0[2], veth1[3] - veth0[3])
        };
        let gso1 = self.gso_counters()?;
        let gso = gso0
            .zip(gso1)
            .map(|(a, b)| std::array::from_fn(|i| b[i] - a[i]));
        Ok(Row {
            underlay: Underlay::Wire,
            path: Path::Kernel,
            tx,
            gbps: bps / 1e9,
            bytes,
            wall,
            sender_cpu: secs((kids1 - kids0) as f64),
            receiver_cpu: secs((kids2 - kids1) as f64),
            softirq_cpu: secs(soft),
            nfkit_cpu: w0.zip(w1).map(|(a, b)| Duration::from_nanos(b - a)),
            veth_frame: db as f64 / df.max(1) as f64,
            gso,
        })
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(mut p) = self.pipeline.take() {
            let _ = p.pause();
        }
    }
}

/// Every row: per underlay, the kernel then nfkit, each A -> B then
/// B -> A.
pub fn run(opts: &Options) -> Result<Vec<Row>> {
    for t in ["iperf3", "ethtool", "ping"] {
        nfkit_testkit::require_tool(t).map_err(|e| anyhow!(e))?;
    }
    if !nfkit_testkit::is_root() {
        bail!("needs root (namespaces, veth, TAP)");
    }
    let mut rows = Vec::new();
    let mut port = 5301;
    for &underlay in &opts.underlays {
        for path in [Path::Kernel, Path::Nfkit] {
            let mut s = Setup::new(path, underlay)
                .with_context(|| format!("setting up {} over {}", path.name(), underlay.name()))?;
            for tx in [true, false] {
                port += 1;
                let mut r = s.transfer(opts, tx, port).with_context(|| {
                    format!(
                        "{} {} over {}",
                        path.name(),
                        if tx { "A -> B" } else { "B -> A" },
                        underlay.name()
                    )
                })?;
                r.underlay = underlay;
                r.path = path;
                rows.push(r);
            }
        }
    }
    Ok(rows)
}

/// Run and print the table (and the 82599 line).
pub fn offloads(opts: &Options) -> Result<()> {
    let ghz = nfkit_lab::cost::cpu_ghz().unwrap_or(1.0);
    let hz = ghz * 1e9;
    println!(
        "SoftNIC Table 1 on this machine (issue 19): TCP over VXLAN between two namespaces, iperf3 -n {} -P {}; \
         cycles per byte at {ghz:.2} GHz (nominal, /proc/cpuinfo; CPU time x clock, no PMU)",
        opts.bytes, opts.streams
    );
    let rows = run(opts)?;
    println!(
        "{:<9} {:<7} {:<25} {:>7} | {:>7} {:>8} {:>7} {:>7} {:>7} | {:>7} | {:>6} {:>7} | {:>6}",
        "underlay",
        "dir",
        "path",
        "Gbit/s",
        "sender",
        "receiver",
        "softirq",
        "nfkit",
        "total",
        "bit/cyc",
        "nfkit%",
        "bit/cyc",
        "frame"
    );
    let bpc = |cpb: f64| 8.0 / cpb.max(f64::MIN_POSITIVE);
    for r in &rows {
        let c = r.cpb(hz);
        let (nf, pct, used) = match r.nfkit_pct() {
            Some(p) => (
                format!("{:.2}", c[3]),
                format!("{p:.0}%"),
                format!("{:.3}", bpc(r.used_cpb(hz))),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "{:<9} {:<7} {:<25} {:>7.2} | {:>7.2} {:>8.2} {:>7.2} {:>7} {:>7.2} | {:>7.3} | {:>6} {:>7} | {:>6.0}",
            r.underlay.name(),
            if r.tx { "A->B tx" } else { "B->A rx" },
            r.path.name(),
            r.gbps,
            c[0],
            c[1],
            c[2],
            nf,
            r.total_cpb(hz),
            bpc(r.total_cpb(hz)),
            pct,
            used,
            r.veth_frame
        );
    }
    println!(
        "cycles per byte of each participant: the iperf3 sender and receiver (user + system), softirq on \
         every CPU (less the machine's rate at rest), nfkit's worker at 100% of its core for the wall time \
         (SoftNIC's convention); then the share of a core nfkit's worker used and the bits per cycle with \
         that instead; frame: mean bytes per frame on the veth in the data's direction"
    );
    for &u in &opts.underlays {
        let find = |p: Path, tx: bool| {
            rows.iter()
                .find(|r| r.underlay == u && r.path == p && r.tx == tx)
        };
        let ratio = |tx: bool| {
            let (k, n) = (find(Path::Kernel, tx), find(Path::Nfkit, tx));
            k.zip(n).map_or_else(
                || "-".to_string(),
                |(k, n)| {
                    format!(
                        "{:.2}x bits per cycle ({:.2}x with nfkit's CPU as used), {:.2}x Gbit/s",
                        k.total_cpb(hz) / n.total_cpb(hz).max(f64::MIN_POSITIVE),
                        k.total_cpb(hz) / n.used_cpb(hz).max(f64::MIN_POSITIVE),
                        n.gbps / k.gbps.max(f64::MIN_POSITIVE)
                    )
                },
            )
        };
        println!(
            "ratio nfkit/kernel, {}: tx (TSO) {}; rx (LRO) {}",
            u.name(),
            ratio(true),
            ratio(false)
        );
    }
    for r in rows.iter().filter(|r| r.path == Path::Nfkit) {
        if let (Some(g), Some(cpu)) = (r.gso, r.nfkit_cpu) {
            println!(
                "nfkit {} {}: TSO cut {} super-frames into {} segments, LRO made {} frames of {} segments; \
                 the worker used {:.2} s of CPU in {:.2} s",
                r.underlay.name(),
                if r.tx { "A->B" } else { "B->A" },
                g[0],
                g[1],
                g[2],
                g[3],
                cpu.as_secs_f64(),
                r.wall.as_secs_f64()
            );
        }
    }
    if opts.sends > 0 {
        let per_send = crate::drivers::tso_instructions_per_send(opts.sends)?;
        println!(
            "82599 TSO: {} driver instructions per 64 KB send (lock step, callgrind, MSS 1448; the model's \
             segmentation not counted)",
            per_send.map_or_else(|| "- (no valgrind)".into(), |v| format!("{v:.0}"))
        );
    }
    Ok(())
}
