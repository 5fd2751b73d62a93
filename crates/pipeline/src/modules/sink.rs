//! Sink: the end of a path; every packet is consumed (freed).

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

#[derive(Debug, Default)]
pub struct Sink;

impl Module for Sink {
    fn class(&self) -> &'static str {
        "Sink"
    }
    fn ogates(&self) -> usize {
        0
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_consumed(batch.len() as u64);
        batch.clear();
    }
}

pub(super) fn build(_: &mut Args, _: &super::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Sink))
}
