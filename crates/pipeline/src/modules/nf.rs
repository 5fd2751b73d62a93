//! NF: a network function of `nfkit-nf` as a module (form (c) of the
//! NFs; the agent handlers and the queue loop are in `nfkit_nf::adapt`).
//! Input gate `k` is NF port `k`, output gate `k` is NF port `k`; a
//! packet arriving on gate 0 (LAN) leaves by the gate the NF names.
//!
//! ```text
//! nat::NF(name=nat, ext_ip="203.0.113.1", ports="1024-65535")
//! lan_in -> 0:nat:1 -> wan_out
//! wan_in -> 1:nat:0 -> lan_out
//! ```
//!
//! Arguments: `name` (nat, bridge, lb, policer, firewall, router), then
//! the NF's options with `_` for `-` (`ext_ip` is `--ext-ip`); a list
//! repeats an option (`iface=["0,10.0.0.1/24,02:00:00:00:01:00", ...]`);
//! `options="--expire 30s"` passes options as the CLI spells them.
//!
//! The NF sees the scheduler time of the batch (`Ctx::now_ns`), one
//! read per batch. Drops by the NF are the module's drops; a flood is
//! copied to every port but the last, which gets the original.

use crate::args::{ArgError, Args, Value};
use crate::module::{Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;
use nfkit_nf::{BoxedNf, NetworkFunction, PortSet, Verdict};
use std::time::Duration;

crate::modules::declare_class!("NF" => build);

/// Every option of every NF, as module arguments.
const OPTIONS: &[&str] = &[
    "lan",
    "wan",
    "ext_ip",
    "ports",
    "expire",
    "capacity",
    "lan_eth_dest",
    "wan_eth_dest",
    "lan_eth_src",
    "wan_eth_src",
    "static",
    "vip",
    "flow_capacity",
    "flow_expire",
    "backend_capacity",
    "backend_expire",
    "table_size",
    "heartbeat_port",
    "backend",
    "rate",
    "burst",
    "iface",
    "route",
    "neighbor",
    "icmp_rate",
];

pub struct NfModule {
    nf: BoxedNf,
    ports: usize,
    class: &'static str,
}

impl NfModule {
    pub fn new(nf: BoxedNf) -> NfModule {
        NfModule::with_class(nf, "NF")
    }

    /// The NF as a module of another class (BESS's `NAT`).
    pub fn with_class(nf: BoxedNf, class: &'static str) -> NfModule {
        let ports = nf.port_count().min(MAX_GATES);
        NfModule { nf, ports, class }
    }

    pub fn nf(&self) -> &dyn NetworkFunction {
        &*self.nf
    }
}

impl Module for NfModule {
    fn class(&self) -> &'static str {
        self.class
    }
    fn igates(&self) -> usize {
        self.ports
    }
    fn ogates(&self) -> usize {
        self.ports
    }

    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        let now = Duration::from_nanos(ctx.now_ns());
        for mut pkt in batch.drain() {
            let len = pkt.len();
            // The whole buffer, so the NF may grow the packet; cannot
            // fail, it is what the buffer has.
            let _ = pkt.set_len(len + pkt.tailroom());
            let (ports, len) = match self.nf.process(pkt.data_mut(), len, igate, now) {
                Verdict::Drop(_) => {
                    ctx.drop_packet(pkt);
                    continue;
                }
                Verdict::Forward { port, len } => (PortSet::EMPTY.with(port), len),
                Verdict::Flood { ports, len } => (ports.without(igate), len),
            };
            if pkt.set_len(len).is_err() || ports.is_empty() {
                ctx.drop_packet(pkt);
                continue;
            }
            let last = ports.iter().last().unwrap_or(0);
            for g in ports.iter().filter(|&g| g != last) {
                ctx.count_created(1);
                match pkt.try_clone() {
                    Some(copy) => ctx.emit(g, copy),
                    None => ctx.count_dropped(1),
                }
            }
            ctx.emit(last, pkt);
        }
    }

    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.nf.stats();
        let mut v = vec![
            ("packets_in", s.packets_in),
            ("forwarded", s.forwarded),
            ("flooded", s.flooded),
            ("flows_created", s.flows_created),
            ("flows_expired", s.flows_expired),
        ];
        v.extend(s.drops().map(|(r, n)| (r.name(), n)));
        v
    }
}

/// The NF's options as CLI arguments: `key=v` becomes `--key v`, a list
/// repeats the option.
fn cli_options(args: &mut Args) -> Result<Vec<String>, ArgError> {
    let mut out = Vec::new();
    if let Some(raw) = args.str("options")? {
        out.extend(raw.split_whitespace().map(String::from));
    }
    for name in OPTIONS {
        let Some(value) = args.take(name) else {
            continue;
        };
        let flag = format!("--{}", name.replace('_', "-"));
        let values = match value {
            Value::List(l) => l,
            v => vec![v],
        };
        for v in values {
            let text = match v {
                Value::Str(s) | Value::Ident(s) => s,
                Value::Int(i) => i.to_string(),
                Value::Float(f) => f.to_string(),
                Value::List(_) | Value::Map(_) => {
                    return Err(ArgError::new(name, "lists do not nest"))
                }
            };
            out.push(flag.clone());
            out.push(text);
        }
    }
    Ok(out)
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let name = args.required_str("name")?;
    let options = cli_options(args)?;
    let nf = nfkit_nf::build(&name, &options).map_err(|e| ArgError::general(e.to_string()))?;
    Ok(Box::new(NfModule::new(nf)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;
    use nfkit_nf::adapt::scenarios::{Exchange, SCENARIOS};
    use nfkit_nf::PortId;

    /// The module in a harness, seen from its gates.
    struct Gates<'a> {
        h: &'a mut Harness,
        m: &'a mut NfModule,
    }

    impl Exchange for Gates<'_> {
        fn send(&mut self, port: PortId, frame: &[u8], now: Duration) -> Vec<(PortId, Vec<u8>)> {
            self.h.set_time(now.as_nanos() as u64);
            let out = self.h.run(self.m, port, &[frame.to_vec()]);
            out.into_iter()
                .enumerate()
                .flat_map(|(g, frames)| frames.into_iter().map(move |f| (g, f)))
                .collect()
        }
    }

    #[test]
    fn every_nf_passes_its_scenarios_as_a_module() {
        for s in SCENARIOS {
            let mut m = NfModule::new(nfkit_nf::build(s.nf, s.options).unwrap());
            let mut h = Harness::new();
            (s.run)(&mut Gates {
                h: &mut h,
                m: &mut m,
            })
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            let st = m.nf().stats();
            assert_eq!(st.packets_in, st.forwarded + st.dropped_total());
            let (created, _, dropped) = h.counters();
            assert_eq!(dropped, st.dropped_total(), "{}: module drops", s.name);
            assert_eq!(created, st.flooded, "{}: one copy per 2-way flood", s.name);
        }
    }

    #[test]
    fn arguments_become_nf_options() {
        let mut a = Args::from_pairs(&[
            ("name", Value::Ident("router".into())),
            (
                "iface",
                Value::List(vec![
                    Value::Str("0,10.0.0.1/24,02:00:00:00:01:00".into()),
                    Value::Str("1,192.0.2.1/24,02:00:00:00:01:01".into()),
                ]),
            ),
            ("icmp_rate", Value::Int(100)),
        ]);
        let m = build(&mut a, &test_env()).unwrap();
        a.finish("NF").unwrap();
        assert_eq!((m.igates(), m.ogates()), (2, 2));
        let mut bad = Args::from_pairs(&[
            ("name", Value::Ident("nat".into())),
            ("vip", Value::Str("10.0.0.1".into())),
        ]);
        let e = build(&mut bad, &test_env()).err().unwrap().to_string();
        assert!(e.contains("--vip") || e.contains("ext-ip"), "{e}");
    }

    /// The config language names the NF; a Source of LAN UDP frames runs
    /// through it in a real pipeline, out of gate 1 (WAN).
    #[test]
    fn config_language_runs_an_nf() {
        let frame = nfkit_packet::FrameBuilder::udp(
            ("10.0.0.5".parse().unwrap(), 5555),
            ("8.8.8.8".parse().unwrap(), 53),
        )
        .payload(&[0; 18])
        .build();
        let bytes: Vec<String> = frame.iter().map(u8::to_string).collect();
        let text = format!(
            "src::Source(template=[{}]) -> 0:nat::NF(name=nat, ext_ip=\"203.0.113.1\", ports=\"1024-2047\"):1 -> Sink()\n\
             wan::Source(size=60) -> 1:nat",
            bytes.join(", ")
        );
        let desc = crate::parse(&text, "nat.nfk").unwrap();
        let no_ports = |s: &str| -> Result<Box<dyn nfkit_port::Port>, nfkit_port::PortError> {
            Err(nfkit_port::PortError::config(s, "no ports here"))
        };
        let mut p = desc.build(&no_ports).unwrap();
        let stats = p.run_for(Duration::from_millis(200)).unwrap();
        p.shutdown().unwrap();
        let m = stats.module("nat").unwrap();
        let extra = |k: &str| m.extra.iter().find(|(n, _)| *n == k).map(|x| x.1);
        assert_eq!(m.class, "NF");
        assert!(extra("forwarded").unwrap() > 0, "{m:?}");
        assert_eq!(extra("flows_created"), Some(1));
        assert!(
            extra("not_ipv4").unwrap() > 0,
            "zero frames from the WAN gate are dropped"
        );
        assert_eq!(
            extra("packets_in"),
            Some(extra("forwarded").unwrap() + extra("not_ipv4").unwrap())
        );
    }

    fn test_env() -> crate::registry::BuildEnv {
        crate::registry::BuildEnv {
            ports: Default::default(),
            pool: Harness::new().pool().clone(),
        }
    }
}
