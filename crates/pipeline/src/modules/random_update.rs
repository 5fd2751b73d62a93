//! RandomUpdate (BESS): write a uniformly random value in `min..=max`
//! into packet fields (big-endian, 1 to 8 bytes at an offset). A packet
//! too short for a field is dropped.
//!
//! Arguments: `fields=[(offset=N, size=1..8, min=A, max=B), ...]` (at
//! most 16), `seed=N`. Commands: `add(fields=[...])`, `clear()`.

use super::rng::{self, Rng};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("RandomUpdate" => build);

/// Most fields.
pub const MAX_FIELDS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomField {
    pub offset: usize,
    pub size: usize,
    pub min: u64,
    pub max: u64,
}

pub struct RandomUpdate {
    fields: Vec<RandomField>,
    min_len: usize,
    rng: Rng,
}

impl RandomUpdate {
    pub fn new(seed: u64) -> RandomUpdate {
        RandomUpdate {
            fields: Vec::new(),
            min_len: 0,
            rng: Rng::new(seed),
        }
    }

    fn parse(&self, args: &mut Args) -> Result<Vec<RandomField>, ArgError> {
        let recs = args
            .records("fields")?
            .ok_or_else(|| ArgError::new("fields", "is required"))?;
        if self.fields.len() + recs.len() > MAX_FIELDS {
            return Err(ArgError::new(
                "fields",
                format!("more than {MAX_FIELDS} fields"),
            ));
        }
        recs.into_iter()
            .map(|mut r| {
                let w = |e: ArgError| ArgError::new("fields", e.to_string());
                // Absent fields are 0 (as BESS's messages leave them out).
                let offset = r.u64_or("offset", 0).map_err(w)?;
                let size = r.u64_or("size", 0).map_err(w)?;
                let min = r.u64_or("min", 0).map_err(w)?;
                let max = r.u64_or("max", 0).map_err(w)?;
                r.finish("a field").map_err(w)?;
                if !(1..=8).contains(&size) {
                    return Err(ArgError::new(
                        "fields",
                        format!("size {size} is not 1 to 8"),
                    ));
                }
                if offset > u16::MAX as u64 {
                    return Err(ArgError::new(
                        "fields",
                        format!("offset {offset} is beyond any packet"),
                    ));
                }
                if min > max || (size < 8 && max >> (size * 8) != 0) {
                    return Err(ArgError::new(
                        "fields",
                        format!(
                            "min {min} and max {max} do not make a range of {size}-byte values"
                        ),
                    ));
                }
                Ok(RandomField {
                    offset: offset as usize,
                    size: size as usize,
                    min,
                    max,
                })
            })
            .collect()
    }

    fn set(&mut self, fields: Vec<RandomField>) {
        self.min_len = fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0);
        self.fields = fields;
    }
}

impl Module for RandomUpdate {
    fn class(&self) -> &'static str {
        "RandomUpdate"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let min = self.min_len;
        batch.retain(|p| p.len() >= min);
        ctx.count_dropped((before - batch.len()) as u64);
        for p in batch.iter_mut() {
            let d = p.data_mut();
            for f in &self.fields {
                let v = self.rng.range(f.min, f.max).to_be_bytes();
                d[f.offset..f.offset + f.size].copy_from_slice(&v[8 - f.size..]);
            }
        }
        ctx.forward(0, batch);
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let f = self.parse(args)?;
                args.finish(cmd)?;
                let mut all = self.fields.clone();
                all.extend(f);
                self.set(all);
            }
            "clear" => {
                args.finish(cmd)?;
                self.set(Vec::new());
            }
            _ => {
                return Err(ArgError::general(format!(
                    "RandomUpdate has no command `{cmd}`"
                )))
            }
        }
        Ok(no_reply())
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let mut m = RandomUpdate::new(rng::seed(args)?);
    if args.pos("fields").is_some() {
        let f = m.parse(args)?;
        m.set(f);
    }
    Ok(Box::new(m))
}
