//! The core modules, one file each, and the registry that builds them
//! from config arguments.

mod bypass;
mod dump;
mod hash_lb;
mod macswap;
mod measure;
mod merge;
mod pcap_capture;
mod port_inc;
mod port_out;
mod queue;
mod random_split;
mod replicate;
mod round_robin;
mod set_metadata;
mod sink;
mod source;
mod split;
mod timestamp;
mod update;

pub use bypass::Bypass;
pub use dump::Dump;
pub use hash_lb::{HashFields, HashLb};
pub use macswap::MacSwap;
pub use measure::Measure;
pub use merge::Merge;
pub use pcap_capture::PcapCapture;
pub use port_inc::PortInc;
pub use port_out::PortOut;
pub use queue::Queue;
pub use random_split::RandomSplit;
pub use replicate::Replicate;
pub use round_robin::RoundRobinSplit;
pub use set_metadata::SetMetadata;
pub use sink::Sink;
pub use source::Source;
pub use split::{Split, SplitOn};
pub use timestamp::{Timestamp, TIMESTAMP_ATTR};
pub use update::{FieldUpdate, Update};

use crate::args::{ArgError, Args};
use crate::module::Module;
use crate::pipeline::SharedPort;
use nfkit_hw::Mempool;
use std::collections::{BTreeMap, HashMap};

/// What constructors may use besides their arguments.
pub struct BuildEnv {
    /// Ports declared in the config, by name.
    pub ports: HashMap<String, SharedPort>,
    /// Buffers for packets the pipeline makes itself (Source).
    pub pool: Mempool,
}

impl BuildEnv {
    /// The port named by argument `arg`.
    pub fn port(&self, args: &mut Args, arg: &str) -> Result<SharedPort, ArgError> {
        let name = args.required_str(arg)?;
        self.ports.get(&name).cloned().ok_or_else(|| {
            let mut known: Vec<&String> = self.ports.keys().collect();
            known.sort();
            ArgError::new(arg, format!("no port named `{name}` (declared: {known:?})"))
        })
    }
}

/// Builds a module from its arguments.
pub type Constructor = fn(&mut Args, &BuildEnv) -> Result<Box<dyn Module>, ArgError>;

/// Module classes by name.
#[derive(Clone)]
pub struct Registry {
    classes: BTreeMap<String, Constructor>,
}

impl Default for Registry {
    /// The core modules.
    fn default() -> Registry {
        let mut r = Registry {
            classes: BTreeMap::new(),
        };
        r.register("PortInc", port_inc::port_inc);
        r.register("QueueInc", port_inc::queue_inc);
        r.register("PortOut", port_out::port_out);
        r.register("QueueOut", port_out::queue_out);
        r.register("Queue", queue::build);
        r.register("Source", source::build);
        r.register("Sink", sink::build);
        r.register("Bypass", bypass::build);
        r.register("Merge", merge::build);
        r.register("Split", split::build);
        r.register("RoundRobin", round_robin::build);
        r.register("Replicate", replicate::build);
        r.register("RandomSplit", random_split::build);
        r.register("HashLB", hash_lb::build);
        r.register("MACSwap", macswap::build);
        r.register("Update", update::build);
        r.register("SetMetadata", set_metadata::build);
        r.register("Timestamp", timestamp::build);
        r.register("Measure", measure::build);
        r.register("Dump", dump::build);
        r.register("PcapCapture", pcap_capture::build);
        r
    }
}

impl Registry {
    /// Add (or replace) a class.
    pub fn register(&mut self, class: &str, ctor: Constructor) {
        self.classes.insert(class.to_string(), ctor);
    }
    pub fn contains(&self, class: &str) -> bool {
        self.classes.contains_key(class)
    }
    pub fn classes(&self) -> impl Iterator<Item = &str> {
        self.classes.keys().map(String::as_str)
    }
    /// Build a module of `class`; unknown arguments are errors.
    pub fn build(
        &self,
        class: &str,
        args: &mut Args,
        env: &BuildEnv,
    ) -> Result<Box<dyn Module>, ArgError> {
        let ctor = self
            .classes
            .get(class)
            .ok_or_else(|| ArgError::general(format!("unknown module class `{class}`")))?;
        let m = ctor(args, env)?;
        args.finish(class)?;
        Ok(m)
    }
}
