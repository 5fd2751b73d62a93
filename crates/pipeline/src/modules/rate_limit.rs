//! RateLimit: a shaper for thousands of flows (SoftNIC §6.2). Packets
//! into gate 0 are classified into flows and wait in their flow's queue;
//! the module's task sends each flow's packets out of gate 0 paced at the
//! flow's own rate, earliest due flow first (a hierarchical timer wheel
//! of send times, `timer_wheel.rs`, 256 ns ticks: a packet sent costs
//! O(1) whatever the number of flows, and nothing is allocated per
//! packet; a flow never leaves before its time, at most a tick late, and
//! lateness does not accumulate: each send time follows from the last
//! one, not from when it was sent).
//!
//! Classification: by 5-tuple (IPv4 addresses, protocol, ports; every
//! other packet is one flow), or by `fields=[(offset=N | attr_name=NAME,
//! num_bytes=N), ...]` (a vport number in metadata, a VLAN id, ...).
//!
//! Pacing: a flow's next packet may leave at `T`; sending `c` units
//! moves `T` by `c / rate`. A backlogged flow whose `T` lies more than
//! `max_burst_us` in the past (the worker was preempted or overloaded) is
//! brought forward to that limit, and the credit it loses is counted in
//! `tokens_lost` (in the flow's units): why a rate fell short. An idle
//! flow loses nothing countable: it simply starts at most
//! `max_burst_us` of credit ahead.
//!
//! Arguments: `resource=bit|packet` (default bit), `rate=N` per second
//! for flows without their own rate (default 1M), `max_burst_us=N`
//! (default 1000), `flows=N` flows at most (default 4096, at most
//! 1,048,576), `queue=N` packets per flow (default 64), `burst=N`
//! packets per task run, `fields=[...]` (else the 5-tuple).
//!
//! Commands: `set_rate(rate=N, values=[...])` (fields) or
//! `set_rate(rate=N, src_ip=, dst_ip=, proto=, src_port=, dst_port=)`
//! (5-tuple) sets one flow's rate, creating the flow;
//! `set_default_rate(rate=N)`; `set_burst(max_burst_us=N)`.
//!
//! Drops (counted): a packet whose flow queue is full, or that would
//! start a flow beyond `flows` (`table_full` also counts those).

use super::classify::{self, ip, Fields, FxMap, Key, MAX_FIELDS};
use super::timer_wheel::TimerWheel;
use crate::args::{ArgError, Args, Value};
use crate::metadata::AttrSpec;
use crate::module::{no_reply, Ctx, Module, DEFAULT_BURST};
use nfkit_hw::{Batch, PktBuf};
use std::collections::VecDeque;

crate::modules::declare_class!("RateLimit" => build);

/// Most flows one module may hold.
pub const MAX_FLOWS: usize = 1 << 20;
/// Most packets one flow may hold.
pub const MAX_QUEUE: usize = 1 << 16;
/// Highest rate: 400 Gbit/s, or 1,000 Mpps.
pub const MAX_BITS: u64 = 400_000_000_000;
pub const MAX_PACKETS: u64 = 1_000_000_000;
const NANOS: u128 = 1_000_000_000;
/// The wheel's tick: 2^8 ns.
const TICK_SHIFT: u32 = 8;

/// What a flow's rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bit,
    Packet,
}

impl Unit {
    fn cost(self, p: &PktBuf) -> u64 {
        match self {
            Unit::Bit => p.pkt_len() as u64 * 8,
            Unit::Packet => 1,
        }
    }
    fn max(self) -> u64 {
        match self {
            Unit::Bit => MAX_BITS,
            Unit::Packet => MAX_PACKETS,
        }
    }
}

struct Flow {
    /// Units per second.
    rate: u64,
    /// Set by command (else it follows the default rate).
    own_rate: bool,
    /// When the head packet may leave: `ns + rem / rate` nanoseconds
    /// (exact: sending `c` units adds `c × 10⁹ / rate`; `rem < rate`).
    ns: u64,
    rem: u64,
    queue: VecDeque<PktBuf>,
}

impl Flow {
    fn due_ns(&self) -> u64 {
        self.ns.saturating_add((self.rem > 0) as u64)
    }
    fn due_tick(&self) -> u64 {
        self.due_ns().div_ceil(1 << TICK_SHIFT)
    }
    fn set_rate(&mut self, rate: u64) {
        // Keep the next send time.
        self.ns = self.due_ns();
        self.rem = 0;
        self.rate = rate;
    }
    /// Move the send time by `units` (one u64 division: units × 10⁹
    /// stays below 2^64 for any frame).
    fn charge(&mut self, units: u64) {
        let total = self.rem as u128 + units as u128 * NANOS;
        let r = self.rate as u128;
        self.ns = self.ns.saturating_add((total / r).min(u64::MAX as u128) as u64);
        self.rem = (total % r) as u64;
    }
    /// Not earlier than `floor` ns: the credit given up, in units × 10⁹.
    fn raise_to(&mut self, floor: u64) -> u128 {
        if self.ns >= floor {
            return 0;
        }
        let lost = (floor - self.ns) as u128 * self.rate as u128 - self.rem as u128;
        self.ns = floor;
        self.rem = 0;
        lost
    }
}

pub struct RateLimit {
    unit: Unit,
    fields: Option<Fields>,
    map: FxMap<Key, u32>,
    flows: Vec<Flow>,
    max_flows: usize,
    max_queue: usize,
    default_rate: u64,
    burst_ns: u64,
    /// Backlogged flows by the tick their head may leave.
    due: TimerWheel,
    burst: usize,
    /// Credit lost at the burst cap, in units × 10⁹.
    lost: u128,
    table_full: u64,
    queue_full: u64,
    held: usize,
}

impl RateLimit {
    /// Flows by 5-tuple at `rate` units per second each.
    pub fn new(unit: Unit, rate: u64) -> RateLimit {
        RateLimit {
            unit,
            fields: None,
            map: FxMap::default(),
            flows: Vec::new(),
            max_flows: 4096,
            max_queue: 64,
            default_rate: rate.clamp(1, unit.max()),
            burst_ns: 1_000_000,
            due: TimerWheel::new(),
            burst: DEFAULT_BURST,
            lost: 0,
            table_full: 0,
            queue_full: 0,
            held: 0,
        }
    }

    /// Classify by `fields` instead of the 5-tuple.
    pub fn with_fields(mut self, fields: Fields) -> RateLimit {
        self.fields = Some(fields);
        self
    }

    /// Tokens lost at the burst cap so far, in units.
    pub fn tokens_lost(&self) -> u64 {
        (self.lost / NANOS) as u64
    }

    fn key(&self, ctx: &Ctx<'_>, p: &PktBuf) -> Key {
        match &self.fields {
            Some(f) => f.key(ctx, p).unwrap_or([u64::MAX; MAX_FIELDS]),
            None => five_tuple(p.data()),
        }
    }

    /// The flow of `key`, made if there is room.
    fn flow(&mut self, key: Key, now: u64) -> Option<u32> {
        if let Some(&f) = self.map.get(&key) {
            return Some(f);
        }
        if self.flows.len() >= self.max_flows {
            return None;
        }
        let f = self.flows.len() as u32;
        let rate = self.default_rate;
        self.flows.push(Flow {
            rate,
            own_rate: false,
            ns: now,
            rem: 0,
            // Grown on demand: thousands of mostly short queues stay small.
            queue: VecDeque::new(),
        });
        self.map.insert(key, f);
        Some(f)
    }

    fn enqueue(&mut self, ctx: &mut Ctx<'_>, p: PktBuf, now: u64) {
        let key = self.key(ctx, &p);
        let Some(f) = self.flow(key, now) else {
            self.table_full += 1;
            ctx.drop_packet(p);
            return;
        };
        let burst_ns = self.burst_ns;
        let flow = &mut self.flows[f as usize];
        if flow.queue.len() >= self.max_queue {
            self.queue_full += 1;
            ctx.drop_packet(p);
            return;
        }
        if flow.queue.is_empty() {
            // Idle until now: credit up to the burst, nothing counted.
            flow.raise_to(now.saturating_sub(burst_ns));
            self.due.insert(f, flow.due_tick());
        }
        flow.queue.push_back(p);
        self.held += 1;
    }

    /// `set_rate`'s flow key: `values=[...]` or the 5-tuple's parts.
    fn command_key(&self, args: &mut Args) -> Result<Key, ArgError> {
        if let Some(f) = &self.fields {
            return f.values(args, "values");
        }
        let ip = |args: &mut Args, name: &str| -> Result<u64, ArgError> {
            let s = args.required_str(name)?;
            Ok(u32::from(classify::ipv4(name, &s)?) as u64)
        };
        let num = |args: &mut Args, name: &str, max: u64| -> Result<u64, ArgError> {
            let v = args
                .u64(name)?
                .ok_or_else(|| ArgError::new(name, "is required"))?;
            if v > max {
                return Err(ArgError::new(name, format!("must be at most {max}")));
            }
            Ok(v)
        };
        let mut key = [0u64; MAX_FIELDS];
        key[0] = ip(args, "src_ip")?;
        key[1] = ip(args, "dst_ip")?;
        key[2] = num(args, "proto", 255)?;
        key[3] = num(args, "src_port", 65535)?;
        key[4] = num(args, "dst_port", 65535)?;
        key[5] = 1;
        Ok(key)
    }

    fn rate_arg(&self, args: &mut Args, name: &str) -> Result<u64, ArgError> {
        let max = self.unit.max();
        args.u64(name)?
            .filter(|&r| (1..=max).contains(&r))
            .ok_or_else(|| {
                ArgError::new(
                    name,
                    format!("must be 1 to {max} {} per second", self.unit_name()),
                )
            })
    }

    fn unit_name(&self) -> &'static str {
        match self.unit {
            Unit::Bit => "bits",
            Unit::Packet => "packets",
        }
    }
}

/// IPv4 addresses, protocol and ports (a marker word tells them from
/// `fields` keys); anything else is one flow.
fn five_tuple(d: &[u8]) -> Key {
    let mut key = [0u64; MAX_FIELDS];
    let Some((ihl, proto)) = ip::header(d) else {
        return key;
    };
    let (sp, dp) = ip::ports(d, ihl, proto).unwrap_or((0, 0));
    key[0] = ip::addr(d, ip::IP_SRC) as u64;
    key[1] = ip::addr(d, ip::IP_DST) as u64;
    key[2] = proto as u64;
    key[3] = sp as u64;
    key[4] = dp as u64;
    key[5] = 1;
    key
}

impl Module for RateLimit {
    fn class(&self) -> &'static str {
        "RateLimit"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        self.fields.as_ref().map(Fields::attrs).unwrap_or_default()
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        for p in batch.drain() {
            self.enqueue(ctx, p, now);
        }
    }
    fn is_task(&self) -> bool {
        true
    }
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now_ns();
        let floor_ns = now.saturating_sub(self.burst_ns);
        self.due.advance(now >> TICK_SHIFT);
        let mut sent = 0;
        while sent < self.burst {
            let Some(f) = self.due.pop_ready() else {
                break;
            };
            let flow = &mut self.flows[f as usize];
            let Some(p) = flow.queue.pop_front() else {
                continue;
            };
            // Backlogged and late beyond the burst: the excess is lost.
            self.lost += flow.raise_to(floor_ns);
            flow.charge(self.unit.cost(&p));
            if !flow.queue.is_empty() {
                self.due.insert(f, flow.due_tick());
            }
            self.held -= 1;
            ctx.emit(0, p);
            sent += 1;
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "set_rate" => {
                let rate = self.rate_arg(args, "rate")?;
                let key = self.command_key(args)?;
                args.finish(cmd)?;
                let Some(f) = self.flow(key, 0) else {
                    return Err(ArgError::general(format!(
                        "the flow table is full ({} flows)",
                        self.max_flows
                    )));
                };
                let flow = &mut self.flows[f as usize];
                flow.own_rate = true;
                flow.set_rate(rate);
                if !flow.queue.is_empty() {
                    // Its queued head leaves at the new pace.
                    self.rebuild_due();
                }
            }
            "set_default_rate" => {
                let rate = self.rate_arg(args, "rate")?;
                args.finish(cmd)?;
                self.default_rate = rate;
                for flow in self.flows.iter_mut().filter(|f| !f.own_rate) {
                    flow.set_rate(rate);
                }
                self.rebuild_due();
            }
            "set_burst" => {
                let us = args
                    .u64("max_burst_us")?
                    .filter(|&u| (1..=10_000_000).contains(&u))
                    .ok_or_else(|| ArgError::new("max_burst_us", "must be 1 to 10,000,000"))?;
                args.finish(cmd)?;
                self.burst_ns = us * 1000;
            }
            _ => {
                return Err(ArgError::general(format!(
                    "RateLimit has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("flows", self.flows.len() as u64),
            ("queued", self.held as u64),
            ("tokens_lost", self.tokens_lost()),
            ("table_full", self.table_full),
            ("queue_full", self.queue_full),
        ]
    }
}

impl RateLimit {
    /// Recompute every backlogged flow's entry (after rates changed).
    fn rebuild_due(&mut self) {
        self.due.clear();
        for (i, f) in self.flows.iter().enumerate() {
            if !f.queue.is_empty() {
                self.due.insert(i as u32, f.due_tick());
            }
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let unit = match args.str("resource")?.as_deref() {
        None | Some("bit") => Unit::Bit,
        Some("packet") => Unit::Packet,
        Some(other) => {
            return Err(ArgError::new(
                "resource",
                format!("`{other}` is not `bit` or `packet`"),
            ))
        }
    };
    let mut m = RateLimit::new(unit, 1);
    m.default_rate = match args.pos("rate") {
        None => 1_000_000.min(unit.max()),
        Some(_) => m.rate_arg(args, "rate")?,
    };
    let us = args.u64_or("max_burst_us", 1000)?;
    if !(1..=10_000_000).contains(&us) {
        return Err(ArgError::new("max_burst_us", "must be 1 to 10,000,000"));
    }
    m.burst_ns = us * 1000;
    m.max_flows = args.usize_in("flows", 4096, 1, MAX_FLOWS)?;
    m.max_queue = args.usize_in("queue", 64, 1, MAX_QUEUE)?;
    m.burst = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
    if args.pos("fields").is_some() {
        m.fields = Some(Fields::parse(args)?);
    }
    m.map.reserve(m.max_flows.min(1 << 16));
    m.flows.reserve(m.max_flows.min(1 << 16));
    m.due.reserve(m.max_flows.min(1 << 16));
    Ok(Box::new(m))
}
