//! ACL (BESS, after NetBricks): an ordered list of rules over the IPv4
//! source and destination blocks and TCP/UDP ports; the first rule a
//! packet matches decides: forward (out of the gate it came in on) or
//! drop. A packet no rule matches, or that is not IPv4, is dropped.
//! A linear scan (as BESS's): up to `max_rules` rules (default 4096,
//! at most 1,048,576).
//!
//! Arguments: `rules=[(src_ip="10.0.0.0/8", dst_ip="", src_port=0,
//! dst_port=80, drop=0), ...]` (`""` and port 0 are wildcards),
//! `max_rules=N`, `gates=N` (default 64, in and out). Commands:
//! `add(rules=[...])` (appended), `delete(rules=[...])`, `clear()`.

use super::classify::{self, ip};
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("ACL" => build);

/// Most rules a table may be configured for.
pub const MAX_RULES: usize = 1 << 20;

/// One rule; port 0 and a zero mask are wildcards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclRule {
    pub src: (u32, u32),
    pub dst: (u32, u32),
    pub src_port: u16,
    pub dst_port: u16,
    pub drop: bool,
}

impl AclRule {
    #[inline]
    fn matches(&self, src: u32, dst: u32, ports: Option<(u16, u16)>) -> bool {
        if src & self.src.1 != self.src.0 || dst & self.dst.1 != self.dst.0 {
            return false;
        }
        if self.src_port == 0 && self.dst_port == 0 {
            return true;
        }
        let Some((sp, dp)) = ports else {
            return false;
        };
        (self.src_port == 0 || self.src_port == sp) && (self.dst_port == 0 || self.dst_port == dp)
    }

    /// `(src_ip=, dst_ip=, src_port=, dst_port=, established=, drop=)`.
    pub fn parse(mut r: Args) -> Result<AclRule, ArgError> {
        let w = |e: ArgError| ArgError::new("rules", e.to_string());
        let src = classify::cidr("src_ip", &r.str("src_ip").map_err(w)?.unwrap_or_default())
            .map_err(w)?;
        let dst = classify::cidr("dst_ip", &r.str("dst_ip").map_err(w)?.unwrap_or_default())
            .map_err(w)?;
        let port = |r: &mut Args, n: &str| -> Result<u16, ArgError> {
            let p = r.u64_or(n, 0).map_err(w)?;
            u16::try_from(p).map_err(|_| ArgError::new("rules", format!("{n} {p} is above 65535")))
        };
        let src_port = port(&mut r, "src_port")?;
        let dst_port = port(&mut r, "dst_port")?;
        if r.bool_or("established", false).map_err(w)? {
            return Err(ArgError::new(
                "rules",
                "established is not implemented (as in BESS)",
            ));
        }
        let drop = r.bool_or("drop", false).map_err(w)?;
        r.finish("an ACL rule").map_err(w)?;
        Ok(AclRule {
            src,
            dst,
            src_port,
            dst_port,
            drop,
        })
    }
}

pub struct Acl {
    rules: Vec<AclRule>,
    max_rules: usize,
    gates: usize,
}

impl Acl {
    pub fn new(max_rules: usize, gates: usize) -> Acl {
        Acl {
            rules: Vec::new(),
            max_rules,
            gates,
        }
    }

    /// Append rules, all or none.
    pub fn add(&mut self, rules: &[AclRule]) -> Result<(), ArgError> {
        if self.rules.len() + rules.len() > self.max_rules {
            return Err(ArgError::new(
                "rules",
                format!("the table is full ({} rules at most)", self.max_rules),
            ));
        }
        self.rules.extend_from_slice(rules);
        Ok(())
    }

    fn parse_rules(args: &mut Args) -> Result<Vec<AclRule>, ArgError> {
        args.records("rules")?
            .unwrap_or_default()
            .into_iter()
            .map(AclRule::parse)
            .collect()
    }

    #[inline]
    fn allows(&self, d: &[u8]) -> bool {
        let Some((ihl, proto)) = ip::header(d) else {
            return false;
        };
        let (src, dst) = (ip::addr(d, ip::IP_SRC), ip::addr(d, ip::IP_DST));
        let ports = ip::ports(d, ihl, proto);
        self.rules
            .iter()
            .find(|r| r.matches(src, dst, ports))
            .is_some_and(|r| !r.drop)
    }
}

impl Module for Acl {
    fn class(&self) -> &'static str {
        "ACL"
    }
    fn igates(&self) -> usize {
        self.gates
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            if self.allows(p.data()) {
                ctx.emit(igate, p);
            } else {
                ctx.drop_packet(p);
            }
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let rules = Self::parse_rules(args)?;
                args.finish(cmd)?;
                self.add(&rules)?;
            }
            "delete" => {
                let rules = Self::parse_rules(args)?;
                args.finish(cmd)?;
                let mut kept = self.rules.clone();
                for r in &rules {
                    let i = kept
                        .iter()
                        .position(|k| k == r)
                        .ok_or_else(|| ArgError::new("rules", format!("no such rule: {r:?}")))?;
                    kept.remove(i);
                }
                self.rules = kept;
            }
            "clear" => {
                args.finish(cmd)?;
                self.rules.clear();
            }
            _ => return Err(ArgError::general(format!("ACL has no command `{cmd}`"))),
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("rules", self.rules.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max_rules = args.usize_in("max_rules", 4096, 1, MAX_RULES)?;
    let gates = classify::gates_arg(args)?;
    let mut acl = Acl::new(max_rules, gates);
    if args.pos("rules").is_some() {
        let rules = Acl::parse_rules(args)?;
        acl.add(&rules)?;
    }
    Ok(Box::new(acl))
}
