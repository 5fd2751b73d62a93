//! Bypass: input gate i goes out of output gate i, untouched. `gates=N`
//! (default BESS's [`MAX_GATES`]) gates each way.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("Bypass" => build);

#[derive(Debug)]
pub struct Bypass {
    gates: usize,
}

impl Bypass {
    pub fn new(gates: usize) -> Bypass {
        Bypass { gates }
    }
}

impl Module for Bypass {
    fn class(&self) -> &'static str {
        "Bypass"
    }
    fn igates(&self) -> usize {
        self.gates
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        ctx.forward(igate, batch);
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Bypass::new(
        args.usize_in("gates", MAX_GATES, 1, MAX_GATES)?,
    )))
}
