//! `nfkit bench traffic` (issue 21, part a: SoftNIC §6.2 and Table 2,
//! measured at nfkit's output). `RateLimit` shapes 1, 10, 100, 1,000 and
//! 4,096 flows, flow i at 1 + (i mod 11) Mbit/s, 1,500-byte frames; a
//! weighted source offers each flow 5% more than its rate; a recording
//! sink timestamps every packet with the scheduler's clock. One worker,
//! pinned to the forwarding core, real time.
//!
//! Reported per case: accuracy (each flow's rate from its first to its
//! last packet over its configured rate; the minimum over flows, and the
//! flows under 0.999), the inter-packet-gap σ (mean over flows), the
//! shaper's cycles per packet (measured apart: the module alone, every
//! flow backlogged, 4,096 packets held in all, one enqueue and one
//! dequeue per packet; and the same loop's instructions per packet in
//! lock step under callgrind, which the machine's load does not move),
//! and the shaper's `tokens_lost` (credit lost while the worker fell
//! behind). Targets: accuracy >= 0.999 at 1,000 flows; cost per packet
//! within 20% from 1 to 4,096 flows.
//!
//! Part b: FlowDirector's cycles per packet at 1k, 64k and 1M exact
//! 5-tuple entries (batches of 32 over 8,192 frames hitting random
//! entries, as `bench classify` measures ExactMatch).
//!
//! Part c: AdaptiveLB against HashLB on a skewed workload, on virtual
//! time (so the figures do not depend on this machine's load): 4 gates
//! served at 120, 120, 80 and 80 kpps (FIFO servers, 1,024 packets of
//! queue each), 4 elephant flows of 32 kpps each among mice (20 packets
//! 1 ms apart, a new mouse every 150 µs on average), 1,000-byte
//! packets, 65% of the gates' capacity offered. Each packet goes
//! through the real module at its arrival time; reported: p50 and p99
//! latency (arrival to end of service), drops, and imbalance (the
//! busiest gate's offered load over its capacity, against the same
//! ratio for all gates together: 1.00 is perfect), medians over seeds.

use crate::classify::{frame, Rng};
use crate::testpmd::{tsc_hz, FORWARDING_CORE, WARMUP};
use anyhow::{anyhow, Result};
use nfkit_hw::sim::SimDma;
use nfkit_hw::{Batch, Mempool};
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::counters::ModuleCounters;
use nfkit_pipeline::module::{Ctx, Module};
use nfkit_pipeline::modules::adaptive_lb::AdaptiveLb;
use nfkit_pipeline::modules::flow_director::{FlowDirector, Learn};
use nfkit_pipeline::modules::flow_table::pack;
use nfkit_pipeline::modules::{BuildEnv, HashFields, HashLb, Registry};
use nfkit_pipeline::sched::{Placement, PolicySpec, RealClock, Resource};
use nfkit_pipeline::{Graph, Pipeline};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

const FRAME: usize = 1500;
const BITS: u64 = FRAME as u64 * 8;
/// The flow counts measured.
pub const FLOWS: [usize; 5] = [1, 10, 100, 1000, 4096];

fn rate(i: usize) -> u64 {
    (1 + (i % 11) as u64) * 1_000_000
}

/// Frames carrying a flow number at offset 14, flows in turn by weight.
struct FlowSource {
    pool: Mempool,
    /// Packets a run (few at low rates, so that no flow gets a burst
    /// its queue cannot hold).
    per_run: usize,
    frame: Vec<u8>,
    schedule: Vec<u16>,
    next: usize,
}

impl Module for FlowSource {
    fn class(&self) -> &'static str {
        "FlowSource"
    }
    fn igates(&self) -> usize {
        0
    }
    fn process(&mut self, _: &mut Ctx<'_>, _: usize, _: &mut Batch) {}
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        for _ in 0..self.per_run {
            let Some(mut p) = self.pool.alloc() else {
                break;
            };
            let flow = self.schedule[self.next];
            self.next = if self.next + 1 == self.schedule.len() {
                0
            } else {
                self.next + 1
            };
            self.frame[14..16].copy_from_slice(&flow.to_be_bytes());
            if p.copy_from(&self.frame).is_err() {
                ctx.drop_packet(p);
                continue;
            }
            ctx.count_created(1);
            ctx.emit(0, p);
        }
    }
}

/// Per flow: packets, first and last time, sums of gaps.
#[derive(Default, Clone, Copy)]
struct Seen {
    n: u64,
    first: u64,
    last: u64,
    gap_sum: f64,
    gap_sq: f64,
}

struct Recorder {
    from_ns: Arc<Mutex<u64>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Module for Recorder {
    fn class(&self) -> &'static str {
        "Recorder"
    }
    fn ogates(&self) -> usize {
        0
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        let from = *self.from_ns.lock();
        let mut seen = self.seen.lock();
        for p in batch.drain() {
            let d = p.data();
            let flow = u16::from_be_bytes([d[14], d[15]]) as usize;
            if now >= from {
                if let Some(s) = seen.get_mut(flow) {
                    if s.n > 0 {
                        let gap = (now - s.last) as f64;
                        s.gap_sum += gap;
                        s.gap_sq += gap * gap;
                    } else {
                        s.first = now;
                    }
                    s.n += 1;
                    s.last = now;
                }
            }
            ctx.count_consumed(1);
        }
    }
}

/// One measured flow count.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficResult {
    pub flows: usize,
    pub packets: u64,
    pub min_accuracy: f64,
    pub under_999: usize,
    pub ipg_sigma_us: f64,
    pub cycles_per_packet: f64,
    pub tokens_lost: u64,
}

/// Shape `flows` flows for `seconds` after the warm-up.
pub fn measure(flows: usize, seconds: u64, hz: f64) -> Result<TrafficResult> {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "traffic", 32768, 2048)?;
    let mut schedule = Vec::new();
    for i in 0..flows {
        schedule.extend(std::iter::repeat_n(
            i as u16,
            (rate(i) / 1_000_000) as usize,
        ));
    }
    let total_bps: u64 = (0..flows).map(rate).sum();
    let offered_pps = (total_bps / BITS * 105 / 100).max(1);
    let mut frame = vec![0u8; FRAME];
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);

    let shaper = shaper(flows, &pool, 64)?;
    let from_ns = Arc::new(Mutex::new(u64::MAX));
    let seen = Arc::new(Mutex::new(vec![Seen::default(); flows]));
    let mut g = Graph::new();
    g.add_worker("w0", Some(FORWARDING_CORE))?;
    g.add_module(
        "src",
        Box::new(FlowSource {
            pool,
            per_run: (offered_pps / 10_000).clamp(1, 32) as usize,
            frame,
            schedule,
            next: 0,
        }),
    )?;
    g.add_module("rl", shaper)?;
    g.add_module(
        "out",
        Box::new(Recorder {
            from_ns: from_ns.clone(),
            seen: seen.clone(),
        }),
    )?;
    g.connect("src", 0, "rl", 0)?;
    g.connect("rl", 0, "out", 0)?;
    g.add_tc(
        "offer",
        None,
        "root",
        PolicySpec::RateLimit {
            resource: Resource::Packet,
            limit: offered_pps,
            max_burst: Some(32),
        },
        Placement::default(),
    )?;
    g.attach("src", None, "offer", Placement::default())?;
    g.attach("rl", None, "root", Placement::default())?;
    let clock = Arc::new(RealClock::default());
    let mut p = Pipeline::new(g, clock.clone())?;
    p.start()?;
    std::thread::sleep(WARMUP);
    let out = |p: &Pipeline| p.stats().module("out").map_or(0, |m| m.consumed);
    let out0 = out(&p);
    *from_ns.lock() = nfkit_pipeline::sched::SchedClock::now_ns(&*clock);
    std::thread::sleep(Duration::from_secs(seconds));
    let out1 = out(&p);
    let stats = p.shutdown()?;
    let packets = out1.saturating_sub(out0);
    let tokens_lost = stats
        .module("rl")
        .and_then(|m| m.extra.iter().find(|e| e.0 == "tokens_lost"))
        .map_or(0, |e| e.1);
    let seen = seen.lock().clone();
    let (mut min_acc, mut under, mut sigma_sum, mut measured) = (f64::MAX, 0, 0.0, 0);
    for (i, s) in seen.iter().enumerate() {
        if s.n < 3 || s.last <= s.first {
            min_acc = 0.0;
            under += 1;
            continue;
        }
        let got = (s.n - 1) as f64 * BITS as f64 * 1e9 / (s.last - s.first) as f64;
        let acc = 1.0 - (got / rate(i) as f64 - 1.0).abs();
        min_acc = min_acc.min(acc);
        if acc < 0.999 {
            under += 1;
        }
        let k = (s.n - 1) as f64;
        let mean = s.gap_sum / k;
        sigma_sum += (s.gap_sq / k - mean * mean).max(0.0).sqrt();
        measured += 1;
    }
    Ok(TrafficResult {
        flows,
        packets,
        min_accuracy: min_acc,
        under_999: under,
        ipg_sigma_us: sigma_sum / measured.max(1) as f64 / 1000.0,
        cycles_per_packet: shaper_cycles(flows, hz)?,
        tokens_lost,
    })
}

/// The shaper alone, every flow backlogged (a timer wheel of `flows`
/// entries): cycles per packet of one enqueue and one dequeue, on this
/// thread, on a virtual time that lets ~32 packets through per run.
pub fn shaper_cycles(flows: usize, hz: f64) -> Result<f64> {
    let mut packets = 0u64;
    let started = std::time::Instant::now();
    shaper_rounds(flows, |round| {
        packets += round()?;
        Ok(started.elapsed() < Duration::from_millis(500))
    })?;
    Ok(started.elapsed().as_secs_f64() * hz / packets.max(1) as f64)
}

/// `packets` (at least) through the shaper of [`shaper_cycles`], for
/// callgrind (`nfkit-bench shaper-lockstep`): the set-up is outside
/// `shaper_round`, whose instructions are the shaper's per-packet cost.
pub fn shaper_lockstep(flows: usize, packets: u64) -> Result<u64> {
    let mut done = 0u64;
    shaper_rounds(flows, |round| {
        done += round()?;
        Ok(done < packets)
    })?;
    Ok(done)
}

/// Packets of a callgrind run of [`shaper_lockstep`].
const LOCKSTEP_PACKETS: u64 = 100_000;

/// Instructions per packet of [`shaper_lockstep`] with `flows` flows,
/// from callgrind (`None` without valgrind).
pub fn shaper_instructions(flows: usize) -> Result<Option<f64>> {
    crate::callgrind::per_packet(
        "shaper_round",
        &[
            "shaper-lockstep",
            "--flows",
            &flows.to_string(),
            "--packets",
            &LOCKSTEP_PACKETS.to_string(),
        ],
    )
}

/// Set up the backlogged shaper, then call `more` with a round (256
/// runs, each packet sent put back into its flow) until it says stop.
fn shaper_rounds(
    flows: usize,
    mut more: impl FnMut(&mut dyn FnMut() -> Result<u64>) -> Result<bool>,
) -> Result<()> {
    let dma = SimDma::new();
    // The same 4,096 packets held whatever the flow count (at least 4
    // a flow), so that every case touches as many packet buffers and
    // the figure is the shaper's own state's cost.
    let depth = 4096usize.div_ceil(flows).max(4);
    let pool = Mempool::new(&*dma, "shaper", depth * flows + 1024, 2048)?;
    let mut m = shaper(flows, &pool, depth)?;
    let counters = ModuleCounters::default();
    let (mut outs, mut trash) = ([Batch::new()], Batch::new());
    let mut frame = vec![0u8; FRAME];
    let mut t: u64 = 1_000_000_000;
    for _ in 0..depth {
        for chunk in (0..flows).collect::<Vec<_>>().chunks(32) {
            let mut b = Batch::new();
            for &f in chunk {
                frame[14..16].copy_from_slice(&(f as u16).to_be_bytes());
                let mut p = pool.alloc().ok_or_else(|| anyhow!("pool empty"))?;
                p.copy_from(&frame).map_err(|e| anyhow!("{e:?}"))?;
                let _ = b.push(p);
            }
            let mut ctx = Ctx::new(&mut outs, &mut trash, &[], &counters, t, 0);
            m.process(&mut ctx, 0, &mut b);
        }
    }
    let total_bps: u64 = (0..flows).map(rate).sum();
    let dt = (32 * BITS as u128 * 1_000_000_000 / total_bps as u128) as u64;
    // Credit for a whole run: every case sends ~32 packets a run (with
    // the default 1 ms cap, one flow at 1 Mbit/s would send one a run
    // and lose the rest as tokens, measuring the run, not the packet).
    let mut a = Args::from_pairs(&[("max_burst_us", Value::Int(2 * dt / 1000 + 1000))]);
    m.command("set_burst", &mut a).map_err(|e| anyhow!("{e}"))?;
    let mut spare = Batch::new();
    let mut round = || -> Result<u64> {
        Ok(shaper_round(
            &mut *m,
            &mut outs,
            (&mut trash, &mut spare),
            &counters,
            &mut t,
            dt,
        ))
    };
    while more(&mut round)? {}
    Ok(())
}

/// 256 runs of the shaper's task, each packet sent put back into its
/// flow (every flow stays backlogged); returns the packets sent.
#[inline(never)]
fn shaper_round(
    m: &mut dyn Module,
    outs: &mut [Batch; 1],
    (trash, spare): (&mut Batch, &mut Batch),
    counters: &ModuleCounters,
    t: &mut u64,
    dt: u64,
) -> u64 {
    let mut packets = 0;
    for _ in 0..256 {
        *t += dt;
        let mut ctx = Ctx::new(outs, trash, &[], counters, *t, 0);
        m.run_task(&mut ctx);
        // The sent packets back into their flows (no allocation: the
        // output batch and a spare trade places).
        std::mem::swap(&mut outs[0], spare);
        packets += spare.len() as u64;
        let mut ctx = Ctx::new(outs, trash, &[], counters, *t, 0);
        m.process(&mut ctx, 0, spare);
    }
    packets
}

/// A RateLimit keyed on the 2-byte flow number at offset 14, flow i at
/// `rate(i)`.
fn shaper(flows: usize, pool: &Mempool, queue: usize) -> Result<Box<dyn Module>> {
    let registry = Registry::default();
    let env = BuildEnv {
        ports: Default::default(),
        pool: pool.clone(),
    };
    let mut args = Args::from_pairs(&[
        (
            "fields",
            Value::List(vec![Value::Map(vec![
                ("offset".into(), Value::Int(14)),
                ("num_bytes".into(), Value::Int(2)),
            ])]),
        ),
        ("flows", Value::Int(8192)),
        ("queue", Value::Int(queue as u64)),
    ]);
    let mut shaper = registry
        .build("RateLimit", &mut args, &env)
        .map_err(|e| anyhow!("{e}"))?;
    for i in 0..flows {
        let mut a = Args::from_pairs(&[
            ("rate", Value::Int(rate(i))),
            ("values", Value::List(vec![Value::Int(i as u64)])),
        ]);
        shaper
            .command("set_rate", &mut a)
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(shaper)
}

/// `nfkit bench traffic`.
pub fn traffic(seconds: u64, quick: bool) -> Result<()> {
    let hz = tsc_hz()?;
    println!(
        "RateLimit: flow i at 1 + (i mod 11) Mbit/s, {FRAME}-byte frames offered 5% above each rate; \
         one worker on core {FORWARDING_CORE}, {seconds} s measured after {} s of warm-up",
        WARMUP.as_secs()
    );
    println!(
        "accuracy = 1 - |measured/configured - 1| per flow (first to last packet at the sink); \
         cycles/pkt = the shaper alone with every flow backlogged (one enqueue, one dequeue) x {:.0} MHz; \
         instr/pkt = the same in lock step under callgrind (`nfkit-bench shaper-lockstep --flows N \
         --packets {LOCKSTEP_PACKETS}`; not affected by the machine's load)",
        hz / 1e6
    );
    println!(
        "{:>6} {:>9} {:>13} {:>10} {:>13} {:>11} {:>10} {:>12}",
        "flows",
        "packets",
        "min accuracy",
        "< 0.999",
        "IPG sigma us",
        "cycles/pkt",
        "instr/pkt",
        "tokens lost"
    );
    let (mut cycles, mut instr) = (Vec::new(), Vec::new());
    for flows in FLOWS {
        let r = measure(flows, seconds, hz)?;
        // Not in --quick (the CI smoke runs a debug build): 5 valgrind runs.
        let i = if quick {
            None
        } else {
            shaper_instructions(flows)?
        };
        println!(
            "{:>6} {:>9} {:>13.5} {:>10} {:>13.2} {:>11.0} {:>10} {:>12}",
            r.flows,
            r.packets,
            r.min_accuracy,
            r.under_999,
            r.ipg_sigma_us,
            r.cycles_per_packet,
            i.map_or("-".to_string(), |i| format!("{i:.0}")),
            r.tokens_lost
        );
        cycles.push(r.cycles_per_packet);
        instr.extend(i);
    }
    let growth = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &c| (lo.min(c), hi.max(c)));
        (hi / lo - 1.0) * 100.0
    };
    let instr_growth = if instr.len() == FLOWS.len() {
        format!("instructions {:+.0}%, ", growth(&instr))
    } else {
        "instructions not measured (--quick, or no valgrind), ".to_string()
    };
    println!(
        "targets: accuracy >= 0.999 at 1,000 flows; cost per packet within 20% from 1 to 4,096 flows \
         (here {instr_growth}cycles {:+.0}%)",
        growth(&cycles)
    );
    println!();
    flow_director(hz, quick)?;
    println!();
    balance(quick);
    Ok(())
}

/// Part b: FlowDirector cycles per packet against its entries.
pub fn flow_director(hz: f64, quick: bool) -> Result<()> {
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 65_536, 1_048_576]
    };
    let packets = if quick { 100_000 } else { 2_000_000 };
    println!(
        "FlowDirector: exact 5-tuple entries, batches of 32 over 8,192 frames hitting random entries, {packets} packets a case"
    );
    println!("{:>9} {:>11} {:>8}", "entries", "cycles/pkt", "ns/pkt");
    let mut rng = Rng(0x5eed_f10d_0000_0001);
    for &n in sizes {
        let mut fd = FlowDirector::new(4, n, Learn::None);
        for i in 0..n as u32 {
            fd.add(
                pack(0x0a00_0001, 0x0b00_0000 + i, 6, 1000, 80),
                (i % 4) as u16,
            )
            .map_err(|e| anyhow!("{e}"))?;
        }
        let frames: Vec<Vec<u8>> = (0..8192)
            .map(|_| {
                frame(
                    0x0a00_0001,
                    0x0b00_0000 + (rng.next() % n as u64) as u32,
                    80,
                )
            })
            .collect();
        let ns = crate::classify::measure(&mut fd, &frames, packets);
        println!("{:>9} {:>11.1} {:>8.1}", n, ns * hz / 1e9, ns);
    }
    Ok(())
}

/// One balancer's result on the skewed workload.
#[derive(Debug, Clone, Copy)]
pub struct Balance {
    pub p50_us: f64,
    pub p99_us: f64,
    pub drops: f64,
    pub imbalance: f64,
}

/// Gate service rates (packets per second).
const GATE_PPS: [f64; 4] = [120e3, 120e3, 80e3, 80e3];
const QUEUE: f64 = 1024.0;

/// Arrivals of the skewed workload: (time ns, src, dst, sport, dport).
fn workload(seed: u64, ms: u64) -> Vec<(u64, u32, u32, u16, u16)> {
    let mut rng = Rng(seed | 1);
    let end = ms * 1_000_000;
    let mut pkts = Vec::new();
    // Elephants: 32 kpps each, from a random start phase.
    for e in 0..4u32 {
        let (src, dst) = (rng.next() as u32, rng.next() as u32);
        let mut t = rng.next() % 31_250;
        while t < end {
            pkts.push((t, src, dst, 5000 + e as u16, 80));
            t += 31_250;
        }
    }
    // Mice: a new one every 150 us on average (exponential gaps), 20
    // packets 1 ms apart.
    let mut t = 0u64;
    while t < end {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        t += (-(1.0 - u).ln() * 150_000.0) as u64;
        let (src, dst, sp) = (rng.next() as u32, rng.next() as u32, rng.next() as u16);
        for k in 0..20 {
            let at = t + k * 1_000_000;
            if at < end {
                pkts.push((at, src, dst, sp, 443));
            }
        }
    }
    pkts.sort_unstable();
    pkts
}

/// Run `lb` (gates 0..4) over the workload, gates as FIFO servers.
fn run_balance(lb: &mut dyn Module, pkts: &[(u64, u32, u32, u16, u16)]) -> Result<Balance> {
    let dma = SimDma::new();
    let pool = Mempool::new(&*dma, "balance", 256, 2048)?;
    let counters = ModuleCounters::default();
    let mut outs: Vec<Batch> = (0..lb.ogates()).map(|_| Batch::new()).collect();
    let mut trash = Batch::new();
    let mut free_at = [0f64; 4];
    let mut offered = [0u64; 4];
    let mut lat = Vec::with_capacity(pkts.len());
    let mut drops = 0u64;
    let mut f = frame(0, 0, 0);
    f.resize(1000, 0);
    // UDP, lengths that agree with the frame (HashLB parses them).
    f[23] = 17;
    f[16..18].copy_from_slice(&986u16.to_be_bytes());
    f[38..40].copy_from_slice(&966u16.to_be_bytes());
    f[40..42].copy_from_slice(&[0, 0]);
    for &(t, src, dst, sp, dp) in pkts {
        f[26..30].copy_from_slice(&src.to_be_bytes());
        f[30..34].copy_from_slice(&dst.to_be_bytes());
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        let mut p = pool.alloc().ok_or_else(|| anyhow!("pool empty"))?;
        p.copy_from(&f).map_err(|e| anyhow!("{e:?}"))?;
        let mut b = Batch::new();
        let _ = b.push(p);
        let mut ctx = Ctx::new(&mut outs, &mut trash, &[], &counters, t, 0);
        lb.process(&mut ctx, 0, &mut b);
        trash.clear();
        for (g, o) in outs.iter_mut().enumerate() {
            if o.is_empty() {
                continue;
            }
            o.clear();
            let g = g.min(3);
            offered[g] += 1;
            let now = t as f64;
            let service = 1e9 / GATE_PPS[g];
            let backlog = (free_at[g] - now).max(0.0) / service;
            if backlog >= QUEUE {
                drops += 1;
                continue;
            }
            free_at[g] = free_at[g].max(now) + service;
            lat.push(free_at[g] - now);
        }
    }
    lat.sort_unstable_by(f64::total_cmp);
    let q = |x: f64| lat.get(((lat.len() as f64 * x) as usize).min(lat.len().saturating_sub(1)));
    let total: u64 = offered.iter().sum();
    let cap: f64 = GATE_PPS.iter().sum();
    let worst = (0..4)
        .map(|g| offered[g] as f64 / GATE_PPS[g])
        .fold(0.0, f64::max);
    Ok(Balance {
        p50_us: q(0.5).copied().unwrap_or(0.0) / 1e3,
        p99_us: q(0.99).copied().unwrap_or(0.0) / 1e3,
        drops: drops as f64 / total.max(1) as f64,
        imbalance: worst / (total as f64 / cap),
    })
}

/// Both balancers over `seeds` runs of `ms` of virtual time each.
pub fn compare(seeds: u64, ms: u64) -> Result<[(&'static str, Vec<Balance>); 2]> {
    let mut adaptive = Vec::new();
    let mut hash = Vec::new();
    for s in 0..seeds {
        let pkts = workload(0x9e37_79b9 * (s + 1), ms);
        adaptive.push(run_balance(
            &mut AdaptiveLb::new(&[0, 1, 2, 3], 1 << 20),
            &pkts,
        )?);
        hash.push(run_balance(&mut HashLb::new(4, HashFields::L4), &pkts)?);
    }
    Ok([("AdaptiveLB", adaptive), ("HashLB", hash)])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Part c.
pub fn balance(quick: bool) {
    let (seeds, ms) = if quick { (1, 200) } else { (7, 2000) };
    println!(
        "AdaptiveLB vs HashLB: gates at 120/120/80/80 kpps (FIFO, 1,024-packet queues), 4 elephants of 32 kpps among 20-packet mice, \
         65% load, 1,000-byte packets; virtual time, {ms} ms x {seeds} seeds (medians; worst p99 in brackets)"
    );
    println!(
        "{:<11} {:>9} {:>9} {:>12} {:>8} {:>10}",
        "balancer", "p50 us", "p99 us", "(worst p99)", "drops %", "imbalance"
    );
    match compare(seeds, ms) {
        Ok(rows) => {
            for (name, r) in rows {
                let m = |f: fn(&Balance) -> f64| median(r.iter().map(f).collect());
                let worst = r.iter().map(|b| b.p99_us).fold(0.0, f64::max);
                println!(
                    "{name:<11} {:>9.1} {:>9.1} {:>12.1} {:>8.3} {:>10.2}",
                    m(|b| b.p50_us),
                    m(|b| b.p99_us),
                    worst,
                    m(|b| b.drops * 100.0),
                    m(|b| b.imbalance)
                );
            }
        }
        Err(e) => println!("balance: {e}"),
    }
}
