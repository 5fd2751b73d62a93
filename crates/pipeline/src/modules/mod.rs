//! The core modules, one file each, and the registry that builds them
//! from config arguments.
//!
//! | class | gates in/out | arguments (defaults) | what it does |
//! |---|---|---|---|
//! | `PortInc` | 0/1, task | `port`, `burst=32` | receive from every queue of a port in turn |
//! | `QueueInc` | 0/1, task | `port`, `qid=0`, `burst=32` | receive from one queue |
//! | `PortOut` | 1/0 | `port` | send on queue `worker % tx_queues`; refused packets are drops |
//! | `QueueOut` | 1/0 | `port`, `qid=0` | send on one queue |
//! | `Queue` | 1/1, task | `size=1024`, `burst=32` | lock-free ring; its task may run on another worker |
//! | `Source` | 0/1, task | `size=60`, `burst=32`, `template=[bytes]` or `"text"` | make packets from the pipeline's pool |
//! | `Sink` | 1/0 | | free packets (counted as consumed) |
//! | `Bypass` | n/n | `gates=1` | input gate i to output gate i |
//! | `Merge` | 64/1 | | every input to output 0 |
//! | `Split` | 1/n | `attribute=NAME` or `offset=N`, `size=1` (1..8), `gates=2` | gate = attribute value, or big-endian packet field |
//! | `RoundRobin` | 1/n | `gates=2`, `mode=packet\|batch` | spread in turn |
//! | `Replicate` | 1/n | `gates=2` | original to gate 0, copies to the rest |
//! | `RandomSplit` | 1/n | `gates=[0]`, `drop_rate=0.0`, `seed` | random gate from the list, or drop |
//! | `HashLB` | 1/n | `gates=2`, `fields=l4` (`l2`, `l3`, `l4`) | flow hash over MACs / IPs / IPs+proto+ports |
//! | `MACSwap` | 1/1 | | swap Ethernet source and destination |
//! | `Update` | 1/1 | `offset=[..]`, `size=[..]` (1..8), `value=[..]` | write big-endian constants into the packet |
//! | `SetMetadata` | 1/1 | `attribute=NAME`, `size=4`, `value=N` or `"bytes"` | write a metadata attribute |
//! | `Timestamp` | 1/1 | `offset=N` (else the `timestamp` attribute) | stamp the scheduler time (ns) |
//! | `Measure` | 1/1 | `offset=N` (else the `timestamp` attribute) | latency histogram (hdrhistogram): count, min, mean, p50, p99, p999, max |
//! | `Dump` | 1/1 | `limit=16`, `snap=64`, `file=PATH` (else stderr) | print the first packets in hex |
//! | `PcapCapture` | 1/1 | `file=PATH` | write packets to a pcap file |
//! | `ExactMatch` | 1/n | `fields=[(offset=N\|attr_name=S, num_bytes=N)]`, `masks`, `size=1M`, `gates=64` | exact match on key fields; commands `add`, `delete`, `clear`, `set_default_gate` |
//! | `WildcardMatch` | 1/n | `fields=[...]`, `size=1M`, `gates=64` | highest-priority masked match; same commands |
//! | `ACL` | n/n | `rules=[(src_ip=, dst_ip=, src_port=, dst_port=, drop=)]`, `max_rules=4096` | first matching rule forwards (same gate) or drops; commands `add`, `delete`, `clear` |
//! | `IPLookup` | 1/n | `max_rules=1024`, `max_tbl8s=128`, `gates=64` | longest-prefix match of the IPv4 destination (DIR-24-8); commands `add`, `delete`, `clear` |
//! | `L2Forward` | 1/n | `size=1024`, `bucket=4`, `gates=64` | destination MAC table; commands `add`, `delete`, `set_default_gate`, `lookup`, `populate` |
//! | `BPF` | 1/n | `filters=[(filter="tcp port 80", priority=P, gate=G)]`, `max_filters=64` | tcpdump filters (libpcap-compiled, run by nfkit's interpreter), highest priority first, else gate 0; commands `add`, `delete`, `clear` |
//! | `UpdateTTL` | 1/1 | | decrement the IPv4 TTL (checksum patched); TTL 0/1 and non-IPv4 dropped |
//! | `IPSwap` | 1/1 | | swap IPv4 addresses and TCP/UDP ports |
//! | `StaticNAT` | 2/2 | `pairs=[(int_range=(start=, end=), ext_range=(start=, end=))]` | one-to-one address ranges; gate 0 in -> 1 out (source), 1 -> 0 (destination) |
//! | `Rewrite` | 1/1 | `templates=[bytes, ...]` | replace packets by templates in turn; commands `add`, `clear` |
//! | `RandomUpdate` | 1/1 | `fields=[(offset=, size=, min=, max=)]`, `seed` | random big-endian values; commands `add`, `clear` |
//! | `RandomDrop` | 1/1 | `drop_rate=F`, `seed` | drop with probability F; command `set_droprate` |
//! | `Buffer` | 1/1 | | gather full batches (32) |
//! | `DRR` | 1/1, task | `num_flows=4096`, `quantum=1500`, `max_flow_queue_size=2048` | deficit round robin over flows |
//! | `FlowGen` | 0/1, task | `template`, `pps`, `flow_rate`, `flow_duration`, `arrival`, `duration`, `*_range`, `quick_rampup` | TCP flows with arrival and duration distributions |
//! | `WorkerSplit` | 1/n | `worker_gates=[...]`, `gates=64` | gate = the worker running it |
//! | `ArpResponder` | 1/1 | `ip`, `mac_addr` | answer ARP requests for configured addresses; commands `add`, `delete` |
//! | `UrlFilter` | 2/2 | `blacklist=[(host=, path=)]`, `max_flows=64k` | drop HTTP requests for blacklisted URLs and block their connections |
//! | `NoOP` | 0/0, task | | does nothing |
//! | `MetadataTest` | n/n | `read=(a=4)`, `write=(...)`, `update=(...)`, `gates=1` | declares attributes (writes 1, updates +1) |
//! | `NF` | n/n | `name=nat\|bridge\|lb\|policer\|firewall\|router`, the NF's options (`ext_ip="..."`) | an `nfkit-nf` network function; gate k = NF port k |
//!
//! Every packet a module receives leaves by an output gate, is consumed
//! (sent, sunk), is held (a queue), or is counted as dropped.

mod acl;
mod arp_responder;
mod bpf;
mod buffer;
mod bypass;
pub mod cbpf;
pub mod classify;
mod drr;
mod dump;
mod exact_match;
mod flowgen;
mod hash_lb;
mod ip_lookup;
mod ip_swap;
mod l2_forward;
mod macswap;
mod measure;
mod merge;
mod metadata_test;
mod nf;
mod noop;
mod pcap_capture;
mod port_inc;
mod port_out;
mod queue;
mod random_drop;
mod random_split;
mod random_update;
mod replicate;
mod rewrite;
mod rng;
mod round_robin;
mod set_metadata;
mod sink;
mod source;
mod split;
mod static_nat;
mod timestamp;
mod update;
mod update_ttl;
mod url_filter;
mod wildcard_match;
mod worker_split;

pub use acl::{Acl, AclRule};
pub use arp_responder::ArpResponder;
pub use bpf::Bpf;
pub use buffer::Buffer;
pub use bypass::Bypass;
pub use drr::Drr;
pub use dump::Dump;
pub use exact_match::ExactMatch;
pub use flowgen::FlowGen;
pub use hash_lb::{HashFields, HashLb};
pub use ip_lookup::IpLookup;
pub use ip_swap::IpSwap;
pub use l2_forward::L2Forward;
pub use macswap::MacSwap;
pub use measure::Measure;
pub use merge::Merge;
pub use metadata_test::MetadataTest;
pub use nf::NfModule;
pub use noop::NoOp;
pub use pcap_capture::PcapCapture;
pub use port_inc::PortInc;
pub use port_out::PortOut;
pub use queue::Queue;
pub use random_drop::RandomDrop;
pub use random_split::RandomSplit;
pub use random_update::{RandomField, RandomUpdate};
pub use replicate::Replicate;
pub use rewrite::Rewrite;
pub use round_robin::RoundRobinSplit;
pub use set_metadata::SetMetadata;
pub use sink::Sink;
pub use source::Source;
pub use split::{Split, SplitOn};
pub use static_nat::{NatPair, StaticNat};
pub use timestamp::{Timestamp, TIMESTAMP_ATTR};
pub use update::{FieldUpdate, Update};
pub use update_ttl::UpdateTtl;
pub use url_filter::UrlFilter;
pub use wildcard_match::WildcardMatch;
pub use worker_split::WorkerSplit;

use crate::args::{ArgError, Args};
use crate::module::Module;
use crate::pipeline::SharedPort;
use nfkit_hw::Mempool;
use std::collections::{BTreeMap, HashMap};

/// What constructors may use besides their arguments.
pub struct BuildEnv {
    /// Ports declared in the config, by name.
    pub ports: HashMap<String, SharedPort>,
    /// Buffers for packets the pipeline makes itself (Source), and the
    /// pool whose buffers a Sink keeps cached.
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
        r.register("NF", nf::build);
        r.register("ExactMatch", exact_match::build);
        r.register("WildcardMatch", wildcard_match::build);
        r.register("ACL", acl::build);
        r.register("IPLookup", ip_lookup::build);
        r.register("L2Forward", l2_forward::build);
        r.register("BPF", bpf::build);
        r.register("UpdateTTL", update_ttl::build);
        r.register("IPSwap", ip_swap::build);
        r.register("StaticNAT", static_nat::build);
        r.register("Rewrite", rewrite::build);
        r.register("RandomUpdate", random_update::build);
        r.register("RandomDrop", random_drop::build);
        r.register("Buffer", buffer::build);
        r.register("DRR", drr::build);
        r.register("FlowGen", flowgen::build);
        r.register("WorkerSplit", worker_split::build);
        r.register("ArpResponder", arp_responder::build);
        r.register("UrlFilter", url_filter::build);
        r.register("NoOP", noop::build);
        r.register("MetadataTest", metadata_test::build);
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
