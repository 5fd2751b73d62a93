//! FlowGen (BESS): a task that makes TCP or UDP flows from a template
//! (its IPv4 protocol says which). New
//! flows arrive at `flow_rate` per second (`arrival`: `uniform` = evenly
//! spaced, `exponential` = a Poisson process); each lasts `flow_duration`
//! seconds (`duration`: `uniform` = exactly, `pareto` = Pareto with shape
//! 1.3 and that mean); the flows share `pps` packets per second. A TCP
//! flow's first packet has SYN set, its last FIN, the others ACK (UDP
//! packets are the template as it is); a flow's addresses and ports are
//! the template's plus random offsets below the `*_range` arguments.
//! The template's IPv4 and TCP/UDP checksums are computed once at start
//! and patched per packet (a UDP checksum that comes out 0 is sent as
//! 0xffff, as RFC 768 asks).
//! Packets are made when due by the scheduler's clock; flows and events
//! live in tables sized at start (at most `max_flows`), so nothing is
//! allocated per packet.
//!
//! Arguments: `template=[bytes]` (Ethernet/IPv4/TCP or UDP, required), `pps`,
//! `flow_rate`, `flow_duration`, `arrival`, `duration`, `quick_rampup=0|1`,
//! `ip_src_range`, `ip_dst_range`, `port_src_range`, `port_dst_range`,
//! `burst=32`, `seed`. Command: `set_burst(burst=N)`.

use super::classify::ip;
use super::csum;
use super::rng::{self, Rng};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module, DEFAULT_BURST};
use nfkit_hw::{Batch, PoolCache};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

crate::modules::declare_class!("FlowGen" => build);

/// Most flows alive at once.
pub const MAX_FLOWS: usize = 1 << 20;
const PARETO_SHAPE: f64 = 1.3;
const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const ACK: u8 = 0x10;
const TCP: u8 = 6;
const UDP: u8 = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    Uniform,
    Exponential,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duration {
    Uniform,
    Pareto,
}

#[derive(Clone, Copy, Default)]
struct Flow {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    left: u64,
    first: bool,
}

pub struct FlowGen {
    pool: PoolCache,
    template: Vec<u8>,
    l4: usize,
    /// The template's IPv4 protocol: 6 (TCP) or 17 (UDP).
    proto: u8,
    pps: f64,
    flow_rate: f64,
    flow_duration: f64,
    arrival: Arrival,
    duration: Duration,
    quick_rampup: bool,
    ranges: [u32; 4],
    burst: usize,
    rng: Rng,
    flows: Vec<Flow>,
    free: Vec<u32>,
    /// (due time ns, flow).
    events: BinaryHeap<Reverse<(u64, u32)>>,
    next_arrival: u64,
    /// Time between two packets of one flow.
    interval_ns: u64,
    started: bool,
    refused: u64,
}

impl FlowGen {
    fn per_flow_pps(&self) -> f64 {
        (self.pps / (self.flow_rate * self.flow_duration).max(1.0)).max(1e-9)
    }

    fn arrival_gap(&mut self) -> u64 {
        let mean = 1e9 / self.flow_rate;
        match self.arrival {
            Arrival::Uniform => mean as u64,
            Arrival::Exponential => (-(1.0 - self.rng.unit()).ln() * mean) as u64,
        }
        .max(1)
    }

    fn packets_of_new_flow(&mut self) -> u64 {
        let secs = match self.duration {
            Duration::Uniform => self.flow_duration,
            Duration::Pareto => {
                let xm = self.flow_duration * (PARETO_SHAPE - 1.0) / PARETO_SHAPE;
                (xm / (1.0 - self.rng.unit()).powf(1.0 / PARETO_SHAPE))
                    .min(self.flow_duration * 1000.0)
            }
        };
        ((secs * self.per_flow_pps()).round() as u64).max(1)
    }

    /// Start a flow whose first packet is due at `at`, with `left` packets.
    fn start_flow(&mut self, at: u64, left: u64, first: bool) {
        let Some(f) = self.free.pop() else {
            self.refused += 1;
            return;
        };
        let r = self.ranges;
        let mut off = |n: u32| {
            if n == 0 {
                0
            } else {
                self.rng.range(0, n as u64 - 1) as u32
            }
        };
        let flow = Flow {
            src: ip::addr(&self.template, ip::IP_SRC).wrapping_add(off(r[0])),
            dst: ip::addr(&self.template, ip::IP_DST).wrapping_add(off(r[1])),
            sport: u16::from_be_bytes([self.template[self.l4], self.template[self.l4 + 1]])
                .wrapping_add(off(r[2]) as u16),
            dport: u16::from_be_bytes([self.template[self.l4 + 2], self.template[self.l4 + 3]])
                .wrapping_add(off(r[3]) as u16),
            left,
            first,
        };
        self.flows[f as usize] = flow;
        self.events.push(Reverse((at, f)));
    }

    /// Write flow `f`'s next packet into `d` (a copy of the template).
    fn fill(&self, d: &mut [u8], f: &Flow, flags: u8) {
        let t = &self.template;
        let l4 = self.l4;
        let (c_ip, c_tcp) = (ip::ETH_LEN + 10, l4 + csum::l4_csum_at(self.proto));
        let mut s_ip = u16::from_be_bytes([d[c_ip], d[c_ip + 1]]);
        let mut s_tcp = u16::from_be_bytes([d[c_tcp], d[c_tcp + 1]]);
        for (at, new) in [(ip::IP_SRC, f.src), (ip::IP_DST, f.dst)] {
            let old = ip::addr(t, at);
            s_ip = ip::csum_update32(s_ip, old, new);
            s_tcp = ip::csum_update32(s_tcp, old, new);
            d[at..at + 4].copy_from_slice(&new.to_be_bytes());
        }
        let old_ports = ip::addr(t, l4);
        let new_ports = (f.sport as u32) << 16 | f.dport as u32;
        s_tcp = ip::csum_update32(s_tcp, old_ports, new_ports);
        d[l4..l4 + 4].copy_from_slice(&new_ports.to_be_bytes());
        if self.proto == TCP {
            let old_flags = u16::from_be_bytes([t[l4 + 12], t[l4 + 13]]);
            let new_flags = old_flags & 0xff00 | flags as u16;
            s_tcp = ip::csum_update(s_tcp, old_flags, new_flags);
            d[l4 + 13] = flags;
        } else if s_tcp == 0 {
            s_tcp = 0xffff; // 0 would mean "no checksum" in UDP
        }
        d[c_ip..c_ip + 2].copy_from_slice(&s_ip.to_be_bytes());
        d[c_tcp..c_tcp + 2].copy_from_slice(&s_tcp.to_be_bytes());
    }

    fn begin(&mut self, now: u64) {
        self.started = true;
        self.next_arrival = now;
        if self.quick_rampup {
            // The flows a steady state would have, part-way through.
            let n = ((self.flow_rate * self.flow_duration) as usize).min(self.flows.len());
            for _ in 0..n {
                let total = self.packets_of_new_flow();
                let left = self.rng.range(1, total);
                let at = now + self.rng.range(0, self.interval_ns);
                self.start_flow(at, left, false);
            }
            let gap = self.arrival_gap();
            self.next_arrival = now + gap;
        }
    }
}

impl Module for FlowGen {
    fn class(&self) -> &'static str {
        "FlowGen"
    }
    fn igates(&self) -> usize {
        0
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_dropped(batch.len() as u64);
        batch.clear();
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now_ns();
        if !self.started {
            self.begin(now);
        }
        while self.next_arrival <= now && !self.free.is_empty() {
            let at = self.next_arrival;
            let left = self.packets_of_new_flow();
            self.start_flow(at, left, true);
            let gap = self.arrival_gap();
            self.next_arrival += gap;
        }
        if self.free.is_empty() && self.next_arrival <= now {
            // Table full: arrivals in the past are refused.
            self.refused += 1;
            let gap = self.arrival_gap();
            self.next_arrival = now + gap;
        }
        let mut made = 0u64;
        while (made as usize) < self.burst {
            let Some(&Reverse((due, fi))) = self.events.peek() else {
                break;
            };
            if due > now {
                break;
            }
            let Some(mut p) = self.pool.alloc() else {
                break;
            };
            self.events.pop();
            let mut f = self.flows[fi as usize];
            let flags = if f.first {
                SYN
            } else if f.left == 1 {
                FIN | ACK
            } else {
                ACK
            };
            if p.copy_from(&self.template).is_err() {
                ctx.drop_packet(p);
                break;
            }
            self.fill(p.data_mut(), &f, flags);
            ctx.emit(0, p);
            made += 1;
            f.first = false;
            f.left -= 1;
            self.flows[fi as usize] = f;
            if f.left == 0 {
                self.free.push(fi);
            } else {
                self.events.push(Reverse((due + self.interval_ns, fi)));
            }
        }
        ctx.count_created(made);
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        if cmd != "set_burst" {
            return Err(ArgError::general(format!("FlowGen has no command `{cmd}`")));
        }
        let b = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
        args.finish(cmd)?;
        self.burst = b;
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("flows", (self.flows.len() - self.free.len()) as u64),
            ("refused_flows", self.refused),
        ]
    }
}

/// Compute the template's IPv4 header checksum, and its TCP or UDP
/// checksum when its lengths agree with the frame, so that patching
/// them per packet gives right ones.
fn set_checksums(t: &mut [u8], l4: usize, proto: u8) {
    let c_ip = ip::ETH_LEN + 10;
    t[c_ip..c_ip + 2].fill(0);
    let c = csum::finish(csum::sum(&t[ip::ETH_LEN..l4]));
    t[c_ip..c_ip + 2].copy_from_slice(&c.to_be_bytes());
    if let Some((at, len, _, pseudo)) = csum::l4(t) {
        let c_l4 = at + csum::l4_csum_at(proto);
        t[c_l4..c_l4 + 2].fill(0);
        let mut c = csum::finish(pseudo + csum::sum(&t[at..at + len]));
        if proto == UDP && c == 0 {
            c = 0xffff;
        }
        t[c_l4..c_l4 + 2].copy_from_slice(&c.to_be_bytes());
    }
}

fn positive(args: &mut Args, name: &str, default: f64) -> Result<f64, ArgError> {
    let v = args.f64(name)?.unwrap_or(default);
    if !(v.is_finite() && v > 0.0) {
        return Err(ArgError::new(name, format!("{v} is not a positive number")));
    }
    Ok(v)
}

fn build(args: &mut Args, env: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut template = args
        .bytes("template")?
        .ok_or_else(|| ArgError::new("template", "is required"))?;
    let (l4, proto) = match ip::header(&template) {
        Some((ihl, TCP)) if template.len() >= ip::ETH_LEN + ihl + 20 => (ip::ETH_LEN + ihl, TCP),
        Some((ihl, UDP)) if template.len() >= ip::ETH_LEN + ihl + 8 => (ip::ETH_LEN + ihl, UDP),
        _ => {
            return Err(ArgError::new(
                "template",
                "is not an Ethernet/IPv4/TCP or UDP frame",
            ))
        }
    };
    set_checksums(&mut template, l4, proto);
    if template.len() > env.pool.data_room() {
        return Err(ArgError::new("template", "longer than a packet buffer"));
    }
    let pps = positive(args, "pps", 1000.0)?;
    let flow_rate = positive(args, "flow_rate", 10.0)?;
    let flow_duration = positive(args, "flow_duration", 10.0)?;
    if flow_rate > pps {
        return Err(ArgError::new("flow_rate", "must not exceed pps"));
    }
    let arrival = match args.str("arrival")?.as_deref() {
        None | Some("uniform") => Arrival::Uniform,
        Some("exponential") => Arrival::Exponential,
        Some(o) => {
            return Err(ArgError::new(
                "arrival",
                format!("`{o}` is not uniform or exponential"),
            ))
        }
    };
    let duration = match args.str("duration")?.as_deref() {
        None | Some("uniform") => Duration::Uniform,
        Some("pareto") => Duration::Pareto,
        Some(o) => {
            return Err(ArgError::new(
                "duration",
                format!("`{o}` is not uniform or pareto"),
            ))
        }
    };
    let quick_rampup = args.bool_or("quick_rampup", false)?;
    let mut ranges = [0u32; 4];
    for (r, n) in ranges.iter_mut().zip([
        "ip_src_range",
        "ip_dst_range",
        "port_src_range",
        "port_dst_range",
    ]) {
        let v = args.u64_or(n, 0)?;
        *r = u32::try_from(v).map_err(|_| ArgError::new(n, "is too large"))?;
    }
    let burst = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
    let seed = rng::seed(args)?;
    // Concurrent flows in a steady state, with room for bursts of arrivals.
    let expected = flow_rate * flow_duration;
    let max_flows = args.usize_in(
        "max_flows",
        ((expected * 4.0) as usize + 64).min(MAX_FLOWS),
        1,
        MAX_FLOWS,
    )?;
    let mut g = FlowGen {
        pool: env.pool.cache(2 * nfkit_hw::pool::MAX_BATCH),
        template,
        l4,
        proto,
        pps,
        flow_rate,
        flow_duration,
        arrival,
        duration,
        quick_rampup,
        ranges,
        burst,
        rng: Rng::new(seed),
        flows: vec![Flow::default(); max_flows],
        free: (0..max_flows as u32).rev().collect(),
        events: BinaryHeap::with_capacity(max_flows),
        next_arrival: 0,
        interval_ns: 0,
        started: false,
        refused: 0,
    };
    g.interval_ns = ((1e9 / g.per_flow_pps()) as u64).max(1);
    Ok(Box::new(g))
}
