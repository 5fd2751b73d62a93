//! L4Checksum (BESS): set the TCP or UDP checksum (over IPv4 or IPv6,
//! after up to two VLAN tags), or with `verify=1` check it: good to gate
//! 0, bad to gate 1. A tunnelled frame (UDP to VXLAN's 4789 or Geneve's
//! 6081 with a valid tunnel header) has its inner TCP or UDP checksum
//! set (before the outer one, which covers it) or checked too, and is
//! bad if either is. Other frames (not TCP/UDP, IPv4 fragments, IPv6
//! with extension headers, lengths that disagree with the frame) pass
//! to gate 0 untouched. A UDP/IPv4 checksum of 0 means "none" and
//! verifies; a computed 0 is sent as 0xffff.
//!
//! `hw=1` (BESS's argument) uses the ports: setting asks for the
//! (inner) checksum in the packet's offload metadata (`L4_CSUM`) and the
//! output port fills it in, in hardware if it can, in software
//! otherwise; verifying trusts a verdict the receiving port left in the
//! metadata (`L4_CSUM_GOOD`/`L4_CSUM_BAD`) and checks in software when
//! there is none. A packet whose metadata says its checksum is still to
//! be filled in (`L4_CSUM`: a partial checksum from a local sender's
//! transmit offload, as AF_PACKET reports it) verifies good either way.

use super::csum::{self, Verdict};
use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::pool::offload::{self as ol, L4};
use nfkit_hw::{Batch, PktBuf};

crate::modules::declare_class!("L4Checksum" => build);

pub struct L4Checksum {
    verify: bool,
    hw: bool,
}

/// Check the TCP or UDP checksum of `d`.
pub fn verify(d: &[u8]) -> Verdict {
    let Some((l4, len, proto, pseudo)) = csum::l4(d) else {
        return Verdict::Absent;
    };
    let at = l4 + csum::l4_csum_at(proto);
    let v4 = csum::l3(d).is_some_and(|(_, t)| t == 0x0800);
    let none = proto == 17 && v4 && d[at..at + 2] == [0, 0];
    if none || csum::finish(pseudo + csum::sum(&d[l4..l4 + len])) == 0 {
        Verdict::Good
    } else {
        Verdict::Bad
    }
}

/// Set the TCP or UDP checksum of `d` (if it has one).
pub fn set(d: &mut [u8]) {
    if let Some((l4, len, proto, pseudo)) = csum::l4(d) {
        let at = l4 + csum::l4_csum_at(proto);
        d[at..at + 2].fill(0);
        let mut c = csum::finish(pseudo + csum::sum(&d[l4..l4 + len]));
        if proto == 17 && c == 0 {
            c = 0xffff;
        }
        d[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// Check the frame's TCP/UDP checksums, the inner one of a tunnel too.
pub fn verify_all(d: &[u8]) -> Verdict {
    let outer = verify(d);
    match csum::inner(d) {
        Some(at) => outer.max(verify(&d[at..])),
        None => outer,
    }
}

/// Set the frame's TCP/UDP checksums, the inner one of a tunnel first.
pub fn set_all(d: &mut [u8]) {
    if let Some(at) = csum::inner(d) {
        set(&mut d[at..]);
    }
    set(d);
}

/// Ask the output port for the (inner) TCP/UDP checksum. A tunnel's
/// outer UDP checksum is left as it is (0 from this crate's encaps).
fn ask_hardware(p: &mut PktBuf) {
    let Some(mut o) = nfkit_packet::offload_meta::describe(p.data()) else {
        return;
    };
    if o.l4 == L4::None {
        return;
    }
    if let Some(x) = p.offload() {
        o.flags = x.flags & !(ol::L4_CSUM_GOOD | ol::L4_CSUM_BAD);
        (o.gso, o.gso_size, o.vlan_tci) = (x.gso, x.gso_size, x.vlan_tci);
    }
    o.flags |= ol::L4_CSUM;
    p.set_offload(o);
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
            let gate = if self.verify {
                let port = self.hw.then(|| p.offload()).flatten();
                let v = match port.or_else(|| p.offload().filter(|o| o.has(ol::L4_CSUM))) {
                    // Still to be filled in (a local sender's transmit
                    // offload): nothing to verify yet, as in Linux.
                    Some(o) if o.has(ol::L4_CSUM) => Verdict::Good,
                    Some(o) if o.has(ol::L4_CSUM_BAD) => Verdict::Bad,
                    Some(o) if o.has(ol::L4_CSUM_GOOD) => Verdict::Good,
                    _ => verify_all(p.data()),
                };
                usize::from(v == Verdict::Bad)
            } else {
                if self.hw {
                    ask_hardware(&mut p);
                } else {
                    set_all(p.data_mut());
                    // Done: a request a port left in the metadata goes.
                    if let Some(o) = p.offload_mut() {
                        o.flags &= !ol::L4_CSUM;
                    }
                }
                0
            };
            ctx.emit(gate, p);
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    Ok(Box::new(L4Checksum {
        verify: args.bool_or("verify", false)?,
        hw: args.bool_or("hw", false)?,
    }))
}
