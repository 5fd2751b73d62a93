//! L2Forward (BESS): the output gate of a frame is the gate of its
//! destination MAC address in a hash table, else the default gate, else
//! it is dropped. The table has `size` entries in buckets of `bucket`
//! slots; each address may sit in one of two buckets (two hashes), and
//! an address whose two buckets are full is refused ("table full").
//! Looking up allocates nothing.
//!
//! Arguments: `size=N` (power of two, default 1024, at most 16,777,216),
//! `bucket=N` (1, 2, 4 or 8; default 4), `gates=N` (default 8,192, BESS's).
//! Commands: `add(entries=[(addr="02:00:00:00:00:01", gate=1), ...])`,
//! `delete(addrs=[...])`, `set_default_gate(gate=G)`,
//! `lookup(addrs=[...])` (answers `(gates=[...])`), `populate(base=MAC,
//! count=N, gate_count=G)` (addresses base, base+1, ... to gates 0, 1,
//! ..., G-1, 0, ...).

use super::classify::{self, DROP};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("L2Forward" => build);

/// Largest configurable table.
pub const MAX_SIZE: usize = 1 << 24;

/// A slot: the address in the low 48 bits and bit 63 set when used.
#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    gate: u16,
}

const USED: u64 = 1 << 63;

pub struct L2Forward {
    slots: Vec<Slot>,
    bucket: usize,
    /// Buckets - 1 (a power of two minus one).
    mask: usize,
    entries: usize,
    default_gate: u16,
    gates: usize,
}

#[inline]
fn mac_u64(b: &[u8]) -> u64 {
    classify::be(&b[..6])
}

impl L2Forward {
    pub fn new(size: usize, bucket: usize, gates: usize) -> L2Forward {
        L2Forward {
            slots: vec![Slot::default(); size],
            bucket,
            mask: size / bucket - 1,
            entries: 0,
            default_gate: DROP,
            gates,
        }
    }

    #[inline]
    fn buckets(&self, mac: u64) -> [usize; 2] {
        let h = (mac ^ USED).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let b1 = (h >> 40) as usize & self.mask;
        let b2 = (h >> 16) as usize & self.mask;
        [b1 * self.bucket, b2 * self.bucket]
    }

    #[inline]
    fn find(&self, mac: u64) -> Option<usize> {
        let key = mac | USED;
        for b in self.buckets(mac) {
            for i in b..b + self.bucket {
                if self.slots[i].key == key {
                    return Some(i);
                }
            }
        }
        None
    }

    #[inline]
    pub fn lookup(&self, mac: u64) -> Option<u16> {
        self.find(mac).map(|i| self.slots[i].gate)
    }

    /// Add or replace an entry.
    pub fn add(&mut self, mac: u64, gate: u16) -> Result<(), ArgError> {
        if let Some(i) = self.find(mac) {
            self.slots[i].gate = gate;
            return Ok(());
        }
        for b in self.buckets(mac) {
            if let Some(i) = (b..b + self.bucket).find(|&i| self.slots[i].key & USED == 0) {
                self.slots[i] = Slot {
                    key: mac | USED,
                    gate,
                };
                self.entries += 1;
                return Ok(());
            }
        }
        Err(ArgError::general(format!(
            "the table is full for {} (both its buckets are full; {} entries of {})",
            mac_text(mac),
            self.entries,
            self.slots.len()
        )))
    }

    fn remove(&mut self, mac: u64) -> bool {
        match self.find(mac) {
            Some(i) => {
                self.slots[i] = Slot::default();
                self.entries -= 1;
                true
            }
            None => false,
        }
    }

    /// Apply `f` to a copy, keep it only if it succeeds.
    fn all_or_nothing(
        &mut self,
        f: impl FnOnce(&mut L2Forward) -> Result<(), ArgError>,
    ) -> Result<(), ArgError> {
        let (slots, entries) = (self.slots.clone(), self.entries);
        let r = f(self);
        if r.is_err() {
            self.slots = slots;
            self.entries = entries;
        }
        r
    }
}

fn mac_text(m: u64) -> String {
    let b = m.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn mac_arg(name: &str, s: &str) -> Result<u64, ArgError> {
    Ok(mac_u64(&classify::mac(name, s)?))
}

impl Module for L2Forward {
    fn class(&self) -> &'static str {
        "L2Forward"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            let d = p.data();
            let gate = if d.len() >= 14 {
                self.lookup(mac_u64(d)).unwrap_or(self.default_gate)
            } else {
                DROP
            };
            classify::emit_or_drop(ctx, gate, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let mut entries = Vec::new();
                for mut r in args.records("entries")?.unwrap_or_default() {
                    let w = |e: ArgError| ArgError::new("entries", e.to_string());
                    let mac = mac_arg("addr", &r.required_str("addr").map_err(w)?).map_err(w)?;
                    let gate = classify::gate(&mut r, "gate", self.gates).map_err(w)?;
                    r.finish("an entry").map_err(w)?;
                    entries.push((mac, gate));
                }
                args.finish(cmd)?;
                self.all_or_nothing(|t| entries.iter().try_for_each(|&(m, g)| t.add(m, g)))?;
            }
            "delete" => {
                let macs = args
                    .str_list("addrs")?
                    .unwrap_or_default()
                    .iter()
                    .map(|s| mac_arg("addrs", s))
                    .collect::<Result<Vec<_>, _>>()?;
                args.finish(cmd)?;
                self.all_or_nothing(|t| {
                    macs.iter().try_for_each(|&m| {
                        if t.remove(m) {
                            Ok(())
                        } else {
                            Err(ArgError::new(
                                "addrs",
                                format!("no entry for {}", mac_text(m)),
                            ))
                        }
                    })
                })?;
            }
            "set_default_gate" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                args.finish(cmd)?;
                self.default_gate = gate;
            }
            "lookup" => {
                let macs = args.str_list("addrs")?.unwrap_or_default();
                args.finish(cmd)?;
                let mut gates = Vec::new();
                for s in &macs {
                    let g = self
                        .lookup(mac_arg("addrs", s)?)
                        .ok_or_else(|| ArgError::new("addrs", format!("no entry for {s}")))?;
                    gates.push(Value::Int(g as u64));
                }
                return Ok(Value::Map(vec![("gates".into(), Value::List(gates))]));
            }
            "populate" => {
                let base = mac_arg("base", &args.required_str("base")?)?;
                let count = args.u64_or("count", 0)?;
                let gate_count = args.u64_or("gate_count", 1)?;
                args.finish(cmd)?;
                if gate_count == 0 || gate_count > self.gates as u64 {
                    return Err(ArgError::new(
                        "gate_count",
                        format!("{gate_count} is not 1 to {}", self.gates),
                    ));
                }
                if count > self.slots.len() as u64 {
                    return Err(ArgError::new("count", "is larger than the table"));
                }
                self.all_or_nothing(|t| {
                    (0..count).try_for_each(|i| {
                        t.add((base + i) & 0xffff_ffff_ffff, (i % gate_count) as u16)
                    })
                })?;
            }
            _ => {
                return Err(ArgError::general(format!(
                    "L2Forward has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("entries", self.entries as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let size = args.usize_in("size", 1024, 1, MAX_SIZE)?;
    let bucket = args.usize_in("bucket", 4, 1, 8)?;
    if !size.is_power_of_two() {
        return Err(ArgError::new(
            "size",
            format!("{size} is not a power of two"),
        ));
    }
    if !bucket.is_power_of_two() || bucket > size {
        return Err(ArgError::new(
            "bucket",
            format!("{bucket} is not a power of two up to the size"),
        ));
    }
    let gates = classify::gates_arg(args)?;
    Ok(Box::new(L2Forward::new(size, bucket, gates)))
}
