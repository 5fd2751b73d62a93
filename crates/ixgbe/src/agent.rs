//! The agent model (TinyNF, OSDI'20 §4-5): one input queue and up to
//! [`MAX_OUTPUTS`] output queues sharing one logical ring of buffers, no
//! pool, packets handled one at a time in place.
//!
//! Descriptor `i` of the receive ring and of every transmit ring points at
//! buffer `i`, written once at set-up. A received packet is handed to the
//! handler, which returns per output the length to send; 0 writes a null
//! descriptor so every ring advances in lock-step. The receive tail then
//! follows the slowest output, whose head the device writes back to
//! memory: the data path reads no register and allocates nothing.
//!
//! Departures from TinyNF, each for a reason:
//! * the receive ring and the output rings are separate memory (the
//!   datasheet nowhere describes one ring being both), so re-arming a
//!   receive descriptor is one extra 8-byte store;
//! * the slowest output is found with modular ring arithmetic (see
//!   [`slowest_head`]);
//! * when receive finds nothing, the agent also re-reads the written-back
//!   heads: otherwise, once a slow output has held the receive tail long
//!   enough for the ring to fill, no new packet can arrive, no status
//!   descriptor is processed and the tail would never move again.

use crate::desc::{legacy_rx, legacy_tx, DescRing};
use crate::device::{Device, QueueClaim};
use crate::error::InitError;
use crate::queue_setup::{self, RxDescType, TxThresholds};
use crate::regs;
use nfkit_hw::dma::DmaSlots;
use nfkit_hw::{Bar, DmaRegion};
use std::sync::Arc;

/// Bytes per buffer; one whole frame (≤ 1522 bytes) fits, and it is a
/// whole number of KiB as SRRCTL.BSIZEPACKET needs (§8.2.3.8.7).
pub const BUFFER_SIZE: usize = 2048;
/// Most outputs an agent may have.
pub const MAX_OUTPUTS: usize = 16;
/// Transmit tails are written every this many packets (and when idle).
pub const FLUSH_PERIOD: usize = 8;
/// Every this many descriptors one requests status (RS): the device then
/// writes the transmit head back, and the receive tail is recomputed.
pub const RECYCLE_PERIOD: usize = 64;
// Flush points are ring positions, and every recycle point is one.
const _: () =
    assert!(FLUSH_PERIOD.is_power_of_two() && RECYCLE_PERIOD.is_multiple_of(FLUSH_PERIOD));
/// Bytes between two written-back heads: one cache line each.
const HEAD_STRIDE: usize = 64;

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Descriptors per ring = buffers (power of two, 128..=8192).
    pub ring_size: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { ring_size: 1024 }
    }
}

/// What an agent does with each packet.
pub trait PacketHandler {
    /// `buffer` is the whole packet buffer ([`BUFFER_SIZE`] bytes); its
    /// first `len` bytes are the received frame, to be read or rewritten
    /// in place. Set `out_lens[k]` to the number of bytes of `buffer` to
    /// send on output `k`; it is 0 (not sent there) on entry.
    fn handle(&mut self, buffer: &mut [u8], len: usize, out_lens: &mut [u16]);
}

impl<F: FnMut(&mut [u8], usize, &mut [u16])> PacketHandler for F {
    #[inline(always)]
    fn handle(&mut self, buffer: &mut [u8], len: usize, out_lens: &mut [u16]) {
        self(buffer, len, out_lens)
    }
}

/// Agent counters (plain fields: one agent, one thread).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AgentStats {
    /// Packets handed to the handler.
    pub rx_packets: u64,
    /// Packets the device flagged with a frame error: never handed to the
    /// handler, sent nowhere.
    pub rx_errors: u64,
    /// Lengths the handler returned that exceed [`BUFFER_SIZE`]: that
    /// output got a null descriptor instead.
    pub invalid_lengths: u64,
    /// Packets queued for transmission, per output.
    pub tx_packets: Vec<u64>,
}

struct Output<B> {
    claim: QueueClaim<B>,
    ring: DescRing,
    /// The output device's BAR and the offset of this queue's TDT.
    bar: Arc<B>,
    tail_offset: usize,
    /// Descriptors of this output that sent nothing (null, or an invalid
    /// length): the packets sent are the others.
    unsent: u64,
}

/// One input and its outputs. `Send`: run one per core, or several on
/// one core with [`run`].
pub struct Agent<B: Bar> {
    input: QueueClaim<B>,
    /// The input device's BAR and the offset of its RDT.
    input_bar: Arc<B>,
    rx_ring: DescRing,
    rx_tail_offset: usize,
    outputs: Vec<Output<B>>,
    /// Buffer `i` for descriptor `i` of every ring.
    buffers: DmaSlots<BUFFER_SIZE>,
    heads: DmaRegion,
    /// Per-output lengths for the packet being handled (the handler
    /// sees the first `outputs.len()`), all 0 between packets: the
    /// transmit loop takes each one, so no reset pass (`memset`) runs.
    lens: [u16; MAX_OUTPUTS],
    mask: usize,
    /// Next descriptor to process.
    next: usize,
    /// Last value written to the TDTs.
    tx_tail: usize,
    /// Last value written to RDT.
    rx_tail: usize,
    /// Descriptors processed, good or not: the per-packet counters are
    /// derived from it and from the rarer events (errors, nulls) when
    /// [`Agent::run_once`] returns.
    processed: u64,
    stats: AgentStats,
}

impl<B: Bar + 'static> Agent<B> {
    /// Build an agent reading receive queue `rx_queue` of `input` and
    /// sending on each `(device, tx_queue)` of `outputs` (any devices,
    /// including the input's). The queues are claimed until the agent is
    /// dropped.
    pub fn new(
        input: &Device<B>,
        rx_queue: usize,
        outputs: &[(&Device<B>, usize)],
        config: &AgentConfig,
    ) -> Result<Agent<B>, InitError> {
        let size = config.ring_size;
        check_config(size, outputs.len(), input.dma().page_size())?;
        let input_claim = input.take_rx(rx_queue)?;
        let dma = input.dma();
        let buffers = dma
            .allocate(size * BUFFER_SIZE, false)
            .and_then(|region| DmaSlots::new(region, size))
            .map_err(|e| InitError::Config(format!("agent buffers: {e}")))?;
        let heads = dma
            .allocate(4096.max(MAX_OUTPUTS * HEAD_STRIDE), true)
            .map_err(|e| InitError::Config(format!("agent head write-back area: {e}")))?;
        let rx_ring = DescRing::new(dma, size)?;
        point_at_buffers(&rx_ring, &buffers);
        let outs = start_outputs(outputs, &buffers, &heads, size)?;
        // The input is started last, so no packet arrives before every
        // output can take it.
        let started = queue_setup::start_rx_queue(
            input.regs(),
            input.clock(),
            input.poll_timeout(),
            rx_queue,
            &rx_ring,
            (BUFFER_SIZE / 1024) as u32,
            RxDescType::Legacy,
        );
        if let Err(e) = started {
            outs.iter().for_each(Output::stop);
            return Err(e);
        }
        let n = outs.len();
        Ok(Agent {
            rx_tail_offset: regs::RDT.at(rx_queue),
            input_bar: input.regs().bar().clone(),
            input: input_claim,
            rx_ring,
            outputs: outs,
            buffers,
            heads,
            lens: [0; MAX_OUTPUTS],
            mask: size - 1,
            next: 0,
            tx_tail: 0,
            rx_tail: size - 1,
            processed: 0,
            stats: AgentStats {
                tx_packets: vec![0; n],
                ..AgentStats::default()
            },
        })
    }
}

fn check_config(size: usize, outputs: usize, page_size: usize) -> Result<(), InitError> {
    crate::desc::check_ring_size(size)?;
    if size < 2 * RECYCLE_PERIOD {
        return Err(InitError::Config(format!(
            "agent ring size {size} must be at least {}",
            2 * RECYCLE_PERIOD
        )));
    }
    if outputs > MAX_OUTPUTS {
        return Err(InitError::Config(format!(
            "{outputs} outputs: an agent has at most {MAX_OUTPUTS}"
        )));
    }
    if !page_size.is_multiple_of(BUFFER_SIZE) {
        return Err(InitError::Config(format!(
            "DMA page size {page_size} is not a multiple of the {BUFFER_SIZE}-byte buffer"
        )));
    }
    Ok(())
}

/// Descriptor `i` gets the address of buffer `i`, once and for all.
fn point_at_buffers(ring: &DescRing, buffers: &DmaSlots<BUFFER_SIZE>) {
    for i in 0..ring.size() {
        ring.write_q0(i, buffers.device_addr(i));
        ring.write_q1(i, 0);
    }
}

/// Set up and enable every output; if one fails, stop those already
/// started so no enabled queue is left pointing at freed memory.
fn start_outputs<B: Bar + 'static>(
    outputs: &[(&Device<B>, usize)],
    buffers: &DmaSlots<BUFFER_SIZE>,
    heads: &DmaRegion,
    size: usize,
) -> Result<Vec<Output<B>>, InitError> {
    let mut outs = Vec::with_capacity(outputs.len());
    for (k, (device, tx_queue)) in outputs.iter().enumerate() {
        // Head write-back slots are 16-byte aligned (TinyNF found the
        // device needs it) and each on its own cache line.
        let head_addr = heads.device_addr_at(k * HEAD_STRIDE);
        match Output::start(device, *tx_queue, buffers, head_addr, size) {
            Ok(out) => outs.push(out),
            Err(e) => {
                outs.iter().for_each(Output::stop);
                return Err(e);
            }
        }
    }
    Ok(outs)
}

impl<B: Bar + 'static> Output<B> {
    fn start(
        device: &Device<B>,
        tx_queue: usize,
        buffers: &DmaSlots<BUFFER_SIZE>,
        head_addr: u64,
        size: usize,
    ) -> Result<Output<B>, InitError> {
        let claim = device.take_tx(tx_queue)?;
        let ring = DescRing::new(device.dma(), size)?;
        point_at_buffers(&ring, buffers);
        queue_setup::start_tx_queue(
            device.regs(),
            device.clock(),
            device.poll_timeout(),
            tx_queue,
            &ring,
            // Prefetch when 60 descriptors are free to fetch and 4 are
            // ready: TinyNF's values, needed for line rate on one core.
            TxThresholds {
                prefetch: 60,
                host: 4,
                write_back: 0,
            },
            Some(head_addr),
        )?;
        Ok(Output {
            bar: device.regs().bar().clone(),
            tail_offset: regs::TDT.at(tx_queue),
            claim,
            ring,
            unsent: 0,
        })
    }
}

impl<B: Bar> Output<B> {
    /// Let the device send what it was given, then disable the queue.
    fn stop(&self) {
        self.claim.stop();
    }
}

impl<B: Bar> Agent<B> {
    /// Handle up to [`FLUSH_PERIOD`] packets; returns how many. When none
    /// is waiting, flushes the transmit tails and recycles transmitted
    /// buffers instead.
    #[inline]
    pub fn run_once<H: PacketHandler + ?Sized>(&mut self, handler: &mut H) -> usize {
        let mut done = 0;
        while done < FLUSH_PERIOD && self.process_one(handler) {
            done += 1;
        }
        if done < FLUSH_PERIOD {
            self.on_idle();
        }
        self.processed += done as u64;
        self.update_stats();
        done
    }

    /// Number of outputs.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> &AgentStats {
        &self.stats
    }

    /// Handle the packet in descriptor `next`, if the device is done
    /// with it.
    #[inline(always)]
    fn process_one<H: PacketHandler + ?Sized>(&mut self, handler: &mut H) -> bool {
        let i = self.next;
        let status = self.rx_ring.read_q1(i);
        if status & legacy_rx::DD == 0 {
            return false;
        }
        // One test for "EOP set, no frame error (§7.1.5.1) and a length
        // below BUFFER_SIZE". Jumbo frames are off, so no good frame
        // comes near 2 KiB; a length that fills the buffer or more is the
        // device misbehaving.
        const LONG: u64 = legacy_rx::LENGTH_MASK & !(BUFFER_SIZE as u64 - 1);
        const CHECKED: u64 = legacy_rx::FRAME_ERRORS | legacy_rx::EOP | LONG;
        if status & CHECKED == legacy_rx::EOP {
            let len = (status & legacy_rx::LENGTH_MASK) as usize;
            let lens = &mut self.lens[..self.outputs.len()];
            handler.handle(self.buffers.slot_mut(i), len, lens);
        } else {
            self.stats.rx_errors += 1;
        }
        self.transmit(i);
        true
    }

    /// Queue descriptor `i` on every output (null where not sent), re-arm
    /// the receive descriptor, advance; every [`FLUSH_PERIOD`] descriptors
    /// hand the outputs their new tails.
    #[inline(always)]
    fn transmit(&mut self, i: usize) {
        for (k, out) in self.outputs.iter_mut().enumerate() {
            // Taking the length leaves 0 for the next packet (k is below
            // MAX_OUTPUTS; the mask only spares a bounds check).
            let mut len = std::mem::take(&mut self.lens[k % MAX_OUTPUTS]) as u64;
            // One comparison for the common case, 1..=BUFFER_SIZE.
            if len.wrapping_sub(1) >= BUFFER_SIZE as u64 {
                out.unsent += 1;
                if len != 0 {
                    self.stats.invalid_lengths += 1;
                    len = 0;
                }
            }
            out.ring
                .write_q1(i, len | legacy_tx::CMD_EOP | legacy_tx::CMD_IFCS);
        }
        // Clear DD: the descriptor goes back to the device when the
        // receive tail passes it, after every output has sent buffer i.
        self.rx_ring.write_q1(i, 0);
        let next = (i + 1) & self.mask;
        self.next = next;
        // Flush and recycle points are fixed ring positions.
        if next.is_multiple_of(FLUSH_PERIOD) {
            self.end_flush_group(i);
        }
    }

    /// After descriptor `i`, the last of a flush group: hand the outputs
    /// their new tails; at the end of a recycle group, first request
    /// status on `i`, and afterwards recycle.
    #[inline(never)]
    fn end_flush_group(&mut self, i: usize) {
        let recycle_point = self.next.is_multiple_of(RECYCLE_PERIOD);
        if recycle_point {
            self.request_status(i);
        }
        self.flush_tx_tails();
        if recycle_point {
            self.recycle();
        }
    }

    /// Set RS on descriptor `i` of every output (the last of a recycle
    /// group, not yet handed to the device): once it is sent, the device
    /// writes its head back (§7.2.3.5.2, TDWBAL/TDWBAH), which is all
    /// [`Self::recycle`] reads. Done here, once per group, rather than as
    /// a per-packet choice of command.
    fn request_status(&mut self, i: usize) {
        for out in &self.outputs {
            out.ring
                .write_q1(i, out.ring.read_q1(i) | legacy_tx::CMD_RS);
        }
    }

    /// Derive the per-packet counters from the descriptors processed.
    #[inline(always)]
    fn update_stats(&mut self) {
        let stats = &mut self.stats;
        stats.rx_packets = self.processed - stats.rx_errors;
        for (count, out) in stats.tx_packets.iter_mut().zip(&self.outputs) {
            *count = self.processed - out.unsent;
        }
    }

    #[cold]
    fn on_idle(&mut self) {
        if self.tx_tail != self.next {
            self.flush_tx_tails();
        }
        self.recycle();
    }

    /// TDT = next on every output: the device may send up to here.
    fn flush_tx_tails(&mut self) {
        for out in &self.outputs {
            out.bar.write32(out.tail_offset, self.next as u32);
        }
        self.tx_tail = self.next;
    }

    /// Let the device receive into every buffer all outputs are done
    /// with: RDT = (slowest head - 1), leaving the one-descriptor gap that
    /// tells a full ring from an empty one.
    fn recycle(&mut self) {
        let heads = (0..self.outputs.len()).map(|k| self.heads.read_u32(k * HEAD_STRIDE) as usize);
        let slowest = slowest_head(self.next, heads, self.mask);
        let tail = slowest.wrapping_sub(1) & self.mask;
        if tail != self.rx_tail {
            self.rx_tail = tail;
            self.input_bar.write32(self.rx_tail_offset, tail as u32);
        }
    }
}

/// The transmit head, among `heads`, that is furthest behind `next` (the
/// next descriptor the agent will process), in a ring of `mask + 1`
/// descriptors. Buffers from an output's head up to `next` are still that
/// output's; the output with the most of them is the slowest. With no
/// outputs, nothing is in flight and `next` is returned.
///
/// The count in flight on one output is `(next - head) mod size`: at most
/// `size - 1`, because the receive tail keeps one descriptor back, so
/// `head == next` always means "drained", never "full". TinyNF's code
/// instead minimises `head - next` as a 64-bit unsigned number; a drained
/// output then scores 0 and wins, and the receive tail overtakes a
/// lagging output's unsent buffers.
#[inline(always)]
pub fn slowest_head(next: usize, heads: impl Iterator<Item = usize>, mask: usize) -> usize {
    let mut most_in_flight = 0;
    for head in heads {
        let in_flight = next.wrapping_sub(head) & mask;
        if in_flight > most_in_flight {
            most_in_flight = in_flight;
        }
    }
    next.wrapping_sub(most_in_flight) & mask
}

impl<B: Bar> Drop for Agent<B> {
    /// Stop the input first (no more writes into the buffers), then let
    /// the outputs drain and stop them; only then is the memory freed.
    fn drop(&mut self) {
        self.input.stop();
        self.flush_tx_tails();
        self.outputs.iter().for_each(Output::stop);
    }
}

/// Run `agents` round robin on this thread, agent `i` with handler `i`,
/// until `keep_running` returns false (checked between rounds). Extra
/// agents or handlers without a partner are ignored.
pub fn run<B: Bar, H: PacketHandler>(
    agents: &mut [Agent<B>],
    handlers: &mut [H],
    mut keep_running: impl FnMut() -> bool,
) {
    while keep_running() {
        for (agent, handler) in agents.iter_mut().zip(handlers.iter_mut()) {
            agent.run_once(handler);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: usize = 1023;

    /// TinyNF's choice, for comparison: min over (head - next) as u64.
    fn tinynf_earliest(next: usize, heads: &[usize]) -> usize {
        *heads
            .iter()
            .min_by_key(|&&h| (h as u64).wrapping_sub(next as u64))
            .unwrap()
    }

    #[test]
    fn drained_output_does_not_hide_a_lagging_one() {
        // output 0 has sent everything (head == next), output 1 still
        // holds buffers 100..500.
        let (next, heads) = (500, [500, 100]);
        assert_eq!(slowest_head(next, heads.into_iter(), MASK), 100);
        assert_eq!(
            tinynf_earliest(next, &heads),
            500,
            "the published rule picks the drained output"
        );
    }

    #[test]
    fn wrap_around_is_handled() {
        // next wrapped to 10; one output at 1000 (34 in flight), one at 5.
        assert_eq!(slowest_head(10, [5, 1000].into_iter(), MASK), 1000);
        assert_eq!(slowest_head(10, [1000, 5].into_iter(), MASK), 1000);
        assert_eq!(slowest_head(0, [0].into_iter(), MASK), 0);
        assert_eq!(slowest_head(7, std::iter::empty(), MASK), 7);
    }

    proptest::proptest! {
        #[test]
        fn slowest_is_the_one_with_most_in_flight(next in 0usize..1024, in_flight in proptest::collection::vec(0usize..1024, 1..8)) {
            let heads: Vec<usize> = in_flight.iter().map(|f| next.wrapping_sub(*f) & MASK).collect();
            let got = slowest_head(next, heads.iter().copied(), MASK);
            let most = *in_flight.iter().max().unwrap();
            proptest::prop_assert_eq!(got, next.wrapping_sub(most) & MASK);
        }
    }
}
