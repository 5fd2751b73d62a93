//! L4Checksum (BESS): set the TCP or UDP checksum (over IPv4 or IPv6,
//! after up to two VLAN tags), or with `verify=1` check it: good to gate
//! 0, bad to gate 1. Other frames (not TCP/UDP, IPv4 fragments, IPv6
//! with extension headers, lengths that disagree with the frame) pass
//! to gate 0 untouched. A UDP/IPv4 checksum of 0 means "none" and
//! verifies; a computed 0 is sent as 0xffff.

use super::csum;
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("L4Checksum" => build);

pub struct L4Checksum {
    verify: bool,
}

impl Module for L4Checksum {
    fn class(&self) -> &'static str {
        "L4Checksum"
    }
    fn ogates(&self) -> usize {
        2
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for mut p in batch.drain() {
            let d = p.data_mut();
            let gate = match csum::l4(d) {
                None => 0,
                Some((l4, len, proto, pseudo)) => {
                    let at = l4 + csum::l4_csum_at(proto);
                    let v4 = csum::l3(d).is_some_and(|(_, t)| t == 0x0800);
                    if self.verify {
                        let none = proto == 17 && v4 && d[at..at + 2] == [0, 0];
                        usize::from(!none && csum::finish(pseudo + csum::sum(&d[l4..l4 + len])) != 0)
                    } else {
                        d[at..at + 2].fill(0);
                        let mut c = csum::finish(pseudo + csum::sum(&d[l4..l4 + len]));
                        if proto == 17 && c == 0 {
                            c = 0xffff;
                        }
                        d[at..at + 2].copy_from_slice(&c.to_be_bytes());
                        0
                    }
                }
            };
            ctx.emit(gate, p);
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(L4Checksum {
        verify: args.bool_or("verify", false)?,
    }))
}
