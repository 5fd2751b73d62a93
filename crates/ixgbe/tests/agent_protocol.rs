//! The agent protocol (TinyNF's shared ring, `src/agent.rs`), model
//! checked: every interleaving of the agent's steps with the device's
//! (frames arriving, receive write-back delayed, each output's transmit
//! engine at its own pace, head write-back delayed and coalesced) on
//! rings of 4 and 8 descriptors with 1 to 3 outputs, explored
//! exhaustively by stateright.
//!
//! The agent's decisions are the driver's own code
//! (`nfkit_ixgbe::agent_protocol`: status checks, transmit commands,
//! flush and recycle points, slowest head, receive tail, derived
//! counters); this file only replays the control flow of
//! `Agent::run_once` one descriptor per step, and models the device as
//! the datasheet allows (§7.1 receive, §7.2 transmit, §7.2.3.5.2 head
//! write-back). Properties:
//!
//! - ownership: the device never writes into a buffer or descriptor the
//!   agent or an output still needs, never transmits a descriptor the
//!   agent has not handed over, and never reads a receive status as a
//!   transmit command;
//! - order: each output sends its frames in arrival order;
//! - accounting: between batches, the agent's derived counters match
//!   what happened (frames received = handled + errors, frames queued
//!   per output = frames the handler asked that output to send), and
//!   every frame that arrived was received or counted as missed;
//! - progress: once nothing more can happen, every frame received was
//!   handled and every output sent all it was asked to, and the device
//!   can still receive;
//! - slow output: the receive tail never lends the device a buffer that
//!   any output, drained or lagging, still has to send.
//!
//! Each property has a deliberately broken agent that the checker must
//! catch. The small sizes run in the debug workspace tests; the full
//! sizes (rings of 4 and 8, 1 to 3 outputs) are `#[ignore]`d and run in
//! release by `cargo xtask test`.

use nfkit_ixgbe::agent_protocol::{
    self as p, legacy_rx, legacy_tx, AgentStats, BatchEnd, BUFFER_SIZE,
};
use stateright::{Checker, Model, Property};
use std::time::Instant;

const MAX_RING: usize = 8;
const MAX_OUT: usize = 3;
const NONE: u8 = u8::MAX;

/// The agent checked, or one broken on purpose (each must be caught).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The driver's own decisions.
    Driver,
    /// Ownership: the receive tail follows the agent, not the outputs
    /// (descriptors are re-armed as soon as they are processed).
    ReArmAtOnce,
    /// Order: the transmit tail is written one descriptor ahead.
    TailAhead,
    /// Accounting: a null descriptor (nothing to send) is not counted.
    NullUncounted,
    /// Progress: no recycling when idle (TinyNF recycles only at
    /// recycle points).
    NoIdleRecycle,
    /// Slow output: TinyNF's published rule, the head minimising
    /// `head - next` as an unsigned number (a drained output wins).
    EarliestHead,
}

#[derive(Clone, Debug)]
struct AgentProtocol<const FLUSH: usize, const RECYCLE: usize> {
    size: usize,
    outputs: usize,
    /// Frames the wire offers, in all.
    packets: u8,
    variant: Variant,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    // The wire.
    arrived: u8,
    missed: u8,
    // The receive engine: RDH, RDT, and (absolute) descriptors filled and
    // written back.
    rdh: u8,
    rdt: u8,
    filled: u8,
    written_back: u8,
    // Memory: the frame in each buffer (by arrival number), quadword 1 of
    // each ring's descriptors (ring 0 is also the receive ring).
    buf: [u8; MAX_RING],
    q1: [[u64; MAX_RING]; MAX_OUT],
    // The transmit engines: TDH, TDT (one value, the agent writes every
    // output's), descriptors passed (absolute), the head waiting to be
    // written back and the one in memory, frames sent and the last one.
    tdh: [u8; MAX_OUT],
    tdt: u8,
    passed: [u8; MAX_OUT],
    head_pending: [u8; MAX_OUT],
    head_mem: [u8; MAX_OUT],
    sent: [u8; MAX_OUT],
    last_sent: [u8; MAX_OUT],
    // The agent (as `Agent`'s fields), plus `processed`, the model's own
    // count of descriptors processed, and whether a batch is under way.
    next: u8,
    processed: u8,
    in_batch: bool,
    end: Option<BatchEnd>,
    tx_tail: u8,
    rx_tail: u8,
    laps: u8,
    rx_errors: u8,
    invalid: u8,
    unsent: [u8; MAX_OUT],
    // What the handler asked each output to send (ground truth).
    meant: [u8; MAX_OUT],
    // Rules the device saw broken.
    overwrote: bool,
    status_as_command: bool,
    sent_unhanded: bool,
    out_of_order: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// A frame arrives from the wire.
    Arrive,
    /// The receive engine writes back its oldest filled descriptor.
    RxWriteBack,
    /// Output `k`'s engine processes one descriptor.
    Transmit(u8),
    /// Output `k`'s engine writes its head back to memory.
    HeadWriteBack(u8),
    /// One step of the agent: one descriptor, or the end of a batch.
    Agent,
}

/// The handler: frame `seq` goes to output `k` or not (0), and now and
/// then with a length beyond the buffer (a counted invalid length).
fn handler(seq: u8, outputs: usize, lens: &mut [u16]) {
    for (k, len) in lens.iter_mut().enumerate() {
        *len = if seq % 5 == 3 && k == outputs - 1 {
            BUFFER_SIZE as u16 + 1
        } else if (usize::from(seq) + k) % 3 == 1 {
            0
        } else {
            60
        };
    }
}

/// The frames the device flags with a receive error.
fn is_error_frame(seq: u8) -> bool {
    seq % 4 == 2
}

/// TinyNF's choice of head (the broken variant): minimise
/// `head - next` as a 64-bit unsigned number.
fn earliest_head(next: usize, heads: &[usize]) -> usize {
    heads
        .iter()
        .copied()
        .min_by_key(|&h| (h as u64).wrapping_sub(next as u64))
        .unwrap_or(next)
}

impl<const FLUSH: usize, const RECYCLE: usize> AgentProtocol<FLUSH, RECYCLE> {
    fn new(size: usize, outputs: usize, packets: u8, variant: Variant) -> Self {
        assert!(size <= MAX_RING && (1..=MAX_OUT).contains(&outputs));
        assert!(
            p::periods_fit(size, FLUSH, RECYCLE),
            "the driver's rule for ring size and periods"
        );
        AgentProtocol {
            size,
            outputs,
            packets,
            variant,
        }
    }

    fn mask(&self) -> usize {
        self.size - 1
    }

    /// Descriptors the device may fill: RDH up to RDT (exclusive).
    fn lent(&self, s: &State) -> u8 {
        s.rdt.wrapping_sub(s.rdh) & self.mask() as u8
    }

    /// The agent's `flush_tx_tails`.
    fn flush(&self, s: &mut State) {
        let ahead = usize::from(self.variant == Variant::TailAhead);
        s.tdt = ((usize::from(s.next) + ahead) & self.mask()) as u8;
        s.tx_tail = s.next;
    }

    /// The agent's `recycle`.
    fn recycle(&self, s: &mut State) {
        let mask = self.mask();
        let next = usize::from(s.next);
        let heads: Vec<usize> = s.head_mem[..self.outputs]
            .iter()
            .map(|&h| usize::from(h))
            .collect();
        let slowest = match self.variant {
            Variant::ReArmAtOnce => next,
            Variant::EarliestHead => earliest_head(next, &heads),
            _ => p::slowest_head(next, heads.iter().copied(), mask),
        };
        let tail = p::rx_tail(slowest, mask) as u8;
        if tail != s.rx_tail {
            s.rx_tail = tail;
            s.rdt = tail;
        }
    }

    /// The end of a batch, as `run_once` ends one.
    fn end_batch(&self, s: &mut State, end: BatchEnd) {
        match end {
            BatchEnd::Idle => {
                if s.tx_tail != s.next {
                    self.flush(s);
                }
                if self.variant != Variant::NoIdleRecycle {
                    self.recycle(s);
                }
            }
            BatchEnd::Recycle => {
                let i = p::status_request_at(usize::from(s.next), self.mask());
                for ring in &mut s.q1[..self.outputs] {
                    ring[i] |= legacy_tx::CMD_RS;
                }
                self.flush(s);
                self.recycle(s);
                if s.next == 0 {
                    s.laps += 1;
                }
            }
            BatchEnd::Flush => self.flush(s),
        }
        s.in_batch = false;
    }

    /// One step of the agent: the rest of `run_once`'s loop body for one
    /// descriptor, or the end of the batch.
    fn agent_step(&self, s: &mut State) {
        if let Some(end) = s.end.take() {
            return self.end_batch(s, end);
        }
        let i = usize::from(s.next);
        let status = s.q1[0][i];
        if p::rx_pending(status) {
            return self.end_batch(s, p::batch_end::<RECYCLE>(true, i));
        }
        let mut lens = [0u16; MAX_OUT];
        let lens = &mut lens[..self.outputs];
        if p::rx_good(status) {
            debug_assert_eq!(p::rx_len(status), 60);
            handler(s.buf[i], self.outputs, lens);
        } else {
            s.rx_errors += 1;
        }
        for (k, &len) in lens.iter().enumerate() {
            let (mut unsent, mut invalid) = (u64::from(s.unsent[k]), u64::from(s.invalid));
            let command = p::tx_command(len, (&mut unsent, &mut invalid));
            if self.variant == Variant::NullUncounted && len == 0 {
                unsent -= 1;
            }
            (s.unsent[k], s.invalid) = (unsent as u8, invalid as u8);
            s.q1[k][i] = command;
            if len > 0 && usize::from(len) <= BUFFER_SIZE {
                s.meant[k] += 1;
            }
        }
        s.next = ((i + 1) & self.mask()) as u8;
        s.processed += 1;
        s.in_batch = true;
        if p::is_flush_point::<FLUSH>(i + 1) {
            s.end = Some(p::batch_end::<RECYCLE>(false, usize::from(s.next)));
        }
    }

    fn quiescent(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.is_empty()
    }
}

impl<const FLUSH: usize, const RECYCLE: usize> Model for AgentProtocol<FLUSH, RECYCLE> {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // As `Agent::new` leaves it: descriptors point at their buffers
        // with quadword 1 cleared, RDT = size - 1, every tail 0.
        vec![State {
            arrived: 0,
            missed: 0,
            rdh: 0,
            rdt: self.mask() as u8,
            filled: 0,
            written_back: 0,
            buf: [NONE; MAX_RING],
            q1: [[0; MAX_RING]; MAX_OUT],
            tdh: [0; MAX_OUT],
            tdt: 0,
            passed: [0; MAX_OUT],
            head_pending: [NONE; MAX_OUT],
            head_mem: [0; MAX_OUT],
            sent: [0; MAX_OUT],
            last_sent: [NONE; MAX_OUT],
            next: 0,
            processed: 0,
            in_batch: false,
            end: None,
            tx_tail: 0,
            rx_tail: self.mask() as u8,
            laps: 0,
            rx_errors: 0,
            invalid: 0,
            unsent: [0; MAX_OUT],
            meant: [0; MAX_OUT],
            overwrote: false,
            status_as_command: false,
            sent_unhanded: false,
            out_of_order: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.arrived < self.packets {
            actions.push(Action::Arrive);
        }
        if s.written_back < s.filled {
            actions.push(Action::RxWriteBack);
        }
        for k in 0..self.outputs {
            if s.tdh[k] != s.tdt {
                actions.push(Action::Transmit(k as u8));
            }
            if s.head_pending[k] != NONE {
                actions.push(Action::HeadWriteBack(k as u8));
            }
        }
        // The agent polls forever; a poll that changes nothing is no step.
        let mut after = s.clone();
        self.agent_step(&mut after);
        if after != *s {
            actions.push(Action::Agent);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        let mask = self.mask();
        let size = self.size as u8;
        match action {
            Action::Arrive => {
                let seq = s.arrived;
                s.arrived += 1;
                if self.lent(&s) == 0 {
                    s.missed += 1;
                } else {
                    let slot = usize::from(s.rdh);
                    // The previous use of this buffer and descriptor must
                    // be over: handled by the agent, passed by every output.
                    if let Some(previous) = s.filled.checked_sub(size) {
                        let still_needed = s.processed <= previous
                            || s.passed[..self.outputs].iter().any(|&p| p <= previous);
                        s.overwrote |= still_needed;
                    }
                    s.buf[slot] = seq;
                    s.rdh = ((slot + 1) & mask) as u8;
                    s.filled += 1;
                }
            }
            Action::RxWriteBack => {
                let slot = usize::from(s.written_back) & mask;
                let seq = s.buf[slot];
                s.q1[0][slot] =
                    legacy_rx::DD | legacy_rx::EOP | if is_error_frame(seq) { 1 << 40 } else { 60 };
                s.written_back += 1;
            }
            Action::Transmit(k) => {
                let k = usize::from(k);
                let slot = usize::from(s.tdh[k]);
                let command = s.q1[k][slot];
                s.status_as_command |= command & legacy_rx::DD != 0;
                s.sent_unhanded |= s.passed[k] >= s.processed;
                if command & 0xFFFF != 0 {
                    let seq = s.buf[slot];
                    s.out_of_order |= s.last_sent[k] != NONE && seq <= s.last_sent[k];
                    s.last_sent[k] = seq;
                    s.sent[k] += 1;
                }
                s.tdh[k] = ((slot + 1) & mask) as u8;
                s.passed[k] += 1;
                if command & legacy_tx::CMD_RS != 0 {
                    s.head_pending[k] = s.tdh[k];
                }
            }
            Action::HeadWriteBack(k) => {
                let k = usize::from(k);
                s.head_mem[k] = s.head_pending[k];
                s.head_pending[k] = NONE;
            }
            Action::Agent => self.agent_step(&mut s),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("ownership", |m: &Self, s: &State| {
                let granted = u16::from(s.filled) + u16::from(m.lent(s));
                !s.overwrote
                    && !s.status_as_command
                    && !s.sent_unhanded
                    && granted <= u16::from(s.processed) + m.size as u16
            }),
            Property::always("order", |_: &Self, s: &State| !s.out_of_order),
            Property::always("accounting", |m: &Self, s: &State| {
                if s.in_batch || s.end.is_some() {
                    // Counters are read between batches.
                    return true;
                }
                let unsent: Vec<u64> = s.unsent[..m.outputs].iter().map(|&u| u.into()).collect();
                let stats = AgentStats::derive(
                    s.laps.into(),
                    s.next.into(),
                    m.mask(),
                    s.rx_errors.into(),
                    s.invalid.into(),
                    &unsent,
                );
                s.arrived == s.missed + s.filled
                    && stats.rx_packets + stats.rx_errors == u64::from(s.processed)
                    && (0..m.outputs).all(|k| {
                        stats.tx_packets[k] == u64::from(s.meant[k]) && s.sent[k] <= s.meant[k]
                    })
            }),
            Property::always("progress", |m: &Self, s: &State| {
                !m.quiescent(s)
                    || (s.arrived == m.packets
                        && s.processed == s.filled
                        && m.lent(s) > 0
                        && (0..m.outputs)
                            .all(|k| s.passed[k] == s.processed && s.sent[k] == s.meant[k]))
            }),
            Property::always("slow output", |m: &Self, s: &State| {
                let granted = u16::from(s.filled) + u16::from(m.lent(s));
                s.passed[..m.outputs]
                    .iter()
                    .all(|&passed| granted < u16::from(passed) + m.size as u16)
            }),
            // Coverage: the interleavings reach these.
            Property::sometimes("a lap completes", |_: &Self, s: &State| s.laps > 0),
            Property::sometimes("the device misses a frame", |_: &Self, s: &State| {
                s.missed > 0
            }),
            Property::sometimes("every frame is received and sent", |m: &Self, s: &State| {
                s.missed == 0
                    && s.filled == m.packets
                    && (0..m.outputs).all(|k| s.sent[k] == s.meant[k])
            }),
            Property::sometimes("a head is written back", |_: &Self, s: &State| {
                s.head_mem.iter().any(|&h| h != 0)
            }),
            Property::sometimes(
                "an error and an invalid length are counted",
                |_: &Self, s: &State| s.rx_errors > 0 && s.invalid > 0,
            ),
        ]
    }
}

const PROPERTIES: [&str; 5] = [
    "ownership",
    "order",
    "accounting",
    "progress",
    "slow output",
];

/// Explore every state; print the count and time; return the checker.
fn check<const F: usize, const R: usize>(
    size: usize,
    outputs: usize,
    packets: u8,
    variant: Variant,
) -> impl Checker<AgentProtocol<F, R>> {
    let started = Instant::now();
    let checker = AgentProtocol::<F, R>::new(size, outputs, packets, variant)
        .checker()
        .threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .spawn_bfs()
        .join();
    println!(
        "agent protocol, ring {size}, {outputs} output(s), {packets} frames, {variant:?}: \
         {} states ({} unique) in {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    checker
}

/// The driver's protocol holds every property, and the exploration
/// reaches the interesting cases.
fn holds<const F: usize, const R: usize>(size: usize, outputs: usize, packets: u8) {
    let checker = check::<F, R>(size, outputs, packets, Variant::Driver);
    assert!(checker.is_done());
    for name in PROPERTIES {
        checker.assert_no_discovery(name);
    }
    for name in [
        "a lap completes",
        "the device misses a frame",
        "every frame is received and sent",
        "a head is written back",
        "an error and an invalid length are counted",
    ] {
        checker.assert_any_discovery(name);
    }
}

/// The broken agent breaks `property`, and the checker says so.
fn caught(variant: Variant, property: &'static str) {
    let checker = check::<1, 2>(4, 2, 6, variant);
    let path = checker.assert_any_discovery(property);
    println!(
        "  {variant:?} breaks {property:?} in {} steps",
        path.into_actions().len()
    );
}

// Rings of 4 descriptors: a flush after every descriptor, a recycle
// point every 2 (the driver's ring >= 2 recycle periods, as `periods_fit`
// requires). Rings of 8: flush every 2, recycle every 4.

#[test]
fn ring_of_4_one_output() {
    holds::<1, 2>(4, 1, 7);
}

#[test]
fn ring_of_4_two_outputs() {
    holds::<1, 2>(4, 2, 7);
}

#[test]
fn ownership_broken_is_caught() {
    caught(Variant::ReArmAtOnce, "ownership");
}

#[test]
fn order_broken_is_caught() {
    caught(Variant::TailAhead, "order");
}

#[test]
fn accounting_broken_is_caught() {
    caught(Variant::NullUncounted, "accounting");
}

#[test]
fn progress_broken_is_caught() {
    caught(Variant::NoIdleRecycle, "progress");
}

#[test]
fn tinynf_earliest_head_rule_is_caught() {
    caught(Variant::EarliestHead, "slow output");
}

#[test]
#[ignore = "full sizes: `cargo xtask test` runs them in release"]
fn full_sizes() {
    let started = Instant::now();
    for outputs in 1..=3 {
        // Three laps of the ring of 4, two of the ring of 8.
        holds::<1, 2>(4, outputs, 13);
        holds::<2, 4>(8, outputs, 17);
    }
    println!("full sizes in {:.1?}", started.elapsed());
}
