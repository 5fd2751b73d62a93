//! The agent protocol's decisions, as pure functions of ring positions
//! and descriptor words: what the agent's data path ([`crate::Agent`])
//! runs, and what the model check of the protocol
//! (`tests/agent_protocol.rs`) runs in its place, on rings of 4 and 8
//! descriptors. A change here changes both.
//!
//! The periods are const parameters: the driver uses [`FLUSH_PERIOD`]
//! and [`RECYCLE_PERIOD`], the model smaller ones in the same proportion
//! to its rings ([`periods_fit`] is the rule both obey).

pub use crate::desc::{legacy_rx, legacy_tx};

/// Bytes per buffer; one whole frame (≤ 1522 bytes) fits, and it is a
/// whole number of KiB as SRRCTL.BSIZEPACKET needs (§8.2.3.8.7).
pub const BUFFER_SIZE: usize = 2048;
/// Transmit tails are written every this many packets (and when idle).
pub const FLUSH_PERIOD: usize = 8;
/// Every this many descriptors one requests status (RS): the device then
/// writes the transmit head back, and the receive tail is recomputed.
pub const RECYCLE_PERIOD: usize = 64;
// Flush points are ring positions, and every recycle point is one.
const _: () = assert!(periods_fit(
    2 * RECYCLE_PERIOD,
    FLUSH_PERIOD,
    RECYCLE_PERIOD
));

/// Receive status bits checked for every packet: DD, EOP, the frame
/// errors (§7.1.5.1) and the length bits of 2 KiB and more. Jumbo frames
/// are off, so no good frame comes near 2 KiB; a length that fills the
/// buffer or more is the device misbehaving.
const RX_CHECKED: u64 = legacy_rx::DD
    | legacy_rx::EOP
    | legacy_rx::FRAME_ERRORS
    | (legacy_rx::LENGTH_MASK & !(BUFFER_SIZE as u64 - 1));
/// ...of which a whole good frame has exactly these set.
const RX_GOOD: u64 = legacy_rx::DD | legacy_rx::EOP;

/// Whether a ring of `size` descriptors works with these periods: flush
/// points are ring positions, every recycle point is a flush point, and
/// the first recycle point comes before the device runs out of the
/// `size - 1` descriptors it starts with (else no head is ever written
/// back and the receive tail never moves).
pub const fn periods_fit(size: usize, flush: usize, recycle: usize) -> bool {
    size.is_power_of_two()
        && flush.is_power_of_two()
        && recycle.is_multiple_of(flush)
        && size.is_multiple_of(recycle)
        && size >= 2 * recycle
}

/// A receive status word is a whole good frame, to hand to the handler.
#[inline(always)]
pub fn rx_good(status: u64) -> bool {
    status & RX_CHECKED == RX_GOOD
}

/// The device has not written this receive descriptor back yet: the
/// agent has caught up.
#[inline(always)]
pub fn rx_pending(status: u64) -> bool {
    status & legacy_rx::DD == 0
}

/// The frame length of a good receive status word.
#[inline(always)]
pub fn rx_len(status: u64) -> usize {
    (status & legacy_rx::LENGTH_MASK) as usize
}

/// The legacy transmit command (§7.2.3.2.2) for a length the handler
/// returned: send `len` bytes, or a null descriptor (length 0, "transfer
/// no data") counted in `unsent`, also for a length beyond the buffer,
/// which `invalid` counts. One test on the common path, 1..=BUFFER_SIZE:
/// `len - 1` has no bit at or above BUFFER_SIZE's (a power of two).
#[inline(always)]
pub fn tx_command(len: u16, (unsent, invalid): (&mut u64, &mut u64)) -> u64 {
    const _: () = assert!(BUFFER_SIZE.is_power_of_two());
    let mut len = u32::from(len);
    // One branch per output (2 paths): a null or invalid length is the
    // rare side, where `invalid` counts without a branch of its own.
    if branch!(
        AgentTransmit,
        "null or invalid length",
        len.wrapping_sub(1) & !(BUFFER_SIZE as u32 - 1) != 0
    ) {
        *unsent += 1;
        *invalid += u64::from(len != 0);
        len = 0;
    }
    u64::from(len) | legacy_tx::CMD_EOP | legacy_tx::CMD_IFCS
}

/// After processing up to (unwrapped) position `i`, the batch ends here.
#[inline(always)]
pub fn is_flush_point<const FLUSH: usize>(i: usize) -> bool {
    i.is_multiple_of(FLUSH)
}

/// How a batch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchEnd {
    /// No packet was waiting: hand the outputs their tails if they moved,
    /// and recycle (re-read the written-back heads).
    Idle,
    /// `next` is a recycle point: request status on the descriptor
    /// before it, hand the outputs their tails, recycle.
    Recycle,
    /// A flush point: hand the outputs their tails.
    Flush,
}

/// How the batch that stopped with `next` to process ends.
#[inline(always)]
pub fn batch_end<const RECYCLE: usize>(idle: bool, next: usize) -> BatchEnd {
    if idle {
        BatchEnd::Idle
    } else if next.is_multiple_of(RECYCLE) {
        BatchEnd::Recycle
    } else {
        BatchEnd::Flush
    }
}

/// The descriptor that requests status (RS) at a recycle point `next`:
/// the last of the group, not yet handed to the device.
#[inline(always)]
pub fn status_request_at(next: usize, mask: usize) -> usize {
    next.wrapping_sub(1) & mask
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
    // `max`, not an `if`: no path per output (TinyNF's 2^(O-1)).
    let most_in_flight = heads
        .map(|head| next.wrapping_sub(head) & mask)
        .fold(0, usize::max);
    next.wrapping_sub(most_in_flight) & mask
}

/// The receive tail (RDT) that lends the device every buffer all outputs
/// are done with: one before the slowest head, leaving the
/// one-descriptor gap that tells a full ring from an empty one.
#[inline(always)]
pub fn rx_tail(slowest: usize, mask: usize) -> usize {
    slowest.wrapping_sub(1) & mask
}

/// Agent counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AgentStats {
    /// Packets handed to the handler.
    pub rx_packets: u64,
    /// Packets the device flagged with a frame error (or a length that
    /// fills the buffer): never handed to the handler, sent nowhere.
    pub rx_errors: u64,
    /// Lengths the handler returned that exceed [`BUFFER_SIZE`]: that
    /// output got a null descriptor instead.
    pub invalid_lengths: u64,
    /// Packets queued for transmission, per output.
    pub tx_packets: Vec<u64>,
}

impl AgentStats {
    /// The counters of an agent that has wrapped `laps` times and will
    /// process `next` (of a ring of `mask + 1`), from the rare events it
    /// counted: everything else follows from the ring position.
    pub fn derive(
        laps: u64,
        next: usize,
        mask: usize,
        rx_errors: u64,
        invalid_lengths: u64,
        unsent: &[u64],
    ) -> AgentStats {
        let processed = laps * (mask as u64 + 1) + next as u64;
        AgentStats {
            rx_packets: processed - rx_errors,
            rx_errors,
            invalid_lengths,
            tx_packets: unsent.iter().map(|unsent| processed - unsent).collect(),
        }
    }
}
