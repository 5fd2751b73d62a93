//! # nfkit-port: one port interface for the queue model
//!
//! A [`Port`] moves batches of pool buffers ([`Batch`] of [`PktBuf`]) in
//! and out of one backend: 82599 queues, AF_XDP, AF_PACKET, TAP, pcap
//! files, null/source/sink. Every command takes a port by its spec string
//! ([`spec`]), opens it with [`open`] (or a [`Registry`] that also knows
//! the hardware backends), and moves packets with the one queue-model
//! loop ([`queue::QueueLoop`]): [`fwd()`] forwards with it, an agent
//! handler runs on it through [`agent`].
//!
//! ```no_run
//! use nfkit_port::{open, OpenOptions, PortSpec, fwd::{fwd, FwdOptions}};
//! use std::sync::atomic::AtomicBool;
//! let opts = OpenOptions::default();
//! let mut a = open(&"pcap:in.pcap".parse::<PortSpec>().unwrap(), &opts).unwrap();
//! let mut b = open(&"pcap-out:out.pcap".parse::<PortSpec>().unwrap(), &opts).unwrap();
//! let stop = AtomicBool::new(false);
//! let report = fwd([&mut *a, &mut *b], &FwdOptions::default(), &stop, |_| {}).unwrap();
//! assert_eq!(report.dirs[0].received, report.dirs[0].forwarded + report.dirs[0].dropped);
//! ```
//!
//! Counting rule, on every port and queue: every packet handed to
//! `tx_batch` is either sent (`tx_packets`) or left in the batch for the
//! caller, who must count it when dropping it (and tell the port with
//! [`Port::tx_refused`], which counts it in `tx_dropped`); every packet a backend
//! discards itself is counted in `rx_dropped`/`tx_dropped` or
//! `rx_errors`/`tx_errors`.
//!
//! `unsafe` in this crate is confined to `sys` (raw socket, ioctl and
//! bpf system calls) and the two ring modules that share memory with the
//! kernel (`afpacket::ring`, `afxdp::ring`); each block has a
//! `// SAFETY:` comment.

#![deny(unsafe_code)]

pub mod afpacket;
pub mod afxdp;
pub mod agent;
pub mod bond;
mod distinct;
pub mod fwd;
pub mod idle;
pub mod model;
pub mod netdev;
pub mod null;
pub mod open;
pub mod pcap;
pub mod queue;
pub mod rate;
pub mod spec;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod tap;

pub use distinct::check_distinct;
pub use idle::{Doorbell, Idle, IdleOptions, IdleTimes, RxWake, WakeSet, Waker};
pub use model::Model;
pub use open::{open, software_pool, with_guard, OpenOptions, Opener, Registry};
pub use spec::{NicOptions, PortSpec, SpecError};

pub use nfkit_hw::pool::offload::{cap, Caps};
pub use nfkit_hw::{Batch, Mempool, PktBuf};

/// The start-up line that states how large a frame `port` carries.
///
/// A port whose wire takes smaller frames than it is handed (the 82599
/// takes 64 KB TSO sends, and frames up to its configured largest frame,
/// [`Caps::max_frame`], on the wire) says both.
pub fn frame_line(port: &dyn Port) -> String {
    let wire = port.capabilities().max_frame as usize;
    format!(
        "port {}: frames up to {} bytes{}{}",
        port.name(),
        port.max_frame(),
        if port.max_frame() > port.pool().data_room() {
            " (chained buffers past one buffer)"
        } else {
            ""
        },
        if wire != 0 && wire < port.max_frame() {
            format!(", at most {wire} on the wire")
        } else {
            String::new()
        }
    )
}

/// Make a batch ready for a port with `caps` ([`Port::capabilities`]):
/// each packet's offload state is done in software where the port
/// cannot do it, and left to the port where it can
/// (`nfkit_packet::offload_meta::finish_for`). Packets whose state does
/// not fit them, or that ask for segmentation the port cannot do, are
/// dropped; returns how many (the caller counts them). A batch without
/// offload state costs one OR per packet.
#[inline]
pub fn prepare_tx(batch: &mut Batch, caps: Caps) -> u64 {
    if !batch.any_offload() {
        return 0;
    }
    let before = batch.len();
    batch.retain(|p| nfkit_packet::offload_meta::finish_for(p, caps).is_ok());
    (before - batch.len()) as u64
}

/// The start-up line of a port: its name and what it does itself.
pub fn capability_line(port: &dyn Port) -> String {
    format!("port `{}`: offloads: {}", port.name(), port.capabilities())
}

/// Per-queue counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets the backend received but could not hand over (no buffer,
    /// ring full, NIC missed).
    pub rx_dropped: u64,
    pub rx_errors: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_dropped: u64,
    pub tx_errors: u64,
}

impl std::ops::AddAssign for QueueStats {
    fn add_assign(&mut self, o: QueueStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.rx_errors += o.rx_errors;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_dropped += o.tx_dropped;
        self.tx_errors += o.tx_errors;
    }
}

/// Link state as a port reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    pub up: bool,
    /// Mbit/s, if known.
    pub speed_mbps: Option<u32>,
}

/// Errors a port reports. Messages name the port and the fix.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("port `{port}`: {msg}")]
    Config { port: String, msg: String },
    #[error("port `{port}`: {msg}: {source}")]
    Os {
        port: String,
        msg: String,
        #[source]
        source: std::io::Error,
    },
    #[error("port `{port}`: {source}")]
    Hw {
        port: String,
        #[source]
        source: nfkit_hw::HwError,
    },
    #[error("port `{port}`: queue {queue} does not exist (the port has {count})")]
    NoQueue {
        port: String,
        queue: usize,
        count: usize,
    },
}

/// A packet port with one or more RX and TX queues.
///
/// Queues are single-producer/single-consumer: one thread per queue.
pub trait Port: Send {
    /// The spec or name the port was opened with.
    fn name(&self) -> &str;
    fn rx_queues(&self) -> usize {
        1
    }
    fn tx_queues(&self) -> usize {
        1
    }
    /// Receive up to `batch.room()` packets into `batch`; returns how many
    /// were added.
    fn rx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize;
    /// Send packets from the front of `batch`, removing those sent (they
    /// are the port's now). Unsent packets stay in `batch`, in order.
    /// Returns how many were sent.
    fn tx_batch(&mut self, queue: usize, batch: &mut Batch) -> usize;
    /// The caller dropped `n` frames this port left in a batch on TX
    /// queue `queue` (it refused them: ring full, no receive buffer
    /// posted): the port counts them in its `tx_dropped`, so that its own
    /// counters show every frame it did not take. Callers that retry
    /// instead of dropping do not call this.
    fn tx_refused(&mut self, queue: usize, n: u64) {
        let _ = (queue, n);
    }
    /// Counters of one queue.
    fn queue_stats(&self, queue: usize) -> QueueStats;
    /// Counters summed over all queues.
    fn stats(&self) -> QueueStats {
        let mut s = QueueStats::default();
        for q in 0..self.rx_queues().max(self.tx_queues()) {
            s += self.queue_stats(q);
        }
        s
    }
    fn link(&self) -> LinkStatus {
        LinkStatus {
            up: true,
            speed_mbps: None,
        }
    }
    fn mac(&self) -> [u8; 6];
    /// Largest frame the port receives and sends, in bytes (Ethernet
    /// header included, no FCS). Larger frames are dropped and counted.
    /// The default: what one buffer of its pool holds.
    fn max_frame(&self) -> usize {
        self.pool().data_room()
    }
    /// Whether `tx_batch` takes chained frames (up to [`Self::max_frame`]).
    /// Loops drop chained frames meant for a port that does not, counted
    /// as too large for it ([`queue::LoopStats::too_large`]).
    fn tx_chains(&self) -> bool {
        false
    }
    /// What the port does with offload state itself, in hardware or
    /// through its kernel interface ([`Caps`]): transmit requests it
    /// carries out (software does the rest before `tx_batch`:
    /// [`prepare_tx`]) and the receive state its packets may carry. The
    /// default: nothing, software does everything.
    fn capabilities(&self) -> Caps {
        Caps::NONE
    }
    /// The pool this port's received buffers come from (generators
    /// allocate from it too).
    fn pool(&self) -> &Mempool;
    /// A fault the port met on its data path since the last call (a
    /// corrupt capture file, a vanished interface). `rx_batch`/`tx_batch`
    /// cannot return errors, so loops poll this now and then.
    fn take_error(&mut self) -> Option<PortError> {
        None
    }
    /// Whether the port will never receive another packet (a capture file
    /// replayed to its end, a port with no receive side). Loops over
    /// finite sources stop when every port is done.
    fn rx_done(&self) -> bool {
        false
    }
    /// Push buffered output to its destination (a capture file).
    fn flush(&mut self) -> Result<(), PortError> {
        Ok(())
    }
    /// Split the port into independent parts, one per queue number, so
    /// that different threads own different queues with no lock between
    /// them (a pipeline gives each worker the queues it polls). Part `q`
    /// serves receive queue `q` and transmit queue `q` under their
    /// original numbers, reports the whole port's `rx_queues` and
    /// `tx_queues`, and counts only its own queues. `self` is left an
    /// empty shell. The default cannot split and returns `None`, leaving
    /// the port as it was (a pipeline then shares it under a lock).
    fn split_queues(&mut self) -> Option<Vec<Box<dyn Port>>> {
        None
    }
    /// How receive queue `queue` can wake a loop that sleeps when idle
    /// ([`idle`]): a descriptor to `poll`, nothing to watch, or no way
    /// (the default: the loop keeps polling).
    fn rx_wake(&self, queue: usize) -> RxWake {
        let _ = queue;
        RxWake::Poll
    }
    /// Enable receive notifications on `queue` before the loop sleeps
    /// (VirtIO's used event, a NIC's queue interrupt); false if it cannot
    /// (the loop then keeps polling). Kernel sockets need nothing.
    fn rx_arm(&mut self, queue: usize) -> bool {
        let _ = queue;
        true
    }
    /// Back to polling after a sleep: suppress notifications again.
    fn rx_disarm(&mut self, queue: usize) {
        let _ = queue;
    }
}

impl PortError {
    /// A configuration error naming the port.
    pub fn config(port: &str, msg: impl Into<String>) -> PortError {
        PortError::Config {
            port: port.to_string(),
            msg: msg.into(),
        }
    }
    /// An operating-system error naming the port and what was attempted.
    pub fn os(port: &str, msg: impl Into<String>, source: std::io::Error) -> PortError {
        PortError::Os {
            port: port.to_string(),
            msg: msg.into(),
            source,
        }
    }
    /// The last OS error (`errno`) with the port and the step.
    pub fn last_os(port: &str, msg: impl Into<String>) -> PortError {
        PortError::os(port, msg, std::io::Error::last_os_error())
    }
}
