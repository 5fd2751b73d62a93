//! VLANPush, VLANPop, VLANSplit (BESS).
//!
//! * `VLANPush(tci=N)`: insert an 802.1Q tag with TCI `N` after the MAC
//!   addresses; a frame already tagged 802.1Q gets an 802.1ad (QinQ)
//!   outer tag instead. Tags nested deeper than [`MAX_TAGS`] are dropped.
//! * `VLANPop()`: remove the outermost tag (802.1Q or 802.1ad) if any.
//! * `VLANSplit(gates=64)`: untagged frames to gate 0; tagged frames lose
//!   their tag and go to the gate of their VLAN ID (a VID with no gate is
//!   dropped: nfkit modules have at most 64 gates, BESS 4096).
//!
//! Frames shorter than an Ethernet header are dropped.

use super::classify;
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::{Batch, PktBuf};

crate::modules::declare_class!("VLANPush" => push, "VLANPop" => pop, "VLANSplit" => split);

/// Most tags a frame may carry after a push.
pub const MAX_TAGS: usize = 2;

fn tagged(d: &[u8]) -> bool {
    d.len() >= 18 && matches!(u16::from_be_bytes([d[12], d[13]]), 0x8100 | 0x88a8)
}

/// Remove the outer tag; its TCI.
fn untag(p: &mut PktBuf) -> u16 {
    let d = p.data_mut();
    let tci = u16::from_be_bytes([d[14], d[15]]);
    d.copy_within(0..12, 4);
    let _ = p.adj(4);
    tci
}

pub struct VlanPush {
    tci: u16,
}

impl Module for VlanPush {
    fn class(&self) -> &'static str {
        "VLANPush"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        let tci = self.tci.to_be_bytes();
        batch.retain(|p| {
            let d = p.data();
            if d.len() < 14 {
                return false;
            }
            let mut at = 12;
            let mut tags = 0;
            while d.len() >= at + 4 && matches!(u16::from_be_bytes([d[at], d[at + 1]]), 0x8100 | 0x88a8) {
                tags += 1;
                at += 4;
            }
            if tags >= MAX_TAGS {
                return false;
            }
            let tpid: u16 = if tags > 0 { 0x88a8 } else { 0x8100 };
            if p.prepend(4).is_err() {
                return false;
            }
            let d = p.data_mut();
            d.copy_within(4..16, 0);
            d[12..14].copy_from_slice(&tpid.to_be_bytes());
            d[14..16].copy_from_slice(&tci);
            true
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

pub struct VlanPop;

impl Module for VlanPop {
    fn class(&self) -> &'static str {
        "VLANPop"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let before = batch.len();
        batch.retain(|p| {
            if tagged(p.data()) {
                untag(p);
            }
            p.len() >= 14
        });
        ctx.count_dropped((before - batch.len()) as u64);
        ctx.forward(0, batch);
    }
}

pub struct VlanSplit {
    gates: usize,
}

impl Module for VlanSplit {
    fn class(&self) -> &'static str {
        "VLANSplit"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for mut p in batch.drain() {
            if p.len() < 14 {
                ctx.drop_packet(p);
            } else if tagged(p.data()) {
                let vid = (untag(&mut p) & 0x0fff) as usize;
                ctx.emit(vid, p);
            } else {
                ctx.emit(0, p);
            }
        }
    }
}

fn push(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let tci = args.u64_or("tci", 0)?;
    let tci = u16::try_from(tci).map_err(|_| ArgError::new("tci", format!("{tci} is not a 16-bit TCI")))?;
    Ok(Box::new(VlanPush { tci }))
}

fn pop(_: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(VlanPop))
}

fn split(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(VlanSplit {
        gates: classify::gates_arg(args)?,
    }))
}
