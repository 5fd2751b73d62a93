//! Sink: the end of a path; every packet is consumed (freed).
//!
//! Buffers go back a whole batch at a time through a cache of the
//! pipeline's pool that the sink owns: no lock per packet, and buffers
//! of other pools (a port's) go home under one lock per run of them.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::{Batch, Mempool, PoolCache};

crate::modules::declare_class!("Sink" => build);

/// Buffer ids the sink's cache keeps before handing some back to the
/// shared pool.
const CACHE_SIZE: usize = 2 * nfkit_hw::pool::MAX_BATCH;

#[derive(Debug)]
pub struct Sink {
    cache: PoolCache,
}

impl Sink {
    /// A sink keeping freed buffers of `pool` in a cache of its own.
    pub fn new(pool: &Mempool) -> Sink {
        Sink {
            cache: pool.cache(CACHE_SIZE),
        }
    }
}

impl Module for Sink {
    fn class(&self) -> &'static str {
        "Sink"
    }
    fn ogates(&self) -> usize {
        0
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        ctx.count_consumed(batch.len() as u64);
        self.cache.free_bulk(batch.drain());
    }
}

fn build(_: &mut Args, env: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(Sink::new(&env.pool)))
}
