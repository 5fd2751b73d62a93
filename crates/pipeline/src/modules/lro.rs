//! LRO (SoftNIC's name): large receive offload in software. In-order
//! TCP segments of one flow (plain, or inside VXLAN/Geneve on their UDP
//! ports) are coalesced into one large frame, a chain of the segments'
//! own buffers (the later ones' headers taken off, no payload copied),
//! by Linux GRO's rules (`nfkit_packet::gso::gro_verdict`): same flow
//! and header lengths, headers alike but for lengths, identifiers and
//! checksums (TTL, TOS, DF, ACK number, window and options equal), the
//! next sequence number, IPv4 identifiers counting up, flags equal but
//! for FIN/PSH, no CWR on a later segment, no segment larger than the
//! first, checksums verified (or left partial by a local sender).
//! A flow is sent at once after a short segment or one with
//! URG/PSH/RST/SYN/FIN; segments without data, with those flags or
//! with IPv4 options pass without being held; and every flow is sent at
//! the end of each input batch (as Linux at the end of a NAPI poll), so
//! nothing waits longer than one batch.
//!
//! The large frame's headers are set (lengths, FIN/PSH of the later
//! segments, every checksum, outer ones included) and it carries
//! offload metadata as a receiving NIC with LRO gives it: TCP
//! segmentation with `gso_size` the first segment's payload (what a
//! port or `TSO` needs to cut it back), the header lengths, and its
//! checksums verified good; ECN's CWR on the first segment sets
//! `GSO_ECN`. A port whose capabilities include TSO (a TAP: the host
//! kernel takes it as one GRO frame) sends it whole; `TSO` cuts it for
//! the others.
//!
//! Segments that are chains (jumbo frames) are merged the same way,
//! their headers in their first buffer; a frame that already carries a
//! segmentation request (a super-frame a port took whole) is not: its
//! flow is sent first and it passes as it is.
//!
//! Gate in 0, gate out 0. Arguments: `max_size` (default 65,535, the
//! largest frame made, bytes from the outer IP header on; at least
//! 1,500), `max_flows` (default 64, flows held at once; the oldest is
//! sent when another starts). Statistics: `merged` (segments added to
//! a held frame), `frames` (large frames sent), `bad_csum` (segments
//! whose checksum did not verify: passed on untouched, never merged).
//! Nothing is dropped.

use crate::args::{ArgError, Args};
use crate::module::{Ctx, Module};
use nfkit_hw::pool::offload::{self as ol, Gso, L3, Offload};
use nfkit_hw::{Batch, PktBuf, MAX_SEGS};
use nfkit_packet::checksum::Sum;
use nfkit_packet::gso::{self, Held, RunningSum, TcpLayout, Verdict};

crate::modules::declare_class!("LRO" => build);

struct Flow {
    pkt: PktBuf,
    h: Held,
    sum: RunningSum,
}

pub struct Lro {
    flows: Vec<Flow>,
    max_flows: usize,
    max_size: usize,
    merged: u64,
    frames: u64,
    bad_csum: u64,
}

impl Lro {
    pub fn new(max_size: usize, max_flows: usize) -> Lro {
        Lro {
            flows: Vec::with_capacity(max_flows),
            max_flows,
            max_size,
            merged: 0,
            frames: 0,
            bad_csum: 0,
        }
    }

    /// Send held flow `i`, its headers set for all it holds.
    fn flush(&mut self, ctx: &mut Ctx<'_>, i: usize) {
        let Flow { mut pkt, h, sum } = self.flows.remove(i);
        if h.segs > 1 {
            let o = h.lay.o;
            let (l4, hl) = (o.l4_start(), o.header_len());
            let total = pkt.pkt_len();
            let d = pkt.data_mut();
            d[l4 + 13] |= h.flags;
            let cwr = d[l4 + 13] & gso::CWR != 0;
            gso::fix_headers(&mut d[..hl], &o, total, 0, sum.sum());
            let mut flags = ol::L4_CSUM_GOOD;
            if o.l3 == L3::Ipv4 {
                flags |= ol::IP_CSUM_GOOD;
            }
            if cwr {
                flags |= ol::GSO_ECN;
            }
            pkt.set_offload(Offload {
                flags,
                gso: Gso::Tcp,
                gso_size: h.mss as u16,
                ..o
            });
            self.frames += 1;
        }
        ctx.emit(0, pkt);
    }

    fn flush_all(&mut self, ctx: &mut Ctx<'_>) {
        while !self.flows.is_empty() {
            self.flush(ctx, 0);
        }
    }

    /// Hold `p` as a new flow, or send it if it cannot be held.
    fn start(&mut self, ctx: &mut Ctx<'_>, mut p: PktBuf, lay: TcpLayout, payload: Sum) {
        // (A chain has no padding: checked by the caller.)
        let trimmed = p.is_chained() || p.set_len(lay.end).is_ok();
        if !gso::holdable(p.data(), &lay) || !trimmed {
            ctx.emit(0, p);
            return;
        }
        if self.flows.len() >= self.max_flows {
            self.flush(ctx, 0);
        }
        let mut sum = RunningSum::default();
        sum.add_sum(payload, lay.payload_len());
        let h = Held::new(p.data(), lay);
        self.flows.push(Flow { pkt: p, h, sum });
    }

    fn one(&mut self, ctx: &mut Ctx<'_>, mut p: PktBuf) {
        let chained = p.is_chained();
        let lay = if chained {
            // A chain (a jumbo segment): its headers in its first buffer,
            // no padding after its IP packet. A super-frame (it carries a
            // segmentation request already) is not merged: its flow goes
            // first and it passes as it is.
            let gso = p.offload().is_some_and(|o| o.gso != Gso::None);
            match TcpLayout::of_prefix(p.data(), p.pkt_len()) {
                Ok(lay) if !gso && lay.end == p.pkt_len() => Ok(lay),
                Ok(_) => Err(true),
                Err(_) => Err(true),
            }
        } else {
            TcpLayout::of(p.data()).map_err(|_| false)
        };
        let lay = match lay {
            Ok(lay) => lay,
            // Not TCP (no held flow is its), or a chain that cannot be
            // merged (every flow goes first).
            Err(flush) => {
                if flush {
                    self.flush_all(ctx);
                }
                return ctx.emit(0, p);
            }
        };
        let trusted = p
            .offload()
            .is_some_and(|o| o.has(ol::L4_CSUM) || o.has(ol::L4_CSUM_GOOD));
        let payload = if chained {
            let sum = gso::pieces_sum(p.segments(), lay.header_len(), lay.end);
            (trusted || gso::verify_headers(p.data(), &lay, sum)).then_some(sum)
        } else if trusted {
            Some(Sum::ZERO.add_bytes(&p.data()[lay.header_len()..lay.end]))
        } else {
            gso::verify_inner(p.data(), &lay)
        };
        let max_len = self.max_size + usize::from(if lay.o.outer_l2_len > 0 {
            lay.o.outer_l2_len
        } else {
            lay.o.l2_len
        });
        let found = self.flows.iter().enumerate().find_map(|(i, f)| {
            match gso::gro_verdict(f.pkt.data(), &f.h, p.data(), &lay, max_len) {
                Verdict::OtherFlow => None,
                v => Some((i, v)),
            }
        });
        let Some(payload) = payload else {
            // A bad checksum: never merged, sent after its flow.
            self.bad_csum += 1;
            if let Some((i, _)) = found {
                self.flush(ctx, i);
            }
            return ctx.emit(0, p);
        };
        match found {
            Some((i, Verdict::Merge { then_flush }))
                if self.flows[i].pkt.nb_segs() + p.nb_segs() <= MAX_SEGS
                    && self.flows[i].pkt.pool().same(p.pool()) =>
            {
                let hl = lay.header_len();
                let f = &mut self.flows[i];
                f.h.add(p.data(), &lay);
                f.sum.add_sum(payload, lay.payload_len());
                let _ = p.take_offload();
                let trimmed = chained || p.set_len(lay.end).is_ok();
                if !trimmed || p.adj(hl).is_err() || f.pkt.append(p).is_err() {
                    // Cannot happen (checked above); the flow goes as it is.
                    ctx.count_dropped(1);
                    return self.flush(ctx, i);
                }
                self.merged += 1;
                if then_flush {
                    self.flush(ctx, i);
                }
            }
            Some((i, _)) => {
                self.flush(ctx, i);
                self.start(ctx, p, lay, payload);
            }
            None => self.start(ctx, p, lay, payload),
        }
    }
}

impl Module for Lro {
    fn class(&self) -> &'static str {
        "LRO"
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            self.one(ctx, p);
        }
        self.flush_all(ctx);
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("merged", self.merged),
            ("frames", self.frames),
            ("bad_csum", self.bad_csum),
        ]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max_size = args.u64_or("max_size", 65_535)?;
    if !(1_500..=65_535).contains(&max_size) {
        return Err(ArgError::new("max_size", format!("{max_size} is not 1500..=65535")));
    }
    let max_flows = args.u64_or("max_flows", 64)?;
    if !(1..=1024).contains(&max_flows) {
        return Err(ArgError::new("max_flows", format!("{max_flows} is not 1..=1024")));
    }
    Ok(Box::new(Lro::new(max_size as usize, max_flows as usize)))
}
