//! RoundRobin: spread packets (or whole batches) over a list of output
//! gates in turn.
//!
//! Arguments: `gates=N` (gates 0..N-1, default 2) or `gates=[0, 2]` (a
//! list, as BESS's `RoundRobinArg` gives it; an empty list drops every
//! packet, counted), `mode=packet|batch` (default packet; BESS's default
//! is batch, which the daemon passes when a `RoundRobinArg` has no
//! mode). Output gates: N with `gates=N`; with a list, [`RR_GATES`] as
//! in BESS, so a gate that is not in the list may still be connected
//! (and later chosen by `set_gates`).
//! Commands (BESS's): `set_mode(mode=packet|batch)`,
//! `set_gates(gates=[...])`.

use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module, MAX_GATES};
use nfkit_hw::Batch;

crate::modules::declare_class!("RoundRobin" => build);

/// Output gates a RoundRobin has (any may be named in its list).
pub const RR_GATES: usize = MAX_GATES;

#[derive(Debug)]
pub struct RoundRobinSplit {
    list: Vec<usize>,
    ogates: usize,
    per_batch: bool,
    next: usize,
}

impl RoundRobinSplit {
    /// Over gates 0..`gates`.
    pub fn new(gates: usize, per_batch: bool) -> RoundRobinSplit {
        let gates = gates.clamp(1, RR_GATES);
        RoundRobinSplit {
            list: (0..gates).collect(),
            ogates: gates,
            per_batch,
            next: 0,
        }
    }

    /// Over the gates of `list`, in its order (gates below [`RR_GATES`]),
    /// with [`RR_GATES`] output gates.
    pub fn over(list: Vec<usize>, per_batch: bool) -> RoundRobinSplit {
        RoundRobinSplit {
            list,
            ogates: RR_GATES,
            per_batch,
            next: 0,
        }
    }

    #[inline]
    fn advance(&mut self) -> usize {
        let g = self.list[self.next];
        self.next += 1;
        if self.next >= self.list.len() {
            self.next = 0;
        }
        g
    }
}

impl Module for RoundRobinSplit {
    fn class(&self) -> &'static str {
        "RoundRobin"
    }
    fn ogates(&self) -> usize {
        self.ogates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        if self.list.is_empty() {
            return; // what is left in the batch is dropped and counted
        }
        if self.per_batch {
            let g = self.advance();
            ctx.forward(g, batch);
            return;
        }
        for p in batch.drain() {
            let g = self.advance();
            ctx.emit(g, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "set_mode" => {
                let per_batch = mode(args)?.unwrap_or(self.per_batch);
                args.finish(cmd)?;
                self.per_batch = per_batch;
            }
            "set_gates" => {
                let list = gates_arg(args)?.map_or_else(Vec::new, Gates::list);
                args.finish(cmd)?;
                if let Some(g) = list.iter().find(|&&g| g >= self.ogates) {
                    return Err(ArgError::new(
                        "gates",
                        format!("invalid gate {g} (the module has {} output gates)", self.ogates),
                    ));
                }
                self.list = list;
                self.next = 0;
            }
            _ => {
                return Err(ArgError::general(format!(
                    "RoundRobin has no command `{cmd}` (it has set_mode, set_gates)"
                )))
            }
        }
        Ok(no_reply())
    }
}

/// `mode=packet|batch`: whether each batch goes to one gate.
fn mode(args: &mut Args) -> Result<Option<bool>, ArgError> {
    match args.str("mode")?.as_deref() {
        None => Ok(None),
        Some("packet") => Ok(Some(false)),
        Some("batch") => Ok(Some(true)),
        Some(m) => Err(ArgError::new(
            "mode",
            format!("expected packet or batch, found `{m}`"),
        )),
    }
}

/// What `gates=` gave: nfkit's count N, or BESS's list.
enum Gates {
    Count(usize),
    List(Vec<usize>),
}

impl Gates {
    fn list(self) -> Vec<usize> {
        match self {
            Gates::Count(n) => (0..n).collect(),
            Gates::List(l) => l,
        }
    }
}

/// `gates=`: a count N (gates 0..N-1), or a list of gates.
fn gates_arg(args: &mut Args) -> Result<Option<Gates>, ArgError> {
    let list: Vec<u64> = match args.take("gates") {
        None => return Ok(None),
        Some(Value::Int(n)) if (1..=RR_GATES as u64).contains(&n) => {
            return Ok(Some(Gates::Count(n as usize)))
        }
        Some(Value::Int(n)) => {
            return Err(ArgError::new(
                "gates",
                format!("{n} is out of range 1..={RR_GATES}"),
            ))
        }
        Some(v @ Value::List(_)) => Args::from_pairs(&[("gates", v)])
            .u64_list("gates")?
            .unwrap_or_default(),
        Some(v) => {
            return Err(ArgError::new(
                "gates",
                format!("expected a gate count or a list of gates, found `{v}`"),
            ))
        }
    };
    if list.len() > RR_GATES {
        return Err(ArgError::new(
            "gates",
            format!("no more than {RR_GATES} gates ({} given)", list.len()),
        ));
    }
    if let Some(g) = list.iter().find(|&&g| g >= RR_GATES as u64) {
        return Err(ArgError::new(
            "gates",
            format!("invalid gate {g} (gates are 0..{})", RR_GATES - 1),
        ));
    }
    Ok(Some(Gates::List(
        list.into_iter().map(|g| g as usize).collect(),
    )))
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = gates_arg(args)?.unwrap_or(Gates::Count(2));
    let per_batch = mode(args)?.unwrap_or(false);
    Ok(Box::new(match gates {
        Gates::Count(n) => RoundRobinSplit::new(n, per_batch),
        Gates::List(l) => RoundRobinSplit::over(l, per_batch),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;

    fn frames(n: u8) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i; 60]).collect()
    }

    #[test]
    fn a_gate_list_and_its_commands_as_bess_names_them() {
        let env = crate::registry::BuildEnv {
            ports: Default::default(),
            pool: Harness::new().pool().clone(),
        };
        let mut args = Args::from_pairs(&[
            ("gates", Value::List(vec![Value::Int(0), Value::Int(2)])),
            ("mode", Value::Str("packet".into())),
        ]);
        let mut rr = build(&mut args, &env).unwrap();
        let mut h = Harness::new();
        let f = frames(4);
        let out = h.run(&mut *rr, 0, &f);
        assert_eq!(out[0], vec![f[0].clone(), f[2].clone()]);
        assert!(out[1].is_empty());
        assert_eq!(out[2], vec![f[1].clone(), f[3].clone()]);

        let cmd = |rr: &mut Box<dyn Module>, c: &str, v: Value| {
            rr.command(c, &mut Args::from_value(c, v).unwrap())
        };
        let gates = |l: &[u64]| {
            Value::Map(vec![(
                "gates".into(),
                Value::List(l.iter().map(|&g| Value::Int(g)).collect()),
            )])
        };
        cmd(&mut rr, "set_gates", gates(&[1, 70])).unwrap();
        cmd(
            &mut rr,
            "set_mode",
            Value::Map(vec![("mode".into(), Value::Str("batch".into()))]),
        )
        .unwrap();
        let a = h.run(&mut *rr, 0, &f[..2]);
        let b = h.run(&mut *rr, 0, &f[2..]);
        assert_eq!(a[1], f[..2].to_vec(), "a whole batch to gate 1");
        assert_eq!(b[70], f[2..].to_vec(), "the next batch to gate 70");

        let e = cmd(&mut rr, "set_gates", gates(&[RR_GATES as u64])).unwrap_err();
        assert!(e.to_string().contains("invalid gate"), "{e}");
        let e = cmd(
            &mut rr,
            "set_mode",
            Value::Map(vec![("mode".into(), Value::Str("flow".into()))]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("packet or batch"), "{e}");

        cmd(&mut rr, "set_gates", gates(&[])).unwrap();
        let before = h.counters().2;
        let out = h.run(&mut *rr, 0, &f);
        assert!(out.iter().all(|g| g.is_empty()));
        assert_eq!(h.counters().2 - before, 4, "no gates: every packet dropped, counted");
    }
}
