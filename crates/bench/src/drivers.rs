//! `nfkit bench drivers`: the two driver models compared on equal terms,
//! with the network functions of TinyNF's Table 4:
//!
//! - **no-op**: the packet is not touched;
//! - **MAC write**: a constant is written to the destination MAC;
//! - **MAC lookup**: the destination MAC is set from a table indexed by
//!   the source MAC.
//!
//! Two figures per model and function:
//! - **Mpps per core** forwarding one direction against the free-running
//!   82599 model (one forwarding thread; the model and the generator run
//!   on their own threads, so on a 2-core machine they compete with it);
//! - **driver cycles per packet** from the forwarding thread's own CPU
//!   time over the same run ([`nfkit_lab::cost`]), with a projection of
//!   one core's Mpps and the model's CPU shown apart: figures that do not
//!   follow the starved model;
//! - **instructions per packet** from a lock-step run under callgrind,
//!   counting only [`driver_round_agent`]/[`driver_round_queue`] (driver
//!   and function code; the device model's own work runs outside them and
//!   is excluded, including what happens inside a register write to the
//!   simulated BAR).

use anyhow::{bail, Context, Result};
use nfkit_hw::Batch;
use nfkit_ixgbe::{Agent, AgentConfig, IxgbePort};
use nfkit_ixgbe_model::{SimBar, TrafficGen};
use nfkit_lab::cost::{DriverCost, Mark};
use nfkit_lab::forms::SimNics;
use nfkit_lab::{sim_mac, SimLab, SimWire};
use nfkit_port::{Model, Port};
use std::time::{Duration, Instant};

/// The network functions of TinyNF's Table 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Nf {
    Noop,
    MacWrite,
    MacLookup,
}

impl Nf {
    pub const ALL: [Nf; 3] = [Nf::Noop, Nf::MacWrite, Nf::MacLookup];

    fn name(self) -> &'static str {
        match self {
            Nf::Noop => "no-op",
            Nf::MacWrite => "MAC write",
            Nf::MacLookup => "MAC lookup",
        }
    }
}

/// Destination MACs by the last byte of the source MAC.
pub struct MacTable([[u8; 6]; 256]);

impl Default for MacTable {
    fn default() -> Self {
        MacTable::new()
    }
}

impl MacTable {
    pub fn new() -> MacTable {
        let mut t = [[0u8; 6]; 256];
        for (i, m) in t.iter_mut().enumerate() {
            *m = [0x02, 0, 0, 0, 0x10, i as u8];
        }
        MacTable(t)
    }
}

/// One of TinyNF's functions, compiled into the round that runs it (as
/// TinyNF compiles its function into the driver loop): choosing the
/// function per packet would add harness work to every figure.
pub trait NfFn: Copy {
    /// Apply the function to one frame in place.
    fn apply(self, frame: &mut [u8]);
}

/// The packet is not touched.
#[derive(Clone, Copy)]
pub struct NoopFn;
/// A constant is written to the destination MAC.
#[derive(Clone, Copy)]
pub struct MacWriteFn;
/// The destination MAC comes from a table indexed by the source MAC.
#[derive(Clone, Copy)]
pub struct MacLookupFn<'a>(pub &'a MacTable);

impl NfFn for NoopFn {
    #[inline(always)]
    fn apply(self, _frame: &mut [u8]) {}
}

impl NfFn for MacWriteFn {
    #[inline(always)]
    fn apply(self, frame: &mut [u8]) {
        frame[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    }
}

impl NfFn for MacLookupFn<'_> {
    #[inline(always)]
    fn apply(self, frame: &mut [u8]) {
        let dst = self.0 .0[frame[11] as usize];
        frame[0..6].copy_from_slice(&dst);
    }
}

/// Run `body` with `nf` as its compiled-in function.
macro_rules! with_nf {
    ($nf:expr, $table:expr, |$f:ident| $body:expr) => {
        match $nf {
            Nf::Noop => {
                let $f = NoopFn;
                $body
            }
            Nf::MacWrite => {
                let $f = MacWriteFn;
                $body
            }
            Nf::MacLookup => {
                let $f = MacLookupFn($table);
                $body
            }
        }
    };
}

/// One round of the agent model: handle every waiting packet.
#[inline(never)]
pub fn driver_round_agent<F: NfFn>(agent: &mut Agent<SimBar>, nf: F) -> usize {
    let mut handler = |buf: &mut [u8], len: usize, out: &mut [u16]| {
        nf.apply(&mut buf[..len]);
        out[0] = len as u16;
    };
    let mut total = 0;
    loop {
        let n = agent.run_once(&mut handler);
        total += n;
        if n == 0 {
            return total;
        }
    }
}

/// One round of the queue model: receive a batch, apply, transmit,
/// drop what the transmit ring refused.
#[inline(never)]
pub fn driver_round_queue<F: NfFn>(
    rx: &mut IxgbePort<SimBar>,
    tx: &mut IxgbePort<SimBar>,
    batch: &mut Batch,
    nf: F,
) -> usize {
    let mut total = 0;
    loop {
        let n = rx.rx_batch(0, batch);
        if n == 0 {
            return total;
        }
        total += n;
        for p in batch.iter_mut() {
            nf.apply(p.data_mut());
        }
        tx.tx_batch(0, batch);
        batch.clear();
    }
}

/// Forwarding rate against the free-running model, one direction.
/// Also returns the forwarding thread's own cost over the measured time
/// ([`nfkit_lab::cost`]), which does not depend on the starved model.
pub fn mpps(model: Model, nf: Nf, seconds: f64) -> Result<(f64, Option<DriverCost>)> {
    let lab = SimLab::new(
        SimWire::Load {
            frame_len: 60,
            flows: 256,
        },
        1,
    );
    let devs = [lab.open_device(0, "sim:0")?, lab.open_device(1, "sim:1")?];
    let table = MacTable::new();
    lab.start_load();
    let start = Instant::now();
    let mut forwarded = 0u64;
    let warmup = Duration::from_millis(300);
    let mut measured_from = None;
    let mut base = 0u64;
    let mut mark = None;
    match model {
        Model::AgentAdapter => bail!("bench drivers measures agents and queues"),
        Model::Agent => {
            let mut agent = Agent::new(&devs[0], 0, &[(&devs[1], 0)], &AgentConfig::default())?;
            while start.elapsed().as_secs_f64() < seconds + warmup.as_secs_f64() {
                forwarded += with_nf!(nf, &table, |f| driver_round_agent(&mut agent, f)) as u64;
                if measured_from.is_none() && start.elapsed() >= warmup {
                    measured_from = Some(Instant::now());
                    mark = Some(Mark::now());
                    base = forwarded;
                }
            }
        }
        Model::Queue => {
            let mut rx = IxgbePort::new("sim:0", devs[0].clone(), &**lab.dma())?;
            let mut tx = IxgbePort::new("sim:1", devs[1].clone(), &**lab.dma())?;
            let mut batch = Batch::new();
            while start.elapsed().as_secs_f64() < seconds + warmup.as_secs_f64() {
                forwarded += with_nf!(nf, &table, |f| driver_round_queue(
                    &mut rx, &mut tx, &mut batch, f
                )) as u64;
                if measured_from.is_none() && start.elapsed() >= warmup {
                    measured_from = Some(Instant::now());
                    mark = Some(Mark::now());
                    base = forwarded;
                }
            }
        }
    }
    let cost = mark.and_then(|m| m.finish(forwarded - base));
    lab.stop_load();
    let from = measured_from.context("the run was shorter than its warm-up")?;
    Ok((
        (forwarded - base) as f64 / from.elapsed().as_secs_f64() / 1e6,
        cost,
    ))
}

/// The lock-step run measured under callgrind: `packets` frames through
/// one direction. Returns the packets forwarded.
pub fn lockstep(model: Model, nf: Nf, packets: u64) -> Result<u64> {
    // The lab's lock-step pair: device work happens only in `step`,
    // outside the counted driver rounds.
    let nics = SimNics::lockstep(2)?;
    let (nic0, nic1) = (&nics.nics[0], &nics.nics[1]);
    let (d0, d1) = (&nics.devs[0], &nics.devs[1]);
    let dma = &nics.dma;
    nic1.wire().attach_sink();
    let table = MacTable::new();
    let mut gen = TrafficGen::udp_flows(sim_mac(0), 256, 60);
    let wire = nic0.wire();
    let mut forwarded = 0u64;
    let mut agent;
    let mut ports;
    let mut batch = Batch::new();
    match model {
        Model::AgentAdapter => bail!("bench drivers measures agents and queues"),
        Model::Agent => {
            agent = Some(Agent::new(d0, 0, &[(d1, 0)], &AgentConfig::default())?);
            ports = None;
        }
        Model::Queue => {
            agent = None;
            ports = Some((
                IxgbePort::new("sim:0", d0.clone(), &**dma)?,
                IxgbePort::new("sim:1", d1.clone(), &**dma)?,
            ));
        }
    }
    let mut idle_rounds = 0;
    while forwarded < packets && idle_rounds < 1000 {
        let want = (packets - forwarded).min(128) as usize;
        if wire.rx_pending() < 256 {
            gen.inject(&wire, want);
        }
        nic0.step();
        let n = match (&mut agent, &mut ports) {
            (Some(a), _) => with_nf!(nf, &table, |f| driver_round_agent(a, f)),
            (_, Some((rx, tx))) => {
                with_nf!(nf, &table, |f| driver_round_queue(rx, tx, &mut batch, f))
            }
            _ => 0,
        };
        nic1.step();
        forwarded += n as u64;
        idle_rounds = if n == 0 { idle_rounds + 1 } else { 0 };
    }
    Ok(forwarded)
}

/// Instructions per packet of the driver rounds, from callgrind.
pub fn instructions_per_packet(model: Model, nf: Nf, packets: u64) -> Result<Option<f64>> {
    let packets = packets.to_string();
    crate::callgrind::per_packet(
        "driver_round_",
        &[
            "bench-lockstep",
            "--model",
            model.name(),
            "--nf",
            nf_arg(nf),
            "--packets",
            &packets,
        ],
    )
}

fn nf_arg(nf: Nf) -> &'static str {
    match nf {
        Nf::Noop => "noop",
        Nf::MacWrite => "mac-write",
        Nf::MacLookup => "mac-lookup",
    }
}

/// The whole table.
pub fn drivers(seconds: f64, packets: u64) -> Result<()> {
    let have_valgrind = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if cfg!(debug_assertions) {
        println!("note: a debug build; run `cargo build --release && target/release/nfkit bench drivers` for meaningful figures");
    }
    println!(
        "{:<7} {:<11} {:>14} {:>16} {:>14} {:>16} {:>10}",
        "model",
        "function",
        "Mpps per core",
        "instr./packet",
        "driver cyc/pkt",
        "1-core proj Mpps",
        "model CPU"
    );
    for model in Model::CHOICES {
        for nf in Nf::ALL {
            let (rate, cost) = mpps(model, nf, seconds)?;
            let ipp = if have_valgrind {
                instructions_per_packet(model, nf, packets)?
            } else {
                None
            };
            let opt = |v: Option<f64>, d: usize| {
                v.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "-".into())
            };
            let c = cost.as_ref();
            println!(
                "{:<7} {:<11} {:>14.2} {:>16} {:>14} {:>16} {:>10}",
                model.name(),
                nf.name(),
                rate,
                ipp.map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "no valgrind".into()),
                opt(c.and_then(|c| c.cycles_per_packet()), 0),
                opt(c.and_then(|c| c.projected_mpps()), 2),
                opt(
                    c.map(|c| c.others_cpu.as_secs_f64() / c.wall.as_secs_f64().max(1e-9) * 100.0),
                    0
                ) + "%"
            );
        }
    }
    println!(
        "driver cyc/pkt: the forwarding thread's own CPU time (schedstat) per packet at the clock of \
         /proc/cpuinfo, empty polls included (an upper bound); 1-core proj Mpps: 1 / that time, a \
         projection, not a measurement; model CPU: the models' and generator's threads, % of a core, \
         not counted in the driver's figure"
    );
    println!(
        "targets (TinyNF Table 4): agent no-op <= 35 instructions/packet, queue (batched DPDK) <= 99"
    );
    if have_valgrind {
        let per_send = tso_instructions_per_send(2_000)?;
        println!(
            "queue model, 82599 TSO: {} driver instructions per 64 KB send (lock step, MSS 1448: \
             a context and {} data descriptors; the model's segmentation not counted)",
            per_send.map_or_else(|| "-".into(), |v| format!("{v:.0}")),
            (TSO_PAYLOAD + 54).div_ceil(nfkit_ixgbe::port::BUF_SIZE - nfkit_hw::pool::HEADROOM)
        );
    }
    Ok(())
}

/// Payload of the TSO case's send: a 64 KB frame with its 54 bytes of
/// Ethernet, IPv4 and TCP headers.
const TSO_PAYLOAD: usize = nfkit_ixgbe::TSO_MAX_SEND - 54;

/// One TSO round: hand the queue one 64 KB send (a chain with GSO
/// metadata: a context descriptor and one data descriptor per segment,
/// reclaiming what was sent before).
#[inline(never)]
pub fn driver_round_tso(tx: &mut nfkit_ixgbe::TxQueue<SimBar>, batch: &mut Batch) -> usize {
    tx.tx_batch(batch)
}

/// The TSO case in lock step: `sends` 64 KB TSO sends through one 82599
/// transmit queue (the model segments each into 1,448-byte segments,
/// outside the counted rounds); returns the sends queued.
pub fn tso_lockstep(sends: u64) -> Result<u64> {
    use nfkit_hw::pool::offload::{self as f, Gso, Offload, L3, L4};
    let nics = SimNics::lockstep(2)?;
    let (nic0, d0) = (&nics.nics[0], &nics.devs[0]);
    nic0.wire().attach_sink();
    let pool = nfkit_hw::Mempool::new(&*nics.dma, "tso", 4096, nfkit_ixgbe::port::BUF_SIZE)?;
    let mut tx = d0.tx_queue(0, &pool, nfkit_ixgbe::port::RING_SIZE)?;
    // Ethernet, IPv4 (total length, protocol 6, addresses), TCP (data
    // offset 5, ACK), then the payload.
    let mut frame = vec![0u8; 54 + TSO_PAYLOAD];
    frame[..6].copy_from_slice(&sim_mac(1));
    frame[6..12].copy_from_slice(&sim_mac(0));
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    let ip_len = (frame.len() - 14) as u16;
    frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
    frame[22] = 64;
    frame[23] = 6;
    frame[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    frame[46] = 5 << 4;
    frame[47] = 0x10;
    let meta = Offload {
        flags: f::IP_CSUM | f::L4_CSUM,
        l3: L3::Ipv4,
        l4: L4::Tcp,
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        gso: Gso::Tcp,
        gso_size: 1448,
        ..Offload::default()
    };
    let mut batch = Batch::new();
    let mut sent = 0;
    let mut idle = 0;
    while sent < sends && idle < 1000 {
        if batch.is_empty() {
            let mut p = pool
                .alloc_frame(&frame)
                .map_err(|e| anyhow::anyhow!("a 64 KB frame: {e}"))?;
            p.set_offload(meta);
            let _ = batch.push(p);
        }
        let n = driver_round_tso(&mut tx, &mut batch);
        nic0.step();
        sent += n as u64;
        idle = if n == 0 { idle + 1 } else { 0 };
    }
    if tx.counters().errors > 0 {
        bail!("the queue refused {} TSO sends", tx.counters().errors);
    }
    Ok(sent)
}

/// Driver instructions per 64 KB TSO send (callgrind, lock step, the
/// model's segmentation excluded).
pub fn tso_instructions_per_send(sends: u64) -> Result<Option<f64>> {
    let sends = sends.to_string();
    crate::callgrind::per_packet(
        "driver_round_tso",
        &["bench-tso-lockstep", "--sends", &sends],
    )
}
