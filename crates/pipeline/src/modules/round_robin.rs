//! RoundRobin: spread packets (or whole batches) over the output gates
//! in turn.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("RoundRobin" => build);

#[derive(Debug)]
pub struct RoundRobinSplit {
    gates: usize,
    per_batch: bool,
    next: usize,
}

impl RoundRobinSplit {
    pub fn new(gates: usize, per_batch: bool) -> RoundRobinSplit {
        RoundRobinSplit {
            gates: gates.max(1),
            per_batch,
            next: 0,
        }
    }
}

impl Module for RoundRobinSplit {
    fn class(&self) -> &'static str {
        "RoundRobin"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        if self.per_batch {
            ctx.forward(self.next, batch);
            self.next = (self.next + 1) % self.gates;
            return;
        }
        for p in batch.drain() {
            ctx.emit(self.next, p);
            self.next = (self.next + 1) % self.gates;
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = args.usize_in("gates", 2, 1, MAX_GATES)?;
    let per_batch = match args.str("mode")?.as_deref() {
        None | Some("packet") => false,
        Some("batch") => true,
        Some(m) => {
            return Err(ArgError::new(
                "mode",
                format!("expected packet or batch, found `{m}`"),
            ))
        }
    };
    Ok(Box::new(RoundRobinSplit::new(gates, per_batch)))
}
