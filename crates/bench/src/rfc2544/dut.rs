//! Devices under test and their wiring: the DUT runs on its own thread,
//! pinned to its own core, on two ports; the tester (the caller's
//! thread) holds the other end of each.
//!
//! | wiring | DUT's ports | tester's ends |
//! |---|---|---|
//! | `vhost` | nfkit `vhost-user:` backends | nfkit `virtio-user:` frontends |
//! | `sim` | simulated 82599s (free-running models) | the models' wires: frames injected, transmitted frames drained |
//! | `veth` | one end of each of two veth pairs (nfkit: `afpacket:`; the kernel: the ends in a namespace) | the other ends, nfkit `afpacket:` |
//!
//! Besides nfkit's own, two DUTs run as the yardsticks the issue names
//! ([`super::external`]): DPDK's `dpdk-testpmd` (io or macswap; on
//! vhost-user over two `net_vhost` ports, on veth over `net_af_packet`)
//! and the Linux kernel in a namespace (IPv4 forwarding, a bridge, or
//! forwarding with nftables masquerade; veth only).

use super::tester::Tester;
use anyhow::{bail, Context, Result};
use nfkit_lab::forms::{with_form, with_ports, SimNics};
use nfkit_lab::{registry, SimLab, SimWire};
use nfkit_nf::workload::{workload, FLOWS};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::fwd::{fwd, FwdOptions, Touch};
use nfkit_port::{Model, OpenOptions, Port};
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What runs between the ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DutKind {
    /// `nfkit fwd`: every packet of one port out of the other.
    Fwd,
    /// An NF of `nfkit-nf` with its workload's options.
    Nf(String),
    /// A `.nfk` pipeline: its first port is the DUT's port 0, its second
    /// port 1, whatever specs the file gives.
    Pipeline(PathBuf),
    /// `dpdk-testpmd` in this forwarding mode (`io` or `macswap`).
    Testpmd(String),
    /// The Linux kernel in a namespace.
    Kernel(super::external::KernelMode),
}

/// A DUT: what, in which driver model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dut {
    pub kind: DutKind,
    pub model: Model,
}

impl Dut {
    /// `fwd`, `nf:NAME`, `pipeline:FILE`, each optionally `@agent` or
    /// `@queue` (default queue).
    pub fn parse(s: &str) -> Result<Dut> {
        let (what, model) = match s.rsplit_once('@') {
            Some((w, m)) => (
                w,
                m.parse::<Model>()
                    .map_err(|e| anyhow::anyhow!("DUT `{s}`: {e}"))?,
            ),
            None => (s, Model::Queue),
        };
        let kind = match what.split_once(':') {
            None if what == "fwd" => DutKind::Fwd,
            Some(("nf", name)) => {
                workload(name, 1).with_context(|| format!("DUT `{s}`"))?;
                DutKind::Nf(name.to_string())
            }
            Some(("testpmd", mode)) if ["io", "macswap"].contains(&mode) => {
                DutKind::Testpmd(mode.to_string())
            }
            Some(("kernel", "forward")) => DutKind::Kernel(super::external::KernelMode::Forward),
            Some(("kernel", "bridge")) => DutKind::Kernel(super::external::KernelMode::Bridge),
            Some(("kernel", "nat")) => DutKind::Kernel(super::external::KernelMode::Nat),
            Some(("pipeline", file)) => {
                let p = PathBuf::from(file);
                if !p.is_file() {
                    bail!("DUT `{s}`: no pipeline file {file}");
                }
                DutKind::Pipeline(p)
            }
            _ => bail!(
                "DUT `{s}`: expected fwd, nf:NAME or pipeline:FILE (each optionally @agent or @queue), \
                 testpmd:io, testpmd:macswap, kernel:forward, kernel:bridge or kernel:nat"
            ),
        };
        Ok(Dut { kind, model })
    }

    /// `fwd@queue`, `nat@agent`, `pipeline:chain.nfk`.
    pub fn name(&self) -> String {
        let m = match self.model {
            Model::Agent => "agent",
            Model::Queue => "queue",
            Model::AgentAdapter => "agent-adapter",
        };
        match &self.kind {
            DutKind::Fwd => format!("fwd@{m}"),
            DutKind::Nf(n) => format!("{n}@{m}"),
            DutKind::Pipeline(p) => format!(
                "pipeline:{}",
                p.file_name().unwrap_or_default().to_string_lossy()
            ),
            DutKind::Testpmd(mode) => format!("testpmd-{mode}"),
            DutKind::Kernel(k) => format!("kernel-{}", k.name()),
        }
    }

    /// The port the tester sends into (the NF's workload input; 0 else).
    pub fn input(&self) -> usize {
        match &self.kind {
            DutKind::Nf(n) => workload(n, 1).map(|w| w.input).unwrap_or(0),
            _ => 0,
        }
    }

    /// One frame of the NF's workload, to take its addresses from.
    pub fn template(&self) -> Option<Vec<u8>> {
        match &self.kind {
            DutKind::Nf(n) => workload(n, 1).ok()?.frames.into_iter().next(),
            _ => None,
        }
    }
}

/// How tester and DUT are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wiring {
    /// vhost-user: DUT on nfkit's backends, tester on nfkit's frontends.
    Vhost,
    /// Two simulated 82599s: the tester on their wires.
    Sim,
    /// Two veth pairs: the DUT on one end of each, the tester (nfkit
    /// `afpacket:`) on the other.
    Veth,
}

impl Wiring {
    /// The line rate assumed, in bit/s.
    pub fn line_bps(self) -> f64 {
        10e9
    }

    pub fn describe(self) -> &'static str {
        match self {
            Wiring::Vhost => "vhost-user (no physical line: 10 Gbit/s assumed, as the 82599's, to bound the search)",
            Wiring::Sim => "simulated 82599 (10 Gbit/s Ethernet)",
            Wiring::Veth => "veth (no physical line: 10 Gbit/s assumed to bound the search; the kernel's work of both veth ends lands on the sending side's core as softirq)",
        }
    }

    /// Whether `dut` can run on this wiring (the kernel only on veth,
    /// testpmd not on the simulated 82599).
    pub fn takes(self, dut: &Dut) -> bool {
        match (&dut.kind, self) {
            (DutKind::Kernel(_), w) => w == Wiring::Veth,
            (DutKind::Testpmd(_), w) => w != Wiring::Sim,
            _ => true,
        }
    }
}

/// A DUT running on its thread.
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
    /// The DUT thread's `/proc/self/task/TID` (or its forwarding
    /// thread's `/proc/PID/task/TID` for a process).
    pub task: Option<PathBuf>,
    /// A DUT that is a process (testpmd), and what it set up (veths, a
    /// namespace, hugepages), undone on drop.
    pub external: Option<super::external::External>,
    /// The frames' addresses when the DUT needs its own (the kernel).
    pub gen: Option<nfkit_lab::pktgen::GenConfig>,
}

impl Running {
    /// A DUT that is a process, or the kernel (no thread here).
    pub fn process(
        external: super::external::External,
        task: Option<PathBuf>,
        gen: Option<nfkit_lab::pktgen::GenConfig>,
    ) -> Running {
        Running {
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
            task,
            external: Some(external),
            gen,
        }
    }

    /// Whether the DUT thread or process ended (an error, or a panic).
    pub fn ended(&self) -> bool {
        if let Some(x) = &self.external {
            if self.thread.is_none() {
                return x.ended();
            }
        }
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stop the DUT; waits at most 5 s for its thread (then leaves it).
    pub fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        // the thread's ports may be on the wiring: the thread ends first
        let ext = self.external.take();
        let r = self.join();
        if let Some(x) = ext {
            x.stop()?;
        }
        r
    }

    fn join(&mut self) -> Result<()> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !t.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !t.is_finished() {
            bail!("the DUT did not stop within 5 s (left running)");
        }
        match t.join() {
            Ok(r) => r,
            Err(_) => bail!("the DUT thread panicked"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

enum Ready {
    Ports(Option<PathBuf>),
    Wires(Option<PathBuf>, [nfkit_ixgbe_model::Wire; 2]),
}

/// Start `dut` on `wiring` (sockets under `dir`), its thread pinned to
/// `core`; returns it and the tester's ends of its ports.
pub fn start(dut: &Dut, wiring: Wiring, dir: &Path, core: usize) -> Result<(Running, Tester)> {
    let socks = [dir.join("dut0.sock"), dir.join("dut1.sock")];
    for s in &socks {
        let _ = std::fs::remove_file(s);
    }
    if let DutKind::Testpmd(_) | DutKind::Kernel(_) = &dut.kind {
        return super::external::start(dut, wiring, dir, core);
    }
    let veths = match wiring {
        Wiring::Veth => Some(super::external::Veths::new()?),
        _ => None,
    };
    let dut_specs = match &veths {
        Some(v) => v.dut_specs(),
        None => socks.clone().map(|s| format!("vhost-user:{}", s.display())),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Result<Ready>>();
    let (d, halt, sk) = (dut.clone(), stop.clone(), dut_specs);
    let thread = std::thread::Builder::new()
        .name("rfc2544-dut".into())
        .spawn(move || -> Result<()> {
            if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                tracing::warn!("could not pin the DUT to core {core}");
            }
            let task = super::cpu::this_thread();
            let r = match wiring {
                Wiring::Vhost | Wiring::Veth => on_specs(&d, &sk, &halt, || {
                    let _ = tx.send(Ok(Ready::Ports(task.clone())));
                }),
                Wiring::Sim => on_sim(&d, &halt, |wires| {
                    let _ = tx.send(Ok(Ready::Wires(task.clone(), wires)));
                }),
            };
            if let Err(e) = &r {
                // the tester may still be waiting for the start
                let _ = tx.send(Err(anyhow::anyhow!("{e:#}")));
            }
            r
        })?;
    let ready = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => bail!("the DUT {} did not start on {wiring:?}: {e:#}", dut.name()),
        Err(_) => bail!(
            "the DUT {} did not start on {wiring:?} within 20 s",
            dut.name()
        ),
    };
    let tester_specs = match &veths {
        Some(v) => v.tester_specs(),
        None => socks.map(|s| format!("virtio-user:{}", s.display())),
    };
    let running = |task| Running {
        stop: stop.clone(),
        thread: Some(thread),
        task,
        external: veths.map(super::external::External::wiring),
        gen: None,
    };
    Ok(match ready {
        Ready::Ports(task) => {
            let ports = super::external::tester_ports(&tester_specs)?;
            (running(task), Tester::ports(ports))
        }
        Ready::Wires(task, wires) => (running(task), Tester::wires(wires)?),
    })
}

/// Rounds between looks at the stop flag.
const CHECK_EVERY: u32 = 256;

/// The DUT on two ports opened from `specs` (vhost-user backends, or
/// `afpacket:` on veth ends).
fn on_specs(dut: &Dut, specs: &[String; 2], stop: &AtomicBool, ready: impl FnOnce()) -> Result<()> {
    let reg = registry(SimLab::new(SimWire::Open, 1), 1);
    let opts = OpenOptions::default();
    let open = |s: &str| {
        reg.open_str(s, &opts)
            .with_context(|| format!("the DUT's port {s}"))
    };
    let mut owned: Vec<Box<dyn Port>> = vec![open(&specs[0])?, open(&specs[1])?];
    if let DutKind::Pipeline(file) = &dut.kind {
        return pipeline(file, owned, stop, ready);
    }
    ready();
    run_on_ports(dut, &mut owned, stop)
}

/// Run `dut` on any two ports until `stop`.
fn run_on_ports(dut: &Dut, owned: &mut [Box<dyn Port>], stop: &AtomicBool) -> Result<()> {
    match &dut.kind {
        DutKind::Fwd => {
            let [a, b] = owned else {
                bail!("fwd takes two ports")
            };
            if dut.model.on(false) == Model::Queue {
                let opts = FwdOptions {
                    touch: Touch::Write,
                    stats_interval: Duration::from_secs(1),
                    stop_when_done: false,
                    idle: nfkit_port::IdleOptions::polling(),
                };
                fwd([&mut **a, &mut **b], &opts, stop, |_| {})?;
            } else {
                let mut agent = AgentAdapter::new(2);
                // like ixy-fwd: touch the destination MAC, out of the other port
                fn to1(buf: &mut [u8], len: usize, out: &mut [u16]) {
                    buf[1] = buf[1].wrapping_add(1);
                    out[1] = len as u16;
                }
                fn to0(buf: &mut [u8], len: usize, out: &mut [u16]) {
                    buf[1] = buf[1].wrapping_add(1);
                    out[0] = len as u16;
                }
                type Handler = fn(&mut [u8], usize, &mut [u16]);
                let mut handlers: [Handler; 2] = [to1, to0];
                let mut ports: [&mut dyn Port; 2] = [&mut **a, &mut **b];
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..CHECK_EVERY {
                        agent.poll(&mut ports, &mut handlers);
                    }
                }
            }
            Ok(())
        }
        DutKind::Nf(name) => {
            let options = workload(name, FLOWS)?.options;
            let mut nf = nfkit_nf::build_for_ports(name, &options, 2)?;
            let ports: RefCell<Vec<&mut dyn Port>> =
                RefCell::new(owned.iter_mut().map(|p| &mut **p as _).collect());
            with_ports(dut.model, &ports, &mut *nf, |r| spin(r.round, stop));
            say_drops(dut, &*nf);
            Ok(())
        }
        DutKind::Pipeline(_) => unreachable!("pipelines run in `pipeline`"),
        DutKind::Testpmd(_) | DutKind::Kernel(_) => unreachable!("processes start in `external`"),
    }
}

/// The NF's own drops over all its cases, by reason (a NAT out of
/// ports, a full table): loss the tester sees that is not the rate's.
fn say_drops(dut: &Dut, nf: &dyn nfkit_nf::NetworkFunction) {
    let s = nf.stats();
    if s.dropped_total() > 0 {
        let why: Vec<String> = s
            .drops()
            .map(|(r, n)| format!("{} {n}", r.name()))
            .collect();
        eprintln!(
            "{}: the NF dropped {} of {} frames: {}",
            dut.name(),
            s.dropped_total(),
            s.packets_in,
            why.join(", ")
        );
    }
}

fn spin(round: &mut dyn FnMut(Duration) -> usize, stop: &AtomicBool) {
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..CHECK_EVERY {
            round(start.elapsed());
        }
    }
}

/// A `.nfk` pipeline whose first two ports are `owned`.
fn pipeline(
    file: &Path,
    owned: Vec<Box<dyn Port>>,
    stop: &AtomicBool,
    ready: impl FnOnce(),
) -> Result<()> {
    let desc = nfkit_pipeline::load(file)?;
    let owned = RefCell::new(owned.into_iter().map(Some).collect::<Vec<_>>());
    let next = Cell::new(0usize);
    let open = |spec: &str| -> Result<Box<dyn Port>, nfkit_port::PortError> {
        let i = next.get();
        next.set(i + 1);
        owned
            .borrow_mut()
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| {
                nfkit_port::PortError::config(
                    spec,
                    "the DUT has two ports, the pipeline asks for a third",
                )
            })
    };
    let mut p = desc
        .build(&open)
        .with_context(|| format!("building {}", file.display()))?;
    if next.get() < 2 {
        bail!(
            "{} uses {} port(s): a DUT needs two (its first two ports are the DUT's)",
            file.display(),
            next.get()
        );
    }
    ready();
    p.run_until(stop, None)?;
    p.shutdown()?;
    Ok(())
}

fn on_sim(
    dut: &Dut,
    stop: &AtomicBool,
    ready: impl FnOnce([nfkit_ixgbe_model::Wire; 2]),
) -> Result<()> {
    if let DutKind::Pipeline(file) = &dut.kind {
        let lab = SimLab::new(SimWire::Open, 1);
        let owned: Vec<Box<dyn Port>> = vec![
            Box::new(lab.open(0, "sim:0")?),
            Box::new(lab.open(1, "sim:1")?),
        ];
        let wires = [
            lab.nic(0).context("sim:0")?.wire(),
            lab.nic(1).context("sim:1")?.wire(),
        ];
        return pipeline(file, owned, stop, || ready(wires));
    }
    let nics = SimNics::free_running(2)?;
    ready([nics.nics[0].wire(), nics.nics[1].wire()]);
    match &dut.kind {
        DutKind::Fwd if dut.model == Model::Agent => {
            let devs = [nics.devs[0].clone(), nics.devs[1].clone()];
            nfkit_lab::fwd::run_agent_pair(&devs, stop, || {})?;
            Ok(())
        }
        DutKind::Fwd => {
            let mut owned: Vec<Box<dyn Port>> = nfkit_lab::forms::queue_ports(&nics)?
                .into_iter()
                .map(|p| Box::new(p) as Box<dyn Port>)
                .collect();
            run_on_ports(dut, &mut owned, stop)
        }
        DutKind::Nf(name) => {
            let options = workload(name, FLOWS)?.options;
            let mut nf = nfkit_nf::build_for_ports(name, &options, 2)?;
            with_form(dut.model, &nics, &mut *nf, |r| spin(r.round, stop))?;
            say_drops(dut, &*nf);
            Ok(())
        }
        DutKind::Pipeline(_) | DutKind::Testpmd(_) | DutKind::Kernel(_) => unreachable!(),
    }
}
