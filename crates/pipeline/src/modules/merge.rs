//! Merge: every input gate goes out of output gate 0.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

#[derive(Debug, Default)]
pub struct Merge;

impl Module for Merge {
    fn class(&self) -> &'static str {
        "Merge"
    }
    fn igates(&self) -> usize {
        MAX_GATES
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.forward(0, batch);
    }
}

pub(super) fn build(_: &mut Args, _: &super::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Merge))
}
