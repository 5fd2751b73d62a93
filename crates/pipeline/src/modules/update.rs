//! Update: write constant values into packet fields (big-endian, 1 to 8
//! bytes at an offset). A packet too short for a field is dropped.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("Update" => build);

/// One field to overwrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldUpdate {
    pub offset: usize,
    pub size: usize,
    pub value: u64,
}

impl FieldUpdate {
    fn end(&self) -> usize {
        self.offset + self.size
    }
    fn apply(&self, data: &mut [u8]) {
        let bytes = self.value.to_be_bytes();
        data[self.offset..self.end()].copy_from_slice(&bytes[8 - self.size..]);
    }
}

#[derive(Debug)]
pub struct Update {
    fields: Vec<FieldUpdate>,
    /// Shortest packet every field fits in.
    min_len: usize,
}

impl Update {
    pub fn new(fields: Vec<FieldUpdate>) -> Update {
        let min_len = fields.iter().map(FieldUpdate::end).max().unwrap_or(0);
        Update { fields, min_len }
    }
}

impl Module for Update {
    fn class(&self) -> &'static str {
        "Update"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let min = self.min_len;
        batch.retain(|p| p.len() >= min);
        ctx.count_dropped((before - batch.len()) as u64);
        for p in batch.iter_mut() {
            let data = p.data_mut();
            for f in &self.fields {
                f.apply(data);
            }
        }
        ctx.forward(0, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let offsets = args
        .u64_list("offset")?
        .ok_or_else(|| ArgError::new("offset", "is required"))?;
    let sizes = args
        .u64_list("size")?
        .ok_or_else(|| ArgError::new("size", "is required"))?;
    let values = args
        .u64_list("value")?
        .ok_or_else(|| ArgError::new("value", "is required"))?;
    if offsets.len() != sizes.len() || sizes.len() != values.len() {
        return Err(ArgError::general(
            "offset, size and value must have the same number of entries",
        ));
    }
    let mut fields = Vec::new();
    for ((&offset, &size), &value) in offsets.iter().zip(&sizes).zip(&values) {
        if !(1..=8).contains(&size) {
            return Err(ArgError::new("size", format!("{size} is not 1 to 8 bytes")));
        }
        if size < 8 && value >> (size * 8) != 0 {
            return Err(ArgError::new(
                "value",
                format!("{value:#x} does not fit in {size} bytes"),
            ));
        }
        if offset > u16::MAX as u64 {
            return Err(ArgError::new(
                "offset",
                format!("{offset} is beyond any packet"),
            ));
        }
        fields.push(FieldUpdate {
            offset: offset as usize,
            size: size as usize,
            value,
        });
    }
    Ok(Box::new(Update::new(fields)))
}
