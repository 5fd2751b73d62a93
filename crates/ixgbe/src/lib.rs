//! # nfkit-ixgbe: a user-space driver for the Intel 82599
//!
//! Written against the hardware-access layer of `nfkit-hw`, so the same
//! code drives a real NIC (sysfs/uio or VFIO) and the software model of
//! `nfkit-ixgbe-model`: everything is generic over the BAR type and takes
//! its DMA memory and its clock as trait objects.
//!
//! * [`Device::init`] walks datasheet §4.6.3 (`init.rs`, one function per
//!   step, registers from the declarative table in [`regs`]); any failure
//!   is an [`InitError`] naming the [`Step`] and its datasheet section.
//!   Every wait is bounded.
//! * The **agent model** ([`Agent`], TinyNF): one input queue, up to
//!   [`MAX_OUTPUTS`] output queues on any devices, one logical ring of
//!   2 KiB buffers, legacy descriptors, packets handled in place by a
//!   [`PacketHandler`]. As in TinyNF the receive ring is also output 0's
//!   transmit ring, so one store per output and packet both sends and
//!   re-arms. The receive tail follows the slowest output, found with
//!   modular ring arithmetic ([`slowest_head`]).
//! * The **queue model** ([`RxQueue`], [`TxQueue`], ixy/DPDK): batches of
//!   pool buffers on advanced descriptors; the network function may keep,
//!   reorder and allocate packets. Buffers move between ring and pool in
//!   bulk (`nfkit_hw::pool::RxBuffers`, `TxBuffers`). Pools need buffers
//!   of 4096 bytes ([`MIN_RX_DATA_ROOM`]).
//!
//! * [`IxgbePort`] is the queue model as an `nfkit_port::Port`, and
//!   [`opener`] opens `pci:ADDR` and `sim:N` specs (the latter from a
//!   [`SimSource`], the simulated lab above this crate).
//!
//! Neither data path allocates or reads a device register: received
//! packets are found by their DD bit, transmitted ones by the written-back
//! head (agent) or DD bit (queue model). Device-wide counters come from
//! [`Device::stats`], which accumulates the clear-on-read registers.
//!
//! ## Example: forward everything from queue 0 back out of queue 0
//!
//! ```no_run
//! use nfkit_ixgbe::{Agent, AgentConfig, Device, DeviceConfig};
//! use nfkit_hw::{Clock, DmaAllocator, PciFunction, SystemClock};
//! use std::sync::Arc;
//!
//! fn forward<P: PciFunction>(pci: &P, dma: Arc<dyn DmaAllocator>) -> Result<(), nfkit_ixgbe::InitError>
//! where
//!     P::Bar: 'static,
//! {
//!     let clock: Arc<dyn Clock> = Arc::new(SystemClock::default());
//!     let dev = Device::init(pci, dma, clock, DeviceConfig::default())?;
//!     let mut agent = Agent::new(&dev, 0, &[(&dev, 0)], &AgentConfig::default())?;
//!     // the handler sees each frame in place and says how much to send
//!     let mut handler = |frame: &mut [u8], len: usize, out: &mut [u16]| {
//!         frame[0..6].copy_from_slice(&[0xff; 6]);
//!         out[0] = len as u16;
//!     };
//!     loop {
//!         agent.run_once(&mut handler);
//!     }
//! }
//! ```
//!
//! The queue model with a pool (buffers of 4096 bytes, see
//! [`MIN_RX_DATA_ROOM`]):
//!
//! ```no_run
//! # use nfkit_ixgbe::Device;
//! # use nfkit_hw::{Bar, Batch, Mempool};
//! # fn f<B: Bar + 'static>(dev: &Device<B>, pool: &Mempool) -> Result<(), nfkit_ixgbe::InitError> {
//! let mut rx = dev.rx_queue(0, pool, 512)?;
//! let mut tx = dev.tx_queue(0, pool, 512)?;
//! let mut batch = Batch::new();
//! loop {
//!     rx.rx_batch(&mut batch);
//!     tx.tx_batch(&mut batch);
//!     batch.clear(); // drop what the ring had no room for
//! }
//! # }
//! ```
#![forbid(unsafe_code)]

// First: its macros are used by the data-path files below.
#[macro_use]
pub mod paths;
mod agent;
pub mod agent_protocol;
mod desc;
mod device;
mod error;
mod init;
pub mod irq;
mod pci;
pub mod port;
mod queue;
mod queue_setup;
pub mod regs;
mod rss;
mod wait;

pub use agent::{
    round, run, slowest_head, Agent, AgentConfig, AgentStats, PacketHandler, BUFFER_SIZE,
    FLUSH_PERIOD, MAX_OUTPUTS, RECYCLE_PERIOD,
};
/// Offload metadata to and from the 82599's descriptor fields.
pub use desc::offload as offload_desc;
pub use device::{
    Device, DeviceConfig, DeviceStats, Link, QueueHwStats, MAX_JUMBO_FRAME, STD_MAX_FRAME,
};
pub use error::{InitError, Step};
pub use init::InitReport;
pub use irq::{Interrupts, LinkIrq, QueueIrq};
pub use pci::{DEVICE_IDS_82599, VENDOR_INTEL};
pub use port::{opener, IxgbePort, SimSource};
pub use queue::{QueueCounters, RxQueue, TxQueue, MIN_RX_DATA_ROOM, TSO_MAX_SEND, TX_CLEAN_BATCH};
pub use rss::RSS_MAX_QUEUES;
