//! MACSwap: exchange the Ethernet destination and source addresses.
//! Frames shorter than the two addresses are dropped.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("MACSwap" => build);

#[derive(Debug, Default)]
pub struct MacSwap;

impl Module for MacSwap {
    fn class(&self) -> &'static str {
        "MACSwap"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| p.len() >= 12);
        ctx.count_dropped((before - batch.len()) as u64);
        for p in batch.iter_mut() {
            let (dst, src) = p.data_mut()[..12].split_at_mut(6);
            dst.swap_with_slice(src);
        }
        ctx.forward(0, batch);
    }
}

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(MacSwap))
}
