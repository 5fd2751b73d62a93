//! `nfkit bench nfs`: every NF of `nfkit-nf` on both driver models over
//! simulated 82599s, with 60,000 flows (90% of the NFs' default 65,536
//! table capacity, the load TinyNF measured its NFs with), as
//! `nfkit bench drivers` does for TinyNF's trivial functions:
//!
//! - **Mpps per core** against the free-running model (one thread for the
//!   NF; the model's device threads and the generator compete with it on
//!   a small machine);
//! - **instructions per packet** from a lock-step run under callgrind,
//!   counting only [`nf_round_agent`]/[`nf_round_queue`] (driver, adapter
//!   and NF code; the model's own work, including inside a register write
//!   to its BAR, is excluded).
//!
//! Both models run the same NF code with two ports, an agent (or a queue
//! pair) per input port and outputs to both ports (the router sends ICMP
//! errors back out of the input). Tables are filled with one packet per
//! flow before measuring, so the figures are for the steady state.
//!
//! The set-up here ([`SimNics`], [`with_form`]) also runs the crafted-
//! packet scenarios of every form in the tests.

use crate::demo::Model;
use crate::ixgbe_port::IxgbePort;
use crate::lab::sim_mac;
use anyhow::{bail, Context, Result};
use nfkit_hw::sim::{SimDma, VirtualClock};
use nfkit_hw::{Clock, SystemClock};
use nfkit_ixgbe::{Agent, AgentConfig, Device, DeviceConfig, PacketHandler};
use nfkit_ixgbe_model::{ModelConfig, Nic82599, RunningNic, SimBar, TrafficGen};
use nfkit_nf::adapt::scenarios::Exchange;
use nfkit_nf::adapt::{AgentNf, QueueNf};
use nfkit_nf::{NetworkFunction, NfStats, PortId, NFS};
use nfkit_packet::{FrameBuilder, MacAddr};
use nfkit_port::agent::AgentAdapter;
use nfkit_port::Port;
use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flows per NF: 90% of the default table capacity of 65,536.
pub const FLOWS: usize = 60_000;

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

/// A form of an NF on 82599 queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Agent handlers on `nfkit_ixgbe::Agent`s.
    Agent,
    /// Agent handlers through `AgentAdapter` on queue-model ports.
    AgentAdapter,
    /// The queue-model loop.
    Queue,
}

impl From<Model> for Form {
    fn from(m: Model) -> Form {
        match m {
            Model::Agent => Form::Agent,
            Model::Queue => Form::Queue,
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
    let mut total = 0;
    loop {
        let mut n = 0;
        for (a, h) in agents.iter_mut().zip(handlers.iter_mut()) {
            n += a.run_once(h);
        }
        total += n;
        if n == 0 {
            return total;
        }
    }
}

/// One round of the queue model: every port until none has a packet.
#[inline(never)]
pub fn nf_round_queue(
    q: &mut QueueNf,
    ports: &mut [&mut IxgbePort<SimBar>],
    nf: &mut dyn NetworkFunction,
    now: Duration,
) -> usize {
    let mut total = 0;
    loop {
        let n = q.poll(ports, nf, now);
        total += n;
        if n == 0 {
            return total;
        }
    }
}

/// An NF set up in a form on some devices.
pub struct Rounds<'r> {
    /// `round(now)` processes everything waiting; returns the packets.
    pub round: &'r mut dyn FnMut(Duration) -> usize,
    /// The NF's counters (between rounds).
    pub stats: &'r dyn Fn() -> NfStats,
    /// Per port, packets the NF sent there that the port refused (a full
    /// transmit ring; agents never refuse, they stop receiving instead).
    pub refused: &'r dyn Fn() -> Vec<u64>,
}

/// Set `nf` up in `form` on `nics` and hand `body` its [`Rounds`].
pub fn with_form<R>(
    form: Form,
    nics: &SimNics,
    nf: &mut dyn NetworkFunction,
    body: impl FnOnce(Rounds<'_>) -> R,
) -> Result<R> {
    Ok(match form {
        Form::Agent => {
            let mut agents = agents(&nics.devs)?;
            let agent_nf = AgentNf::new(nf);
            let mut handlers = agent_nf.handlers();
            let ports = agents.len();
            body(Rounds {
                round: &mut |now| nf_round_agent(&mut agents, &mut handlers, &agent_nf, now),
                stats: &|| agent_nf.nf().stats().clone(),
                refused: &|| vec![0; ports],
            })
        }
        Form::Queue => {
            let mut owned = queue_ports(nics)?;
            let mut ports: Vec<&mut IxgbePort<SimBar>> = owned.iter_mut().collect();
            // Shared by the round and the counters, never at once.
            let q = RefCell::new(QueueNf::new(ports.len()));
            let nf = RefCell::new(nf);
            body(Rounds {
                round: &mut |now| {
                    nf_round_queue(&mut q.borrow_mut(), &mut ports, *nf.borrow_mut(), now)
                },
                stats: &|| nf.borrow().stats().clone(),
                refused: &|| q.borrow().stats().dropped.clone(),
            })
        }
        Form::AgentAdapter => {
            let mut owned = queue_ports(nics)?;
            let mut ports: Vec<&mut dyn Port> = owned.iter_mut().map(|p| p as _).collect();
            let adapter = RefCell::new(AgentAdapter::new(ports.len()));
            let agent_nf = AgentNf::new(nf);
            let mut handlers = agent_nf.handlers();
            body(Rounds {
                round: &mut |now| {
                    agent_nf.set_now(now);
                    let mut total = 0;
                    loop {
                        let n = adapter.borrow_mut().poll(&mut ports, &mut handlers);
                        total += n;
                        if n == 0 {
                            return total;
                        }
                    }
                },
                stats: &|| agent_nf.nf().stats().clone(),
                refused: &|| adapter.borrow().stats().dropped.clone(),
            })
        }
    })
}

/// A form on lock-step devices as an [`Exchange`]: a frame onto a
/// port's wire, device steps and rounds, and whatever the devices put on
/// their wires.
pub struct LockstepExchange<'a> {
    pub nics: &'a SimNics,
    pub round: &'a mut dyn FnMut(Duration) -> usize,
}

impl Exchange for LockstepExchange<'_> {
    fn send(&mut self, port: PortId, frame: &[u8], now: Duration) -> Vec<(PortId, Vec<u8>)> {
        if !self.nics.nics[port].wire().inject(frame) {
            return Vec::new();
        }
        // Receive (device), handle (driver), transmit (device); a few
        // times over, for write-backs and tails written when idle.
        for _ in 0..4 {
            self.nics.step();
            (self.round)(now);
        }
        self.nics.step();
        let mut out = Vec::new();
        for (p, nic) in self.nics.nics.iter().enumerate() {
            nic.wire().drain_transmitted(|f| out.push((p, f.to_vec())));
        }
        out
    }
}

/// The traffic an NF is measured with.
pub struct Workload {
    pub options: Vec<String>,
    /// Port the traffic arrives on (it leaves by the other).
    pub input: PortId,
    /// One frame per flow, 60 bytes.
    pub frames: Vec<Vec<u8>>,
}

/// The measured traffic of NF `name`: `flows` UDP flows in the direction
/// that creates the NF's state (LAN to WAN for NAT and firewall, clients
/// on the WAN for the LB, WAN to LAN for the policer; the bridge learns a
/// source MAC per flow and floods to an unknown destination; the router
/// routes to a destination per flow).
pub fn workload(name: &str, flows: usize) -> Result<Workload> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let udp = |src: Ipv4Addr, sport: u16, dst: Ipv4Addr| {
        FrameBuilder::udp((src, sport), (dst, 5000)).payload(&[0; 18])
    };
    let host = |i: usize| Ipv4Addr::from(0x0a00_0000 + 2 + i as u32);
    let port_of = |i: usize| 1024 + (i % 50_000) as u16;
    let server = Ipv4Addr::new(198, 51, 100, 1);
    let frames: Vec<Vec<u8>> = (0..flows)
        .map(|i| match name {
            "lb" => udp(
                Ipv4Addr::from(0xc633_0000 + i as u32),
                port_of(i),
                Ipv4Addr::new(192, 0, 2, 10),
            )
            .build(),
            "policer" => udp(server, 53, host(i)).build(),
            "bridge" => udp(host(0), 1, server)
                .macs(
                    MacAddr([2, 1, 0, 0, (i >> 8) as u8, i as u8]),
                    MacAddr([2, 0xee, 0, 0, 0, 1]),
                )
                .build(),
            "router" => udp(host(0), 1, Ipv4Addr::from(0x0800_0000 + i as u32)).build(),
            _ => udp(host(i), port_of(i), server).build(),
        })
        .collect();
    let (options, input) = match name {
        "nat" => (s(&["--ext-ip", "203.0.113.1", "--ports", "1024-65535"]), 0),
        "firewall" | "bridge" => (Vec::new(), 0),
        "lb" => (
            s(&[
                "--vip",
                "192.0.2.10",
                "--backend",
                "10.1.0.2@02:00:00:00:b0:02",
                "--backend",
                "10.1.0.3@02:00:00:00:b0:03",
                "--backend",
                "10.1.0.4@02:00:00:00:b0:04",
                "--backend",
                "10.1.0.5@02:00:00:00:b0:05",
            ]),
            1,
        ),
        // Buckets idle for burst/rate (1000 s) expire: none does here.
        "policer" => (s(&["--rate", "1G", "--burst", "1T"]), 1),
        "router" => (
            s(&[
                "--iface",
                "0,10.0.0.1/8,02:00:00:00:01:00",
                "--iface",
                "1,192.0.2.1/24,02:00:00:00:01:01",
                "--route",
                "0.0.0.0/0,1,192.0.2.254",
                "--neighbor",
                "192.0.2.254,02:00:00:00:0f:fe",
            ]),
            0,
        ),
        other => bail!("no workload for NF `{other}`"),
    };
    Ok(Workload {
        options,
        input,
        frames,
    })
}

/// Build NF `name` and fill its tables with one packet per flow.
fn prepared(name: &str, w: &Workload) -> Result<nfkit_nf::BoxedNf> {
    let mut nf = nfkit_nf::build(name, &w.options)?;
    let mut buf = vec![0u8; 2048];
    for f in &w.frames {
        buf[..f.len()].copy_from_slice(f);
        nf.process(&mut buf, f.len(), w.input, Duration::ZERO);
    }
    Ok(nf)
}

/// Forwarding rate of NF `name` in `model` against the free-running
/// model, over `seconds` after a warm-up.
pub fn mpps(model: Model, name: &str, seconds: f64) -> Result<f64> {
    let w = workload(name, FLOWS)?;
    let mut nf = prepared(name, &w)?;
    let nics = SimNics::free_running(2)?;
    let output = 1 - w.input;
    let sink = nics.nics[output].wire().attach_sink();
    let stop = Arc::new(AtomicBool::new(false));
    let pump = {
        let wire = nics.nics[w.input].wire();
        let mut gen = TrafficGen::from_frames(w.frames.clone());
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if wire.rx_pending() < 256 {
                    gen.inject(&wire, 64);
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };
    let warmup = Duration::from_millis(300);
    let start = Instant::now();
    let measured = with_form(model.into(), &nics, &mut *nf, |r| {
        let mut base = None;
        let mut done = 0u64;
        loop {
            let now = start.elapsed();
            done += (r.round)(now) as u64;
            if base.is_none() && now >= warmup {
                base = Some((done, Instant::now()));
            }
            if now.as_secs_f64() >= seconds + warmup.as_secs_f64() {
                return base.map(|(b, at)| (done - b, at.elapsed()));
            }
        }
    })?;
    stop.store(true, Ordering::Relaxed);
    let _ = pump.join();
    let (packets, over) = measured.context("the run was shorter than its warm-up")?;
    if sink.frames() == 0 {
        bail!("nf {name}: nothing came out of port {output}");
    }
    Ok(packets as f64 / over.as_secs_f64() / 1e6)
}

/// The lock-step run measured under callgrind: `packets` frames of NF
/// `name`'s workload. Returns the packets that came out.
pub fn lockstep(model: Model, name: &str, packets: u64) -> Result<u64> {
    let w = workload(name, FLOWS)?;
    let mut nf = prepared(name, &w)?;
    let nics = SimNics::lockstep(2)?;
    let output = 1 - w.input;
    let sink = nics.nics[output].wire().attach_sink();
    let wire = nics.nics[w.input].wire();
    let mut gen = TrafficGen::from_frames(w.frames.clone());
    with_form(model.into(), &nics, &mut *nf, |r| {
        let (mut handled, mut idle) = (0u64, 0);
        let mut tick = 0u64;
        while handled < packets && idle < 1000 {
            let want = (packets - handled).min(128) as usize;
            if wire.rx_pending() < 256 {
                gen.inject(&wire, want);
            }
            nics.step();
            tick += 1;
            // Virtual time: 1 µs per round, read once per round.
            let n = (r.round)(Duration::from_micros(tick)) as u64;
            nics.step();
            handled += n;
            idle = if n == 0 { idle + 1 } else { 0 };
        }
    })?;
    nics.step();
    Ok(sink.frames())
}

/// Instructions per packet of the NF rounds, from callgrind (`None`
/// without valgrind).
pub fn instructions_per_packet(model: Model, name: &str, packets: u64) -> Result<Option<f64>> {
    let packets = packets.to_string();
    crate::bench::callgrind_per_packet(
        "nf_round_",
        &[
            "bench-nf-lockstep",
            "--model",
            model_arg(model),
            "--nf",
            name,
            "--packets",
            &packets,
        ],
    )
}

fn model_arg(m: Model) -> &'static str {
    match m {
        Model::Agent => "agent",
        Model::Queue => "queue",
    }
}

/// One NF's figures on one model.
#[derive(Debug, Clone, Copy)]
struct Row {
    mpps: f64,
    instructions: Option<f64>,
}

/// The whole table, for the NFs in `only` (all when empty).
pub fn nfs(seconds: f64, packets: u64, only: &[String]) -> Result<()> {
    let have_valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if cfg!(debug_assertions) {
        println!(
            "note: a debug build; run `cargo run --release -- bench nfs` for meaningful figures"
        );
    }
    println!("{FLOWS} flows per NF, 60-byte frames, one direction");
    println!(
        "{:<9} {:<6} {:>14} {:>16}",
        "NF", "model", "Mpps per core", "instr./packet"
    );
    let (mut faster, mut leaner, mut compared) = (0, 0, 0);
    for (name, _) in NFS
        .iter()
        .filter(|(n, _)| only.is_empty() || only.iter().any(|o| o == n))
    {
        let mut rows = Vec::new();
        for model in [Model::Agent, Model::Queue] {
            let row = Row {
                mpps: mpps(model, name, seconds)?,
                instructions: if have_valgrind {
                    instructions_per_packet(model, name, packets)?
                } else {
                    None
                },
            };
            println!(
                "{:<9} {:<6} {:>14.3} {:>16}",
                name,
                model_arg(model),
                row.mpps,
                row.instructions
                    .map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "no valgrind".into())
            );
            rows.push(row);
        }
        compared += 1;
        faster += usize::from(rows[0].mpps > rows[1].mpps);
        if let (Some(a), Some(q)) = (rows[0].instructions, rows[1].instructions) {
            leaner += usize::from(a < q);
        }
    }
    println!(
        "agent model vs queue model: faster on {faster} of {compared} NFs, fewer instructions per packet on {leaner} of {compared}"
    );
    println!(
        "{}",
        if leaner == compared && compared > 0 {
            "as TinyNF found: the agent model beats the queue model on real NFs (by instructions per packet)"
        } else {
            "unlike TinyNF's finding, the agent model does not beat the queue model on every NF here"
        }
    );
    Ok(())
}
