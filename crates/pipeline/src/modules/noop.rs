//! NoOP (BESS): a task that does nothing (for scheduler tests): no
//! gates, produces no packet.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("NoOP" => build);

#[derive(Debug, Default)]
pub struct NoOp;

impl Module for NoOp {
    fn class(&self) -> &'static str {
        "NoOP"
    }
    fn igates(&self) -> usize {
        0
    }
    fn ogates(&self) -> usize {
        0
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_dropped(batch.len() as u64);
        batch.clear();
    }
    fn is_task(&self) -> bool {
        true
    }
    fn task_sleeps(&self) -> bool {
        true
    }
}

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(NoOp))
}
