//! MPLSPop (BESS): pop the MPLS label after the Ethernet header of an
//! MPLS frame (EtherType 0x8847) and set the EtherType to
//! `next_eth_type` (default 0x0800), out of gate 0; with
//! `remove_eth_header=1` the Ethernet header goes too. Frames that are
//! not MPLS leave by gate 1 untouched; truncated MPLS frames are dropped.
//! Command (BESS's, argument `MplsPopArg`): `set(remove_eth_header=,
//! next_eth_type=)` sets both; one left out takes its default above (a
//! BESS message cannot tell a zero from a field left out).

use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("MPLSPop" => build);

pub struct MplsPop {
    remove_eth: bool,
    next_type: u16,
}

impl Module for MplsPop {
    fn class(&self) -> &'static str {
        "MPLSPop"
    }
    fn ogates(&self) -> usize {
        2
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for mut p in batch.drain() {
            let d = p.data_mut();
            if d.len() < 14 || d[12..14] != [0x88, 0x47] {
                ctx.emit(1, p);
                continue;
            }
            if d.len() < 18 {
                ctx.drop_packet(p);
                continue;
            }
            if self.remove_eth {
                let _ = p.adj(18);
            } else {
                d.copy_within(0..12, 4);
                d[16..18].copy_from_slice(&self.next_type.to_be_bytes());
                let _ = p.adj(4);
            }
            ctx.emit(0, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        if cmd != "set" {
            return Err(ArgError::general(format!(
                "MPLSPop has no command `{cmd}` (it has set)"
            )));
        }
        let m = settings(args)?;
        args.finish(cmd)?;
        *self = m;
        Ok(no_reply())
    }
}

fn settings(args: &mut Args) -> Result<MplsPop, ArgError> {
    let remove_eth = args.bool_or("remove_eth_header", false)?;
    let t = args.u64_or("next_eth_type", 0x0800)?;
    let next_type = u16::try_from(t).map_err(|_| ArgError::new("next_eth_type", format!("{t:#x} is not an EtherType")))?;
    Ok(MplsPop { remove_eth, next_type })
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(settings(args)?))
}
