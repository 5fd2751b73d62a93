//! Module classes under BESS's names: each class's `*Arg` message (in a
//! `google.protobuf.Any`) becomes nfkit's module arguments, with BESS's
//! defaults. Any class also takes `bess.pb.NfkitArg`, nfkit's own
//! argument text (`"size=60, burst=32"`).

use crate::error::{Fail, Res};
use crate::pb;
use nfkit_pipeline::args::{Args, Value};
use nfkit_pipeline::module::MAX_GATES;
use prost::Message;
use prost_types::Any;

/// One line of help per class (GetMclassInfo), and its commands with
/// their argument message types.
pub struct ClassInfo {
    pub name: &'static str,
    pub help: &'static str,
    pub cmds: &'static [(&'static str, &'static str)],
}

pub const CLASSES: &[ClassInfo] = &[
    ClassInfo { name: "ArpResponder", help: "answers ARP requests for the addresses it was given", cmds: &[("add", "ArpResponderArg")] },
    ClassInfo { name: "Bypass", help: "passes packets from input gate i to output gate i", cmds: &[] },
    ClassInfo { name: "Dump", help: "prints the first packets in hex (nfkit arguments: limit, snap, file)", cmds: &[] },
    ClassInfo { name: "HashLB", help: "splits packets over gates by a flow hash (l2, l3, l4)", cmds: &[] },
    ClassInfo { name: "MACSwap", help: "swaps source and destination MAC addresses", cmds: &[] },
    ClassInfo { name: "Measure", help: "measures latency from the timestamp Timestamp wrote", cmds: &[("get_summary", "MeasureCommandGetSummaryArg")] },
    ClassInfo { name: "MPLSPop", help: "pops the MPLS label (non-MPLS frames to gate 1)", cmds: &[("set", "MplsPopArg")] },
    ClassInfo { name: "Merge", help: "merges every input gate into output gate 0", cmds: &[] },
    ClassInfo { name: "NF", help: "an nfkit network function (nfkit arguments: name=nat|bridge|lb|policer|firewall|router, options)", cmds: &[] },
    ClassInfo { name: "PcapCapture", help: "writes packets to a pcap file (nfkit arguments: file)", cmds: &[] },
    ClassInfo { name: "PortInc", help: "receives packets from every queue of a port", cmds: &[] },
    ClassInfo { name: "PortOut", help: "sends packets to a port", cmds: &[] },
    ClassInfo { name: "Queue", help: "a lock-free ring; its task sends what it holds", cmds: &[("get_status", "QueueCommandGetStatusArg")] },
    ClassInfo { name: "QueueInc", help: "receives packets from one queue of a port", cmds: &[] },
    ClassInfo { name: "QueueOut", help: "sends packets to one queue of a port", cmds: &[] },
    ClassInfo { name: "RandomSplit", help: "sends each packet to a random gate of a list, or drops it", cmds: &[] },
    ClassInfo { name: "Replicate", help: "sends the packet to gate 0 and a copy to every other gate", cmds: &[] },
    ClassInfo { name: "RoundRobin", help: "spreads packets (or batches) over gates in turn", cmds: &[] },
    ClassInfo { name: "SetMetadata", help: "writes a constant metadata attribute into every packet", cmds: &[] },
    ClassInfo { name: "Sink", help: "frees every packet it receives", cmds: &[] },
    ClassInfo { name: "Source", help: "makes packets of a given size", cmds: &[] },
    ClassInfo { name: "Split", help: "chooses the output gate from a metadata attribute or a packet field", cmds: &[] },
    ClassInfo { name: "Timestamp", help: "writes the current time into every packet", cmds: &[] },
    ClassInfo { name: "Update", help: "writes constant values at packet offsets", cmds: &[] },
];

/// A class's commands and their argument messages, as BESS names them
/// (`ExactMatchCommandSetDefaultGateArg` -> `set_default_gate`).
pub fn commands(class: &str) -> Vec<(String, String)> {
    let prefix = format!("{class}Command");
    let mut out: Vec<(String, String)> = crate::reflect::all_messages()
        .into_iter()
        .filter_map(|m| {
            let cmd = m.strip_prefix(&prefix)?.strip_suffix("Arg")?;
            Some((snake(cmd), m.clone()))
        })
        .collect();
    for c in info(class).map(|i| i.cmds).unwrap_or_default() {
        if !out.iter().any(|o| o.0 == c.0) {
            out.push((c.0.to_string(), c.1.to_string()));
        }
    }
    out.sort();
    out
}

pub fn info(class: &str) -> Option<&'static ClassInfo> {
    CLASSES.iter().find(|c| c.name == class)
}

/// The message name of `any`'s type (`bess.pb.SourceArg`).
pub fn type_name(any: &Any) -> &str {
    any.type_url.rsplit('/').next().unwrap_or("")
}

/// Decode `any` as `T` named `bess.pb.NAME`; an absent argument, or a
/// `bess.pb.EmptyArg` (what pybess packs for a class BESS gives no
/// `<Class>Arg`, such as MPLSPop), is the message's defaults.
pub fn decode<T: Message + Default>(any: Option<&Any>, name: &str) -> Res<T> {
    let Some(any) = any.filter(|a| !is_empty_arg(a)) else {
        return Ok(T::default());
    };
    let want = format!("bess.pb.{name}");
    if type_name(any) != want {
        return Err(Fail::inval(format!(
            "expected an argument of type {want}, got `{}`",
            any.type_url
        )));
    }
    T::decode(any.value.as_slice()).map_err(|e| Fail::inval(format!("malformed {want}: {e}")))
}

/// No argument: nothing at all, or a `bess.pb.EmptyArg`.
fn is_empty_arg(a: &Any) -> bool {
    (a.type_url.is_empty() && a.value.is_empty()) || type_name(a) == "bess.pb.EmptyArg"
}

/// Pack `m` as an `Any` of type `bess.pb.NAME`.
pub fn pack<T: Message>(m: &T, name: &str) -> Any {
    Any {
        type_url: format!("type.googleapis.com/bess.pb.{name}"),
        value: m.encode_to_vec(),
    }
}

fn int(v: u64) -> Value {
    Value::Int(v)
}
fn s(v: &str) -> Value {
    Value::Str(v.to_string())
}

/// BESS gate lists (`[0, 1, 2]`) as nfkit's gate count: nfkit's modules
/// spread over gates 0..N.
fn gate_count(class: &str, gates: &[i64], default: u64) -> Res<u64> {
    if gates.is_empty() {
        return Ok(default);
    }
    let contiguous = gates.iter().enumerate().all(|(i, &g)| g == i as i64);
    if !contiguous || gates.len() > MAX_GATES {
        return Err(Fail::inval(format!(
            "{class}: gates {gates:?}: nfkit's {class} uses gates 0..N-1 in order (at most {MAX_GATES}); give [0, 1, ..., N-1]"
        )));
    }
    Ok(gates.len() as u64)
}

/// The module arguments for `class` from its BESS argument (or an
/// `NfkitArg`), as (name, value) pairs for the pipeline's registry.
pub fn bess_args(class: &str, any: Option<&Any>) -> Res<Vec<(String, Value)>> {
    if let Some(a) = any.filter(|a| type_name(a) == "bess.pb.NfkitArg") {
        let arg: pb::NfkitArg = decode(Some(a), "NfkitArg")?;
        return parse_nfkit_args(class, &arg.args);
    }
    let mut out: Vec<(&str, Value)> = Vec::new();
    match class {
        "Source" => {
            let a: pb::SourceArg = decode(any, "SourceArg")?;
            out.push(("size", int(if a.pkt_size == 0 { 60 } else { a.pkt_size })));
        }
        "Sink" => {
            let _: pb::SinkArg = decode(any, "SinkArg")?;
        }
        "MACSwap" => {
            let _: pb::MacSwapArg = decode(any, "MACSwapArg")?;
        }
        "Merge" => {
            let _: pb::MergeArg = decode(any, "MergeArg")?;
        }
        "PortInc" => {
            let a: pb::PortIncArg = decode(any, "PortIncArg")?;
            out.push(("port", Value::Ident(a.port)));
        }
        "PortOut" => {
            let a: pb::PortOutArg = decode(any, "PortOutArg")?;
            out.push(("port", Value::Ident(a.port)));
        }
        "QueueInc" => {
            let a: pb::QueueIncArg = decode(any, "QueueIncArg")?;
            out.push(("port", Value::Ident(a.port)));
            out.push(("qid", int(a.qid)));
        }
        "QueueOut" => {
            let a: pb::QueueOutArg = decode(any, "QueueOutArg")?;
            out.push(("port", Value::Ident(a.port)));
            out.push(("qid", int(a.qid)));
        }
        "Queue" => {
            let a: pb::QueueArg = decode(any, "QueueArg")?;
            if a.backpressure {
                return Err(Fail::notsup(
                    "Queue: backpressure is not supported by nfkit",
                ));
            }
            if a.size != 0 {
                out.push(("size", int(a.size)));
            }
        }
        "Bypass" => {
            let a: pb::BypassArg = decode(any, "BypassArg")?;
            if a.cycles_per_batch + a.cycles_per_packet + a.cycles_per_byte != 0 {
                return Err(Fail::notsup(
                    "Bypass: cycles_per_batch/packet/byte (busy work) is not supported by nfkit",
                ));
            }
        }
        "Split" => {
            let a: pb::SplitArg = decode(any, "SplitArg")?;
            out.push(("size", int(if a.size == 0 { 1 } else { a.size })));
            out.push(("gates", int(MAX_GATES as u64)));
            match a.r#type {
                Some(pb::split_arg::Type::Attribute(n)) => out.push(("attribute", s(&n))),
                Some(pb::split_arg::Type::Offset(o)) if o >= 0 => {
                    out.push(("offset", int(o as u64)))
                }
                Some(pb::split_arg::Type::Offset(o)) => {
                    return Err(Fail::inval(format!("Split: offset {o} is negative")))
                }
                None => return Err(Fail::inval("Split: give either `attribute` or `offset`")),
            }
        }
        "RoundRobin" => {
            // BESS's list as given (gates=[0, 2]); no list drops every
            // packet, and no mode is BESS's default, batch.
            let a: pb::RoundRobinArg = decode(any, "RoundRobinArg")?;
            if let Some(g) = a.gates.iter().find(|&&g| g < 0) {
                return Err(Fail::inval(format!("RoundRobin: invalid gate {g}")));
            }
            out.push((
                "gates",
                Value::List(a.gates.iter().map(|&g| int(g as u64)).collect()),
            ));
            out.push(("mode", s(if a.mode.is_empty() { "batch" } else { &a.mode })));
        }
        "Replicate" => {
            let a: pb::ReplicateArg = decode(any, "ReplicateArg")?;
            out.push(("gates", int(gate_count(class, &a.gates, 1)?)));
        }
        "RandomSplit" => {
            let a: pb::RandomSplitArg = decode(any, "RandomSplitArg")?;
            if a.gates.iter().any(|&g| g < 0) {
                return Err(Fail::inval("RandomSplit: negative gate"));
            }
            if a.gates.is_empty() {
                return Err(Fail::inval("RandomSplit: `gates` must not be empty"));
            }
            out.push((
                "gates",
                Value::List(a.gates.iter().map(|&g| int(g as u64)).collect()),
            ));
            out.push(("drop_rate", Value::Float(a.drop_rate)));
        }
        "HashLB" => {
            let a: pb::HashLbArg = decode(any, "HashLBArg")?;
            if !a.fields.is_empty() {
                return Err(Fail::notsup(
                    "HashLB: custom `fields` are not supported by nfkit (use mode l2, l3 or l4)",
                ));
            }
            out.push(("gates", int(gate_count(class, &a.gates, 2)?)));
            if !a.mode.is_empty() {
                out.push(("fields", s(&a.mode)));
            }
        }
        "Update" => {
            let a: pb::UpdateArg = decode(any, "UpdateArg")?;
            if a.fields.is_empty() {
                return Err(Fail::inval("Update: `fields` must not be empty"));
            }
            if let Some(f) = a.fields.iter().find(|f| f.offset < 0) {
                return Err(Fail::inval(format!(
                    "Update: offset {} is negative",
                    f.offset
                )));
            }
            let list = |f: &dyn Fn(&pb::update_arg::Field) -> u64| {
                Value::List(a.fields.iter().map(|x| int(f(x))).collect())
            };
            out.push(("offset", list(&|f| f.offset as u64)));
            out.push(("size", list(&|f| f.size)));
            out.push(("value", list(&|f| f.value)));
        }
        "SetMetadata" => {
            let a: pb::SetMetadataArg = decode(any, "SetMetadataArg")?;
            let [attr] = a.attrs.as_slice() else {
                return Err(Fail::notsup(format!(
                    "SetMetadata: nfkit sets one attribute per module ({} given); chain several modules",
                    a.attrs.len()
                )));
            };
            if attr.offset != 0 || !attr.mask.is_empty() || attr.rshift_bits != 0 {
                return Err(Fail::notsup(
                    "SetMetadata: copying from the packet (offset, mask, rshift_bits) is not supported by nfkit",
                ));
            }
            out.push(("attribute", s(&attr.name)));
            match &attr.value {
                Some(pb::set_metadata_arg::attribute::Value::ValueInt(v)) => {
                    out.push(("size", int(if attr.size == 0 { 4 } else { attr.size })));
                    out.push(("value", int(*v)));
                }
                Some(pb::set_metadata_arg::attribute::Value::ValueBin(b)) => {
                    let text = String::from_utf8(b.clone()).map_err(|_| {
                        Fail::notsup("SetMetadata: value_bin must be UTF-8 bytes in nfkit")
                    })?;
                    out.push(("size", int(b.len() as u64)));
                    out.push(("value", Value::Str(text)));
                }
                None => return Err(Fail::inval("SetMetadata: the attribute has no value")),
            }
        }
        "Timestamp" => {
            let a: pb::TimestampArg = decode(any, "TimestampArg")?;
            match a.r#type {
                Some(pb::timestamp_arg::Type::Offset(o)) if o != 0 => out.push(("offset", int(o))),
                Some(pb::timestamp_arg::Type::AttrName(n)) if !n.is_empty() && n != "timestamp" => {
                    return Err(Fail::notsup(
                        "Timestamp: nfkit writes the `timestamp` attribute or a packet offset",
                    ))
                }
                _ => {}
            }
        }
        "Measure" => {
            let a: pb::MeasureArg = decode(any, "MeasureArg")?;
            match a.r#type {
                Some(pb::measure_arg::Type::Offset(o)) if o != 0 => out.push(("offset", int(o))),
                Some(pb::measure_arg::Type::AttrName(n)) if !n.is_empty() && n != "timestamp" => {
                    return Err(Fail::notsup(
                        "Measure: nfkit reads the `timestamp` attribute or a packet offset",
                    ))
                }
                _ => {}
            }
        }
        "Dump" => {
            let _: pb::DumpArg = decode(any, "DumpArg")?;
        }
        "L2Forward" => {
            // BESS's `size` counts hash buckets of `bucket` slots (1024
            // and 4 by default); nfkit's counts slots.
            let a: pb::L2ForwardArg = decode(any, "L2ForwardArg")?;
            let size = if a.size == 0 { 1024 } else { a.size };
            let bucket = if a.bucket == 0 { 4 } else { a.bucket };
            if size < 0 || bucket < 0 {
                return Err(Fail::inval(format!(
                    "L2Forward: size {size} and bucket {bucket} must be positive"
                )));
            }
            let slots = size.checked_mul(bucket).ok_or_else(|| {
                Fail::inval(format!(
                    "L2Forward: size {size} x bucket {bucket} is too large"
                ))
            })?;
            out.push(("size", int(slots as u64)));
            out.push(("bucket", int(bucket as u64)));
        }
        _ => {
            // Every other class reads BESS's fields under their own
            // names (nfkit-pipeline's classes take BESS's argument names).
            let Some(a) = any.filter(|a| !is_empty_arg(a)) else {
                return Ok(Vec::new());
            };
            let (msg, v) = crate::reflect::any_to_value(a)?;
            if !msg.eq_ignore_ascii_case(&format!("{class}Arg")) {
                return Err(Fail::inval(format!(
                    "{class}: expected an argument of type bess.pb.{class}Arg (or bess.pb.NfkitArg), got `{}`",
                    a.type_url
                )));
            }
            let nfkit_pipeline::args::Value::Map(items) = v else {
                return Ok(Vec::new());
            };
            return Ok(items);
        }
    }
    Ok(out.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// Parse nfkit's argument text with the config language's parser.
pub fn parse_nfkit_args(class: &str, text: &str) -> Res<Vec<(String, Value)>> {
    let src = format!("__m::{class}({text})");
    let desc = nfkit_pipeline::config::parse_with(&src, "NfkitArg", &permissive_registry(class))
        .map_err(|e| Fail::inval(format!("NfkitArg: {e}")))?;
    let m = desc
        .modules
        .into_iter()
        .next()
        .ok_or_else(|| Fail::inval("NfkitArg: no arguments found"))?;
    let mut args = m.args;
    let mut out = Vec::new();
    // Args has no iterator: take the names we can see in the text.
    for name in text
        .split(',')
        .filter_map(|kv| kv.split('=').next())
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if let Some(v) = args.take(name) {
            out.push((name.to_string(), v));
        }
    }
    Ok(out)
}

/// A registry that knows `class` (the parser checks class names).
fn permissive_registry(class: &str) -> nfkit_pipeline::modules::Registry {
    let mut r = nfkit_pipeline::modules::Registry::default();
    if !r.contains(class) {
        r.register(class, |_, _| {
            Err(nfkit_pipeline::args::ArgError::general("unreachable"))
        });
    }
    r
}

/// nfkit's `Args` from pairs.
pub fn to_args(pairs: &[(String, Value)]) -> Args {
    let v: Vec<(&str, Value)> = pairs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    Args::from_pairs(&v)
}

/// BESS's default name: the class in snake case (`PortInc` ->
/// `port_inc`), to which the caller appends a number.
pub fn snake(class: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = class.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && chars[i - 1].is_ascii_lowercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_names() {
        assert_eq!(snake("PortInc"), "port_inc");
        assert_eq!(snake("Source"), "source");
        assert_eq!(snake("HashLB"), "hash_lb");
        assert_eq!(snake("PMDPort"), "pmd_port");
        assert_eq!(snake("MACSwap"), "mac_swap");
    }

    #[test]
    fn source_defaults_and_wrong_types() {
        let a = bess_args("Source", None).unwrap();
        assert_eq!(a, vec![("size".to_string(), Value::Int(60))]);
        let wrong = pack(&pb::SinkArg {}, "SinkArg");
        let e = bess_args("Source", Some(&wrong)).unwrap_err();
        assert_eq!(e.code, libc::EINVAL);
        assert!(e.msg.contains("bess.pb.SourceArg"), "{}", e.msg);
        let bad = Any {
            type_url: "type.googleapis.com/bess.pb.SourceArg".into(),
            value: vec![0xff, 0xff, 0xff],
        };
        assert!(bess_args("Source", Some(&bad))
            .unwrap_err()
            .msg
            .contains("malformed"));
    }

    #[test]
    fn nfkit_arg_text() {
        let a = pack(
            &pb::NfkitArg {
                args: "size=128, burst=8".into(),
            },
            "NfkitArg",
        );
        let v = bess_args("Source", Some(&a)).unwrap();
        assert_eq!(
            v,
            vec![
                ("size".to_string(), Value::Int(128)),
                ("burst".to_string(), Value::Int(8))
            ]
        );
    }

    #[test]
    fn gate_lists() {
        let a = pack(
            &pb::ReplicateArg {
                gates: vec![0, 1, 2],
            },
            "ReplicateArg",
        );
        assert_eq!(
            bess_args("Replicate", Some(&a)).unwrap()[0].1,
            Value::Int(3)
        );
        let a = pack(&pb::ReplicateArg { gates: vec![1, 2] }, "ReplicateArg");
        assert!(bess_args("Replicate", Some(&a)).is_err());
        // RoundRobin takes BESS's list as it is, in batch mode by default.
        let a = pack(
            &pb::RoundRobinArg {
                gates: vec![0, 2],
                mode: String::new(),
            },
            "RoundRobinArg",
        );
        assert_eq!(
            bess_args("RoundRobin", Some(&a)).unwrap(),
            vec![
                (
                    "gates".to_string(),
                    Value::List(vec![Value::Int(0), Value::Int(2)])
                ),
                ("mode".to_string(), Value::Str("batch".into()))
            ]
        );
    }
}
