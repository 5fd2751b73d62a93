//! Buffer (BESS): hold packets until a full batch (32) has gathered,
//! then pass the batch on to gate 0. Packets held when the pipeline
//! stops are freed with the module.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, DEFAULT_BURST};
use nfkit_hw::Batch;

crate::modules::declare_class!("Buffer" => build);

#[derive(Default)]
pub struct Buffer {
    held: Batch,
}

impl Module for Buffer {
    fn class(&self) -> &'static str {
        "Buffer"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            // Never full: it is passed on at 32 of its 64.
            if let Some(p) = self.held.push(p) {
                ctx.drop_packet(p);
            }
            if self.held.len() >= DEFAULT_BURST {
                ctx.forward(0, &mut self.held);
            }
        }
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("held", self.held.len() as u64)]
    }
}

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Buffer::default()))
}
