//! SetMetadata: write a constant into a metadata attribute of every
//! packet (for Split on an attribute, or tests).

use crate::args::{ArgError, Args};
use crate::metadata::{Access, AttrSpec, MAX_ATTR_SIZE};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("SetMetadata" => build);

#[derive(Debug)]
pub struct SetMetadata {
    attr: String,
    value: Vec<u8>,
}

impl SetMetadata {
    /// Set `attr` to `value` (its size is the value's length).
    pub fn new(attr: &str, value: &[u8]) -> SetMetadata {
        SetMetadata {
            attr: attr.to_string(),
            value: value.to_vec(),
        }
    }
    /// Set `attr` (`size` bytes) to the integer `value`, little-endian as
    /// `Attr::get_u64` reads it.
    pub fn int(attr: &str, size: usize, value: u64) -> SetMetadata {
        let mut v = value.to_le_bytes().to_vec();
        v.resize(size, 0);
        SetMetadata::new(attr, &v)
    }
}

impl Module for SetMetadata {
    fn class(&self) -> &'static str {
        "SetMetadata"
    }
    fn attrs(&self) -> Vec<AttrSpec> {
        vec![AttrSpec::new(
            self.attr.clone(),
            self.value.len(),
            Access::Write,
        )]
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let attr = ctx.attr(0);
        for p in batch.iter_mut() {
            attr.set_bytes(p, &self.value);
        }
        ctx.forward(0, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let attr = args.required_str("attribute")?;
    let size = args.usize_in("size", 4, 1, MAX_ATTR_SIZE)?;
    match args.take("value") {
        Some(crate::args::Value::Int(v)) => {
            if size < 8 && v >> (size * 8) != 0 {
                return Err(ArgError::new(
                    "value",
                    format!("{v} does not fit in {size} bytes"),
                ));
            }
            Ok(Box::new(SetMetadata::int(&attr, size, v)))
        }
        Some(crate::args::Value::Str(s)) if s.len() <= MAX_ATTR_SIZE => {
            Ok(Box::new(SetMetadata::new(&attr, s.as_bytes())))
        }
        Some(v) => Err(ArgError::new(
            "value",
            format!("expected an integer or a short string, found `{v}`"),
        )),
        None => Err(ArgError::new("value", "is required")),
    }
}
