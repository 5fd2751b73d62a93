//! FlowDirector: software flow steering (SoftNIC §6.3), DPDK's Flow
//! Director in "perfect" mode without the hardware's 8k-entry limit.
//! Each exact IPv4 5-tuple entry sends its flow to an output gate (a
//! worker's queue, a vport); a miss is learned by the configured rule,
//! or goes to the default gate, or is dropped.
//!
//! Gates: 1 in, `gates=N` out (default 2). Arguments: `size=N` entries
//! at most (default 16,777,216: memory is the limit, ~50 bytes an
//! entry), `learn=none|hash|least_loaded` (default none: a miss is not
//! remembered; `hash`: the gate a hash of the 5-tuple picks;
//! `least_loaded`: the gate holding the fewest flows), `default_gate=G`
//! (else misses that are not learned are dropped), `idle_timeout_ms=N`
//! (learned entries unseen that long are removed, a few slots swept per
//! batch; 0 = never, the default). Non-IPv4 frames are misses that are
//! never learned.
//!
//! Commands (BESS ExactMatch / DPDK fdir names): `add(src_ip=, dst_ip=,
//! proto=, src_port=, dst_port=, gate=)` (entries added by command never
//! expire), `delete(...the 5-tuple...)`, `clear()`,
//! `set_default_gate(gate=G)`, `lookup(...the 5-tuple...)` (returns the
//! gate, or nothing).
//!
//! Statistics (DPDK's fdir names): `entries`, `fdir_match`, `fdir_miss`,
//! `learned`, `expired`, `table_full` (misses not learned because the
//! table was at `size`; they go to the default gate or are dropped).

use super::classify::{self, DROP};
use super::flow_table::{self, FlowKey, FlowTable};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("FlowDirector" => build);

/// Most entries one module may be configured for.
pub const MAX_SIZE: usize = 1 << 26;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learn {
    None,
    Hash,
    LeastLoaded,
}

pub struct FlowDirector {
    gates: usize,
    table: FlowTable,
    learn: Learn,
    default_gate: u16,
    idle_ns: u64,
    hits: u64,
    misses: u64,
    learned: u64,
    expired: u64,
    table_full: u64,
}

impl FlowDirector {
    pub fn new(gates: usize, size: usize, learn: Learn) -> FlowDirector {
        FlowDirector {
            gates,
            table: FlowTable::new(size, gates),
            learn,
            default_gate: DROP,
            idle_ns: 0,
            hits: 0,
            misses: 0,
            learned: 0,
            expired: 0,
            table_full: 0,
        }
    }

    /// Steer `key` to `gate` (kept until deleted).
    pub fn add(&mut self, key: FlowKey, gate: u16) -> Result<(), ArgError> {
        if !self.table.insert(key, gate, true, 0) {
            return Err(ArgError::general(format!(
                "the table is full ({} entries)",
                self.table.limit()
            )));
        }
        Ok(())
    }

    pub fn entries(&self) -> usize {
        self.table.len()
    }

    #[inline]
    fn steer(&mut self, d: &[u8], now: u64) -> u16 {
        let Some(key) = flow_table::five_tuple(d) else {
            self.misses += 1;
            return self.default_gate;
        };
        if let Some(e) = self.table.touch(key, now) {
            self.hits += 1;
            return e.gate;
        }
        self.misses += 1;
        let gate = match self.learn {
            Learn::None => return self.default_gate,
            Learn::Hash => (flow_table::hash(key) % self.gates as u64) as u16,
            Learn::LeastLoaded => {
                let pg = self.table.per_gate();
                (0..self.gates).min_by_key(|&g| pg[g]).unwrap_or(0) as u16
            }
        };
        if self.table.insert(key, gate, false, now) {
            self.learned += 1;
            gate
        } else {
            self.table_full += 1;
            self.default_gate
        }
    }
}

/// The 5-tuple a command names.
pub fn command_key(args: &mut Args) -> Result<FlowKey, ArgError> {
    let ip = |args: &mut Args, name: &str| -> Result<u32, ArgError> {
        let s = args.required_str(name)?;
        Ok(u32::from(classify::ipv4(name, &s)?))
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
    let src = ip(args, "src_ip")?;
    let dst = ip(args, "dst_ip")?;
    let proto = num(args, "proto", 255)? as u8;
    let sp = num(args, "src_port", 65535)? as u16;
    let dp = num(args, "dst_port", 65535)? as u16;
    Ok(flow_table::pack(src, dst, proto, sp, dp))
}

impl Module for FlowDirector {
    fn class(&self) -> &'static str {
        "FlowDirector"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        let n = batch.len();
        for p in batch.drain() {
            let gate = self.steer(p.data(), now);
            classify::emit_or_drop(ctx, gate, p);
        }
        if self.idle_ns > 0 {
            let before = now.saturating_sub(self.idle_ns);
            self.expired += self.table.sweep(2 * n + 8, before);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                let key = command_key(args)?;
                args.finish(cmd)?;
                self.add(key, gate)?;
            }
            "delete" => {
                let key = command_key(args)?;
                args.finish(cmd)?;
                if !self.table.remove(key) {
                    return Err(ArgError::general("no such entry"));
                }
            }
            "lookup" => {
                let key = command_key(args)?;
                args.finish(cmd)?;
                return Ok(match self.table.get(key) {
                    Some(e) => Value::Int(e.gate as u64),
                    None => no_reply(),
                });
            }
            "clear" => {
                args.finish(cmd)?;
                self.table.clear();
            }
            "set_default_gate" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                args.finish(cmd)?;
                self.default_gate = gate;
            }
            _ => {
                return Err(ArgError::general(format!(
                    "FlowDirector has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("entries", self.table.len() as u64),
            ("fdir_match", self.hits),
            ("fdir_miss", self.misses),
            ("learned", self.learned),
            ("expired", self.expired),
            ("table_full", self.table_full),
        ]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = args.usize_in("gates", 2, 1, MAX_GATES)?;
    let size = args.usize_in("size", 1 << 24, 1, MAX_SIZE)?;
    let learn = match args.str("learn")?.as_deref() {
        None | Some("none") => Learn::None,
        Some("hash") => Learn::Hash,
        Some("least_loaded") => Learn::LeastLoaded,
        Some(o) => {
            return Err(ArgError::new(
                "learn",
                format!("`{o}` is not none, hash or least_loaded"),
            ))
        }
    };
    let mut m = FlowDirector::new(gates, size, learn);
    if args.pos("default_gate").is_some() {
        m.default_gate = classify::gate(args, "default_gate", gates)?;
    }
    let ms = args.u64_or("idle_timeout_ms", 0)?;
    if ms > 86_400_000 {
        return Err(ArgError::new("idle_timeout_ms", "must be at most 86400000 (a day)"));
    }
    m.idle_ns = ms * 1_000_000;
    Ok(Box::new(m))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::harness::Harness;
    use crate::module::Ctx;

    pub(crate) fn udp(src: u32, dst: u32, sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src.to_be_bytes());
        f.extend_from_slice(&dst.to_be_bytes());
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    fn gate_of(out: &[Vec<Vec<u8>>]) -> Option<usize> {
        out.iter().position(|g| !g.is_empty())
    }

    #[test]
    fn entries_steer_misses_learn_and_idle_ones_expire() {
        let mut h = Harness::new();
        let mut fd = FlowDirector::new(4, 1 << 20, Learn::LeastLoaded);
        fd.idle_ns = 1_000_000;
        fd.add(flow_table::pack(1, 2, 17, 10, 20), 3).unwrap();
        let out = h.run(&mut fd, 0, &[udp(1, 2, 10, 20)]);
        assert_eq!(gate_of(&out), Some(3));
        // Learned flows spread over the gates with the fewest flows.
        let mut got = [0; 4];
        for i in 0..8 {
            let out = h.run(&mut fd, 0, &[udp(9, 9, i, 1)]);
            got[gate_of(&out).unwrap()] += 1;
        }
        assert_eq!(got, [3, 2, 2, 1], "gate 3 also holds the added flow");
        // The same flow again: the same gate.
        for i in 0..8 {
            let first = fd.table.get(flow_table::pack(9, 9, 17, i, 1)).unwrap().gate;
            let out = h.run(&mut fd, 0, &[udp(9, 9, i, 1)]);
            assert_eq!(gate_of(&out), Some(first as usize));
        }
        assert_eq!(fd.entries(), 9);
        // 2 ms later one packet sweeps: the learned ones go, the added one stays.
        h.set_time(3_000_000);
        h.run(&mut fd, 0, &[udp(1, 2, 10, 20)]);
        assert_eq!(fd.entries(), 1);
        assert_eq!(fd.expired, 8);
        // Non-IPv4 without a default gate: dropped, counted.
        let out = h.run(&mut fd, 0, &[vec![0; 60]]);
        assert_eq!(gate_of(&out), None);
        assert_eq!(h.counters().2, 1);
    }

    #[test]
    fn learned_flows_keep_their_gate_while_the_table_grows_to_a_million() {
        use crate::counters::ModuleCounters;
        let h = Harness::new();
        let mut fd = FlowDirector::new(8, 1 << 21, Learn::LeastLoaded);
        let mut outs: Vec<Batch> = (0..8).map(|_| Batch::new()).collect();
        let mut trash = Batch::new();
        let counters = ModuleCounters::default();
        // Steer a batch of frames from `src` addresses; their gates.
        let mut send = |fd: &mut FlowDirector, srcs: &[u32]| -> Vec<usize> {
            let mut b = Batch::new();
            for &s in srcs {
                let mut p = h.pool().alloc().unwrap();
                p.copy_from(&udp(s, 0x0a00_0002, 1000, 53)).unwrap();
                let _ = b.push(p);
            }
            let mut ctx = Ctx::new(&mut outs, &mut trash, &[], &counters, 0, 0);
            fd.process(&mut ctx, 0, &mut b);
            let mut gates = vec![usize::MAX; srcs.len()];
            for (g, o) in outs.iter_mut().enumerate() {
                for p in o.drain() {
                    let s = u32::from_be_bytes(p.data()[26..30].try_into().unwrap());
                    gates[srcs.iter().position(|&x| x == s).unwrap()] = g;
                }
            }
            gates
        };
        let tracked: Vec<u32> = (0..32).map(|i| 0xc000_0000 + i * 7919).collect();
        let before = send(&mut fd, &tracked);
        assert!(before.iter().all(|&g| g < 8));
        // A million more flows, one reused batch rewritten in place.
        let mut b = Batch::new();
        for _ in 0..32 {
            let mut p = h.pool().alloc().unwrap();
            p.copy_from(&udp(0, 0x0a00_0002, 1000, 53)).unwrap();
            let _ = b.push(p);
        }
        let mut next = 0x0100_0000u32;
        let mut outs: Vec<Batch> = (0..8).map(|_| Batch::new()).collect();
        let mut trash = Batch::new();
        while fd.entries() < 1 << 20 {
            for p in b.iter_mut() {
                p.data_mut()[26..30].copy_from_slice(&next.to_be_bytes());
                next += 1;
            }
            let mut ctx = Ctx::new(&mut outs, &mut trash, &[], &counters, 0, 0);
            fd.process(&mut ctx, 0, &mut b);
            for o in outs.iter_mut() {
                for p in o.drain() {
                    let _ = b.push(p);
                }
            }
        }
        assert_eq!(send(&mut fd, &tracked), before, "a flow changed gate");
        assert_eq!(fd.table_full, 0);
        // Least-loaded learning kept the gates even.
        let pg = fd.table.per_gate();
        assert!(pg.iter().max().unwrap() - pg.iter().min().unwrap() <= 1, "{pg:?}");
    }

    #[test]
    fn a_full_table_counts_and_sends_misses_to_the_default_gate() {
        let mut h = Harness::new();
        let mut fd = FlowDirector::new(2, 4, Learn::Hash);
        fd.default_gate = 1;
        let frames: Vec<Vec<u8>> = (0..100).map(|i| udp(i, 1, 1, 1)).collect();
        h.run(&mut fd, 0, &frames);
        assert_eq!(fd.entries(), 4);
        assert_eq!(fd.table_full, 96);
        assert_eq!(h.counters().2, 0, "nothing dropped");
        assert!(fd.add(flow_table::pack(7, 7, 6, 1, 1), 0).is_err());
    }

    #[test]
    fn commands_add_lookup_delete_and_refuse_bad_input() {
        let mut fd = FlowDirector::new(2, 16, Learn::None);
        let t = |g: Option<u64>| {
            let mut v = vec![
                ("src_ip", Value::Str("10.0.0.1".into())),
                ("dst_ip", Value::Str("10.0.0.2".into())),
                ("proto", Value::Int(6)),
                ("src_port", Value::Int(1000)),
                ("dst_port", Value::Int(80)),
            ];
            if let Some(g) = g {
                v.push(("gate", Value::Int(g)));
            }
            Args::from_pairs(&v)
        };
        fd.command("add", &mut t(Some(1))).unwrap();
        assert_eq!(fd.command("lookup", &mut t(None)).unwrap(), Value::Int(1));
        assert!(fd.command("add", &mut t(Some(2))).is_err(), "gate 2 of 2");
        fd.command("delete", &mut t(None)).unwrap();
        assert!(fd.command("delete", &mut t(None)).is_err());
        assert_eq!(fd.command("lookup", &mut t(None)).unwrap(), no_reply());
        let mut bad = Args::from_pairs(&[("src_ip", Value::Str("10.0.0.300".into()))]);
        assert!(fd.command("add", &mut bad).is_err());
    }
}
