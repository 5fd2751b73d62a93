//! # nfkit-pipeline: the SoftNIC layer
//!
//! A pipeline is a dataflow graph of [`modules`] joined gate to gate
//! (SoftNIC §3.3, BESS). Packets move through it in batches
//! ([`nfkit_hw::Batch`]); modules that produce packets (port inputs,
//! sources, queues) are *tasks*, run by per-core workers whose
//! [`sched`]uler walks a tree of traffic classes (priority, weighted
//! fair, round robin, rate limit) to pick the next task (SoftNIC §3.4,
//! §4.4). Modules declare per-packet [`metadata`] attributes; offsets are
//! fixed when the pipeline is committed, so no name is looked up per
//! packet.
//!
//! From a file to running packets, in a few hops:
//!
//! ```no_run
//! # fn open(spec: &str) -> Result<Box<dyn nfkit_port::Port>, nfkit_port::PortError> { unimplemented!() }
//! let desc = nfkit_pipeline::load("examples/macswap.nfk")?;   // config::parse + name checks
//! let mut pipeline = desc.build(&open)?;                         // ports, modules, metadata, workers
//! let stats = pipeline.run_for(std::time::Duration::from_secs(1))?;
//! println!("{stats}");
//! # Ok::<(), nfkit_pipeline::Error>(())
//! ```
//!
//! [`Pipeline::edit`] changes a running pipeline (pause, change the graph
//! or the class trees, recompute metadata, resume).
//!
//! ## The config language
//!
//! Click/BESS style. One statement per line (or separated by `;`);
//! `#` starts a comment; a chain may continue on the next line when that
//! line starts with `->`, and newlines inside `(...)`/`[...]` are free.
//!
//! ```text
//! file      = { statement } ;
//! statement = port | worker | tc | attach | command | chain ;
//! port      = "port" NAME "=" STRING ;                  port p0 = "afpacket:veth0"
//! worker    = "worker" NAME [ "core" "=" INT ] ;        worker w0 core=0
//! tc        = "tc" NAME "=" POLICY "(" [ args ] ")" ;   tc rl = rate_limit(parent=root, resource=bit, limit=10M)
//! attach    = NAME "." "attach" "(" [ args ] ")" ;      src.attach(tc=rl)
//! command   = NAME "." CMD "(" [ args ] ")" ;           em.add(gate=1, fields=[0x0a000001])
//! chain     = endpoint { "->" endpoint } ;              a:1 -> 0:b -> Sink()
//! endpoint  = [ INT ":" ] node [ ":" INT ] ;            input gate before, output gate after
//! node      = NAME "::" CLASS "(" [ args ] ")"          a named new module
//!           | CLASS "(" [ args ] ")"                    an anonymous one (named class+index: sink3)
//!           | NAME ;                                    a module declared earlier
//! args      = arg { "," arg } [ "," ] ;   arg = NAME "=" value ;
//! value     = INT | FLOAT | STRING | NAME | "[" [ value { "," value } ] "]"
//!           | "(" [ args ] ")" ;                        a record: (src_ip="10.0.0.0/8", drop=1)
//! ```
//!
//! Integers may be hex (`0x1f`), use `_`, or carry a decimal suffix
//! `k`, `M`, `G`, `T` (`10M` = 10,000,000; `1.5G` = 1,500,000,000).
//!
//! * **Ports** are opened by the caller's `open_port(spec)` (the CLI's
//!   port registry); modules name them: `PortInc(port=p0)`. Each receive
//!   and transmit queue is polled by one worker; a graph that gives a
//!   queue to two workers is refused. While the workers run, each owns
//!   its ports (or its queues of them) and polls them with no lock
//!   ([`ports`]).
//! * **Workers**: threads, pinned to `core` when given. Without any
//!   `worker` line there is one unpinned worker `w0`.
//! * **Traffic classes**: every worker has a round-robin root class
//!   `root`. `tc NAME = POLICY(...)` adds a class under `parent=` (default
//!   `root`) on `worker=` (default: the parent's worker, else the first).
//!   Policies: `priority()`, `weighted_fair(resource=count|cycle|packet|bit)`,
//!   `round_robin()`, `rate_limit(resource=bit|packet|cycle|count, limit=N
//!   per second, max_burst=N units)` (burst defaults to 1 ms of `limit`).
//!   Under a `priority` parent a class needs `priority=N` (lower runs
//!   first); under `weighted_fair` it needs `share=N`.
//! * **Module commands**: `m.CMD(args)` runs BESS-style module command
//!   `CMD` (`add`, `delete`, `clear`, `set_default_gate`, ...) on module
//!   `m` when it is built, in file order: a classifier's initial
//!   entries. [`Pipeline::command`] runs the same commands on a running
//!   pipeline, between batches.
//! * **Tasks**: `m.attach(tc=NAME, priority=|share=)` puts task module `m`
//!   under a class; unattached tasks run under the first worker's root.
//! * **Multi-core**: *duplication*: a copy of the chain per worker, each
//!   on its own queue (`QueueInc(port=p0, qid=1)`); *chaining*: a `Queue`
//!   whose input side is fed on one worker and whose task is attached on
//!   another. A module fed from two workers is an error.
//! * **Walks**: a batch crosses at most [`graph::MAX_DEPTH`] (1,024)
//!   modules after the task that made it, and a loop must pass through a
//!   task (a `Queue`); deeper graphs and loops with no task are refused
//!   when the graph is committed.
//!
//! Errors say `file:line:col: what was expected/found`; errors found when
//! building (bad module arguments, a reader of a metadata attribute with
//! no upstream writer, metadata space exhausted, gates that do not exist)
//! point at the module or the arrow concerned.
//!
//! The core module classes and their arguments are listed in
//! [`modules`]; the examples in `crates/pipeline/examples/*.nfk` run in
//! the tests against an in-memory port.
#![forbid(unsafe_code)]

pub mod args;
pub mod config;
pub mod counters;
pub mod graph;
pub mod harness;
pub mod hooks;
pub mod metadata;
pub mod module;
pub mod modules;
pub mod pipeline;
pub mod ports;
pub mod registry;
mod runtime;
pub mod sched;

pub use config::{load, parse, BuildOptions, ConfigError, Desc, OpenPort};
pub use graph::Graph;
pub use module::{Ctx, Module};
pub use pipeline::{Pipeline, PipelineError, PipelineStats, SharedPort};

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Any error from loading, building or running a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

/// What `nfkit run FILE` does: load `path`, open its ports with
/// `open_port`, run until `stop` is set or `limit` passes, and return the
/// statistics (`Display` prints a `show pipeline`-style report).
pub fn run_file(
    path: impl AsRef<Path>,
    open_port: &OpenPort<'_>,
    stop: &AtomicBool,
    limit: Option<Duration>,
) -> Result<PipelineStats, Error> {
    let desc = load(path)?;
    let mut pipeline = desc.build(open_port)?;
    let stats = pipeline.run_until(stop, limit)?;
    pipeline.shutdown()?;
    Ok(stats)
}
