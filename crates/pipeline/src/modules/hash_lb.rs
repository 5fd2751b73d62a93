//! HashLB: spread flows over the output gates by a hash of their
//! addresses, so each flow stays on one gate. Fields: `l2` (MACs), `l3`
//! (IP addresses), `l4` (IP addresses, protocol and ports). A packet
//! that lacks the requested layer falls back to the layers it has.
//! Headers are read with etherparse (no allocation).

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module, MAX_GATES};
use etherparse::{LinkSlice, NetSlice, SlicedPacket, TransportSlice};
use nfkit_hw::Batch;
use std::hash::Hasher;

crate::modules::declare_class!("HashLB" => build);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashFields {
    L2,
    L3,
    L4,
}

#[derive(Debug)]
pub struct HashLb {
    gates: usize,
    fields: HashFields,
}

impl HashLb {
    pub fn new(gates: usize, fields: HashFields) -> HashLb {
        HashLb {
            gates: gates.max(1),
            fields,
        }
    }

    /// The flow hash of a frame.
    pub fn hash(&self, frame: &[u8]) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        let Ok(s) = SlicedPacket::from_ethernet(frame) else {
            h.write(frame.get(..12).unwrap_or(frame));
            return h.finish();
        };
        let mut have_l3 = false;
        if self.fields != HashFields::L2 {
            match &s.net {
                Some(NetSlice::Ipv4(ip)) => {
                    h.write(&ip.header().source());
                    h.write(&ip.header().destination());
                    h.write_u8(ip.header().protocol().0);
                    have_l3 = true;
                }
                Some(NetSlice::Ipv6(ip)) => {
                    h.write(&ip.header().source());
                    h.write(&ip.header().destination());
                    have_l3 = true;
                }
                _ => {}
            }
        }
        if self.fields == HashFields::L4 && have_l3 {
            match &s.transport {
                Some(TransportSlice::Tcp(t)) => {
                    h.write_u16(t.source_port());
                    h.write_u16(t.destination_port());
                }
                Some(TransportSlice::Udp(u)) => {
                    h.write_u16(u.source_port());
                    h.write_u16(u.destination_port());
                }
                _ => {}
            }
        }
        if !have_l3 {
            match &s.link {
                Some(LinkSlice::Ethernet2(e)) => {
                    h.write(&e.source());
                    h.write(&e.destination());
                }
                _ => h.write(frame.get(..12).unwrap_or(frame)),
            }
        }
        h.finish()
    }
}

impl Module for HashLb {
    fn class(&self) -> &'static str {
        "HashLB"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            let g = (self.hash(p.data()) % self.gates as u64) as usize;
            ctx.emit(g, p);
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = args.usize_in("gates", 2, 1, MAX_GATES)?;
    let fields = match args.str("fields")?.as_deref() {
        Some("l2") => HashFields::L2,
        Some("l3") => HashFields::L3,
        None | Some("l4") => HashFields::L4,
        Some(m) => {
            return Err(ArgError::new(
                "fields",
                format!("expected l2, l3 or l4, found `{m}`"),
            ))
        }
    };
    Ok(Box::new(HashLb::new(gates, fields)))
}
