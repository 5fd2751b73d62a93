//! AdaptiveLB (SoftNIC §6.4): each new flow goes to the active gate
//! with the fewest load points over the last window, and stays there
//! (a flow table). A gate earns `flow_points` (default 10,000) for each
//! new flow, `packet_points` (1,000) per packet and `byte_points` (1)
//! per byte. The window (`window_us`, default 1,000) is sliding,
//! approximated by two buckets: the load of a gate is the current
//! bucket plus the previous one weighted by the part of it still inside
//! the window.
//!
//! Gates: 1 in, up to 64 out; `gates=[0, 1, ...]` the active ones (or
//! `gates=N`: 0..N; default 2). Other arguments: `size=N` flows at most
//! (default 1,048,576), `idle_timeout_ms=N` (flows unseen that long are
//! forgotten, a few swept per batch; default 10,000, 0 = never).
//! Non-IPv4 frames are balanced as one flow.
//!
//! Commands: `set_gates(gates=[...])` changes the active gates at run
//! time: flows on gates that stay keep their gate; flows on a removed
//! gate are placed again as new flows. `get_load()` returns each active
//! gate's current load points.
//!
//! Statistics: `flows`, `new_flows`, `moved` (flows placed again after
//! their gate was removed), `expired`, `table_full` (new flows when the
//! table was full: balanced by the same rule but not remembered).

use super::flow_table::{self, FlowTable};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("AdaptiveLB" => build);

/// Most gates an AdaptiveLB spreads over (its per-gate state is inline).
pub const LB_GATES: usize = 64;

pub struct AdaptiveLb {
    active: Vec<u16>,
    is_active: [bool; LB_GATES],
    table: FlowTable,
    idle_ns: u64,
    pub flow_points: u64,
    pub packet_points: u64,
    pub byte_points: u64,
    window_ns: u64,
    window_start: u64,
    cur: [u64; LB_GATES],
    prev: [u64; LB_GATES],
    new_flows: u64,
    moved: u64,
    expired: u64,
    table_full: u64,
}

impl AdaptiveLb {
    /// Balance over `gates` (the active output gates), SoftNIC's points.
    pub fn new(gates: &[u16], size: usize) -> AdaptiveLb {
        let mut m = AdaptiveLb {
            active: Vec::new(),
            is_active: [false; LB_GATES],
            table: FlowTable::new(size, LB_GATES),
            idle_ns: 10_000_000_000,
            flow_points: 10_000,
            packet_points: 1_000,
            byte_points: 1,
            window_ns: 1_000_000,
            window_start: 0,
            cur: [0; LB_GATES],
            prev: [0; LB_GATES],
            new_flows: 0,
            moved: 0,
            expired: 0,
            table_full: 0,
        };
        m.set_active(gates);
        m
    }

    fn set_active(&mut self, gates: &[u16]) {
        self.is_active = [false; LB_GATES];
        for &g in gates {
            self.is_active[g as usize] = true;
        }
        self.active = (0..LB_GATES as u16)
            .filter(|&g| self.is_active[g as usize])
            .collect();
    }

    /// Set the window length.
    pub fn set_window(&mut self, ns: u64) {
        self.window_ns = ns.max(1);
    }

    /// Start a new bucket when the window has passed.
    #[inline]
    fn roll(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed < self.window_ns {
            return;
        }
        if elapsed < 2 * self.window_ns {
            self.prev = self.cur;
        } else {
            self.prev = [0; LB_GATES];
        }
        self.cur = [0; LB_GATES];
        self.window_start = now - elapsed % self.window_ns;
    }

    /// Each gate's load points over the last window, as of `now`.
    #[inline]
    pub fn load(&self, gate: u16, now: u64) -> u64 {
        let g = gate as usize;
        let into = now.saturating_sub(self.window_start).min(self.window_ns);
        let left = (self.window_ns - into) as u128;
        self.cur[g] + (self.prev[g] as u128 * left / self.window_ns as u128) as u64
    }

    fn least_loaded(&self, now: u64) -> Option<u16> {
        self.active
            .iter()
            .copied()
            .min_by_key(|&g| self.load(g, now))
    }

    /// The gate of a packet of `len` bytes with this `key`; `None` when
    /// no gate is active.
    #[inline]
    fn pick(&mut self, key: flow_table::FlowKey, len: usize, now: u64) -> Option<u16> {
        let gate = match self.table.touch(key, now) {
            Some(e) if self.is_active[e.gate as usize] => e.gate,
            found => {
                let was = found.is_some();
                let g = self.least_loaded(now)?;
                if was {
                    self.moved += 1;
                }
                self.new_flows += 1;
                self.cur[g as usize] += self.flow_points;
                if !self.table.insert(key, g, false, now) {
                    self.table_full += 1;
                }
                g
            }
        };
        self.cur[gate as usize] += self.packet_points + self.byte_points * len as u64;
        Some(gate)
    }

    pub fn flows(&self) -> usize {
        self.table.len()
    }
}

impl Module for AdaptiveLb {
    fn class(&self) -> &'static str {
        "AdaptiveLB"
    }
    fn ogates(&self) -> usize {
        LB_GATES
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        self.roll(now);
        let n = batch.len();
        for p in batch.drain() {
            // Non-IPv4: one flow of its own (the key no IPv4 flow has).
            let key = flow_table::five_tuple(p.data()).unwrap_or(1);
            match self.pick(key, p.len(), now) {
                Some(g) => ctx.emit(g as usize, p),
                None => ctx.drop_packet(p),
            }
        }
        if self.idle_ns > 0 {
            let before = now.saturating_sub(self.idle_ns);
            self.expired += self.table.sweep(2 * n + 8, before);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "set_gates" => {
                let gates = gates_arg(args)?;
                args.finish(cmd)?;
                self.set_active(&gates);
            }
            "get_load" => {
                args.finish(cmd)?;
                let now = self.window_start + self.window_ns / 2;
                return Ok(Value::List(
                    self.active
                        .iter()
                        .map(|&g| Value::Int(self.load(g, now)))
                        .collect(),
                ));
            }
            _ => {
                return Err(ArgError::general(format!(
                    "AdaptiveLB has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("flows", self.table.len() as u64),
            ("new_flows", self.new_flows),
            ("moved", self.moved),
            ("expired", self.expired),
            ("table_full", self.table_full),
        ]
    }
}

/// `gates=[g, ...]` (each below 64) or `gates=N` meaning 0..N.
fn gates_arg(args: &mut Args) -> Result<Vec<u16>, ArgError> {
    let list = match args.take("gates") {
        None => return Ok(vec![0, 1]),
        Some(Value::Int(n)) if (1..=LB_GATES as u64).contains(&n) => {
            return Ok((0..n as u16).collect())
        }
        Some(Value::Int(n)) => {
            return Err(ArgError::new(
                "gates",
                format!("{n} gates: must be 1 to {LB_GATES}"),
            ))
        }
        Some(v) => Args::from_pairs(&[("gates", v)]).u64_list("gates")?,
    };
    let list = list.unwrap_or_default();
    if list.is_empty() {
        return Err(ArgError::new("gates", "needs at least one gate"));
    }
    list.into_iter()
        .map(|g| super::classify::check_gate("gates", g, LB_GATES))
        .collect()
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = gates_arg(args)?;
    let size = args.usize_in("size", 1 << 20, 1, super::flow_director::MAX_SIZE)?;
    let mut m = AdaptiveLb::new(&gates, size);
    m.flow_points = args.u64_or("flow_points", 10_000)?;
    m.packet_points = args.u64_or("packet_points", 1_000)?;
    m.byte_points = args.u64_or("byte_points", 1)?;
    let us = args.u64_or("window_us", 1000)?;
    if !(1..=60_000_000).contains(&us) {
        return Err(ArgError::new("window_us", "must be 1 to 60,000,000"));
    }
    m.window_ns = us * 1000;
    let ms = args.u64_or("idle_timeout_ms", 10_000)?;
    if ms > 86_400_000 {
        return Err(ArgError::new(
            "idle_timeout_ms",
            "must be at most 86400000 (a day)",
        ));
    }
    m.idle_ns = ms * 1_000_000;
    Ok(Box::new(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;
    use crate::modules::flow_director::tests::udp;

    fn gate_of(out: &[Vec<Vec<u8>>]) -> usize {
        out.iter().position(|g| !g.is_empty()).unwrap()
    }

    #[test]
    fn new_flows_avoid_the_gate_an_elephant_loads_and_flows_stick() {
        let mut h = Harness::new();
        let mut lb = AdaptiveLb::new(&[0, 1, 2], 1 << 16);
        // An elephant: 200 packets of 1,000 bytes on its gate.
        let mut big = udp(1, 1, 1, 1);
        big.resize(1000, 0);
        let eg = gate_of(&h.run(&mut lb, 0, &[big.clone()]));
        for _ in 0..199 {
            assert_eq!(gate_of(&h.run(&mut lb, 0, &[big.clone()])), eg);
        }
        // 20 mice in the same window: none on the elephant's gate.
        let mut mice = [0; 3];
        for i in 0..20 {
            let g = gate_of(&h.run(&mut lb, 0, &[udp(2, 2, i, 1)]));
            mice[g] += 1;
        }
        assert_eq!(mice[eg], 0, "{mice:?}");
        assert!(mice.iter().all(|&m| m == 0 || m == 10), "{mice:?}");
        // Removing a gate moves only its flows.
        let before: Vec<u16> = (0..20)
            .map(|i| lb.table.get(flow_table::pack(2, 2, 17, i, 1)).unwrap().gate)
            .collect();
        let gone = (0..3).find(|&g| g != eg).unwrap();
        let keep: Vec<Value> = (0..3u64)
            .filter(|&g| g != gone as u64)
            .map(Value::Int)
            .collect();
        lb.command("set_gates", &mut Args::from_pairs(&[("gates", Value::List(keep))]))
            .unwrap();
        h.set_time(10_000_000);
        for i in 0..20u16 {
            let g = gate_of(&h.run(&mut lb, 0, &[udp(2, 2, i, 1)])) as u16;
            if before[i as usize] == gone as u16 {
                assert_ne!(g, gone as u16);
            } else {
                assert_eq!(g, before[i as usize], "flow {i} moved");
            }
        }
        assert_eq!(lb.moved, 10);
        // A gate added later takes the next new flows.
        lb.command("set_gates", &mut Args::from_pairs(&[("gates", Value::Int(4))]))
            .unwrap();
        let g = gate_of(&h.run(&mut lb, 0, &[udp(3, 3, 3, 3)]));
        assert!(g == 3 || g == gone, "{g}");
    }

    #[test]
    fn bad_arguments_are_refused() {
        let env = crate::registry::BuildEnv {
            ports: Default::default(),
            pool: Harness::new().pool().clone(),
        };
        for bad in [
            vec![("gates", Value::Int(0))],
            vec![("gates", Value::List(vec![Value::Int(64)]))],
            vec![("gates", Value::List(vec![]))],
            vec![("window_us", Value::Int(0))],
        ] {
            assert!(build(&mut Args::from_pairs(&bad), &env).is_err(), "{bad:?}");
        }
    }
}
