//! ExactMatch (BESS): the output gate of a packet is the gate of the
//! rule whose values equal its key fields (packet bytes at offsets,
//! big-endian, or metadata attributes; each ANDed with its mask), else
//! the default gate, else it is dropped. A hash table of up to `size`
//! rules (default 1,048,576); looking up allocates nothing.
//!
//! Arguments: `fields=[(offset=N | attr_name=NAME, num_bytes=1..8), ...]`
//! (1 to 8), `masks=[...]` (one per field, default all ones), `size=N`,
//! `gates=N` (default 64). Commands: `add(gate=G, fields=[v, ...])`,
//! `delete(fields=[...])`, `clear()`, `set_default_gate(gate=G)`.

use super::classify::{self, Fields, FxMap, Key, DROP};
use crate::args::{ArgError, Args, Value};
use crate::metadata::AttrSpec;
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("ExactMatch" => build);

/// Most rules a table may be configured for.
pub const MAX_SIZE: usize = 1 << 24;

pub struct ExactMatch {
    fields: Fields,
    masks: Key,
    table: FxMap<Key, u16>,
    size: usize,
    default_gate: u16,
    gates: usize,
}

impl ExactMatch {
    pub fn new(fields: Fields, masks: Key, size: usize, gates: usize) -> ExactMatch {
        ExactMatch {
            fields,
            masks,
            table: FxMap::default(),
            size,
            default_gate: DROP,
            gates,
        }
    }

    /// Add or replace a rule (the key is masked first).
    pub fn add(&mut self, mut key: Key, gate: u16) -> Result<(), ArgError> {
        mask(&mut key, &self.masks);
        if self.table.len() >= self.size && !self.table.contains_key(&key) {
            return Err(ArgError::general(format!(
                "the table is full ({} rules)",
                self.size
            )));
        }
        self.table.insert(key, gate);
        Ok(())
    }

    pub fn rules(&self) -> usize {
        self.table.len()
    }
}

#[inline]
fn mask(key: &mut Key, masks: &Key) {
    for (k, m) in key.iter_mut().zip(masks) {
        *k &= m;
    }
}

impl Module for ExactMatch {
    fn class(&self) -> &'static str {
        "ExactMatch"
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
                Some(mut k) => {
                    mask(&mut k, &self.masks);
                    self.table.get(&k).copied().unwrap_or(self.default_gate)
                }
                None => self.default_gate,
            };
            classify::emit_or_drop(ctx, gate, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let gate = classify::gate(args, "gate", self.gates)?;
                let key = self.fields.values(args, "fields")?;
                args.finish(cmd)?;
                self.add(key, gate)?;
            }
            "delete" => {
                let mut key = self.fields.values(args, "fields")?;
                args.finish(cmd)?;
                mask(&mut key, &self.masks);
                if self.table.remove(&key).is_none() {
                    return Err(ArgError::new("fields", "no such rule"));
                }
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
                    "ExactMatch has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("rules", self.table.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let fields = Fields::parse(args)?;
    let mut masks = [0u64; classify::MAX_FIELDS];
    for (m, f) in masks.iter_mut().zip(&fields.fields) {
        *m = classify::full_mask(f.size);
    }
    if args.pos("masks").is_some() {
        masks = fields.values(args, "masks")?;
    }
    let size = args.usize_in("size", 1 << 20, 1, MAX_SIZE)?;
    let gates = classify::gates_arg(args)?;
    Ok(Box::new(ExactMatch::new(fields, masks, size, gates)))
}
