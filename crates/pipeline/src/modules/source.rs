//! Source: a task that makes packets from a template, as fast as its
//! traffic class lets it (a batch of up to `burst` per run). When the
//! pool runs dry the run makes fewer.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, DEFAULT_BURST};
use nfkit_hw::{Batch, Mempool, PoolCache};

crate::modules::declare_class!("Source" => build);

pub struct Source {
    /// A per-task stack of free buffers: no shared atomics per packet.
    pool: PoolCache,
    template: Vec<u8>,
    burst: usize,
}

impl Source {
    /// Packets of `size` bytes starting with `template` (zero-padded).
    pub fn new(pool: Mempool, template: &[u8], size: usize, burst: usize) -> Source {
        let mut t = template.to_vec();
        t.resize(size.max(template.len()), 0);
        Source {
            pool: pool.cache(2 * nfkit_hw::pool::MAX_BATCH),
            template: t,
            burst: burst.clamp(1, nfkit_hw::pool::MAX_BATCH),
        }
    }
}

impl Module for Source {
    fn class(&self) -> &'static str {
        "Source"
    }
    fn igates(&self) -> usize {
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
    fn run_task(&mut self, ctx: &mut Ctx<'_>) {
        let mut made = 0;
        if let Some(out) = ctx.output(0) {
            while made < self.burst {
                // Built in one piece (`PoolCache::alloc_received` says
                // why); the template fits a buffer (checked at build).
                let Some(p) = self.pool.alloc_copy(&self.template) else {
                    break;
                };
                let _ = out.push(p);
                made += 1;
            }
        }
        ctx.count_created(made as u64);
    }
}

fn build(args: &mut Args, env: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let size = args.usize_in("size", 60, 14, env.pool.data_room())?;
    let burst = args.usize_in("burst", DEFAULT_BURST, 1, nfkit_hw::pool::MAX_BATCH)?;
    let template = args.bytes("template")?.unwrap_or_default();
    if template.len() > env.pool.data_room() {
        return Err(ArgError::new("template", "longer than a packet buffer"));
    }
    Ok(Box::new(Source::new(
        env.pool.clone(),
        &template,
        size,
        burst,
    )))
}
