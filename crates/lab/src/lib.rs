//! # nfkit-lab: the simulated lab, and the one port registry
//!
//! The lab sits above the 82599 driver (`nfkit-ixgbe`) and its software
//! model (`nfkit-ixgbe-model`), which never depend on each other: the
//! lab makes the models ([`SimLab`]: `sim:N` ports, free-running on their
//! own threads) and hands their PCI functions to the driver's opener
//! through [`nfkit_ixgbe::SimSource`]. What is on the far side of a
//! simulated port's wire depends on the command: a traffic generator and
//! sink (`fwd`, `demo`), or a loopback cable (`pktgen` receiving its own
//! traffic).
//!
//! [`registry`] is the one registry that opens every spec: the software
//! backends of `nfkit-port`, `sim:` and `pci:` (82599) of `nfkit-ixgbe`,
//! and `pci:` (VirtIO-net), `vhost-user:` and `virtio-user:` of
//! `nfkit-virtio`.
//!
//! The commands' work is here too, for the command crate to call: [`fwd`],
//! [`demo`], [`daemon`], [`nf`] (with [`forms`]: NFs on simulated 82599s in each
//! driver model), [`pktgen`], [`run`] and [`doctor`].
#![forbid(unsafe_code)]

pub mod cores;
pub mod cost;
pub mod daemon;
pub mod demo;
pub mod doctor;
pub mod forms;
pub mod fwd;
pub mod nf;
pub mod pktgen;
pub mod run;

use anyhow::{Context, Result};
use nfkit_hw::sim::SimDma;
use nfkit_hw::DmaAllocator;
use nfkit_ixgbe::port::init_device;
use nfkit_ixgbe::{Device, Interrupts, IxgbePort, SimSource};
use nfkit_ixgbe_model::{
    ModelConfig, Nic82599, RunningNic, SimBar, SimPci, SinkStats, TrafficGen, Wire,
};
use nfkit_port::{PortError, Registry};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A stop flag set by Ctrl-C or a timer.
pub fn stop_flag(seconds: Option<u64>) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // Only the first command of a process can install the handler (it
    // also takes SIGTERM and SIGHUP: the totals are printed then too).
    if ctrlc::set_handler(move || s.store(true, Ordering::Relaxed)).is_err() {
        tracing::warn!("could not install the Ctrl-C handler: Ctrl-C ends the command at once");
    }
    if let Some(secs) = seconds {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            s.store(true, Ordering::Relaxed);
        });
    }
    stop
}

/// Log to stderr, filtered by `RUST_LOG`; warnings and errors are shown
/// when it is not set.
pub fn init_tracing() {
    init_tracing_quiet(false);
}

/// [`init_tracing`]; `quiet` (`--quiet`) shows only errors when
/// `RUST_LOG` is not set.
pub fn init_tracing_quiet(quiet: bool) {
    let default = if quiet { "error" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// A thread feeding one simulated wire with frames from a generator, as
/// fast as the port takes them: it backs off while the wire's receive
/// buffer holds 256 frames (a sender with flow control). Stops on drop.
pub struct Feeder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    pub fn start(wire: Wire, mut gen: TrafficGen) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if wire.rx_pending() < 256 {
                    gen.inject(&wire, 64);
                } else {
                    std::thread::yield_now();
                }
            }
        });
        Feeder {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The MAC address of simulated port `n`.
pub fn sim_mac(n: usize) -> [u8; 6] {
    [0x02, 0x00, 0x00, 0x00, 0x82, n as u8]
}

/// What hangs off a simulated port's wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimWire {
    /// Nothing: transmitted frames are kept for inspection (bounded).
    Open,
    /// A sink counts transmitted frames; a generator feeds the port with
    /// UDP frames of this size, as fast as the port takes them.
    Load { frame_len: usize, flows: usize },
    /// Transmitted frames come back in.
    Loopback,
}

struct SimPort {
    nic: Nic82599,
    _running: RunningNic,
    sink: Option<Arc<SinkStats>>,
}

/// Frames the load generator offered to the wires, and how many the
/// ports' MACs accepted (the rest were refused at the wire and counted
/// by the model).
#[derive(Debug, Default)]
pub struct LoadCounters {
    pub offered: std::sync::atomic::AtomicU64,
    pub accepted: std::sync::atomic::AtomicU64,
}

/// Wires of simulated ports made since the load thread last looked.
#[derive(Default)]
struct AddedWires {
    wires: Mutex<Vec<(usize, Wire)>>,
    /// How many were ever added.
    count: AtomicUsize,
}

/// The simulated 82599s of this process.
pub struct SimLab {
    dma: Arc<SimDma>,
    wire: SimWire,
    queues: usize,
    ports: Mutex<Vec<Option<SimPort>>>,
    /// With `SimWire::Load`: the wires of ports made since the load
    /// thread last looked (it feeds them from then on), and how many
    /// were ever added (one relaxed load a pass tells it to look).
    added: Arc<AddedWires>,
    pump_stop: Arc<AtomicBool>,
    pump: Mutex<Option<JoinHandle<()>>>,
    /// Once [`SimLab::start_load`] was called (with `SimWire::Load`):
    /// what the load thread counts into. The thread starts with the
    /// first port (none: no thread spinning on nothing).
    load: Mutex<Option<Arc<LoadCounters>>>,
}

impl SimLab {
    pub fn new(wire: SimWire, queues: usize) -> Arc<SimLab> {
        Arc::new(SimLab {
            dma: SimDma::new(),
            wire,
            queues: queues.max(1),
            ports: Mutex::new(Vec::new()),
            added: Arc::default(),
            pump_stop: Arc::new(AtomicBool::new(false)),
            pump: Mutex::new(None),
            load: Mutex::new(None),
        })
    }

    /// Create simulated port `n`: its model, its device thread and
    /// what hangs off its wire.
    fn create_nic(&self, n: usize) -> SimPci {
        let nic = Nic82599::new(
            ModelConfig {
                mac: sim_mac(n),
                ..ModelConfig::default()
            },
            self.dma.clone(),
        );
        let running = nic.spawn();
        let sink = match self.wire {
            SimWire::Open => None,
            SimWire::Load { .. } => Some(nic.wire().attach_sink()),
            SimWire::Loopback => {
                nfkit_ixgbe_model::cable(&nic, &nic);
                None
            }
        };
        let pci = nic.pci();
        if let SimWire::Load { .. } = self.wire {
            self.added.wires.lock().push((n, nic.wire()));
            self.added.count.fetch_add(1, Ordering::SeqCst);
            let load = self.load.lock().clone();
            if let Some(counters) = load {
                self.spawn_pump(counters);
            }
        }
        let mut ports = self.ports.lock();
        if ports.len() <= n {
            ports.resize_with(n + 1, || None);
        }
        ports[n] = Some(SimPort {
            nic,
            _running: running,
            sink,
        });
        pci
    }

    /// Create simulated port `n` and initialize the driver on it; returns
    /// the device (for agents).
    pub fn open_device(&self, n: usize, name: &str) -> Result<Device<SimBar>> {
        let pci = self.create_nic(n);
        init_device(&pci, self.dma.clone(), self.queues)
            .with_context(|| format!("initializing the simulated 82599 {name}"))
    }

    /// MSI-X for simulated port `n`'s device `dev` (made by
    /// [`SimLab::open_device`]), for agents that sleep when idle.
    pub fn interrupts(&self, n: usize, dev: &Device<SimBar>) -> Result<Interrupts<SimBar>> {
        let pci = self
            .nic(n)
            .with_context(|| format!("no simulated port {n}"))?
            .pci();
        Ok(dev.enable_interrupts(&pci)?)
    }

    /// Simulated port `n` as a queue-model port.
    pub fn open(&self, n: usize, name: &str) -> Result<IxgbePort<SimBar>> {
        let dev = self.open_device(n, name)?;
        Ok(IxgbePort::new(name, dev, &*self.dma)?)
    }

    /// The simulated DMA memory (for pools of agents and ports).
    pub fn dma(&self) -> &Arc<SimDma> {
        &self.dma
    }

    /// Simulated port `n`'s model (for inspection), if opened.
    pub fn nic(&self, n: usize) -> Option<Nic82599> {
        self.ports.lock().get(n)?.as_ref().map(|p| p.nic.clone())
    }

    /// Frames the sink of port `n` counted (with `SimWire::Load`).
    pub fn sink_frames(&self, n: usize) -> u64 {
        self.ports
            .lock()
            .get(n)
            .and_then(|p| p.as_ref()?.sink.as_ref().map(|s| s.frames()))
            .unwrap_or(0)
    }

    /// With `SimWire::Load`: start a thread feeding every port's wire
    /// (those open now and those opened later, as `nfkit daemon` does at
    /// run time) with generated frames, keeping its packet buffer from
    /// overflowing (the generator backs off, like a sender with flow
    /// control). Without a port yet, the thread starts with the first.
    pub fn start_load(self: &Arc<Self>) -> Arc<LoadCounters> {
        let generated = Arc::new(LoadCounters::default());
        let SimWire::Load { .. } = self.wire else {
            return generated;
        };
        *self.load.lock() = Some(generated.clone());
        if self.added.count.load(Ordering::SeqCst) > 0 {
            self.spawn_pump(generated.clone());
        }
        generated
    }

    /// Start the load thread unless it runs.
    fn spawn_pump(&self, count: Arc<LoadCounters>) {
        let SimWire::Load { frame_len, flows } = self.wire else {
            return;
        };
        let mut pump = self.pump.lock();
        if pump.is_some() {
            return;
        }
        let added = self.added.clone();
        let stop = self.pump_stop.clone();
        let handle = std::thread::Builder::new()
            .name("sim-load".into())
            .spawn(move || {
                let mut wires: Vec<(usize, Wire, TrafficGen)> = Vec::new();
                let mut seen = 0;
                while !stop.load(Ordering::Relaxed) {
                    if added.count.load(Ordering::Acquire) != seen {
                        let mut new = added.wires.lock();
                        seen = added.count.load(Ordering::Acquire);
                        for (n, wire) in new.drain(..) {
                            let gen = TrafficGen::udp_flows(sim_mac(n), flows, frame_len);
                            // A port made again at the same number
                            // replaces the old one's wire.
                            wires.retain(|w| w.0 != n);
                            wires.push((n, wire, gen));
                        }
                    }
                    let mut idle = true;
                    for (_, wire, gen) in wires.iter_mut() {
                        if wire.rx_pending() < 256 {
                            let n = gen.inject(wire, 64);
                            count.offered.fetch_add(64, Ordering::Relaxed);
                            count.accepted.fetch_add(n as u64, Ordering::Relaxed);
                            idle = false;
                        }
                    }
                    if idle {
                        std::thread::yield_now();
                    }
                }
            })
            .expect("spawning the load thread");
        *pump = Some(handle);
    }

    /// Stop the load thread.
    pub fn stop_load(&self) {
        self.pump_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.pump.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for SimLab {
    fn drop(&mut self) {
        self.stop_load();
    }
}

impl SimSource for SimLab {
    type Pci = SimPci;
    fn create(&self, n: usize) -> Result<(SimPci, Arc<dyn DmaAllocator>), PortError> {
        Ok((self.create_nic(n), self.dma.clone()))
    }
}

/// The port registry: software ports, `sim:` ports from `lab`, `pci:`
/// ports (VirtIO-net devices to the VirtIO driver, anything else to the
/// 82599 driver), and vhost-user ports (`vhost-user:`, `virtio-user:`);
/// 82599 ports get `queues` queue pairs.
pub fn registry(lab: Arc<SimLab>, queues: usize) -> Registry {
    let queues = queues.max(1);
    Registry::new()
        .with(nfkit_ixgbe::opener(queues, lab))
        .with(nfkit_virtio::opener())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfkit_port::OpenOptions;

    #[test]
    fn registry_opens_vhost_user_pairs_and_passes_other_pci_devices_on() {
        let reg = registry(SimLab::new(SimWire::Open, 1), 1);
        let opts = OpenOptions {
            pool_buffers: 1024,
            ..OpenOptions::default()
        };
        let path = std::env::temp_dir().join(format!("nfkit-lab-{}.sock", std::process::id()));
        let be = reg
            .open_str(&format!("vhost-user:{}", path.display()), &opts)
            .unwrap();
        let fe = reg
            .open_str(&format!("virtio-user:{}", path.display()), &opts)
            .unwrap();
        assert_eq!(be.name(), format!("vhost-user:{}", path.display()));
        assert_eq!(fe.tx_queues(), 1);
        // No such device: not VirtIO, so the 82599 opener reports it.
        let e = reg.open_str("pci:0000:fe:1f.7", &opts).err().unwrap();
        assert!(!e.to_string().contains("VirtIO"), "{e}");
    }
}

#[cfg(test)]
mod jumbo_tests {
    use super::*;
    use nfkit_hw::Batch;
    use nfkit_port::{OpenOptions, Port};
    use std::time::Instant;

    /// Forward from `a` to `b` until `b`'s wire sent a frame or `wait`
    /// passes; returns what `b`'s wire carried.
    fn forward(lab: &SimLab, a: &mut dyn Port, b: &mut dyn Port, wait: Duration) -> Vec<Vec<u8>> {
        let out = lab.nic(1).unwrap().wire();
        let end = Instant::now() + wait;
        let mut batch = Batch::new();
        while out.transmitted_pending() == 0 && Instant::now() < end {
            a.rx_batch(0, &mut batch);
            b.tx_batch(0, &mut batch);
            batch.clear();
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut got = Vec::new();
        out.drain_transmitted(|f| got.push(f.to_vec()));
        got
    }

    /// `sim:N,mtu=9000` turns on the 82599's jumbo frames through the
    /// strict model: a 9,000-byte frame crosses byte-exact; without
    /// `mtu=` the device drops it as oversize (ROC), counted as a receive
    /// error of the port.
    #[test]
    fn a_9000_byte_frame_crosses_sim_ports_with_mtu_9000_and_is_counted_without() {
        let mut frame = vec![0u8; 9000];
        frame[..6].copy_from_slice(&sim_mac(0));
        frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
        frame[12..14].copy_from_slice(&[0x88, 0xB5]); // local experimental
        for (i, b) in frame[14..].iter_mut().enumerate() {
            *b = (i * 7 + i / 251) as u8;
        }
        for (opts, jumbo) in [(",mtu=9000,rx_csum=on", true), ("", false)] {
            let lab = SimLab::new(SimWire::Open, 1);
            let reg = registry(lab.clone(), 1);
            let open = |s: String| reg.open_str(&s, &OpenOptions::default()).unwrap();
            let mut a = open(format!("sim:0{opts}"));
            let mut b = open(format!("sim:1{opts}"));
            let line = nfkit_port::frame_line(&*a);
            let wire_max = if jumbo { 9014 } else { 1514 };
            assert!(
                line.contains(&format!("at most {wire_max} on the wire")),
                "{line}"
            );
            // The model's link comes up a while after the device is
            // initialized (as a real one's does).
            let end = Instant::now() + Duration::from_secs(10);
            while !(a.link().up && b.link().up) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            let took = lab.nic(0).unwrap().wire().inject(&frame);
            assert_eq!(took, jumbo, "the MAC takes it only with jumbo frames on");
            let wait = Duration::from_secs(if jumbo { 10 } else { 1 });
            let got = forward(&lab, &mut *a, &mut *b, wait);
            let nic = lab.nic(0).unwrap();
            if jumbo {
                assert_eq!(got.len(), 1, "one frame out");
                assert!(got[0] == frame, "byte-exact ({} bytes out)", got[0].len());
                assert_eq!(a.stats().rx_errors, 0);
            } else {
                assert!(got.is_empty());
                assert_eq!(a.stats().rx_errors, 1, "counted as oversize (ROC)");
            }
            for n in [&nic, &lab.nic(1).unwrap()] {
                let v = n.violations();
                assert!(v.is_empty(), "strict model: {v:?}");
            }
        }
    }
}
