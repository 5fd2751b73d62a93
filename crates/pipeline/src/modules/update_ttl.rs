//! UpdateTTL (BESS): decrement the IPv4 TTL and patch the header
//! checksum (RFC 1624); a packet whose TTL is 0 or 1, or that is not
//! IPv4, is dropped.

use super::classify::ip;
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("UpdateTTL" => build);

const TTL: usize = ip::ETH_LEN + 8;
const CSUM: usize = ip::ETH_LEN + 10;

#[derive(Debug, Default)]
pub struct UpdateTtl;

impl Module for UpdateTtl {
    fn class(&self) -> &'static str {
        "UpdateTTL"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            let d = p.data_mut();
            if ip::header(d).is_none() || d[TTL] <= 1 {
                return false;
            }
            let old = u16::from_be_bytes([d[TTL], d[TTL + 1]]);
            d[TTL] -= 1;
            let sum = u16::from_be_bytes([d[CSUM], d[CSUM + 1]]);
            let sum = ip::csum_update(sum, old, old - 0x100);
            d[CSUM..CSUM + 2].copy_from_slice(&sum.to_be_bytes());
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(UpdateTtl))
}
