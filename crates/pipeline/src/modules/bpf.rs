//! BPF (BESS): filters in tcpdump's syntax (`pcap-filter(7)`), compiled
//! by libpcap (`pcap_compile` for Ethernet frames) and run by nfkit's
//! own classic BPF interpreter ([`cbpf`](super::cbpf)). Filters are
//! tried highest priority first; a packet goes to the gate of the first
//! that matches, and a packet no filter matches to gate 0 (as BESS).
//!
//! Arguments: `filters=[(filter="tcp port 80", priority=P, gate=G), ...]`,
//! `max_filters=N` (default 64, at most 1024), `gates=N` (default 64).
//! Commands: `add(filters=[...])`, `delete(filters=[...])` (same filter,
//! priority and gate), `clear()`.

use super::cbpf::Program;
use super::classify;
use crate::args::{ArgError, Args, Value};
use crate::module::{no_reply, Ctx, Module};
use nfkit_hw::Batch;

crate::modules::declare_class!("BPF" => build);

/// Most filters a module may be configured for.
pub const MAX_FILTERS: usize = 1024;

#[derive(Debug, Clone)]
struct Filter {
    text: String,
    priority: i64,
    gate: u16,
    program: Program,
}

pub struct Bpf {
    /// Highest priority first.
    filters: Vec<Filter>,
    max_filters: usize,
    gates: usize,
}

/// Compile a tcpdump expression for Ethernet frames with libpcap.
///
/// A build with `--cfg nfkit_no_libpcap` (the QEMU guest's static
/// binary: Debian's static libpcap needs libdbus and more) has no libpcap:
/// BPF filters are then refused with this reason, and nothing else changes.
#[cfg(nfkit_no_libpcap)]
pub fn compile(expr: &str) -> Result<Program, String> {
    Err(format!(
        "cannot compile `{expr}`: this nfkit was built without libpcap (--cfg nfkit_no_libpcap)"
    ))
}

/// Compile a tcpdump expression for Ethernet frames with libpcap.
#[cfg(not(nfkit_no_libpcap))]
pub fn compile(expr: &str) -> Result<Program, String> {
    let cap = pcap::Capture::dead(pcap::Linktype::ETHERNET).map_err(|e| e.to_string())?;
    let prog = cap
        .compile(expr, true)
        .map_err(|e| format!("libpcap cannot compile `{expr}`: {e}"))?;
    let lines: Vec<String> = prog
        .get_instructions()
        .iter()
        .map(|i| i.to_string())
        .collect();
    Program::from_text(lines.iter().map(String::as_str))
}

impl Bpf {
    pub fn new(max_filters: usize, gates: usize) -> Bpf {
        Bpf {
            filters: Vec::new(),
            max_filters,
            gates,
        }
    }

    /// Add a compiled filter.
    pub fn add(&mut self, expr: &str, priority: i64, gate: u16) -> Result<(), ArgError> {
        let program = compile(expr).map_err(|e| ArgError::new("filters", e))?;
        self.insert(vec![Filter {
            text: expr.into(),
            priority,
            gate,
            program,
        }])
    }

    fn insert(&mut self, new: Vec<Filter>) -> Result<(), ArgError> {
        if self.filters.len() + new.len() > self.max_filters {
            return Err(ArgError::new(
                "filters",
                format!("too many filters ({} at most)", self.max_filters),
            ));
        }
        self.filters.extend(new);
        // Stable: among equal priorities, the earlier filter first.
        self.filters.sort_by_key(|f| std::cmp::Reverse(f.priority));
        Ok(())
    }

    fn parse(&self, args: &mut Args, compile_it: bool) -> Result<Vec<Filter>, ArgError> {
        let recs = args.records("filters")?.unwrap_or_default();
        recs.into_iter()
            .map(|mut r| {
                let w = |e: ArgError| ArgError::new("filters", e.to_string());
                let text = r.required_str("filter").map_err(w)?;
                let priority = classify::priority(&mut r, "priority").map_err(w)?;
                let gate =
                    classify::check_gate("gate", r.u64_or("gate", 0).map_err(w)?, self.gates)
                        .map_err(w)?;
                r.finish("a filter").map_err(w)?;
                let program = if compile_it {
                    compile(&text).map_err(|e| ArgError::new("filters", e))?
                } else {
                    Program::new(vec![super::cbpf::Insn {
                        code: 0x06,
                        jt: 0,
                        jf: 0,
                        k: 0,
                    }])
                    .map_err(|e| ArgError::new("filters", e))?
                };
                Ok(Filter {
                    text,
                    priority,
                    gate,
                    program,
                })
            })
            .collect()
    }
}

impl Module for Bpf {
    fn class(&self) -> &'static str {
        "BPF"
    }
    fn ogates(&self) -> usize {
        self.gates
    }
    fn process(&mut self, ctx: &mut Ctx<'_>, _igate: usize, batch: &mut Batch) {
        for p in batch.drain() {
            let d = p.data();
            let gate = self
                .filters
                .iter()
                .find(|f| f.program.run(d) != 0)
                .map_or(0, |f| f.gate);
            ctx.emit(gate as usize, p);
        }
    }
    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<Value, ArgError> {
        match cmd {
            "add" => {
                let new = self.parse(args, true)?;
                args.finish(cmd)?;
                self.insert(new)?;
            }
            "delete" => {
                let gone = self.parse(args, false)?;
                args.finish(cmd)?;
                let mut kept = self.filters.clone();
                for g in &gone {
                    let i = kept
                        .iter()
                        .position(|f| {
                            f.text == g.text && f.priority == g.priority && f.gate == g.gate
                        })
                        .ok_or_else(|| {
                            ArgError::new("filters", format!("no filter `{}`", g.text))
                        })?;
                    kept.remove(i);
                }
                self.filters = kept;
            }
            "clear" => {
                args.finish(cmd)?;
                self.filters.clear();
            }
            _ => return Err(ArgError::general(format!("BPF has no command `{cmd}`"))),
        }
        Ok(no_reply())
    }
    fn extra_stats(&self) -> Vec<(&'static str, u64)> {
        vec![("filters", self.filters.len() as u64)]
    }
}

fn build(args: &mut Args, _: &crate::registry::BuildEnv) -> Result<Box<dyn Module>, ArgError> {
    let max_filters = args.usize_in("max_filters", 64, 1, MAX_FILTERS)?;
    let gates = classify::gates_arg(args)?;
    let mut bpf = Bpf::new(max_filters, gates);
    if args.pos("filters").is_some() {
        let f = bpf.parse(args, true)?;
        bpf.insert(f)?;
    }
    Ok(Box::new(bpf))
}
