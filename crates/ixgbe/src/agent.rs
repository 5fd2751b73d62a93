//! The agent model (TinyNF, OSDI'20 §4-5): one input queue and up to
//! [`MAX_OUTPUTS`] output queues sharing one logical ring of buffers, no
//! pool, packets handled one at a time in place.
//!
//! Descriptor `i` of every ring points at buffer `i`, written once at
//! set-up. As in TinyNF, the input's receive ring *is* output 0's transmit
//! ring (the same memory; outputs 1.. have rings of their own). A
//! received packet is handed to the handler, which returns per output the
//! length to send; 0 writes a null descriptor so every ring advances in
//! lock-step. On ring 0 that one store is both output 0's transmit
//! command and the receive descriptor's re-arming: it clears DD. The
//! receive tail then follows the slowest output, whose head the device
//! writes back to memory: the data path reads no register and allocates
//! nothing.
//!
//! Why one ring can serve both directions (legacy formats, §7.1.5 and
//! §7.2.3.2.2): receive write-back only writes quadword 1 (length,
//! status, errors) and leaves the buffer address in quadword 0, which
//! transmit then reads as its buffer address; the transmit command in
//! quadword 1 is only read by the transmit engine, the receive engine
//! reads quadword 0 alone; and with head write-back (§7.2.3.5.2) the
//! transmit engine writes no descriptor back, so no stale DD can appear
//! where the agent waits for the next packet. The receive engine only
//! gets a descriptor back after every output's head has passed it.
//!
//! Departures from TinyNF, each for a reason:
//! * the slowest output is found with modular ring arithmetic (see
//!   [`slowest_head`]);
//! * when receive finds nothing, the agent also re-reads the written-back
//!   heads: otherwise, once a slow output has held the receive tail long
//!   enough for the ring to fill, no new packet can arrive, no status
//!   descriptor is processed and the tail would never move again;
//! * frames the device flagged (or too long for a buffer) and lengths
//!   the handler returns beyond a buffer are counted drops, each found
//!   by one comparison on the common path;
//! * the counters are derived from the ring position when asked for
//!   ([`Agent::stats`]): only the rare events (errors, null descriptors)
//!   are counted as they happen.

use crate::agent_protocol::{self as protocol, BatchEnd};
use crate::desc::{self, legacy_tx, DescRing};
use crate::device::{Device, QueueClaim};
use crate::error::InitError;
use crate::queue_setup::{self, RxDescType, TxThresholds};
use crate::regs;
use nfkit_hw::dma::DmaSlots;
use nfkit_hw::{Bar, DmaRegion};
use std::sync::Arc;

/// Most outputs an agent may have.
pub const MAX_OUTPUTS: usize = 16;
pub use crate::agent_protocol::{
    slowest_head, AgentStats, BUFFER_SIZE, FLUSH_PERIOD, RECYCLE_PERIOD,
};

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

/// What an agent does with each packet: the one handler shape of the
/// agent model, shared with `nfkit_port::agent::AgentAdapter` (the buffer
/// here is [`BUFFER_SIZE`] bytes).
pub use nfkit_port::agent::PacketHandler;

struct Output<B> {
    claim: QueueClaim<B>,
    /// The output device's BAR and the offset of this queue's TDT.
    bar: Arc<B>,
    tail_offset: usize,
}

/// One input and its outputs. `Send`: run one per core, or several on
/// one core with [`run`].
pub struct Agent<B: Bar> {
    input: QueueClaim<B>,
    /// The input device's BAR and the offset of its RDT.
    input_bar: Arc<B>,
    rx_tail_offset: usize,
    /// Ring `k` is output `k`'s transmit ring; ring 0 is also the
    /// input's receive ring (with no output, it is only that).
    rings: Vec<DescRing>,
    outputs: Vec<Output<B>>,
    /// Buffer `i` for descriptor `i` of every ring.
    buffers: DmaSlots<BUFFER_SIZE>,
    heads: DmaRegion,
    mask: usize,
    /// Next descriptor to process.
    next: usize,
    /// Last value written to the TDTs.
    tx_tail: usize,
    /// Last value written to RDT.
    rx_tail: usize,
    /// Times `next` wrapped to 0: laps * size + next descriptors have
    /// been processed, good or not.
    laps: u64,
    rx_errors: u64,
    invalid_lengths: u64,
    /// Per output, descriptors that sent nothing (null, or an invalid
    /// length): the packets sent are the others.
    unsent: [u64; MAX_OUTPUTS],
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
        // TinyNF's agent: one 2 KiB buffer per descriptor, in lock step
        // with the outputs, so a frame is never spread over descriptors:
        // jumbo frames stay off (HLREG0.JUMBOEN = 0, §8.2.3.22.8) and the
        // device drops longer frames itself (receive oversize, §8.2.3.23).
        if input.config().max_frame > crate::device::STD_MAX_FRAME {
            return Err(InitError::Config(format!(
                "the agent model takes one {BUFFER_SIZE}-byte buffer per frame: a largest frame of {} bytes \
                 (jumbo frames) needs the queue model",
                input.config().max_frame
            )));
        }
        tracing::info!(
            "82599 agent on rx queue {rx_queue}: largest frame {} bytes (one buffer per descriptor, no offloads)",
            crate::device::STD_MAX_FRAME
        );
        let input_claim = input.take_rx(rx_queue)?;
        let dma = input.dma();
        let buffers = dma
            .allocate(size * BUFFER_SIZE, false)
            .and_then(|region| DmaSlots::new(region, size))
            .map_err(|e| InitError::Config(format!("agent buffers: {e}")))?;
        let heads = dma
            .allocate(4096.max(MAX_OUTPUTS * HEAD_STRIDE), true)
            .map_err(|e| InitError::Config(format!("agent head write-back area: {e}")))?;
        let rings = (0..outputs.len().max(1))
            .map(|k| {
                // Ring 0 is the input's (and output 0's, which must reach
                // the input's memory anyway: the buffers are there); the
                // others are in their output device's DMA memory.
                let dma = match k {
                    0 => input.dma(),
                    _ => outputs[k].0.dma(),
                };
                let ring = desc::new_ring(dma, size)?;
                point_at_buffers(&ring, &buffers);
                Ok(ring)
            })
            .collect::<Result<Vec<_>, InitError>>()?;
        let outs = start_outputs(outputs, &rings, &heads)?;
        // The input is started last, so no packet arrives before every
        // output can take it.
        let started = queue_setup::start_rx_queue(
            input.regs(),
            input.clock(),
            input.poll_timeout(),
            rx_queue,
            &rings[0],
            (BUFFER_SIZE / 1024) as u32,
            RxDescType::Legacy,
        );
        if let Err(e) = started {
            outs.iter().for_each(Output::stop);
            return Err(e);
        }
        Ok(Agent {
            rx_tail_offset: regs::RDT.at(rx_queue),
            input_bar: input.regs().bar().clone(),
            input: input_claim,
            rings,
            outputs: outs,
            buffers,
            heads,
            mask: size - 1,
            next: 0,
            tx_tail: 0,
            rx_tail: size - 1,
            laps: 0,
            rx_errors: 0,
            invalid_lengths: 0,
            unsent: [0; MAX_OUTPUTS],
        })
    }
}

fn check_config(size: usize, outputs: usize, page_size: usize) -> Result<(), InitError> {
    crate::desc::check_ring_size(size)?;
    if !protocol::periods_fit(size, FLUSH_PERIOD, RECYCLE_PERIOD) {
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
    for i in 0..ring.entries() {
        ring.write_q0(i, buffers.device_addr(i));
        ring.write_q1(i, 0);
    }
}

/// Set up and enable output `k` on ring `k`; if one fails, stop those
/// already started so no enabled queue is left pointing at freed memory.
fn start_outputs<B: Bar + 'static>(
    outputs: &[(&Device<B>, usize)],
    rings: &[DescRing],
    heads: &DmaRegion,
) -> Result<Vec<Output<B>>, InitError> {
    let mut outs = Vec::with_capacity(outputs.len());
    for (k, ((device, tx_queue), ring)) in outputs.iter().zip(rings).enumerate() {
        // Head write-back slots are 16-byte aligned (TinyNF found the
        // device needs it) and each on its own cache line.
        let head_addr = heads.device_addr_at(k * HEAD_STRIDE);
        match Output::start(device, *tx_queue, ring, head_addr) {
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
        ring: &DescRing,
        head_addr: u64,
    ) -> Result<Output<B>, InitError> {
        let claim = device.take_tx(tx_queue)?;
        queue_setup::start_tx_queue(
            device.regs(),
            device.clock(),
            device.poll_timeout(),
            tx_queue,
            ring,
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
    /// Handle the packets waiting, up to the next flush point (at most
    /// [`FLUSH_PERIOD`]); returns how many. Ends by handing the outputs
    /// their new tails at a flush point (and recycling at a recycle
    /// point), or, when no packet was waiting, by flushing them and
    /// recycling transmitted buffers.
    #[inline]
    pub fn run_once<H: PacketHandler + ?Sized>(&mut self, handler: &mut H) -> usize {
        // At most MAX_OUTPUTS, as `new` checked (and the compiler now
        // knows: no bounds check below).
        let outputs = self.outputs.len().min(MAX_OUTPUTS);
        // Per-output lengths for the packet being handled, all 0 between
        // packets: sending takes each one.
        let mut lens = [0u16; MAX_OUTPUTS];
        // Everything the loop reaches stays in registers (see
        // `DescRingView`).
        let ring0 = self.rings[0].view();
        let mut buffers = self.buffers.view_mut();
        let start = self.next;
        // Not wrapped here: the ring accessors wrap it.
        let mut i = start;
        let idle = loop {
            path_call!(AgentReceive);
            let desc = ring0.desc(i);
            let status = desc.read_q1();
            if branch!(AgentReceive, "good frame", protocol::rx_good(status)) {
                let len = protocol::rx_len(status);
                path_call!(AgentHandler);
                handler.handle(buffers.slot_mut(i), len, &mut lens[..outputs]);
            } else if branch!(AgentReceive, "no frame", protocol::rx_pending(status)) {
                break true;
            } else {
                // Sent nowhere: every output gets a null descriptor.
                self.rx_errors += 1;
            }
            path_call!(AgentTransmit);
            // Output 0's command; on ring 0 it also clears DD, which
            // re-arms the receive descriptor (it goes back to the device
            // when the receive tail passes it).
            let counts = (&mut self.unsent[0], &mut self.invalid_lengths);
            desc.write_q1(protocol::tx_command(std::mem::take(&mut lens[0]), counts));
            if branch!(AgentTransmit, "more outputs", outputs > 1) {
                for (k, ring) in self.rings[1..outputs].iter().enumerate() {
                    let output = k + 1;
                    let counts = (&mut self.unsent[output], &mut self.invalid_lengths);
                    let command = protocol::tx_command(std::mem::take(&mut lens[output]), counts);
                    ring.write_q1(i, command);
                }
            }
            i = i.wrapping_add(1);
            if branch!(
                AgentTransmit,
                "flush point",
                protocol::is_flush_point::<FLUSH_PERIOD>(i)
            ) {
                break false;
            }
        };
        self.next = i & self.mask;
        // Idle ends the receive call that found no frame; the others end
        // the last descriptor's transmit call.
        match protocol::batch_end::<RECYCLE_PERIOD>(idle, self.next) {
            BatchEnd::Idle => self.on_idle(),
            BatchEnd::Recycle => {
                arm!(AgentTransmit, "recycle point", 1);
                self.end_recycle_group()
            }
            BatchEnd::Flush => {
                arm!(AgentTransmit, "recycle point", 0);
                self.flush_tx_tails()
            }
        }
        i.wrapping_sub(start)
    }

    /// Number of outputs.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Counters so far, derived from the descriptors processed and the
    /// rare events counted.
    pub fn stats(&self) -> AgentStats {
        AgentStats::derive(
            self.laps,
            self.next,
            self.mask,
            self.rx_errors,
            self.invalid_lengths,
            &self.unsent[..self.outputs.len()],
        )
    }

    /// `next` is a recycle point: request status on the descriptor
    /// before it, hand the outputs their new tails, then recycle.
    #[cold]
    #[inline(never)]
    fn end_recycle_group(&mut self) {
        self.request_status(protocol::status_request_at(self.next, self.mask));
        self.flush_tx_tails();
        self.recycle();
        self.laps += u64::from(self.next == 0);
    }

    /// Set RS on descriptor `i` of every output (the last of a recycle
    /// group, not yet handed to the device): once it is sent, the device
    /// writes its head back (§7.2.3.5.2, TDWBAL/TDWBAH), which is all
    /// [`Self::recycle`] reads. Done here, once per group, rather than as
    /// a per-packet choice of command.
    fn request_status(&mut self, i: usize) {
        for ring in &self.rings[..self.outputs.len()] {
            ring.write_q1(i, ring.read_q1(i) | legacy_tx::CMD_RS);
        }
    }

    #[cold]
    #[inline(never)]
    fn on_idle(&mut self) {
        if branch!(AgentReceive, "tails to flush", self.tx_tail != self.next) {
            self.flush_tx_tails();
        }
        self.recycle();
    }

    /// TDT = next on every output: the device may send up to here.
    #[inline(always)]
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
        path_call!(AgentRecycle);
        let heads = (0..self.outputs.len()).map(|k| self.heads.read_u32(k * HEAD_STRIDE) as usize);
        let slowest = slowest_head(self.next, heads, self.mask);
        let tail = protocol::rx_tail(slowest, self.mask);
        if branch!(AgentRecycle, "tail moved", tail != self.rx_tail) {
            self.rx_tail = tail;
            self.input_bar.write32(self.rx_tail_offset, tail as u32);
        }
    }
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

/// One round of `agents` on this thread: agent `i` once with handler
/// `i`. Extra agents or handlers without a partner are ignored. Returns
/// the packets handled.
#[inline]
pub fn round<B: Bar, H: PacketHandler>(agents: &mut [Agent<B>], handlers: &mut [H]) -> usize {
    let mut n = 0;
    for (agent, handler) in agents.iter_mut().zip(handlers.iter_mut()) {
        n += agent.run_once(handler);
    }
    n
}

/// The agent model's run loop: [`round`] after round until
/// `keep_running` returns false (checked between rounds).
pub fn run<B: Bar, H: PacketHandler>(
    agents: &mut [Agent<B>],
    handlers: &mut [H],
    mut keep_running: impl FnMut() -> bool,
) {
    while keep_running() {
        round(agents, handlers);
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
