//! Replicate: every packet leaves on each output gate: the original on
//! gate 0, copies (new buffers from the same pool) on the others. A copy
//! the pool cannot supply is counted as dropped.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("Replicate" => build);

#[derive(Debug)]
pub struct Replicate {
    gates: usize,
}

impl Replicate {
    pub fn new(gates: usize) -> Replicate {
        Replicate {
            gates: gates.max(1),
        }
    }
}

impl Module for Replicate {
    fn class(&self) -> &'static str {
        "Replicate"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for g in 1..self.gates {
            for i in 0..batch.len() {
                match batch[i].try_clone() {
                    Some(copy) => {
                        ctx.count_created(1);
                        ctx.emit(g, copy);
                    }
                    None => {
                        // The copy existed for a moment in intent only:
                        // count it made and dropped, so the books balance.
                        ctx.count_created(1);
                        ctx.count_dropped(1);
                    }
                }
            }
        }
        ctx.forward(0, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Replicate::new(
        args.usize_in("gates", 2, 1, MAX_GATES)?,
    )))
}
