//! Transmit of packets that carry a mark (a chain of segments, or offload
//! state): several data descriptors per frame with EOP on the last
//! (§7.2.3.2.4, §7.2.3.1), preceded, when the packet asks for an offload,
//! by an advanced context descriptor (§7.2.3.2.3): IPv4 header checksum
//! (POPTS.IXSM), TCP/UDP checksum (POPTS.TXSM), TCP segmentation
//! (DCMD.TSE, §7.2.4), VLAN insertion (DCMD.VLE).
//!
//! Reached only from `TxQueue::send` when a batch has a marked packet
//! (`Batch::maybe_marked`, then `Batch::marks`): the single-segment path
//! pays two loads per batch for it.
//!
//! Ring bookkeeping: the fast path has one packet per descriptor; here a
//! packet takes `k` descriptors. A packet never straddles a group of
//! `TX_CLEAN_BATCH` descriptors: when it would, the group is closed with
//! null descriptors, so that RS (set on each group's last descriptor) is
//! always on a packet's last descriptor or a null one, never on a context
//! descriptor or inside a packet. Each group counts its descriptors that
//! hold no packet (`extras`), so reclaiming a group frees
//! `TX_CLEAN_BATCH - extras` packets.

use super::{TxQueue, TX_CLEAN_BATCH, TX_COMMAND};
use crate::desc::{adv_tx, legacy_tx, offload as ofl};
use nfkit_hw::pool::offload::{self as f, Gso, Offload, L3, L4};
use nfkit_hw::{Bar, Batch, PktBuf};

/// Why a marked packet cannot be sent (it is dropped, counted in
/// `QueueCounters::errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// More descriptors than a group (a chain of over 31 segments).
    TooManySegments,
    /// Larger than the largest frame (a TSO send: `TSO_MAX_SEND`).
    TooLarge,
    /// Empty, or an empty segment (a descriptor of length 0 is null).
    Empty,
    /// Offload state the 82599 cannot carry out (software's job:
    /// `nfkit_port::prepare_tx`), or that does not fit the frame's first
    /// segment.
    Offload,
}

/// The descriptors of one marked packet.
struct Plan {
    /// The context descriptor, if the packet asks for an offload.
    ctx: Option<ofl::TxOffload>,
    /// OR-ed into every data descriptor's quadword 1 (DCMD, olinfo with
    /// PAYLEN).
    data: u64,
    segs: usize,
}

impl<B: Bar> TxQueue<B> {
    /// `send` for a batch with marked packets: packets from the front
    /// until the ring is full; refused ones are dropped and counted.
    #[cold]
    #[inline(never)]
    pub(super) fn send_marked(&mut self, batch: &mut Batch) -> usize {
        let first = self.next;
        let mut pos = first;
        let mut sent = 0;
        let mut bytes = 0;
        while let Some(pkt) = batch.as_mut_slice().first_mut() {
            let plan = match plan(pkt, self.wire_max) {
                Ok(p) => p,
                Err(_why) => {
                    drop(batch.drain_front(1));
                    self.counters.errors += 1;
                    continue;
                }
            };
            let k = plan.segs + usize::from(plan.ctx.is_some());
            let in_group = pos % TX_CLEAN_BATCH;
            let fill = if in_group + k > TX_CLEAN_BATCH {
                TX_CLEAN_BATCH - in_group
            } else {
                0
            };
            let in_flight = pos.wrapping_sub(self.clean) & self.mask;
            if fill + k > self.mask - in_flight {
                break;
            }
            // Null descriptors (length 0, §7.2.3.2.2) close the group.
            for n in 0..fill {
                self.ring.write_q0(pos + n, 0);
                self.ring
                    .write_q1(pos + n, legacy_tx::CMD_EOP | legacy_tx::CMD_IFCS);
            }
            self.add_extras(pos, fill);
            pos += fill;
            self.add_extras(pos, k - 1);
            if let Some(c) = plan.ctx {
                self.ring.write_q0(pos, u64::from(c.vlan_macip_lens));
                self.ring.write_q1(
                    pos,
                    u64::from(c.type_tucmd_mlhl) | u64::from(c.mss_l4len_idx) << 32,
                );
                pos += 1;
            }
            let mut left = plan.segs;
            let (ring, data) = (&self.ring, plan.data);
            for (addr, len) in pkt.dma_segments() {
                left -= 1;
                let eop = if left == 0 { adv_tx::CMD_EOP } else { 0 };
                ring.write_q0(pos, addr);
                ring.write_q1(
                    pos,
                    (TX_COMMAND & !adv_tx::CMD_EOP) | eop | data | len as u64,
                );
                pos += 1;
            }
            bytes += pkt.pkt_len() as u64;
            let held = self.bufs.hold_front(batch, 1);
            debug_assert_eq!(held, 1);
            sent += 1;
        }
        if pos != first {
            self.request_status(first, pos);
            self.next = pos & self.mask;
            self.counters.packets += sent as u64;
            self.counters.bytes += bytes;
            self.bar.write32(self.tail_offset, self.next as u32);
        }
        sent
    }

    /// `n` descriptors from `pos` on hold no packet (they stay in one group).
    fn add_extras(&mut self, pos: usize, n: usize) {
        let g = (pos & self.mask) / TX_CLEAN_BATCH;
        self.extras[g] += n as u8;
    }
}

/// The descriptors `pkt` needs, with the header fields the 82599 expects
/// written in its first segment (checksum seeds, §7.2.4, §7.2.5).
fn plan(pkt: &mut PktBuf, wire_max: usize) -> Result<Plan, Refused> {
    let segs = pkt.nb_segs();
    if pkt.pkt_len() == 0 || pkt.dma_segments().any(|(_, len)| len == 0) {
        return Err(Refused::Empty);
    }
    let asked = f::IP_CSUM | f::L4_CSUM | f::OUTER_IP_CSUM | f::VLAN_INSERT;
    let o = match pkt.offload() {
        Some(o) if o.flags & asked != 0 || o.gso != Gso::None => *o,
        _ => {
            if segs + 1 > TX_CLEAN_BATCH {
                return Err(Refused::TooManySegments);
            }
            if pkt.pkt_len() > wire_max {
                return Err(Refused::TooLarge);
            }
            let len = pkt.pkt_len() as u64;
            return Ok(Plan {
                ctx: None,
                data: len << adv_tx::PAYLEN_SHIFT,
                segs,
            });
        }
    };
    if segs + 1 > TX_CLEAN_BATCH {
        return Err(Refused::TooManySegments);
    }
    o.check(pkt.len()).map_err(|_| Refused::Offload)?;
    let mut t = ofl::tx(&o).ok_or(Refused::Offload)?;
    let tso = o.gso != Gso::None;
    let limit = if tso { super::TSO_MAX_SEND } else { wire_max };
    if pkt.pkt_len() > limit {
        return Err(Refused::TooLarge);
    }
    if tso {
        // The 82599 segments TCP (§7.2.4); an IPv4 header changes per
        // segment, so its checksum is always the device's.
        if o.gso != Gso::Tcp || o.l4 != L4::Tcp || o.l4_len < 20 {
            return Err(Refused::Offload);
        }
        if o.l3 == L3::Ipv4 {
            t.olinfo |= ofl::POPTS_IXSM;
        }
    }
    seed(pkt.data_mut(), &o, &t, tso)?;
    let paylen = (pkt.pkt_len() - usize::from(t.paylen_less)) as u64;
    Ok(Plan {
        ctx: Some(t),
        data: u64::from(t.dcmd) | u64::from(t.olinfo) << 32 | paylen << adv_tx::PAYLEN_SHIFT,
        segs,
    })
}

/// The header fields the device computes from, in the first segment:
/// the IPv4 checksum field zero (IXSM sums the header as it is), the L4
/// checksum field the pseudo-header sum, with the L4 length for a single
/// frame and without it for TSO, which adds each segment's (§7.2.4).
fn seed(d: &mut [u8], o: &Offload, t: &ofl::TxOffload, tso: bool) -> Result<(), Refused> {
    let (l3, l4) = (o.l3_start(), o.l4_start());
    if t.olinfo & ofl::POPTS_IXSM != 0 {
        let ip = if o.tunnel == nfkit_hw::pool::offload::Tunnel::None {
            l3
        } else {
            usize::from(o.outer_l2_len)
        };
        d.get_mut(ip + 10..ip + 12).ok_or(Refused::Offload)?.fill(0);
    }
    if t.olinfo & ofl::POPTS_TXSM == 0 {
        return Ok(());
    }
    let at = l4 + usize::from(o.l4.csum_offset().ok_or(Refused::Offload)?);
    let (mut sum, len) = match o.l3 {
        L3::Ipv4 => {
            let ip = d.get(l3..l3 + 20).ok_or(Refused::Offload)?;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            (
                ones(&ip[12..20]) + u32::from(ip[9]),
                total.saturating_sub(usize::from(o.l3_len)),
            )
        }
        L3::Ipv6 => {
            let ip = d.get(l3..l3 + 40).ok_or(Refused::Offload)?;
            let pl = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let len = (pl + 40).saturating_sub(usize::from(o.l3_len));
            (ones(&ip[8..40]) + u32::from(ip[6]), len)
        }
        L3::None => return Err(Refused::Offload),
    };
    if !tso {
        sum += len as u32;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    d.get_mut(at..at + 2)
        .ok_or(Refused::Offload)?
        .copy_from_slice(&(sum as u16).to_be_bytes());
    Ok(())
}

/// Sum of big-endian 16-bit words (an even number of bytes).
fn ones(b: &[u8]) -> u32 {
    b.chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum()
}
