//! Split: the output gate of each packet is a value read from a metadata
//! attribute or from the packet itself (big-endian, 1 to 8 bytes). A
//! value with no such gate, or a packet too short to hold the field, is
//! dropped.

use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::{Batch, PktBuf};

crate::modules::declare_class!("Split" => build);

/// Where Split reads the gate number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitOn {
    /// A metadata attribute (little-endian as stored by `Attr::set_u64`).
    Attr { name: String, size: usize },
    /// Packet bytes at `offset`, big-endian (network order).
    Field { offset: usize, size: usize },
}

#[derive(Debug)]
pub struct Split {
    on: SplitOn,
    gates: usize,
}

impl Split {
    pub fn new(on: SplitOn, gates: usize) -> Split {
        Split { on, gates }
    }
    fn gate_of(&self, ctx: &Ctx<'_>, p: &PktBuf) -> Option<usize> {
        let v = match &self.on {
            SplitOn::Attr { .. } => ctx.attr(0).get_u64(p),
            SplitOn::Field { offset, size } => {
                let bytes = p.data().get(*offset..offset + size)?;
                bytes.iter().fold(0u64, |v, &b| v << 8 | b as u64)
            }
        };
        usize::try_from(v).ok().filter(|&g| g < self.gates)
    }
}

impl Module for Split {
    fn class(&self) -> &'static str {
        "Split"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        match &self.on {
            SplitOn::Attr { name, size } => vec![AttrSpec::new(name.clone(), *size, Access::Read)],
            SplitOn::Field { .. } => Vec::new(),
        }
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            match self.gate_of(ctx, &p) {
                Some(g) => ctx.emit(g, p),
                None => ctx.drop_packet(p),
            }
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let size = args.usize_in("size", 1, 1, 8)?;
    let gates = args.usize_in("gates", 2, 1, MAX_GATES)?;
    let on = match (args.str("attribute")?, args.u64("offset")?) {
        (Some(name), None) => SplitOn::Attr { name, size },
        (None, Some(offset)) => SplitOn::Field {
            offset: offset as usize,
            size,
        },
        _ => {
            return Err(ArgError::general(
                "Split needs exactly one of attribute=NAME or offset=N",
            ))
        }
    };
    Ok(Box::new(Split::new(on, gates)))
}
