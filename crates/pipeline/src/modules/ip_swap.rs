//! IPSwap (BESS): swap the IPv4 source and destination addresses, and
//! the TCP/UDP ports (checksums stay right: the same words, swapped).
//! A packet that is not IPv4 is dropped.

use super::classify::ip;
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("IPSwap" => build);

#[derive(Debug, Default)]
pub struct IpSwap;

impl Module for IpSwap {
    fn class(&self) -> &'static str {
        "IPSwap"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            let d = p.data_mut();
            let Some((ihl, proto)) = ip::header(d) else {
                return false;
            };
            for i in 0..4 {
                d.swap(ip::IP_SRC + i, ip::IP_DST + i);
            }
            if ip::ports(d, ihl, proto).is_some() {
                let l4 = ip::ETH_LEN + ihl;
                d.swap(l4, l4 + 2);
                d.swap(l4 + 1, l4 + 3);
            }
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

fn build(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(IpSwap))
}
