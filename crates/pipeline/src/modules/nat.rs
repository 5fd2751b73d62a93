//! NAT (BESS): dynamic address and port translation, the `nat` network
//! function of `nfkit-nf` (its one mapping table, RFC 4787/5382/5508
//! behaviour, lifetimes and counted drops) under BESS's class name and
//! arguments.
//!
//! ```text
//! nat::NAT(ext_addrs=[(ext_addr="192.0.2.1"),
//!                     (ext_addr="192.0.2.2", port_ranges=[(begin=1024, end=65535)])])
//! inside -> 0:nat:1 -> outside
//! back   -> 1:nat:0 -> inside_out
//! ```
//!
//! Gates as BESS's: input gate 0 takes internal-to-external packets and
//! sends them out of output gate 1 with an external source; input gate 1
//! takes external-to-internal packets and sends them out of output gate 0
//! with the internal destination. A hairpinned packet (inside to an
//! external address) leaves by gate 0.
//!
//! Arguments: `ext_addrs`, one record per external address (at most
//! 64): `ext_addr` and `port_ranges`, records of `begin`, `end` (both
//! ports included; port 0 is never used) and `suspended` (a suspended
//! range gives no port). An address without ranges gets 1024-65535
//! (BESS would also give 1-1023 to internal ports below 1024). nfkit's
//! own: `capacity` (mappings in all, 65,536) and `expire` (one lifetime
//! for every protocol, instead of the NF's per-protocol defaults).
//! An internal address maps to one external address (a hash) while that
//! address has ports. Drops (each counted by reason in the module's
//! extra counters): not IPv4, other protocols, no mapping for a packet
//! from outside, table full, ports exhausted.

use super::classify::ipv4;
use super::nf::NfModule;
use crate::args::{ArgError, Args};
use crate::module::Module;
use nfkit_nf::{ExternalAddr, Nat, NatConfig, NatTimeouts, PortRange};

crate::modules::declare_class!("NAT" => build);

fn port(r: &mut Args, name: &str) -> Result<u16, ArgError> {
    let v = r.u64(name)?.unwrap_or(0);
    u16::try_from(v).map_err(|_| ArgError::new("ext_addrs", format!("port {v} is above 65535")))
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let bad = |e: ArgError| ArgError::new("ext_addrs", e.to_string());
    let mut external = Vec::new();
    for mut a in args.records("ext_addrs")?.unwrap_or_default() {
        let ip = ipv4("ext_addr", &a.required_str("ext_addr").map_err(bad)?).map_err(bad)?;
        let mut ports = Vec::new();
        let mut suspended = false;
        for mut r in a.records("port_ranges").map_err(bad)?.unwrap_or_default() {
            let (begin, end) = (port(&mut r, "begin")?, port(&mut r, "end")?);
            let off = r.bool_or("suspended", false).map_err(bad)?;
            r.finish("a port range").map_err(bad)?;
            let range = PortRange::new(begin.max(1), end)
                .map_err(|e| ArgError::new("ext_addrs", format!("{ip}: {begin}-{end}: {e}")))?;
            if off {
                suspended = true;
            } else {
                ports.push(range);
            }
        }
        a.finish("an external address").map_err(bad)?;
        // Only suspended ranges: the address gives no port.
        if !(suspended && ports.is_empty()) {
            external.push(ExternalAddr { ip, ports });
        }
    }
    let Some(first) = external.first() else {
        return Err(ArgError::new(
            "ext_addrs",
            "at least one external address (with a port range that is not suspended)",
        ));
    };
    let mut cfg = NatConfig::new(first.ip);
    cfg.external = external;
    if let Some(c) = args.u64("capacity")? {
        cfg.capacity = usize::try_from(c).unwrap_or(usize::MAX);
    }
    if let Some(e) = args.str("expire")? {
        let d = nfkit_nf::config::parse_duration(&e)
            .ok_or_else(|| ArgError::new("expire", format!("`{e}` is not a duration like 60s")))?;
        cfg.timeouts = NatTimeouts::all(d);
    }
    let nat = Nat::new(cfg).map_err(|e| ArgError::general(e.to_string()))?;
    Ok(Box::new(NfModule::with_class(Box::new(nat), "NAT")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Value;
    use crate::harness::Harness;
    use nfkit_packet::{parse_ipv4, FlowKey, FrameBuilder};

    fn record(items: &[(&str, Value)]) -> Value {
        Value::Map(items.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    fn nat(ext_addrs: Value) -> Result<Box<dyn Module>, ArgError> {
        let mut a = Args::from_pairs(&[("ext_addrs", ext_addrs)]);
        let m = build(&mut a, &test_env())?;
        a.finish("NAT")?;
        Ok(m)
    }

    fn key(f: &[u8]) -> FlowKey {
        FlowKey::from_frame(f, &parse_ipv4(f).unwrap()).unwrap()
    }

    /// BESS's sample: two external addresses; out through gate 0 to 1,
    /// the reply through gate 1 to 0, translated back.
    #[test]
    fn inside_out_and_back_by_bess_gates() {
        let s = |v: &str| Value::Str(v.into());
        let mut m = nat(Value::List(vec![
            record(&[("ext_addr", s("192.168.0.1"))]),
            record(&[
                ("ext_addr", s("192.168.0.2")),
                (
                    "port_ranges",
                    Value::List(vec![record(&[
                        ("begin", Value::Int(2000)),
                        ("end", Value::Int(2001)),
                    ])]),
                ),
            ]),
        ]))
        .unwrap();
        assert_eq!((m.class(), m.igates(), m.ogates()), ("NAT", 2, 2));
        let mut h = Harness::new();
        let ext: [std::net::Ipv4Addr; 2] = ["192.168.0.1".parse().unwrap(), "192.168.0.2".parse().unwrap()];
        for host in ["172.16.100.1", "172.12.55.99", "192.168.1.123"] {
            let host = host.parse().unwrap();
            let f = FrameBuilder::udp((host, 10001), ("10.0.0.1".parse().unwrap(), 10002)).build();
            let out = h.run(&mut *m, 0, &[f]);
            assert!(out[0].is_empty());
            let k = key(&out[1][0]);
            assert!(ext.contains(&k.src_ip), "{k:?}");
            let r = k.reversed();
            let back = FrameBuilder::udp((r.src_ip, r.src_port), (r.dst_ip, r.dst_port)).build();
            let out = h.run(&mut *m, 1, &[back]);
            assert_eq!(key(&out[0][0]), FlowKey::new("10.0.0.1".parse().unwrap(), 10002, host, 10001, 17));
        }
        // Unsolicited from outside: dropped and counted.
        let f = FrameBuilder::udp(("10.0.0.1".parse().unwrap(), 1), (ext[0], 5000)).build();
        assert!(h.run(&mut *m, 1, &[f]).iter().all(Vec::is_empty));
        assert!(m.extra_stats().contains(&("no_mapping", 1)), "{:?}", m.extra_stats());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let s = |v: &str| Value::Str(v.into());
        let range = |b: u64, e: u64, off: bool| {
            Value::List(vec![record(&[
                ("begin", Value::Int(b)),
                ("end", Value::Int(e)),
                ("suspended", Value::Int(u64::from(off))),
            ])])
        };
        let one = |r: Value| Value::List(vec![record(&[("ext_addr", s("192.0.2.1")), ("port_ranges", r)])]);
        for (arg, want) in [
            (Value::List(vec![]), "at least one"),
            (Value::List(vec![record(&[("ext_addr", s("nope"))])]), "IPv4"),
            (one(range(9, 1, false)), "inverted"),
            (one(range(1, 70_000, false)), "above 65535"),
            (one(range(1, 100, true)), "at least one"),
        ] {
            let e = nat(arg).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(want), "{e}");
        }
        assert!(nat(one(range(0, 100, false))).is_ok(), "port 0 is left out, not refused");
    }

    fn test_env() -> crate::registry::BuildEnv {
        crate::registry::BuildEnv {
            ports: Default::default(),
            pool: Harness::new().pool().clone(),
        }
    }
}
