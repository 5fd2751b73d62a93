//! The module classes, one file each (or a folder with `mod.rs`). Every
//! file here is compiled and its `declare_class!` collected into the
//! default [`Registry`] by `build.rs`: adding a class touches only its
//! own file. How to write one: `src/modules/README.md`.
//!
//! The core classes:
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
//! | `Bypass` | n/n | `gates=8192` | input gate i to output gate i |
//! | `Merge` | 8192/1 | | every input to output 0 |
//! | `Split` | 1/n | `attribute=NAME` or `offset=N`, `size=1` (1..8), `gates=2` | gate = attribute value, or big-endian packet field |
//! | `RoundRobin` | 1/n | `gates=2` or `[0, 2]`, `mode=packet\|batch`; `set_mode`, `set_gates` | spread in turn |
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
//! | `ExactMatch` | 1/n | `fields=[(offset=N\|attr_name=S, num_bytes=N)]`, `masks`, `size=1M`, `gates=8192` | exact match on key fields; commands `add`, `delete`, `clear`, `set_default_gate` |
//! | `WildcardMatch` | 1/n | `fields=[...]`, `size=1M`, `gates=8192` | highest-priority masked match; same commands |
//! | `ACL` | n/n | `rules=[(src_ip=, dst_ip=, src_port=, dst_port=, drop=)]`, `max_rules=4096` | first matching rule forwards (same gate) or drops; commands `add`, `delete`, `clear` |
//! | `IPLookup` | 1/n | `max_rules=1024`, `max_tbl8s=128`, `gates=8192` | longest-prefix match of the IPv4 destination (DIR-24-8); commands `add`, `delete`, `clear` |
//! | `L2Forward` | 1/n | `size=1024`, `bucket=4`, `gates=8192` | destination MAC table; commands `add`, `delete`, `set_default_gate`, `lookup`, `populate` |
//! | `BPF` | 1/n | `filters=[(filter="tcp port 80", priority=P, gate=G)]`, `max_filters=64` | tcpdump filters (libpcap-compiled, run by nfkit's interpreter), highest priority first, else gate 0; commands `add`, `delete`, `clear` |
//! | `NF` | n/n | `name=nat\|bridge\|lb\|policer\|firewall\|router`, the NF's options (`ext_ip="..."`) | an `nfkit-nf` network function; gate k = NF port k |
//!
//! Every packet a module receives leaves by an output gate, is consumed
//! (sent, sunk), is held (a queue), or is counted as dropped.

pub use acl::{Acl, AclRule};
pub use bpf::Bpf;
pub use bypass::Bypass;
pub use dump::Dump;
pub use exact_match::ExactMatch;
pub use hash_lb::{HashFields, HashLb};
pub use ip_lookup::IpLookup;
pub use l2_forward::L2Forward;
pub use macswap::MacSwap;
pub use measure::Measure;
pub use merge::Merge;
pub use nf::NfModule;
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
pub use wildcard_match::WildcardMatch;

pub use crate::registry::{BuildEnv, ClassDecl, Constructor, Registry};

/// Declare the classes a module file builds, once, in that file:
///
/// ```ignore
/// crate::modules::declare_class!("MACSwap" => build);
/// crate::modules::declare_class!("PortInc" => port_inc, "QueueInc" => queue_inc);
/// ```
///
/// Each `build` is a [`Constructor`]. The default [`Registry`] collects
/// every file's declarations (`build.rs` lists the files).
macro_rules! declare_class {
    ($($name:literal => $build:path),+ $(,)?) => {
        /// The classes this file declares (collected by the registry).
        pub(crate) const CLASSES: &[$crate::registry::ClassDecl] = &[
            $($crate::registry::ClassDecl { name: $name, build: $build }),+
        ];
    };
}
pub(crate) use declare_class;

// `pub mod NAME;` for every file of this folder, and `DECLARED`.
include!(concat!(env!("OUT_DIR"), "/module_files.rs"));

impl Default for Registry {
    /// Every declared class.
    fn default() -> Registry {
        Registry::from_decls(DECLARED)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_class_is_declared_once() {
        let mut names: Vec<&str> = super::DECLARED
            .iter()
            .flat_map(|f| f.iter())
            .map(|d| d.name)
            .collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a class name is declared twice");
        let r = super::Registry::default();
        for class in [
            "PortInc", "QueueInc", "PortOut", "QueueOut", "Queue", "Source", "Sink", "NF",
        ] {
            assert!(r.contains(class), "{class}");
        }
    }
}
