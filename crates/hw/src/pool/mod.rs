//! The DMA packet-buffer pool of the queue model (ixy/DPDK style).
//!
//! A [`Mempool`] carves DMA memory into fixed-size entries. Each entry is
//! `HEADROOM` bytes of headroom followed by the data room; the device
//! address of every entry is computed once at creation. Per-packet
//! metadata ([`META_SIZE`] bytes, for pipeline attributes) lives in
//! ordinary memory beside the pool, where no device can touch it.
//!
//! Free entries sit in a stack of entry ids shared by all cores, behind
//! a mutex. Hot paths (a driver queue refilling its ring, cleaning
//! transmitted buffers) go through a per-core [`PoolCache`]: a plain stack
//! of entry ids, refilled from and spilled to the shared stack in chunks
//! under one lock each, so cores do not contend, and take no lock, per
//! packet. (A hand-written stack rather than a lock-free queue such as
//! crossbeam's `ArrayQueue`: those move one id per atomic operation, and
//! the bulk moves are what keeps the per-packet cost low.) A [`PktBuf`]
//! dropped anywhere returns to the shared stack.
//!
//! A packet buffer does not count as a reference to its pool: making,
//! moving, freeing a [`PktBuf`] touches no reference count (an atomic
//! operation per packet, twice). Instead the shared stack, which knows
//! exactly when every id is home, holds one pool handle for all the
//! buffers while any id is out, and lets go of it when the last one comes
//! back. The pool's memory therefore outlives every buffer, whichever of
//! the pool's handles and buffers goes last.
//!
//! A receive ring lends its buffers to the device as entry ids only
//! ([`RxBuffers`]): the [`PktBuf`] is made when a packet arrives. A
//! transmit ring holds the buffers it sends in a [`TxBuffers`] and frees
//! them in groups.
//!
//! The files follow the ideas, each above the ones it uses: [`mempool`]
//! (the pool and its shared free stack), [`pktbuf`] (one packet, and
//! taking one from the pool), [`cache`] (the per-core stack, and the
//! runs of foreign buffers sent home), [`batch`] (a batch, and filling
//! one from the pool), [`rings`] (a driver ring's buffers). Beside
//! them: `chain` (a chained frame's layout, and reading it),
//! `chain_edit` (building and freeing chains), `front` (a device
//! header in the headroom), [`offload`] (offload state) and `caps`
//! (what a port offloads). A method of [`Mempool`]
//! that makes one of those lives with what it makes.

mod batch;
mod cache;
mod caps;
mod chain;
mod chain_edit;
mod front;
mod mempool;
pub mod offload;
mod pktbuf;
mod rings;
mod sync;

pub use batch::{Batch, Marks, MAX_BATCH};
pub use cache::PoolCache;
pub use chain::{ChainError, Segments, MAX_FRAME, MAX_SEGS};
pub use mempool::{Mempool, DEFAULT_BUF_SIZE, HEADROOM, META_SIZE};
pub use offload::{Caps, Offload, OffloadError};
pub use pktbuf::{NoRoom, PktBuf};
pub use rings::{min_pool_for_rx_ring, RxBuffers, TxBuffers, RING_CACHE};

// The unit tests look at the pool handle's reference counts with std's
// `Arc`; under loom, `tests/loom_pool.rs` checks the pool instead.
#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_chain;
