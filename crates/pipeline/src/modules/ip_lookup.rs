//! IPLookup (BESS): longest-prefix match of the IPv4 destination on
//! nfkit's DIR-24-8 table (`nfkit_nf::lpm`); the gate of the longest
//! prefix holding it, and `0.0.0.0/0` is the default route. A packet
//! with no route, or not IPv4, is dropped. One lookup is one or two
//! loads and allocates nothing.
//!
//! Arguments: `max_rules=N` (default 1024, at most 1,048,576),
//! `max_tbl8s=N` (/24 blocks holding prefixes longer than /24; default
//! 128, at most 32768), `gates=N` (default 64). Commands:
//! `add(prefix="10.0.0.0", prefix_len=8, gate=G)`, `delete(prefix=,
//! prefix_len=)`, `clear()`. Each change rebuilds the table (a 32 MiB
//! array, some milliseconds) off the data path, between batches.

use super::classify::{self, ip};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;
use nfkit_nf::lpm::{Dir24_8, MAX_TBL8_GROUPS};
use nfkit_nf::Ipv4Prefix;
use std::collections::BTreeMap;

crate::modules::declare_class!("IPLookup" => build);

/// Most rules a table may be configured for.
pub const MAX_RULES: usize = 1 << 20;

pub struct IpLookup {
    /// (network, length) -> gate.
    rules: BTreeMap<(u32, u8), u16>,
    table: Option<Dir24_8>,
    max_rules: usize,
    max_tbl8s: usize,
    gates: usize,
}

impl IpLookup {
    pub fn new(max_rules: usize, max_tbl8s: usize, gates: usize) -> IpLookup {
        IpLookup {
            rules: BTreeMap::new(),
            table: None,
            max_rules,
            max_tbl8s,
            gates,
        }
    }

    /// Replace the routes with `routes` and rebuild; on error nothing
    /// changes.
    pub fn set_rules(&mut self, rules: BTreeMap<(u32, u8), u16>) -> Result<(), ArgError> {
        if rules.len() > self.max_rules {
            return Err(ArgError::general(format!(
                "the table is full ({} rules)",
                self.max_rules
            )));
        }
        let routes: Vec<(Ipv4Prefix, u16)> = rules
            .iter()
            .map(|(&(a, len), &g)| {
                (
                    Ipv4Prefix {
                        addr: a.into(),
                        len,
                    },
                    g,
                )
            })
            .collect();
        let table = if routes.is_empty() {
            None
        } else {
            Some(
                Dir24_8::build(&routes, self.max_tbl8s)
                    .map_err(|e| ArgError::general(e.to_string()))?,
            )
        };
        self.rules = rules;
        self.table = table;
        Ok(())
    }

    pub fn rules(&self) -> usize {
        self.rules.len()
    }

    fn prefix(args: &mut Args) -> Result<(u32, u8), ArgError> {
        let addr = classify::ipv4("prefix", &args.required_str("prefix")?)?;
        // Absent is 0 (a BESS message leaves a zero field out).
        let len = args.u64_or("prefix_len", 0)?;
        if len > 32 {
            return Err(ArgError::new(
                "prefix_len",
                format!("{len} is longer than an IPv4 address (32)"),
            ));
        }
        let p =
            Ipv4Prefix::new(addr, len as u8).map_err(|e| ArgError::new("prefix", e.to_string()))?;
        Ok((u32::from(p.addr), p.len))
    }
}

impl Module for IpLookup {
    fn class(&self) -> &'static str {
        "IPLookup"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            let d = p.data();
            let gate = match (&self.table, ip::header(d)) {
                (Some(t), Some(_)) => t.lookup(ip::addr(d, ip::IP_DST)),
                _ => None,
            };
            match gate {
                Some(g) => ctx.emit(g as usize, p),
                None => ctx.drop_packet(p),
            }
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        let mut rules = self.rules.clone();
        match cmd {
            "add" => {
                let key = Self::prefix(args)?;
                let gate = classify::gate(args, "gate", self.gates)?;
                args.finish(cmd)?;
                rules.insert(key, gate);
            }
            "delete" => {
                let key = Self::prefix(args)?;
                args.finish(cmd)?;
                if rules.remove(&key).is_none() {
                    return Err(ArgError::new("prefix", "no such rule"));
                }
            }
            "clear" => {
                args.finish(cmd)?;
                rules.clear();
            }
            _ => {
                return Err(ArgError::general(format!(
                    "IPLookup has no command `{cmd}`"
                )))
            }
        }
        self.set_rules(rules)?;
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("rules", self.rules.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max_rules = args.usize_in("max_rules", 1024, 1, MAX_RULES)?;
    let max_tbl8s = args.usize_in("max_tbl8s", 128, 0, MAX_TBL8_GROUPS)?;
    let gates = classify::gates_arg(args)?;
    Ok(Box::new(IpLookup::new(max_rules, max_tbl8s, gates)))
}
