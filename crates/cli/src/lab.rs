//! Where 82599 ports come from: `sim:N` (a free-running software model of
//! the 82599 in this process) and `pci:ADDR` (a real device, over VFIO if
//! it is bound to vfio-pci, else over sysfs/uio with hugepages).
//!
//! The simulated lab owns the models. What is on the far side of a
//! simulated port's wire depends on the command: a traffic generator and
//! sink (`fwd`, `demo`), or a loopback cable (`pktgen` receiving its own
//! traffic).

use crate::ixgbe_port::IxgbePort;
use anyhow::{Context, Result};
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Clock, DmaAllocator, PciAddress, SystemClock};
use nfkit_ixgbe::{Device, DeviceConfig};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, RunningNic, SimBar, SinkStats, TrafficGen};
use nfkit_port::{OpenOptions, Port, PortError, PortSpec, Registry};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

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

/// The simulated 82599s of this process.
pub struct SimLab {
    dma: Arc<SimDma>,
    wire: SimWire,
    queues: usize,
    ports: Mutex<Vec<Option<SimPort>>>,
    pump_stop: Arc<AtomicBool>,
    pump: Mutex<Option<JoinHandle<()>>>,
}

impl SimLab {
    pub fn new(wire: SimWire, queues: usize) -> Arc<SimLab> {
        Arc::new(SimLab {
            dma: SimDma::new(),
            wire,
            queues: queues.max(1),
            ports: Mutex::new(Vec::new()),
            pump_stop: Arc::new(AtomicBool::new(false)),
            pump: Mutex::new(None),
        })
    }

    /// Create simulated port `n`, start its device thread and initialize
    /// the driver on it; returns the device (for agents).
    pub fn open_device(&self, n: usize, name: &str) -> Result<Device<SimBar>> {
        let nic = Nic82599::new(
            ModelConfig {
                mac: sim_mac(n),
                ..ModelConfig::default()
            },
            self.dma.clone(),
        );
        let running = nic.spawn();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
        let dev = Device::init(
            &nic.pci(),
            self.dma.clone(),
            clock,
            DeviceConfig {
                rx_queues: self.queues,
                tx_queues: self.queues,
                ..DeviceConfig::default()
            },
        )
        .with_context(|| format!("initializing the simulated 82599 {name}"))?;
        let sink = match self.wire {
            SimWire::Open => None,
            SimWire::Load { .. } => Some(nic.wire().attach_sink()),
            SimWire::Loopback => {
                nfkit_ixgbe_model::cable(&nic, &nic);
                None
            }
        };
        let mut ports = self.ports.lock();
        if ports.len() <= n {
            ports.resize_with(n + 1, || None);
        }
        ports[n] = Some(SimPort {
            nic,
            _running: running,
            sink,
        });
        Ok(dev)
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

    /// With `SimWire::Load`: start a thread feeding every open port's wire
    /// with generated frames, keeping its packet buffer from overflowing
    /// (the generator backs off, like a sender with flow control).
    pub fn start_load(self: &Arc<Self>) -> Arc<LoadCounters> {
        let generated = Arc::new(LoadCounters::default());
        let SimWire::Load { frame_len, flows } = self.wire else {
            return generated;
        };
        let wires: Vec<_> = self
            .ports
            .lock()
            .iter()
            .enumerate()
            .filter_map(|(n, p)| {
                p.as_ref().map(|p| {
                    (
                        p.nic.wire(),
                        TrafficGen::udp_flows(sim_mac(n), flows, frame_len),
                    )
                })
            })
            .collect();
        let stop = self.pump_stop.clone();
        let count = generated.clone();
        let handle = std::thread::Builder::new()
            .name("sim-load".into())
            .spawn(move || {
                let mut wires = wires;
                while !stop.load(Ordering::Relaxed) {
                    let mut idle = true;
                    for (wire, gen) in wires.iter_mut() {
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
        *self.pump.lock() = Some(handle);
        generated
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

/// Open a real 82599 at `addr`: VFIO when the device sits in an IOMMU
/// group bound to vfio-pci, else sysfs/uio with hugepage memory.
pub fn open_pci(addr: PciAddress, name: &str, queues: usize) -> Result<Box<dyn Port>> {
    let config = DeviceConfig {
        rx_queues: queues,
        tx_queues: queues,
        ..DeviceConfig::default()
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
    let sysfs_driver = std::fs::read_link(format!("/sys/bus/pci/devices/{addr}/driver"))
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().to_string()));
    if sysfs_driver.as_deref() == Some("vfio-pci") {
        let container = nfkit_hw::vfio::VfioContainer::open()?;
        let pci = container.device(addr)?;
        let dma: Arc<dyn DmaAllocator> = Arc::new(container);
        let dev = Device::init(&pci, dma.clone(), clock, config)?;
        return Ok(Box::new(IxgbePort::new(name, dev, &*dma)?));
    }
    let pci = nfkit_hw::linux::LinuxPci::open(addr)?;
    pci.unbind_driver()?;
    let dma: Arc<dyn DmaAllocator> = Arc::new(nfkit_hw::linux::HugepageDma::new()?);
    let dev = Device::init(&pci, dma.clone(), clock, config)
        .with_context(|| format!("initializing {name}"))?;
    Ok(Box::new(IxgbePort::new(name, dev, &*dma)?))
}

/// The port registry of the `nfkit` command: software ports, `sim:`
/// ports from `lab`, `pci:` ports (VirtIO-net devices to the VirtIO
/// driver, anything else to the 82599 driver), and vhost-user ports
/// (`vhost-user:`, `virtio-user:`).
pub fn registry(lab: Arc<SimLab>, queues: usize) -> Registry {
    ixgbe_registry(lab, queues).with(nfkit_virtio::opener())
}

fn ixgbe_registry(lab: Arc<SimLab>, queues: usize) -> Registry {
    Registry::new().with(move |spec: &PortSpec, _opts: &OpenOptions| {
        let name = spec.to_string();
        let wrap = |r: Result<Box<dyn Port>>| {
            r.map_err(|e| PortError::Config {
                port: name.clone(),
                msg: format!("{e:#}"),
            })
        };
        match spec {
            PortSpec::Sim(n) => Some(wrap(
                lab.open(*n, &name).map(|p| Box::new(p) as Box<dyn Port>),
            )),
            PortSpec::Pci(addr) => Some(wrap(open_pci(*addr, &name, queues))),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
