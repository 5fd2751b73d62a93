//! GenericEncap and GenericDecap (BESS).
//!
//! * `GenericEncap(fields=[(size=N, value=V | attribute=NAME), ...])`:
//!   prepend the fields in order: constants big-endian (`value`, an
//!   integer or bytes), attributes as stored. At most 8 bytes a field,
//!   [`MAX_HEADER`] in all.
//! * `GenericDecap(bytes=N)`: strip `N` bytes from the front; shorter
//!   packets are dropped.

use super::classify::{self, Field, FieldPos};
use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("GenericEncap" => encap, "GenericDecap" => decap);

/// Longest header GenericEncap prepends.
pub const MAX_HEADER: usize = 64;

enum Part {
    Const(Vec<u8>),
    Attr { index: usize, size: usize },
}

pub struct GenericEncap {
    parts: Vec<Part>,
    attrs: Vec<AttrSpec>,
    len: usize,
}

impl Module for GenericEncap {
    fn class(&self) -> &'static str {
        "GenericEncap"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        self.attrs.clone()
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let mut header = [0u8; MAX_HEADER];
        batch.retain(|p| {
            let mut at = 0;
            for part in &self.parts {
                match part {
                    Part::Const(b) => header[at..at + b.len()].copy_from_slice(b),
                    Part::Attr { index, size } => {
                        let v = ctx.attr(*index).bytes(p);
                        let n = v.len().min(*size);
                        header[at..at + n].copy_from_slice(&v[..n]);
                        header[at + n..at + size].fill(0);
                    }
                }
                at += match part {
                    Part::Const(b) => b.len(),
                    Part::Attr { size, .. } => *size,
                };
            }
            match p.prepend(self.len) {
                Ok(h) => {
                    h.copy_from_slice(&header[..self.len]);
                    true
                }
                Err(_) => false,
            }
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

pub struct GenericDecap {
    bytes: usize,
}

impl Module for GenericDecap {
    fn class(&self) -> &'static str {
        "GenericDecap"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let n = self.bytes;
        batch.retain(|p| p.adj(n).is_ok());
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

fn encap(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let recs = args.records("fields")?.ok_or_else(|| ArgError::new("fields", "is required"))?;
    let (mut parts, mut attrs, mut len) = (Vec::new(), Vec::new(), 0);
    for mut r in recs {
        let w = |e: ArgError| ArgError::new("fields", e.to_string());
        let size = r.u64_or("size", 0).map_err(w)? as usize;
        if !(1..=8).contains(&size) {
            return Err(ArgError::new("fields", format!("size {size} is not 1 to 8")));
        }
        let part = match (r.str("attribute").map_err(w)?, r.take("value")) {
            (Some(name), None) => {
                attrs.push(AttrSpec::new(name, size, Access::Read));
                Part::Attr { index: attrs.len() - 1, size }
            }
            (None, Some(v)) => {
                let f = Field { pos: FieldPos::Offset(0), size };
                let v = classify::field_data("fields", v, &f)?;
                Part::Const(v.to_be_bytes()[8 - size..].to_vec())
            }
            _ => return Err(ArgError::new("fields", "each field needs exactly one of attribute=NAME or value=V")),
        };
        r.finish("a field").map_err(w)?;
        len += size;
        if len > MAX_HEADER {
            return Err(ArgError::new("fields", format!("the header is longer than {MAX_HEADER} bytes")));
        }
        parts.push(part);
    }
    Ok(Box::new(GenericEncap { parts, attrs, len }))
}

fn decap(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let bytes = args.usize_in("bytes", 0, 1, 1024)?;
    Ok(Box::new(GenericDecap { bytes }))
}
