//! WildcardMatch (BESS): rules of (values, masks, priority, gate) over
//! key fields; a packet goes to the gate of the highest-priority rule
//! with `key & mask == value & mask`, else the default gate, else it is
//! dropped. Tuple space search: one hash table per distinct mask
//! combination (at most [`MAX_TUPLES`]), probed in turn; up to `size`
//! rules (default 1,048,576). Looking up allocates nothing.
//!
//! Arguments: `fields=[(offset=N | attr_name=NAME, num_bytes=1..8), ...]`,
//! `size=N`, `gates=N` (default 64). Commands: `add(gate=G, priority=P,
//! values=[...], masks=[...])`, `delete(values=[...], masks=[...])`,
//! `clear()`, `set_default_gate(gate=G)`.

use super::classify::{self, Fields, FxMap, Key, DROP};
use crate::args::{ArgError, Args, Value};
use crate::metadata::AttrSpec;
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("WildcardMatch" => build);

/// Most distinct mask combinations (tuples).
pub const MAX_TUPLES: usize = 16;

struct Tuple {
    masks: Key,
    /// Masked values -> (priority, gate).
    rules: FxMap<Key, (i64, u16)>,
}

pub struct WildcardMatch {
    fields: Fields,
    tuples: Vec<Tuple>,
    rules: usize,
    size: usize,
    default_gate: u16,
    gates: usize,
}

#[inline]
fn masked(key: &Key, masks: &Key) -> Key {
    let mut k = *key;
    for (k, m) in k.iter_mut().zip(masks) {
        *k &= m;
    }
    k
}

impl WildcardMatch {
    pub fn new(fields: Fields, size: usize, gates: usize) -> WildcardMatch {
        WildcardMatch {
            fields,
            tuples: Vec::new(),
            rules: 0,
            size,
            default_gate: DROP,
            gates,
        }
    }

    /// Add or replace the rule (values, masks).
    pub fn add(
        &mut self,
        values: Key,
        masks: Key,
        priority: i64,
        gate: u16,
    ) -> Result<(), ArgError> {
        let key = masked(&values, &masks);
        let t = self.tuples.iter().position(|t| t.masks == masks);
        let exists = t.is_some_and(|t| self.tuples[t].rules.contains_key(&key));
        if !exists && self.rules >= self.size {
            return Err(ArgError::general(format!(
                "the table is full ({} rules)",
                self.size
            )));
        }
        let t = match t {
            Some(t) => t,
            None if self.tuples.len() >= MAX_TUPLES => {
                return Err(ArgError::new(
                    "masks",
                    format!("more than {MAX_TUPLES} distinct mask combinations"),
                ))
            }
            None => {
                self.tuples.push(Tuple {
                    masks,
                    rules: FxMap::default(),
                });
                self.tuples.len() - 1
            }
        };
        if self.tuples[t].rules.insert(key, (priority, gate)).is_none() {
            self.rules += 1;
        }
        Ok(())
    }

    pub fn rules(&self) -> usize {
        self.rules
    }

    #[inline]
    fn lookup(&self, key: &Key) -> u16 {
        let mut best: Option<(i64, u16)> = None;
        for t in &self.tuples {
            if let Some(&(prio, gate)) = t.rules.get(&masked(key, &t.masks)) {
                if best.is_none_or(|(b, _)| prio > b) {
                    best = Some((prio, gate));
                }
            }
        }
        best.map_or(self.default_gate, |(_, g)| g)
    }
}

impl Module for WildcardMatch {
    fn class(&self) -> &'static str {
        "WildcardMatch"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        self.fields.attrs()
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            let gate = match self.fields.key(ctx, &p) {
                Some(k) => self.lookup(&k),
                None => self.default_gate,
            };
            classify::emit_or_drop(ctx, gate, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                let priority = classify::priority(args, "priority")?;
                let values = self.fields.values(args, "values")?;
                let masks = self.fields.values(args, "masks")?;
                args.finish(cmd)?;
                self.add(values, masks, priority, gate)?;
            }
            "delete" => {
                let values = self.fields.values(args, "values")?;
                let masks = self.fields.values(args, "masks")?;
                args.finish(cmd)?;
                let key = masked(&values, &masks);
                let t = self
                    .tuples
                    .iter()
                    .position(|t| t.masks == masks && t.rules.contains_key(&key))
                    .ok_or_else(|| ArgError::new("values", "no such rule"))?;
                self.tuples[t].rules.remove(&key);
                self.rules -= 1;
                if self.tuples[t].rules.is_empty() {
                    self.tuples.remove(t);
                }
            }
            "clear" => {
                args.finish(cmd)?;
                self.tuples.clear();
                self.rules = 0;
            }
            "set_default_gate" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                args.finish(cmd)?;
                self.default_gate = gate;
            }
            _ => {
                return Err(ArgError::general(format!(
                    "WildcardMatch has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("rules", self.rules as u64),
            ("tuples", self.tuples.len() as u64),
        ]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let fields = Fields::parse(args)?;
    let size = args.usize_in("size", 1 << 20, 1, super::exact_match::MAX_SIZE)?;
    let gates = classify::gates_arg(args)?;
    Ok(Box::new(WildcardMatch::new(fields, size, gates)))
}
