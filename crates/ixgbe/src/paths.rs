//! Path counting (TinyNF's Table 2, measured rather than counted by
//! hand): the data path's branch sites are wrapped in [`branch!`] and
//! each call of a data-path function in [`path_call!`]. With the
//! `paths` feature (never on in a product build: without it the macros
//! are the bare condition and nothing), each branch outcome is appended
//! to the current call's trace in a thread-local recorder, and
//! `tests/paths.rs` counts the distinct traces per function over the
//! lock-step model's inputs (`cargo xtask paths`).
//!
//! Only the driver's own decisions are sites: a loop over a fixed number
//! of outputs is not a branch (as in TinyNF's count, the number of
//! outputs is a parameter), and the pool's internals are one call each
//! (TinyNF's A_S, A_F and P for DPDK and ixy).

/// The data-path functions whose paths are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Function {
    /// Agent: one descriptor looked at (a packet, an error, or none and
    /// the end of the batch).
    AgentReceive,
    /// Agent: the handler called on one packet.
    AgentHandler,
    /// Agent: one descriptor's commands written to every output, and the
    /// batch's end when it is a flush or recycle point.
    AgentTransmit,
    /// Agent: the receive tail recomputed from the written-back heads.
    AgentRecycle,
    /// Queue model: one `rx_batch` call.
    QueueReceive,
    /// Queue model: one `tx_batch` call, its reclaiming apart.
    QueueTransmit,
    /// Queue model: the reclaiming of sent buffers at the start of
    /// `tx_batch`.
    QueueRecycle,
}

/// Every function, in table order.
pub const FUNCTIONS: [Function; 7] = [
    Function::AgentReceive,
    Function::AgentHandler,
    Function::AgentTransmit,
    Function::AgentRecycle,
    Function::QueueReceive,
    Function::QueueTransmit,
    Function::QueueRecycle,
];

/// One call's branch outcomes: (site, outcome), in execution order.
pub type Trace = Vec<(&'static str, u8)>;

#[cfg(feature = "paths")]
mod recorder {
    use super::{Function, Trace, FUNCTIONS};
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Default)]
    struct Recorder {
        on: bool,
        current: BTreeMap<Function, Trace>,
        seen: BTreeMap<Function, BTreeSet<Trace>>,
    }

    impl Recorder {
        fn close(&mut self, f: Function) {
            if let Some(trace) = self.current.remove(&f) {
                self.seen.entry(f).or_default().insert(trace);
            }
        }
    }

    thread_local! {
        static RECORDER: RefCell<Recorder> = RefCell::new(Recorder::default());
    }

    /// Start recording on this thread (forgetting earlier traces).
    pub fn start() {
        RECORDER.with(|r| {
            *r.borrow_mut() = Recorder {
                on: true,
                ..Recorder::default()
            }
        });
    }

    /// Stop recording; the distinct traces seen per function.
    pub fn stop() -> BTreeMap<Function, BTreeSet<Trace>> {
        RECORDER.with(|r| {
            let mut r = r.borrow_mut();
            for f in FUNCTIONS {
                r.close(f);
            }
            r.on = false;
            std::mem::take(&mut r.seen)
        })
    }

    /// A call of `f` begins: the previous one's trace is complete.
    pub fn call(f: Function) {
        RECORDER.with(|r| {
            let mut r = r.borrow_mut();
            if r.on {
                r.close(f);
                r.current.insert(f, Trace::new());
            }
        });
    }

    /// Branch `site` of `f` went `outcome`.
    pub fn record(f: Function, site: &'static str, outcome: u8) {
        RECORDER.with(|r| {
            let mut r = r.borrow_mut();
            if r.on {
                r.current.entry(f).or_default().push((site, outcome));
            }
        });
    }
}

#[cfg(feature = "paths")]
pub use recorder::{call, record, start, stop};

/// `branch!(Function, "site", condition)`: the condition, its outcome
/// recorded under the `paths` feature.
macro_rules! branch {
    ($f:ident, $site:literal, $cond:expr) => {{
        let cond: bool = $cond;
        #[cfg(feature = "paths")]
        $crate::paths::record($crate::paths::Function::$f, $site, u8::from(cond));
        cond
    }};
}

/// `arm!(Function, "site", n)`: arm `n` of a `match` was taken.
macro_rules! arm {
    ($f:ident, $site:literal, $n:expr) => {{
        #[cfg(feature = "paths")]
        $crate::paths::record($crate::paths::Function::$f, $site, $n);
    }};
}

/// `path_call!(Function)`: a call of that data-path function begins.
macro_rules! path_call {
    ($f:ident) => {{
        #[cfg(feature = "paths")]
        $crate::paths::call($crate::paths::Function::$f);
    }};
}
