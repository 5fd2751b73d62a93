//! Timestamp: stamp each packet with the scheduler time (ns) in the
//! `timestamp` attribute, or in the packet at `offset` (8 bytes,
//! big-endian) when the stamp must survive a wire. Measure reads it.

use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("Timestamp" => build);

/// The attribute Timestamp writes and Measure reads.
pub const TIMESTAMP_ATTR: &str = "timestamp";

#[derive(Debug, Default)]
pub struct Timestamp {
    /// `Some`: write into the packet at this offset.
    offset: Option<usize>,
}

impl Timestamp {
    /// Stamp the metadata attribute.
    pub fn new() -> Timestamp {
        Timestamp { offset: None }
    }
    /// Stamp packet bytes `offset..offset + 8`.
    pub fn in_packet(offset: usize) -> Timestamp {
        Timestamp {
            offset: Some(offset),
        }
    }
}

impl Module for Timestamp {
    fn class(&self) -> &'static str {
        "Timestamp"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        match self.offset {
            None => vec![AttrSpec::new(TIMESTAMP_ATTR, 8, Access::Write)],
            Some(_) => Vec::new(),
        }
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let now = ctx.now_ns();
        match self.offset {
            None => {
                let attr = ctx.attr(0);
                for p in batch.iter_mut() {
                    attr.set_u64(p, now);
                }
            }
            Some(off) => {
                let before = batch.len();
                batch.retain(|p| p.len() >= off + 8);
                ctx.count_dropped((before - batch.len()) as u64);
                for p in batch.iter_mut() {
                    p.data_mut()[off..off + 8].copy_from_slice(&now.to_be_bytes());
                }
            }
        }
        ctx.forward(0, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(match args.u64("offset")? {
        Some(o) if o <= u16::MAX as u64 => Timestamp::in_packet(o as usize),
        Some(o) => return Err(ArgError::new("offset", format!("{o} is beyond any packet"))),
        None => Timestamp::new(),
    }))
}
