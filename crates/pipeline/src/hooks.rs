//! Gate hooks: something that sees every batch through one gate (BESS's
//! gate hooks, such as its `tcpdump`). A hook is set on a module's input
//! or output gate with [`Pipeline::set_gate_tap`](crate::Pipeline::set_gate_tap)
//! (between batches, like any edit); the worker that owns the gate calls
//! it with each batch, after counting it and before the next module sees
//! it. A gate without a hook costs one `None` check per batch.

use nfkit_hw::Batch;
use std::sync::Arc;

/// A hook on one gate. Called by the worker that owns the gate, on its
/// data path: it must not block (count what it cannot keep).
pub trait GateTap: Send + Sync {
    fn tap(&self, batch: &Batch);
}

/// A shared hook (the daemon keeps a handle to read its counters).
pub type Tap = Arc<dyn GateTap>;

/// Which side of a module a gate is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateDir {
    In,
    Out,
}
