//! Network functions on simulated 82599s, in each driver model: the
//! devices ([`SimNics`], lock-step or free-running), and [`with_form`],
//! which sets an NF up in a [`Model`] on them and hands out its
//! [`Rounds`]. `nfkit nf` on `sim:` ports, `nfkit bench nfs` and the
//! crafted-packet scenario tests all run NFs through here.
//!
//! The rounds [`nf_round_agent`] and [`nf_round_queue`] are what
//! `nfkit bench nfs` counts instructions in (callgrind collects inside
//! functions named `nf_round_`).

use crate::sim_mac;
use anyhow::{Context, Result};
use nfkit_hw::sim::{SimDma, VirtualClock};
use nfkit_hw::{Clock, SystemClock};
use nfkit_ixgbe::{Agent, AgentConfig, Device, DeviceConfig, IxgbePort, PacketHandler};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, RunningNic, SimBar};
use nfkit_nf::adapt::{AgentNf, QueueNf};
use nfkit_nf::{NetworkFunction, NfStats};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::{Model, Port};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

/// Simulated 82599s for an NF: one receive queue each (RSS off) and one
/// transmit queue per port, so that agent `i` sends on transmit queue `i`
/// of every port.
pub struct SimNics {
    pub nics: Vec<Nic82599>,
    pub devs: Vec<Device<SimBar>>,
    pub dma: Arc<SimDma>,
    _running: Vec<RunningNic>,
}

impl SimNics {
    /// Lock-step devices: they work only in [`SimNics::step`].
    pub fn lockstep(ports: usize) -> Result<SimNics> {
        let clock = VirtualClock::new();
        let c: Arc<dyn Clock> = clock.clone();
        SimNics::new(ports, c, |nic| {
            nic.attach_clock(&clock);
            None
        })
    }

    /// Free-running devices, each on its own thread.
    pub fn free_running(ports: usize) -> Result<SimNics> {
        let c: Arc<dyn Clock> = Arc::new(SystemClock::default());
        SimNics::new(ports, c, |nic| Some(nic.spawn()))
    }

    fn new(
        ports: usize,
        clock: Arc<dyn Clock>,
        start: impl Fn(&Nic82599) -> Option<RunningNic>,
    ) -> Result<SimNics> {
        let dma = SimDma::new();
        let mut nics = Vec::new();
        let mut running = Vec::new();
        let mut devs = Vec::new();
        for n in 0..ports {
            let nic = Nic82599::new(
                ModelConfig {
                    mac: sim_mac(n),
                    ..ModelConfig::default()
                },
                dma.clone(),
            );
            running.extend(start(&nic));
            let config = DeviceConfig {
                rx_queues: 1,
                tx_queues: ports,
                ..DeviceConfig::default()
            };
            devs.push(
                Device::init(&nic.pci(), dma.clone(), clock.clone(), config)
                    .with_context(|| format!("initializing simulated 82599 {n}"))?,
            );
            nics.push(nic);
        }
        Ok(SimNics {
            nics,
            devs,
            dma,
            _running: running,
        })
    }

    /// Lock-step: let every device do its pending work.
    pub fn step(&self) {
        for n in &self.nics {
            n.step();
        }
    }
}

/// One agent per port, reading its receive queue 0 and sending on
/// transmit queue `i` of every port (outputs in NF port order).
pub fn agents(devs: &[Device<SimBar>]) -> Result<Vec<Agent<SimBar>>> {
    (0..devs.len())
        .map(|i| {
            let outputs: Vec<(&Device<SimBar>, usize)> = devs.iter().map(|d| (d, i)).collect();
            Ok(Agent::new(&devs[i], 0, &outputs, &AgentConfig::default())?)
        })
        .collect()
}

/// Every device as a queue-model port.
pub fn queue_ports(nics: &SimNics) -> Result<Vec<IxgbePort<SimBar>>> {
    nics.devs
        .iter()
        .enumerate()
        .map(|(i, d)| Ok(IxgbePort::new(&format!("sim:{i}"), d.clone(), &*nics.dma)?))
        .collect()
}

/// One round of the agent model: every agent until none has a packet.
#[inline(never)]
pub fn nf_round_agent<H: PacketHandler>(
    agents: &mut [Agent<SimBar>],
    handlers: &mut [H],
    nf: &AgentNf,
    now: Duration,
) -> usize {
    nf.set_now(now);
    until_idle(|| nfkit_ixgbe::round(agents, handlers))
}

/// Call `pass` until it handles no packet; returns the packets handled.
#[inline(always)]
fn until_idle(mut pass: impl FnMut() -> usize) -> usize {
    let mut total = 0;
    loop {
        let n = pass();
        total += n;
        if n == 0 {
            return total;
        }
    }
}

/// One round of the queue model: every port until none has a packet.
#[inline(never)]
pub fn nf_round_queue<P: Port + ?Sized>(
    q: &mut QueueNf,
    ports: &mut [&mut P],
    nf: &mut dyn NetworkFunction,
    now: Duration,
) -> usize {
    until_idle(|| q.poll(ports, nf, now))
}

/// One round of the agent handlers through the adapter: every port
/// until none has a packet.
#[inline(never)]
pub fn nf_round_adapter<H: PacketHandler>(
    adapter: &mut AgentAdapter,
    ports: &mut [&mut dyn Port],
    handlers: &mut [H],
    nf: &AgentNf,
    now: Duration,
) -> usize {
    nf.set_now(now);
    until_idle(|| adapter.poll(ports, handlers))
}

/// An NF set up in a driver model on some ports.
pub struct Rounds<'r> {
    /// `round(now)` processes everything waiting; returns the packets.
    pub round: &'r mut dyn FnMut(Duration) -> usize,
    /// The NF's counters (between rounds).
    pub stats: &'r dyn Fn() -> NfStats,
    /// The NF's table, one line per entry (between rounds).
    pub table: &'r dyn Fn() -> Vec<String>,
    /// Per port, packets the NF sent there (queued to an 82599 agent's
    /// output, handed to the port otherwise).
    pub sent: &'r dyn Fn() -> Vec<u64>,
    /// Per port, packets the NF sent there that the port refused (a full
    /// transmit ring; agents never refuse, they stop receiving instead).
    pub refused: &'r dyn Fn() -> Vec<u64>,
}

/// Set `nf` up in `model` on `nics` and hand `body` its [`Rounds`].
pub fn with_form<R>(
    model: Model,
    nics: &SimNics,
    nf: &mut dyn NetworkFunction,
    body: impl FnOnce(Rounds<'_>) -> R,
) -> Result<R> {
    Ok(match model {
        Model::Agent => {
            let mut agents = agents(&nics.devs)?;
            let agent_nf = AgentNf::new(nf);
            let mut handlers = agent_nf.handlers();
            let ports = agents.len();
            // Shared by the round and the counters, never at once.
            let agents = RefCell::new(&mut agents);
            body(Rounds {
                round: &mut |now| {
                    nf_round_agent(&mut agents.borrow_mut(), &mut handlers, &agent_nf, now)
                },
                stats: &|| agent_nf.nf().stats().clone(),
                table: &|| agent_nf.nf().table(),
                sent: &|| {
                    (0..ports)
                        .map(|o| {
                            agents
                                .borrow()
                                .iter()
                                .map(|a| a.stats().tx_packets[o])
                                .sum()
                        })
                        .collect()
                },
                refused: &|| vec![0; ports],
            })
        }
        Model::Queue => {
            let mut owned = queue_ports(nics)?;
            let ports = RefCell::new(owned.iter_mut().collect::<Vec<_>>());
            queue_rounds(&ports, nf, body)
        }
        Model::AgentAdapter => {
            let mut owned = queue_ports(nics)?;
            let ports = RefCell::new(owned.iter_mut().map(|p| p as &mut dyn Port).collect());
            adapter_rounds(&ports, nf, body)
        }
    })
}

/// Set `nf` up in `model` on any `ports` (port `k` is NF port `k`) and
/// hand `body` its [`Rounds`]; between rounds `body` may borrow the
/// ports (for their counters and errors). `Model::Agent` runs through the
/// adapter here: agents need 82599 devices ([`with_form`]).
pub fn with_ports<R>(
    model: Model,
    ports: &RefCell<Vec<&mut dyn Port>>,
    nf: &mut dyn NetworkFunction,
    body: impl FnOnce(Rounds<'_>) -> R,
) -> R {
    match model.on(false) {
        Model::Queue => queue_rounds(ports, nf, body),
        _ => adapter_rounds(ports, nf, body),
    }
}

/// The queue-model loop's rounds over `ports`.
fn queue_rounds<P: Port + ?Sized, R>(
    ports: &RefCell<Vec<&mut P>>,
    nf: &mut dyn NetworkFunction,
    body: impl FnOnce(Rounds<'_>) -> R,
) -> R {
    // Shared by the round and the counters, never at once.
    let q = RefCell::new(QueueNf::new(ports.borrow().len()));
    let nf = RefCell::new(nf);
    body(Rounds {
        round: &mut |now| {
            nf_round_queue(
                &mut q.borrow_mut(),
                &mut ports.borrow_mut(),
                *nf.borrow_mut(),
                now,
            )
        },
        stats: &|| nf.borrow().stats().clone(),
        table: &|| nf.borrow().table(),
        sent: &|| q.borrow().stats().sent.clone(),
        refused: &|| q.borrow().stats().dropped.clone(),
    })
}

/// The agent handlers' rounds through the adapter over `ports`.
fn adapter_rounds<R>(
    ports: &RefCell<Vec<&mut dyn Port>>,
    nf: &mut dyn NetworkFunction,
    body: impl FnOnce(Rounds<'_>) -> R,
) -> R {
    let adapter = RefCell::new(AgentAdapter::new(ports.borrow().len()));
    let agent_nf = AgentNf::new(nf);
    let mut handlers = agent_nf.handlers();
    body(Rounds {
        round: &mut |now| {
            nf_round_adapter(
                &mut adapter.borrow_mut(),
                &mut ports.borrow_mut(),
                &mut handlers,
                &agent_nf,
                now,
            )
        },
        stats: &|| agent_nf.nf().stats().clone(),
        table: &|| agent_nf.nf().table(),
        sent: &|| adapter.borrow().stats().sent.clone(),
        refused: &|| adapter.borrow().stats().dropped.clone(),
    })
}
