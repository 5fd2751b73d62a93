//! WorkerSplit (BESS): packets leave by the gate of the worker running
//! the module: gate = worker index, or the gate `worker_gates` maps the
//! worker to; a worker with no gate drops.
//!
//! Arguments: `worker_gates=[g0, g1, ...]` (gate of worker i), or a
//! record `(w0=g, ...)`/`("0"=g)` as BESS's map; `gates=N` (default 64).

use super::classify;
use crate::args::{ArgError, Args, Value};
use crate::module::{Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("WorkerSplit" => build);

/// Most workers a map may name.
pub const MAX_WORKERS: usize = 64;

pub struct WorkerSplit {
    /// Gate of each worker (`None`: drop); `None` overall: the worker's index.
    map: Option<Vec<Option<u16>>>,
    gates: usize,
}

impl Module for WorkerSplit {
    fn class(&self) -> &'static str {
        "WorkerSplit"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        let w = ctx.worker();
        let gate = match &self.map {
            None => Some(w).filter(|&g| g < self.gates),
            Some(m) => m.get(w).copied().flatten().map(usize::from),
        };
        match gate {
            Some(g) => ctx.forward(g, batch),
            None => {
                ctx.count_dropped(batch.len() as u64);
                batch.clear();
            }
        }
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let gates = classify::gates_arg(args)?;
    let pairs: Option<Vec<(usize, u64)>> = match args.take("worker_gates") {
        None => None,
        Some(Value::List(l)) => Some(
            l.into_iter()
                .enumerate()
                .map(|(w, v)| match v {
                    Value::Int(g) => Ok((w, g)),
                    v => Err(ArgError::new(
                        "worker_gates",
                        format!("`{v}` is not a gate"),
                    )),
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(Value::Map(m)) => Some(
            m.into_iter()
                .map(|(k, v)| {
                    let w = k.trim_start_matches('w').parse::<usize>().map_err(|_| {
                        ArgError::new("worker_gates", format!("`{k}` is not a worker index"))
                    })?;
                    match v {
                        Value::Int(g) => Ok((w, g)),
                        v => Err(ArgError::new(
                            "worker_gates",
                            format!("`{v}` is not a gate"),
                        )),
                    }
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(v) => {
            return Err(ArgError::new(
                "worker_gates",
                format!("expected a list or a record, found `{v}`"),
            ))
        }
    };
    let map = match pairs {
        None => None,
        Some(pairs) => {
            let mut m = vec![None; MAX_WORKERS];
            for (w, g) in pairs {
                if w >= MAX_WORKERS {
                    return Err(ArgError::new(
                        "worker_gates",
                        format!("worker {w} is not below {MAX_WORKERS}"),
                    ));
                }
                m[w] = Some(classify::check_gate("worker_gates", g, gates)?);
            }
            Some(m)
        }
    };
    Ok(Box::new(WorkerSplit { map, gates }))
}
