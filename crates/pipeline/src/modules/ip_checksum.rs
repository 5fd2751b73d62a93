//! IPChecksum (BESS): set the IPv4 header checksum, or with `verify=1`
//! check it: good to gate 0, bad to gate 1. A tunnelled frame (UDP to
//! VXLAN's 4789 or Geneve's 6081 with a valid tunnel header) has its
//! inner IPv4 header set or checked too, and is bad if either is. Frames
//! that are not IPv4 (after up to two VLAN tags) pass to gate 0
//! untouched; an IPv4 header that is truncated goes to gate 1 when
//! verifying, and is dropped when setting (`truncated` statistic).
//!
//! `hw=1` (BESS's argument) uses the ports: setting asks for the
//! checksum in the packet's offload metadata (`IP_CSUM`, or
//! `OUTER_IP_CSUM` for a tunnel's outer header) and the output port
//! fills it in, in hardware if it can, in software otherwise; verifying
//! trusts a verdict the receiving port left in the metadata and checks
//! in software when there is none.

use super::csum::{self, Verdict};
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::pool::offload::{self as ol, Offload};
use nfkit_hw::Batch;

crate::modules::declare_class!("IPChecksum" => build);

pub struct IpChecksum {
    verify: bool,
    hw: bool,
    truncated: u64,
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

/// Check the IPv4 header checksum of `d`.
pub fn verify(d: &[u8]) -> Verdict {
    match header(d) {
        None => Verdict::Absent,
        Some(None) => Verdict::Bad,
        Some(Some((l3, ihl))) if csum::finish(csum::sum(&d[l3..l3 + ihl])) == 0 => Verdict::Good,
        Some(Some(_)) => Verdict::Bad,
    }
}

/// Set the IPv4 header checksum of `d`; false if its header is cut short.
pub fn set(d: &mut [u8]) -> bool {
    match header(d) {
        None => true,
        Some(None) => false,
        Some(Some((l3, ihl))) => {
            d[l3 + 10..l3 + 12].fill(0);
            let c = csum::finish(csum::sum(&d[l3..l3 + ihl]));
            d[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            true
        }
    }
}

/// Check the frame's IPv4 checksums, the inner one of a tunnel too.
pub fn verify_all(d: &[u8]) -> Verdict {
    let outer = verify(d);
    match csum::inner(d) {
        Some(at) => outer.max(verify(&d[at..])),
        None => outer,
    }
}

/// The port's verdict on the (inner) IPv4 header, if it left one.
fn port_verdict(o: Option<&Offload>) -> Option<Verdict> {
    let o = o?;
    if o.has(ol::IP_CSUM_BAD) {
        Some(Verdict::Bad)
    } else if o.has(ol::IP_CSUM_GOOD) {
        Some(Verdict::Good)
    } else {
        None
    }
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
            let gate = if self.verify {
                let v = match self.hw.then(|| port_verdict(p.offload())).flatten() {
                    Some(v) => v,
                    None => verify_all(p.data()),
                };
                usize::from(v == Verdict::Bad)
            } else if self.hw {
                if !ask_hardware(&mut p) {
                    self.truncated += 1;
                    ctx.drop_packet(p);
                    continue;
                }
                0
            } else {
                let d = p.data_mut();
                let inner_ok = csum::inner(d).is_none_or(|at| set(&mut d[at..]));
                if !(inner_ok && set(d)) {
                    self.truncated += 1;
                    ctx.drop_packet(p);
                    continue;
                }
                0
            };
            ctx.emit(gate, p);
        }
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("truncated", self.truncated)]
    }
}

/// Ask the output port for the IPv4 checksums in the offload metadata;
/// false if the frame's headers are cut short.
fn ask_hardware(p: &mut nfkit_hw::PktBuf) -> bool {
    let Some(mut o) = nfkit_packet::offload_meta::describe(p.data()) else {
        // not IPv4 or IPv6 at all passes; an IPv4 header cut short does not
        return header(p.data()).is_none();
    };
    let prior = p.offload().map_or(0, |x| x.flags);
    o.flags = prior & !(ol::IP_CSUM_GOOD | ol::IP_CSUM_BAD);
    if o.l3 == nfkit_hw::pool::offload::L3::Ipv4 {
        o.flags |= ol::IP_CSUM;
    }
    if o.tunnel != nfkit_hw::pool::offload::Tunnel::None && header(p.data()).is_some() {
        o.flags |= ol::OUTER_IP_CSUM;
    }
    if let Some(x) = p.offload() {
        (o.gso, o.gso_size, o.vlan_tci) = (x.gso, x.gso_size, x.vlan_tci);
    }
    p.set_offload(o);
    true
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(IpChecksum {
        verify: args.bool_or("verify", false)?,
        hw: args.bool_or("hw", false)?,
        truncated: 0,
    }))
}
