//! Merge: every input gate goes out of output gate 0.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("Merge" => build);

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

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Merge))
}
