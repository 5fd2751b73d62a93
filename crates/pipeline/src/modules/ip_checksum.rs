//! IPChecksum (BESS): set the IPv4 header checksum, or with `verify=1`
//! check it: good to gate 0, bad to gate 1. Frames that are not IPv4
//! (after up to two VLAN tags) pass to gate 0 untouched; an IPv4 header
//! that is truncated goes to gate 1 when verifying, and is dropped when
//! setting.

use super::csum;
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("IPChecksum" => build);

pub struct IpChecksum {
    verify: bool,
}

/// The IPv4 header of a frame, if IPv4: `Some(None)` if it is truncated.
fn header(d: &[u8]) -> Option<Option<(usize, usize)>> {
    let (l3, et) = csum::l3(d)?;
    if et != 0x0800 {
        return None;
    }
    let ihl = (*d.get(l3)? & 0x0f) as usize * 4;
    Some((ihl >= 20 && l3 + ihl <= d.len()).then_some((l3, ihl)))
}

impl Module for IpChecksum {
    fn class(&self) -> &'static str {
        "IPChecksum"
    }
    fn ogates(&self) -> usize {
        2
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for mut p in batch.drain() {
            let d = p.data_mut();
            let gate = match header(d) {
                None => 0,
                Some(None) if self.verify => 1,
                Some(None) => {
                    ctx.drop_packet(p);
                    continue;
                }
                Some(Some((l3, ihl))) if self.verify => {
                    usize::from(csum::finish(csum::sum(&d[l3..l3 + ihl])) != 0)
                }
                Some(Some((l3, ihl))) => {
                    d[l3 + 10..l3 + 12].fill(0);
                    let c = csum::finish(csum::sum(&d[l3..l3 + ihl]));
                    d[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
                    0
                }
            };
            ctx.emit(gate, p);
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(IpChecksum {
        verify: args.bool_or("verify", false)?,
    }))
}
